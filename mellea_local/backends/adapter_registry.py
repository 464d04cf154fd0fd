"""Registering PEFT adapters on a backend: resolve, check they fit the base, load.

An adapter trained for another base model or tokenizer can load without complaint and then
compute nonsense (or, for an aLoRA, never activate). So before PEFT sees it we check what can be
checked: the invocation tokens mean the same thing to our tokenizer, and every LoRA matrix has
the shape of the module it attaches to.
"""

from __future__ import annotations

import logging
from typing import Any

from mellea_local.adapters import (
    AdapterKind,
    ResolvedAdapter,
    fast_path_spec,
)
from mellea_local.adapters.loaded import Adapter
from mellea_local.errors import AdapterError

__all__ = ["Adapter", "check_tokenizer_fit", "check_weight_fit", "describe", "intrinsic_of"]

logger = logging.getLogger(__name__)

_PEFT_PREFIX = "base_model.model."


def intrinsic_of(resolved: ResolvedAdapter) -> str | None:
    """The intrinsic an adapter serves, from how it was resolved or its library layout."""
    if resolved.intrinsic:
        return resolved.intrinsic
    if resolved.path.name in {k.value for k in AdapterKind} and resolved.path.parent.parent.name:
        return resolved.path.parent.parent.name
    return None


def check_tokenizer_fit(resolved: ResolvedAdapter, tokenizer: Any) -> None:
    """The declared invocation ids must round-trip through our tokenizer unchanged."""
    inv = resolved.invocation_tokens
    if not inv:
        return
    size = len(tokenizer)
    if max(inv) >= size:
        raise AdapterError(
            f"Adapter {resolved.path} declares invocation token ids {list(inv)}, beyond this "
            f"tokenizer's {size} tokens: it was trained for another tokenizer. Use an adapter "
            "trained on this base model."
        )
    text = tokenizer.decode(list(inv), skip_special_tokens=False)
    again = tokenizer.encode(text, add_special_tokens=False)
    if tuple(again) != tuple(inv):
        raise AdapterError(
            f"Adapter {resolved.path} declares invocation tokens {list(inv)} ({text!r}), which "
            f"this tokenizer writes as {again}: the adapter belongs to another tokenizer. Use "
            "an adapter trained on this base model."
        )


def check_weight_fit(resolved: ResolvedAdapter, model: Any) -> None:
    """Every LoRA matrix must match the in/out features of the module it adapts."""
    from safetensors import safe_open

    modules = dict(model.named_modules())
    with safe_open(str(resolved.weights_path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open is not a Mapping
            if ".lora_A." not in key and ".lora_B." not in key:
                continue
            module_name = key.split(".lora_")[0].removeprefix(_PEFT_PREFIX)
            module = modules.get(module_name)
            shape = f.get_slice(key).get_shape()
            if module is None:
                raise AdapterError(
                    f"Adapter {resolved.path} adapts {module_name!r}, which this "
                    f"{type(model).__name__} does not have: it was trained for another model "
                    "architecture."
                )
            base = getattr(module, "base_layer", module)
            expected = getattr(base, "in_features", None) if ".lora_A." in key else getattr(
                base, "out_features", None)
            got = shape[1] if ".lora_A." in key else shape[0]
            if expected is not None and got != expected:
                raise AdapterError(
                    f"Adapter {resolved.path} has {key} of shape {list(shape)}, but "
                    f"{module_name} has {expected} {'input' if '.lora_A.' in key else 'output'}"
                    " features: it was trained for a different base model size."
                )


def describe(resolved: ResolvedAdapter, name: str, tokenizer: Any = None) -> Adapter:
    """The ``Adapter`` record for a resolved folder, with its fast-path spec precomputed and,
    given the tokenizer, its invocation spelled out (what prompt building looks for)."""
    io = resolved.io_config
    inv = resolved.invocation_tokens
    return Adapter(
        name=name,
        kind=resolved.kind,
        path=resolved.path,
        io_config=io,
        invocation_tokens=resolved.invocation_tokens,
        intrinsic=intrinsic_of(resolved),
        fast_path=fast_path_spec(io.transformations, io.response_format_dict()),
        invocation_text=(tokenizer.decode(list(inv), skip_special_tokens=False)
                         if inv and tokenizer is not None else None),
    )
