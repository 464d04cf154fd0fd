"""Loading a base model and tokenizer: device, dtype, safe weights, offline errors.

Kept apart from generation so the rules (safetensors unless the caller opts in, no remote code
by default, float32 on CPU) are in one place and testable without generating anything.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from mellea_local.backends.quiet import quiet_loading
from mellea_local.errors import BackendArgumentError, ModelLoadError

logger = logging.getLogger(__name__)


DTYPES = ("float32", "bfloat16", "float16")
"""The dtypes a model may be loaded in (float64 doubles memory and time for nothing)."""


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The requested device, else cuda, then mps, then cpu."""
    if device is not None:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError, ValueError):
            raise BackendArgumentError(
                f"device={device!r} is not a torch device; pass 'cpu', 'cuda', 'cuda:1' or "
                "'mps', or leave it out to pick the best available."
            ) from None
        _require_available(dev)
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _require_available(dev: torch.device) -> None:
    mps = getattr(torch.backends, "mps", None)
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available() and (dev.index or 0) < torch.cuda.device_count(),
        "mps": mps is not None and mps.is_available(),
    }
    if not available.get(dev.type, False):
        raise BackendArgumentError(
            f"device={str(dev)!r} is not available on this machine; pass device='cpu' (or "
            "leave device out to pick the best available)."
        )


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """bf16 on a GPU that supports it, else float32.

    float32 on CPU on purpose: on CPUs without AMX, bf16 matmuls are ~1.4x slower than fp32,
    and fp32 keeps cache-reuse results exact to 1e-6.
    """
    if dtype is None or dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        if device.type == "mps":
            return torch.float16
        return torch.float32
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, str | torch.dtype) else None
    if name not in DTYPES:
        raise BackendArgumentError(
            f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)} (or leave it "
            "out for bfloat16 on a GPU and float32 on a CPU)."
        )
    return getattr(torch, name)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


HUB_PROBE_SECONDS = 3.0
"""How long to wait for the hub to accept a connection before treating it as unreachable."""


def hub_endpoint() -> tuple[str, int]:
    """The host and port a hub download connects to first: the HTTPS proxy if one is set."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlsplit(proxy or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """Whether the hub (or the proxy) accepts a TCP connection within ``timeout`` seconds.

    Without network, transformers retries a download for ~45 s before failing; one probe
    (name lookup included, hence the thread) tells the user in seconds instead.
    """
    host, port = hub_endpoint()
    answered: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError:
            answered.append(False)
        else:
            answered.append(True)

    thread = threading.Thread(target=probe, name="mellea-local-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answered and answered[0])


def _load_error(
    model: str, revision: str | None, exc: Exception, *, unreachable: bool = False
) -> ModelLoadError:
    where = f"{model}@{revision}" if revision else model
    if Path(model).expanduser().exists():
        hint = (
            "the folder exists but its model or tokenizer files cannot be loaded (missing, "
            "truncated or corrupt; the cause is below). Download or save the model again"
        )
    elif _offline():
        hint = (
            "HF_HUB_OFFLINE=1 is set and it is not in the local Hugging Face cache; "
            f"fetch it once on a connected machine (`hf download {model}`) or pass a local folder"
        )
    elif unreachable:
        host, port = hub_endpoint()
        hint = (
            f"it is not a local folder, no network reaches the hub ({host}:{port} did not "
            f"answer within {HUB_PROBE_SECONDS:g} s) and it is not in the local Hugging Face "
            "cache. Pass a local model folder, fetch it on a connected machine "
            f"(`hf download {model}`), fix the network or proxy, or set HF_HUB_OFFLINE=1 to "
            "use only the cache"
        )
    else:
        hint = (
            "it is neither a local folder nor a reachable hub repo; check the id, your network, "
            "and HF_TOKEN for gated models"
        )
    return ModelLoadError(f"Cannot load model {where!r}: {hint}. ({type(exc).__name__}: {exc})")


def check_model_name(model: Any) -> str:
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str) or not model.strip():
        raise BackendArgumentError(
            f"model={model!r} is not a model: pass a local model folder, a hub id such as "
            "'ibm-granite/granite-4.1-3b', or use LocalHFBackend.embedded()."
        )
    return model


def resolve_model_source(model: str | os.PathLike[str]) -> str:
    """What ``model`` loads from: a ``.gguf`` file (or a folder holding one) becomes its cached
    safetensors conversion, a registered name (``smollm2-135m``) its verified cached folder, a
    converted folder is verified; anything else (a model folder, a hub id) is returned as is.

    A registered name only counts when no file or folder of that name exists, so a local
    folder called ``smollm2-135m`` still loads as a folder.
    """
    from mellea_local.models import convert_gguf, find_gguf, is_registered, model_path
    from mellea_local.models.cache import is_converted, verify_converted

    name = check_model_name(model)
    path = Path(name).expanduser()
    gguf = find_gguf(path)
    if gguf is not None:
        return str(convert_gguf(gguf, progress=logger.info))
    if is_converted(path):  # a manifest, or the cache's layout: a deleted manifest is refused
        verify_converted(path)
        return name
    if not path.exists() and is_registered(name):
        return str(model_path(name))
    return name


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

    name = check_model_name(model)
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    unreachable = (not Path(name).expanduser().exists() and not _offline()
                   and not hub_reachable())
    if unreachable:
        kwargs["local_files_only"] = True  # the cache may still hold it
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
            lm = AutoModelForCausalLM.from_pretrained(
                name, dtype=dtype, use_safetensors=None if allow_pickle else True, **kwargs
            )
    except Exception as exc:  # transformers, tokenizers and safetensors raise many types
        if not allow_pickle and "no file named" in str(exc).lower() and (
                "safetensors" in str(exc).lower()):
            raise ModelLoadError(
                f"Model {name!r} has no safetensors weights; pickled weights can run code when "
                "loaded. Convert them to safetensors, or pass allow_pickle=True if you trust "
                "the source."
            ) from exc
        raise _load_error(name, revision, exc, unreachable=unreachable) from exc
    lm.to(device)
    lm.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    logger.debug("loaded %s on %s as %s", name, device, dtype)
    return lm, tokenizer


def check_cache_budget(tokens: Any) -> int:
    """``kv_cache_tokens`` must be a whole number of tokens, 0 or more (0: no reuse)."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise BackendArgumentError(
            f"kv_cache_tokens={tokens!r} must be a whole number of tokens >= 0 (0 turns the "
            "prefix cache off)."
        )
    return tokens


def check_model_options(options: Any) -> dict[str, Any]:
    """Backend-wide ``model_options`` must be a mapping (or None); a copy is returned."""
    from collections.abc import Mapping

    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise BackendArgumentError(
            f"model_options={options!r} must be a mapping of options, e.g. "
            "{ModelOption.MAX_NEW_TOKENS: 64}, or None."
        )
    return dict(options)
