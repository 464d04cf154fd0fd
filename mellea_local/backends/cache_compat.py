"""Version shims for transformers' KV cache API, so the rest of the package has one spelling.

What moves between the transformers versions we support (5.16 up to 6):

- 5.24 renamed the forward/generate keyword and the output field ``past_key_values`` to
  ``cache``; the old name still works there with a FutureWarning and is slated for removal.
  We detect the name from the model's ``forward`` signature instead of comparing versions.
- ``Cache.crop(n)`` with a positive ``n`` (crop *to* n tokens) is deprecated in 5.17 and raises
  in 5.24; ``crop(-k)`` (drop the last k tokens) works in both, so :func:`crop_to` only uses it.
- ``Cache.is_croppable`` exists in 5.24 but says ``True`` for dynamic sliding-window layers,
  which have already thrown away tokens outside the window. :func:`croppable_reason` therefore
  judges layer by layer and treats the flag as a veto only.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from mellea_local.backends.growable_layer import GrowableLayer
from mellea_local.errors import KVCacheError

# Layer classes that hold per-token K/V for every past token and crop exactly. Looked up by
# name so an older transformers without one of them still imports this module.
_EXACT_LAYER_NAMES = ("DynamicLayer", "StaticLayer", "DummyLayer")

__all__ = [
    "cache_batch_size",
    "cache_kwarg_name",
    "cache_seq_length",
    "crop_to",
    "croppable_reason",
    "is_croppable",
    "new_cache",
    "output_cache",
]


def _unwrap(model: Any) -> Any:
    """The transformers model under a PEFT wrapper; PeftModel.forward only takes ``**kwargs``."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


@functools.cache
def _kwarg_for_class(cls: type) -> str:
    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_kwarg_name(model: Any) -> str:
    """The keyword a model's ``forward``/``generate`` takes its KV cache under.

    ``"cache"`` on transformers >= 5.24, ``"past_key_values"`` before. Works through a PEFT
    wrapper. Cached per model class, so it is free on the hot path.
    """
    return _kwarg_for_class(type(_unwrap(model)))


def output_cache(output: Any) -> Cache | None:
    """The cache a forward or ``generate(return_dict_in_generate=True)`` output carries.

    Reads the field by key, not attribute, so the deprecated alias never fires its warning.
    """
    for name in ("cache", "past_key_values"):
        value = output.get(name) if hasattr(output, "get") else getattr(output, name, None)
        if value is not None:
            return value
    return None


def new_cache(model: Any) -> DynamicCache:
    """An empty cache shaped by the model's config (sliding/hybrid layers where the model has them).

    Passing the config matters: without it a sliding-window model gets full layers and the cache
    would look croppable while the model's masks say otherwise. Plain full-attention layers
    become :class:`GrowableLayer`, which appends without re-copying the past on every step.
    """
    cache = DynamicCache(config=_unwrap(model).config)
    cache.layers = [
        GrowableLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:  # no layers from config
        cache.layer_class_to_replicate = GrowableLayer
    return cache


def cache_seq_length(cache: Cache) -> int:
    """Tokens whose K/V the cache holds, as an int (static layers report a tensor)."""
    return int(cache.get_seq_length())


def croppable_reason(cache: Any) -> str | None:
    """Why ``cache`` cannot be cropped back to an earlier length exactly, or None when it can.

    Only full-attention layers keep the K/V of every past token; sliding-window layers drop
    tokens outside the window and linear-attention/SSM layers fold the past into one state, so
    cropping either cannot restore an earlier prefix. Unknown layer kinds are refused too: a
    wrong reuse is a silent wrong answer, a refused one only costs a prefill.
    """
    if not isinstance(cache, Cache):
        return f"{type(cache).__name__} is not a transformers Cache (legacy tuple format?)"
    if getattr(cache, "is_croppable", True) is False:
        return f"{type(cache).__name__}.is_croppable is False"
    if not cache.layers:
        return "the cache has no layers yet (no forward has filled it)"
    for idx, layer in enumerate(cache.layers):
        kind = type(layer).__name__
        if getattr(layer, "is_sliding", False):
            return f"layer {idx} ({kind}) is a sliding-window layer and drops old tokens"
        if hasattr(layer, "conv_states") or hasattr(layer, "recurrent_states"):
            return f"layer {idx} ({kind}) holds linear-attention/SSM state that is cumulative"
        if getattr(layer, "is_croppable", True) is False:
            return f"layer {idx} ({kind}) is not croppable (e.g. quantized)"
        if not any(base.__name__ in _EXACT_LAYER_NAMES for base in type(layer).__mro__):
            return f"layer {idx} has unknown kind {kind}; only full-attention layers crop exactly"
    return None


def is_croppable(cache: Any) -> bool:
    """Whether ``cache`` can be cropped back to any earlier length exactly."""
    return croppable_reason(cache) is None


def crop_to(cache: Cache, length: int) -> None:
    """Crop ``cache`` in place so it holds exactly the first ``length`` tokens.

    O(1) for dynamic layers (a view slice) and static ones (a counter), unlike a deepcopy.
    """
    current = cache_seq_length(cache)
    if length < 0 or length > current:
        raise KVCacheError(
            f"Cannot crop a KV cache of {current} tokens to {length}: the target length must be "
            f"between 0 and the cached length. Crop only back to a length the cache has held."
        )
    if length < current:
        cache.crop(length - current)


def cache_batch_size(cache: Cache) -> int | None:
    """Batch size of the first filled layer, or None when no layer holds tensors yet."""
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.dim() == 4:
            return int(keys.shape[0])
    return None
