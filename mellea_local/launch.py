"""A backend from command-line style arguments: a model name, folder or hub id, an adapter.

Shared by the command line (``mellea_local.cli``) and the benchmark suite
(``mellea_local.bench``), so the suite never imports the CLI. Arguments are checked before any
weights load, and every message names the flag and what to pass instead: a user reads flags,
not the API's parameter names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mellea_local.errors import (
    AdapterError,
    AdapterNotFoundError,
    BackendArgumentError,
    InvalidInputError,
    ModelLoadError,
)
from mellea_local.intrinsics.score import REQUIREMENT_CHECK

EMBEDDED = "embedded"


def _looks_like_path(text: str) -> bool:
    return text.startswith((".", "/", "~")) or os.sep in text or text.count("/") > 1


def check_model_args(model: str, *, dtype: str | None = None, adapter: str | None = None) -> None:
    """Refuse a bad ``--model``/``--dtype``/``--adapter`` before any weights load."""
    from mellea_local.embedded import trained_weights_dir

    if model == EMBEDDED:
        if dtype not in (None, "float32"):
            raise BackendArgumentError(
                f"--dtype {dtype}: the embedded model runs in float32 only (its adapters were "
                "trained against float32 activations); leave out --dtype, or pass --model "
                "with another model."
            )
        base = str(trained_weights_dir())
    else:
        from mellea_local.backends.loading import resolve_model_source
        from mellea_local.models import find_gguf, is_registered

        path = Path(model).expanduser()
        if not model.strip():
            raise ModelLoadError("--model is empty; pass a model folder, a cached hub id or "
                             "'embedded'.")
        if find_gguf(path) is not None or (not path.exists() and is_registered(model)):
            # A GGUF or a registered name: its verified (converted once, cached) folder, which
            # the load right after reuses, and whose name adapters are looked up under.
            if adapter is not None:
                check_adapter_arg(adapter, resolve_model_source(model))
            else:
                resolve_model_source(model)
            return
        if not path.exists() and _looks_like_path(model):
            raise ModelLoadError(
                f"--model {model!r}: no such folder; pass an existing model folder, a cached "
                "hub id, or 'embedded'."
            )
        if path.exists() and not (path / "config.json").is_file():
            raise ModelLoadError(
                f"--model {model!r}: {'the folder' if path.is_dir() else 'it is a file and'} "
                "holds no config.json; pass a folder written by save_pretrained()."
            )
        base = str(path) if path.exists() else model
    if adapter is not None:
        check_adapter_arg(adapter, base)


def check_adapter_arg(adapter: str, base_model: str) -> None:
    """``--adapter`` names a usable adapter folder, or an intrinsic the libraries hold."""
    from mellea_local.adapters import resolve_adapter
    from mellea_local.adapters.library import base_model_name, default_library_roots

    path = Path(adapter).expanduser()
    if not adapter.strip():
        raise AdapterError("--adapter is empty; pass an adapter folder or an intrinsic name "
                           f"such as {REQUIREMENT_CHECK!r}.")
    if not path.is_dir() and (path.exists() or _looks_like_path(adapter)):
        raise AdapterNotFoundError(
            f"--adapter {adapter!r}: no such folder; pass a folder holding adapter_config.json, "
            f"adapter_model.safetensors and io.yaml, or an intrinsic name such as "
            f"{REQUIREMENT_CHECK!r}."
        )
    try:
        resolve_adapter(path if path.is_dir() else adapter, base_model=base_model)
    except AdapterNotFoundError:
        if path.is_dir():
            raise
        roots = ", ".join(str(r) for r in default_library_roots()) or "none"
        raise AdapterNotFoundError(
            f"--adapter {adapter!r}: no folder of that name here, and no adapter for the "
            f"intrinsic {adapter!r} on model {base_model_name(base_model)!r} in the adapter "
            f"libraries ({roots}); pass --adapter with an adapter folder."
        ) from None
    except AdapterError as exc:
        raise AdapterError(f"--adapter {adapter!r}: {exc}") from None


def load_backend(
    model: str, *, device: str | None = None, dtype: str | None = None,
    adapter: str | None = None, model_options: dict[str, Any] | None = None,
    backend: str = "hf", server_urls: tuple[str, ...] = (), api_key: str | None = None,
    threads: int | None = None,
) -> Any:
    """The backend for ``--model`` on the engine ``--backend`` names (``backends.registry``):
    ``hf`` (default) loads the embedded model, a local folder or a cached hub id; another
    engine gets ``server_urls``/``api_key`` (``--server-url``) and ``threads``.

    The arguments (``adapter`` too, which is only checked here) are validated first, so a
    typo costs no model load.
    """
    if backend != "hf":
        from mellea_local.backends.registry import backend_loader

        return backend_loader(backend)(model, device=device, dtype=dtype,
                                       model_options=model_options, server_urls=server_urls,
                                       api_key=api_key, threads=threads)
    return load_hf_backend(model, device=device, dtype=dtype, adapter=adapter,
                           model_options=model_options)


def load_hf_backend(
    model: str, *, device: str | None = None, dtype: str | None = None,
    adapter: str | None = None, model_options: dict[str, Any] | None = None,
    **_: Any,
) -> Any:
    """``--backend hf``: a ``LocalHFBackend`` for ``--model`` (arguments checked first)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_model_args(model, dtype=dtype, adapter=adapter)
    from mellea_local.backends.hf import LocalHFBackend

    if model == EMBEDDED:
        return LocalHFBackend.embedded(device=device or "cpu")
    path = Path(model).expanduser()
    return LocalHFBackend(path if path.exists() else model, device=device, dtype=dtype,
                          model_options=model_options)


def missing_check_adapter(model: str, base_model: str) -> AdapterNotFoundError:
    """The one line a user reads when ``--model`` has no requirement-check adapter anywhere.

    Said plainly (which model, why it matters, the command that makes one) instead of the
    library's list of the places it looked, which reads as a broken install.
    """
    from mellea_local.adapters.library import base_model_name

    return AdapterNotFoundError(
        f"no requirement-check adapter exists for model {base_model_name(base_model)!r} "
        f"(--model {model}); train one with `mellea-local train data.jsonl --model {model}` "
        "(README \"A real model\"), or pass --adapter with an adapter folder."
    )


def require_check_adapter(model: str) -> None:
    """``check`` without ``--adapter``: refuse, before any weights load (on either engine), a
    model that has no requirement-check adapter in the libraries. The embedded model brings
    its own; any other backend starts with none, so the libraries are the only source."""
    if model == EMBEDDED:
        return
    from mellea_local.backends.loading import resolve_model_source
    from mellea_local.models import find_gguf, is_registered

    check_model_args(model)
    path = Path(model).expanduser()
    if find_gguf(path) is not None or (not path.exists() and is_registered(model)):
        base = str(resolve_model_source(model))
    else:
        base = str(path) if path.exists() else model
    try:
        check_adapter_arg(REQUIREMENT_CHECK, base)
    except AdapterNotFoundError:
        raise missing_check_adapter(model, base) from None


def add_check_adapter(backend: Any, model: str) -> str | None:
    """Load the model's requirement-check adapter from the libraries (None when the backend
    already has one); ``missing_check_adapter`` when none exists for it."""
    if backend.supports_intrinsic(REQUIREMENT_CHECK):
        return None
    try:
        return add_cli_adapter(backend, REQUIREMENT_CHECK)
    except AdapterNotFoundError:
        raise missing_check_adapter(model, str(backend.model_id)) from None


def add_cli_adapter(backend: Any, adapter: str) -> str:
    """Load ``--adapter`` (a folder or a library entry) and return its name on the backend."""
    # An existing folder wins over an intrinsic of the same name ("adapter" in the current
    # directory); otherwise the library tells a path from a name and words its own errors.
    path = Path(adapter).expanduser()
    loaded = backend.add_adapter(path if path.is_dir() else adapter, name="cli-adapter")
    return str(loaded.name)


def read_utf8(path: Path, what: str, error: type[Exception] = InvalidInputError) -> str:
    """The text of ``path`` with its line ends as written (``read_text`` would turn a lone
    ``"\\r"``, whitespace inside a JSON line, into a line break); a file that is not UTF-8 is
    an ``error`` naming it and the byte."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
            f"offset {exc.start}); save it as UTF-8."
        ) from None
    except OSError as exc:
        raise error(f"{what} {str(path)!r} cannot be read: {exc.strerror or exc}.") from None
