"""Registering PEFT adapters on a backend: resolve, check they fit the base, load.

An adapter trained for another base model or tokenizer can load without complaint and then
compute nonsense (or, for an aLoRA, never activate). So before PEFT sees it we check what can be
checked: the config names this base model, the invocation tokens mean the same thing to our
tokenizer, and every LoRA matrix has the shape of the module it attaches to and the declared rank.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from mellea_local.adapters import (
    AdapterKind,
    ResolvedAdapter,
    base_model_name,
)
from mellea_local.adapters.loaded import Adapter
from mellea_local.errors import AdapterError, AdapterNotFoundError
from mellea_local.inputs import check_name

__all__ = [
    "Adapter",
    "LoadedAdapters",
    "check_adapter_name",
    "check_base_fit",
    "check_config",
    "check_tokenizer_fit",
    "check_weight_fit",
    "describe",
    "intrinsic_of",
]

logger = logging.getLogger(__name__)

_PEFT_PREFIX = "base_model.model."
_UNSUPPORTED_CONFIG = ("use_dora", "modules_to_save", "trainable_token_indices",
                       "layer_replication")


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


def check_config(resolved: ResolvedAdapter) -> Any:
    """The folder's ``LoraConfig`` as PEFT reads it, or a typed error naming the file."""
    from peft import LoraConfig

    try:
        config = LoraConfig.from_pretrained(str(resolved.path))
    except Exception as exc:
        raise AdapterError(
            f"{resolved.config_path} is not a LoRA config PEFT can read ({type(exc).__name__}: "
            f"{exc}). Re-save the adapter with PeftModel.save_pretrained or fix the file."
        ) from exc
    unsupported = [key for key in _UNSUPPORTED_CONFIG if getattr(config, key, None)]
    if unsupported:
        raise AdapterError(
            f"{resolved.config_path} sets {unsupported}, which this package does not load or "
            "check (their extra weights would be initialised silently); use a plain LoRA or "
            "aLoRA adapter, or remove those settings if the adapter was not trained with them."
        )
    for key in ("lora_alpha", "lora_dropout"):
        value = getattr(config, key, None)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                math.isfinite(value) and value >= 0):
            raise AdapterError(
                f"{resolved.config_path}: {key} must be a number >= 0, not {value!r}; set it "
                "to the value the adapter was trained with."
            )
    ranks = {"r": config.r, **{f"rank_pattern[{k!r}]": v for k, v in
                                 (config.rank_pattern or {}).items()}}
    for key, rank in ranks.items():
        if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
            raise AdapterError(
                f"{resolved.config_path}: {key} must be a positive integer (the LoRA rank), "
                f"not {rank!r}; set it to the rank the adapter was trained with."
            )
    return config


def _rank_for(config: Any, module_name: str) -> int:
    from peft.utils.other import get_pattern_key

    pattern = config.rank_pattern or {}
    return int(pattern.get(get_pattern_key(pattern.keys(), module_name), config.r))


def check_base_fit(resolved: ResolvedAdapter, model_id: str | None) -> None:
    """The base model named in adapter_config.json must be the one this backend runs.

    Names are compared by ``base_model_name`` (a hub id and a local copy of it,
    ``ibm-granite/granite-4.1-3b`` and ``/models/granite-4.1-3b``, are the same model),
    ignoring case. An adapter that names no base, or a backend whose model has no name, is
    not checked.
    """
    declared = resolved.base_model_name_or_path
    if not declared or not model_id:
        return
    theirs, ours = _canonical_base(declared), _canonical_base(model_id)
    if theirs is None or ours is None or theirs == ours:
        return
    raise AdapterError(
        f"Adapter {resolved.path} was trained on base model {declared!r} "
        f"(base_model_name_or_path in {resolved.config_path}), but this backend runs "
        f"{model_id!r}: its weights would compute nonsense here. Load the adapter trained for "
        f"{base_model_name(model_id)!r}, run it on {declared!r}, or pass "
        "allow_other_base=True if this model is a copy or fine-tune of that base."
    )


def _canonical_base(model_id: str) -> str | None:
    try:
        return base_model_name(model_id).lower()
    except AdapterError:
        return None


def check_weight_fit(resolved: ResolvedAdapter, model: Any, config: Any) -> set[str]:
    """Check every tensor before PEFT sees the file; returns the tensor names.

    Each LoRA matrix must match the in/out features of the module it adapts and the rank the
    config declares (lora_A rows == lora_B columns == r), come in A/B pairs, hold floating
    point numbers and no NaN or infinity. The file must read whole: a truncated file is
    refused here rather than half way through PEFT's load.
    """
    modules = dict(model.named_modules())
    a_of: set[str] = set()
    b_of: set[str] = set()
    try:
        keys = _check_tensors(resolved, model, config, modules, a_of, b_of)
    except AdapterError:
        raise
    except Exception as exc:
        raise AdapterError(
            f"{resolved.weights_path} cannot be read as safetensors ({type(exc).__name__}: "
            f"{exc}); the file is truncated or corrupt. Download or save it again."
        ) from exc
    unpaired = sorted(a_of ^ b_of)
    if unpaired:
        raise AdapterError(
            f"{resolved.weights_path} has a lora_A without its lora_B (or the reverse) for "
            f"{unpaired[0]!r}; both matrices are needed. Save the adapter again."
        )
    return keys


def _check_tensors(
    resolved: ResolvedAdapter, model: Any, config: Any, modules: dict[str, Any],
    a_of: set[str], b_of: set[str],
) -> set[str]:
    import torch
    from safetensors import safe_open

    path = resolved.weights_path
    keys: set[str] = set()
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open is not a Mapping
            keys.add(key)
            tensor = f.get_tensor(key)  # reads the bytes: a short file fails here
            if not tensor.is_floating_point():
                raise AdapterError(
                    f"{path}: tensor {key} holds {tensor.dtype}, not floating point numbers; "
                    "save the adapter again."
                )
            if not bool(torch.isfinite(tensor).all()):
                raise AdapterError(
                    f"{path}: tensor {key} contains NaN or infinity; the adapter is broken "
                    "(a diverged training run?). Use a checkpoint from before it diverged."
                )
            is_a = ".lora_A." in key
            if not is_a and ".lora_B." not in key:
                continue
            if not key.startswith(_PEFT_PREFIX):
                raise AdapterError(
                    f"{path}: tensor {key} is not named as PEFT saves it ({_PEFT_PREFIX}"
                    "<module>.lora_A.weight), so PEFT would not load it. Save the adapter again "
                    "with PeftModel.save_pretrained."
                )
            module_name = key.split(".lora_")[0].removeprefix(_PEFT_PREFIX)
            (a_of if is_a else b_of).add(module_name)
            _check_matrix(resolved, model, config, modules, key, module_name, tensor.shape)
    return keys


def _check_matrix(
    resolved: ResolvedAdapter, model: Any, config: Any, modules: dict[str, Any], key: str,
    module_name: str, shape: Any,
) -> None:
    path = resolved.weights_path
    module = modules.get(module_name)
    if module is None:
        raise AdapterError(
            f"Adapter {resolved.path} adapts {module_name!r}, which this "
            f"{type(model).__name__} does not have: it was trained for another model "
            "architecture. Use the adapter trained for this base model."
        )
    if not key.endswith(".weight"):
        return
    is_a = ".lora_A." in key
    if len(shape) < 2:
        raise AdapterError(
            f"{path}: {key} has shape {list(shape)}, but a LoRA matrix has two dimensions. "
            "Save the adapter again."
        )
    rank = _rank_for(config, module_name)
    got_rank = shape[0] if is_a else shape[1]
    if got_rank != rank:
        raise AdapterError(
            f"{path}: {key} has shape {list(shape)}, rank {got_rank}, but "
            f"{resolved.config_path} declares r={rank} for {module_name}: the file and the "
            "config come from different adapters. Save the adapter again, or fix r/rank_pattern."
        )
    base = getattr(module, "base_layer", module)
    expected = getattr(base, "in_features" if is_a else "out_features", None)
    got = shape[1] if is_a else shape[0]
    if expected is not None and got != expected:
        raise AdapterError(
            f"Adapter {resolved.path} has {key} of shape {list(shape)}, but "
            f"{module_name} has {expected} {'input' if is_a else 'output'}"
            " features: it was trained for a different base model size. Use the adapter "
            "trained for this base model."
        )


def describe(resolved: ResolvedAdapter, name: str, tokenizer: Any = None) -> Adapter:
    """The ``Adapter`` record for a resolved folder, with its fast-path spec precomputed and,
    given the tokenizer, its invocation spelled out (what prompt building looks for)."""
    return Adapter.build(
        name=name, kind=resolved.kind, path=resolved.path, io_config=resolved.io_config,
        invocation_tokens=resolved.invocation_tokens, intrinsic=intrinsic_of(resolved),
        tokenizer=tokenizer,
    )


def check_adapter_name(name: Any) -> str | None:
    """A name PEFT can key module dicts by: a non-empty string without '.' (or None)."""
    if name is None:
        return None
    check_name(name, "Adapter name")  # type, length, separators, control characters
    if "." in name:
        raise AdapterError(
            f"Adapter name {name!r} is not usable: pass a non-empty string without dots or "
            "surrounding spaces, such as 'requirement-check_alora', or leave name= out."
        )
    return name


def _fingerprint(resolved: ResolvedAdapter) -> tuple[tuple[int, int], ...]:
    files = (resolved.config_path, resolved.weights_path, resolved.path / "io.yaml")
    stats = [f.stat() for f in files]
    return tuple((s.st_size, s.st_mtime_ns) for s in stats)


class LoadedAdapters:
    """The adapters a backend has loaded, by name, and the folder state each was read from."""

    def __init__(self) -> None:
        self.adapters: dict[str, Adapter] = {}
        self._stamps: dict[str, tuple[tuple[int, int], ...]] = {}

    def loaded_from(self, resolved: ResolvedAdapter) -> Adapter | None:
        """The adapter already loaded from this very folder, unchanged since; else None."""
        stamp = _fingerprint(resolved)
        for name, adapter in self.adapters.items():
            if adapter.path == resolved.path and self._stamps.get(name) == stamp:
                return adapter
        return None

    def refuse_clash(self, name: str, source: Any, resolved: ResolvedAdapter) -> None:
        check_adapter_name(name)  # a name derived from a folder's name is checked too
        held = self.adapters.get(name)
        if held is None:
            return
        why = ("was loaded from the same folder, which has changed since"
               if held.path == resolved.path else f"holds {held.path}")
        raise AdapterError(
            f"add_adapter({source!r}) would load {resolved.path} as {name!r}, but that name "
            f"{why}. Pass name='...' to load it beside the other, or call "
            f"unload_adapter({name!r}) first to replace it."
        )

    def note_loaded_again(self, adapter: Adapter, source: Any) -> Adapter:
        """Adding an adapter that is already loaded is a no-op that says so (a warning), so a
        second ``add_adapter("requirement-check")`` neither loads a copy nor passes unseen."""
        logger.warning("add_adapter(%r): %s is already loaded as %r; nothing was done",
                       source, adapter.path, adapter.name)
        return adapter

    def add(self, adapter: Adapter, resolved: ResolvedAdapter) -> Adapter:
        self.adapters[adapter.name] = adapter
        self._stamps[adapter.name] = _fingerprint(resolved)
        return adapter

    def remove(self, name: str) -> None:
        del self.adapters[name]
        self._stamps.pop(name, None)

    def adapter_for(self, intrinsic: str, *, name: str | None = None) -> Adapter:
        """The adapter named ``name``, else the preferred one serving ``intrinsic`` (an aLoRA
        before a LoRA: ``strategy.preference``); ``AdapterNotFoundError`` naming the fix."""
        if name is not None:
            adapter = self.adapters.get(name)
            if adapter is None:
                raise AdapterNotFoundError(
                    f"No adapter named {name!r} is loaded (loaded: {sorted(self.adapters)})."
                )
            return adapter
        serving = [a for a in self.adapters.values() if a.intrinsic == intrinsic]
        if not serving:
            raise AdapterNotFoundError(
                f"No adapter for intrinsic {intrinsic!r} is loaded; call "
                f"backend.add_adapter({intrinsic!r}) or pass an adapter folder."
            )
        return min(serving, key=lambda a: a.strategy.preference)

    def serves(self, intrinsic: str) -> bool:
        """Whether some loaded adapter serves ``intrinsic``."""
        return any(a.intrinsic == intrinsic for a in self.adapters.values())
