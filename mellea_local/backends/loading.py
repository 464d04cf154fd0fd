"""Loading a base model and tokenizer: device, dtype, safe weights, offline errors.

Kept apart from generation so the rules (safetensors unless the caller opts in, no remote code
by default, float32 on CPU) are in one place and testable without generating anything.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from mellea_local.errors import ModelLoadError

logger = logging.getLogger(__name__)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The requested device, else cuda, then mps, then cpu."""
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """bf16 on a GPU that supports it, else float32.

    float32 on CPU on purpose: on CPUs without AMX, bf16 matmuls are ~1.4x slower than fp32,
    and fp32 keeps cache-reuse results exact to 1e-6.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype != "auto":
        resolved = getattr(torch, dtype.removeprefix("torch."), None)
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"Unknown dtype {dtype!r}; use e.g. 'float32', 'bfloat16', 'float16'.")
        return resolved
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def _load_error(model: str, revision: str | None, exc: Exception) -> ModelLoadError:
    where = f"{model}@{revision}" if revision else model
    if Path(model).expanduser().exists():
        hint = "the folder exists but does not hold a loadable model and tokenizer"
    elif _offline():
        hint = (
            "HF_HUB_OFFLINE=1 is set and it is not in the local Hugging Face cache; "
            f"fetch it once on a connected machine (`hf download {model}`) or pass a local folder"
        )
    else:
        hint = (
            "it is neither a local folder nor a reachable hub repo; check the id, your network, "
            "and HF_TOKEN for gated models"
        )
    return ModelLoadError(f"Cannot load model {where!r}: {hint}. ({type(exc).__name__}: {exc})")


def load_pretrained(
    model: str | os.PathLike[str],
    *,
    device: torch.device,
    dtype: torch.dtype,
    revision: str | None = None,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local folder or a hub id (cache honoured).

    Pickled (``.bin``) weights can execute code when loaded, so they are refused unless
    ``allow_pickle=True``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = str(model)
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(
            name, dtype=dtype, use_safetensors=None if allow_pickle else True, **kwargs
        )
    except (OSError, ValueError) as exc:
        if not allow_pickle and "safetensors" in str(exc).lower():
            raise ModelLoadError(
                f"Model {name!r} has no safetensors weights; pickled weights can run code when "
                "loaded. Convert them to safetensors, or pass allow_pickle=True if you trust "
                "the source."
            ) from exc
        raise _load_error(name, revision, exc) from exc
    lm.to(device)
    lm.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    logger.debug("loaded %s on %s as %s", name, device, dtype)
    return lm, tokenizer
