"""Which adapter a run starts from, its settings, and its weights checked before they are used.

By default a run continues the adapter the package ships for this model and kind (e.g.
``adapters/requirement-check/SmolLM2-135M-Instruct/alora``) when there is one: a user's own
family trained from scratch on 150 lines reached 0.55 held out, continuing the shipped adapter
0.675 (after a rank-mismatch error the user had to work around). ``--init-from FOLDER`` names
another adapter; ``--from-scratch`` starts from PEFT's fresh init.

The adapter started from decides the shape of the new one: its rank, alpha, target modules and
layers are taken from its ``adapter_config.json`` for each setting the caller left unset; a
setting the caller gave that differs is refused, naming both values (the weights would not fit
or would mean something else). Its weights are read and checked before the model loads: every
tensor finite (an all-NaN init once trained on to a NaN loss and wrote an adapter), and, once
the fresh adapter exists, exactly its tensor names and shapes (a mismatch names the tensor and
both shapes instead of PEFT's raw ``size mismatch``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mellea_local.errors import InitAdapterError
from mellea_local.inputs import loads_json, regular_file_problem

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
DEFAULT_RANK = 32
DEFAULT_ALPHA = 32
DEFAULT_MODULES = ("q_proj", "k_proj", "v_proj")

SCRATCH, GIVEN, SHIPPED = "scratch", "init-from", "shipped"


@dataclass(frozen=True)
class Start:
    """Where the run's adapter weights come from, and what they are."""

    source: str  # SCRATCH, GIVEN (--init-from) or SHIPPED (the library's adapter, the default)
    path: Path | None = None
    config: dict[str, Any] | None = None
    weights: dict[str, torch.Tensor] | None = None
    sha256: str | None = None

    def describe(self) -> str:
        if self.source == SCRATCH or self.config is None:
            return "starting from a fresh adapter"
        cfg = self.config
        how = "the shipped adapter" if self.source == SHIPPED else "--init-from"
        modules = ",".join(sorted(cfg.get("target_modules") or []))
        return (f"starting from {how} {self.path} (r={cfg.get('r')}, alpha "
                f"{cfg.get('lora_alpha')}, modules {modules})")


@dataclass(frozen=True)
class Shape:
    """The adapter's settings after the start is taken into account."""

    rank: int
    alpha: int
    target_modules: tuple[str, ...]
    layers: tuple[int, ...] | None


def shipped_adapter(intrinsic: str, base: str, kind: str) -> Path | None:
    """The library's adapter for this intrinsic, base and kind, when the package ships one."""
    from mellea_local.training.output import shipped_library_roots

    for root in shipped_library_roots():
        folder = root / intrinsic / base / kind
        if (folder / CONFIG).is_file() and (folder / WEIGHTS).is_file():
            return folder
    return None


def _read(folder: Path, what: str) -> tuple[dict[str, Any], dict[str, torch.Tensor], str]:
    for name in (CONFIG, WEIGHTS):
        problem = regular_file_problem(folder / name)
        if problem is not None:
            raise InitAdapterError(
                f"{what} {str(folder)!r}: {name} {problem}; an adapter folder holds "
                f"{CONFIG} and {WEIGHTS}.")
    try:
        config = loads_json((folder / CONFIG).read_bytes(), CONFIG)
    except (OSError, ValueError) as exc:
        raise InitAdapterError(f"{what} {str(folder)!r}: {CONFIG} is unreadable ({exc}).") \
            from None
    if not isinstance(config, dict):
        raise InitAdapterError(f"{what} {str(folder)!r}: {CONFIG} is not a JSON object.")
    from safetensors.torch import load_file

    raw = (folder / WEIGHTS).read_bytes()
    try:
        weights = load_file(str(folder / WEIGHTS))
    except Exception as exc:  # safetensors raises its own type for a torn or foreign file
        raise InitAdapterError(
            f"{what} {str(folder)!r}: {WEIGHTS} is not a readable safetensors file ({exc}).") \
            from None
    if not weights:
        raise InitAdapterError(f"{what} {str(folder)!r}: {WEIGHTS} holds no tensors.")
    for name, tensor in weights.items():
        if not tensor.is_floating_point() or not torch.isfinite(tensor).all():
            bad = int((~torch.isfinite(tensor.float())).sum())
            raise InitAdapterError(
                f"{what} {str(folder)!r}: tensor {name} holds {bad} NaN or infinite value(s) "
                f"of {tensor.numel()}; training from it would give a NaN loss. Start from "
                "another adapter, or --from-scratch.")
    return config, weights, hashlib.sha256(raw).hexdigest()


def choose_start(init_from: str | None, from_scratch: bool, intrinsic: str, base: str,
                 kind: str, *, shipped_ok: bool = True) -> Start:
    """The start of a run: ``init_from`` when given, else (unless ``from_scratch``) the
    shipped adapter of this model and kind when one exists, else a fresh adapter."""
    if init_from is not None:
        folder, source = Path(init_from).expanduser(), GIVEN
    elif from_scratch or not shipped_ok:
        return Start(SCRATCH)
    else:
        found = shipped_adapter(intrinsic, base, kind)
        if found is None:
            return Start(SCRATCH)
        folder, source = found, SHIPPED
    what = "--init-from" if source == GIVEN else "The shipped adapter"
    config, weights, digest = _read(folder, what)
    return Start(source, folder, config, weights, digest)


def _as_tuple(value: Any) -> tuple[Any, ...] | None:
    if value is None:
        return None
    if isinstance(value, int):
        return (value,)
    return tuple(value)


_FLAGS = {"r": "--rank", "lora_alpha": "--alpha", "target_modules": "--target-modules"}


def conflicts(start: Start, rank: int | None, alpha: int | None,
              modules: tuple[str, ...] | None) -> list[str]:
    """The settings the caller gave that differ from the start's, each as
    ``"r 16 (this run: 8)"``; empty for a fresh start."""
    if start.config is None:
        return []
    cfg = start.config
    theirs = {"r": cfg.get("r"), "lora_alpha": cfg.get("lora_alpha"),
              "target_modules": tuple(sorted(cfg.get("target_modules") or ()))}
    given = {"r": rank, "lora_alpha": alpha,
             "target_modules": tuple(sorted(modules)) if modules else None}
    return [f"{k} {theirs[k]!r} (this run: {given[k]!r})" for k in theirs
            if given[k] is not None and given[k] != theirs[k]]


def shape_for(start: Start, rank: int | None, alpha: int | None,
              modules: tuple[str, ...] | None) -> Shape:
    """The settings of the new adapter: the caller's where given, else the start's, else the
    defaults. A given setting that differs from the start's is refused naming both."""
    if start.config is None:
        return Shape(rank or DEFAULT_RANK, alpha or DEFAULT_ALPHA,
                     tuple(modules or DEFAULT_MODULES), None)
    differ = conflicts(start, rank, alpha, modules)
    if differ:
        raise InitAdapterError(
            f"--init-from {str(start.path)!r} was trained with other settings: "
            + "; ".join(differ) + ". Leave those flags out to take the adapter's own, or pass "
            "the same --kind, --rank, --alpha.")
    cfg = start.config
    r, a = cfg.get("r"), cfg.get("lora_alpha")
    mods = tuple(sorted(cfg.get("target_modules") or ()))
    if not (isinstance(r, int) and r >= 1 and isinstance(a, int | float) and a > 0 and mods
            and all(isinstance(m, str) for m in mods)):
        raise InitAdapterError(
            f"{str(start.path)!r}: {CONFIG} lacks a usable r, lora_alpha or target_modules "
            f"(r={r!r}, lora_alpha={a!r}, target_modules={list(mods)!r}).")
    layers = _as_tuple(cfg.get("layers_to_transform"))
    return Shape(r, int(a), mods, layers)


def check_invocation(start: Start, invocation: list[int] | None) -> None:
    """The start's aLoRA invocation (or its absence, for a LoRA) must be this run's."""
    if start.config is None:
        return
    theirs = start.config.get("alora_invocation_tokens")
    if (list(theirs) if theirs else None) != (list(invocation) if invocation else None):
        raise InitAdapterError(
            f"{str(start.path)!r} was trained with alora_invocation_tokens {theirs!r} (this "
            f"run: {invocation!r}); it is another kind of adapter or another tokenizer's. Pass "
            "the same --kind, or --from-scratch.")


def load_start(model: Any, start: Start) -> None:
    """Put the start's weights into the fresh adapter, after checking every tensor's name and
    shape against it."""
    if start.weights is None:
        return
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    ours = get_peft_model_state_dict(model)
    missing = sorted(set(ours) - set(start.weights))
    extra = sorted(set(start.weights) - set(ours))
    where = f"{'--init-from' if start.source == GIVEN else 'The shipped adapter'} " \
            f"{str(start.path)!r}"
    if missing or extra:
        name = (missing or extra)[0]
        raise InitAdapterError(
            f"{where} does not match this model's adapter: "
            + (f"it lacks {len(missing)} tensor(s) (e.g. {name})" if missing else
               f"it holds {len(extra)} tensor(s) this adapter has not (e.g. {name})")
            + "; it was trained for another base model or other layers. Pass an adapter of "
            "this model, or --from-scratch.")
    for name, tensor in start.weights.items():
        if tuple(tensor.shape) != tuple(ours[name].shape):
            raise InitAdapterError(
                f"{where}: tensor {name} has shape {tuple(tensor.shape)}, this model's "
                f"adapter needs {tuple(ours[name].shape)}; it was trained for another base "
                "model or rank. Pass an adapter of this model, or --from-scratch.")
    set_peft_model_state_dict(model, start.weights)
