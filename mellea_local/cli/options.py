"""Options every model-running command shares, loading the backend, and one-line errors.

A command line user wants one readable line when something is wrong (a missing model folder, an
adapter for another base), not a traceback; ``--debug`` brings the traceback back for bug
reports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

EMBEDDED = "embedded"

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Model folder or hub id (offline cache only), or 'embedded' for the shipped model.",
    ),
]
AdapterOpt = Annotated[
    str | None,
    typer.Option(
        "--adapter",
        "-a",
        help="Adapter folder, or an intrinsic name looked up in the adapter libraries "
        "(e.g. 'requirement-check').",
    ),
]
DTYPES = ("float32", "bfloat16", "float16")


def _check_device(value: str | None) -> str | None:
    """``--device`` parses as a torch device that exists here (checked before any load)."""
    if value is None:
        return None
    import torch

    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        raise typer.BadParameter(
            f"{value!r} is not a torch device; use cpu, cuda, cuda:1 or mps.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise typer.BadParameter(f"{value!r}: no CUDA device is available here; use cpu.")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise typer.BadParameter(
            f"{value!r}: this machine has {torch.cuda.device_count()} CUDA device(s).")
    mps = getattr(torch.backends, "mps", None)
    if device.type == "mps" and not (mps is not None and mps.is_available()):
        raise typer.BadParameter(f"{value!r}: MPS is not available here; use cpu.")
    if device.type not in ("cpu", "cuda", "mps"):
        raise typer.BadParameter(f"{value!r}: use cpu, cuda, cuda:1 or mps.")
    return value


def _check_dtype(value: str | None) -> str | None:
    if value is not None and value not in DTYPES:
        raise typer.BadParameter(f"{value!r} is not supported; use {', '.join(DTYPES)}.")
    return value


DeviceOpt = Annotated[
    str | None,
    typer.Option("--device", callback=_check_device,
                 help="torch device: cpu, cuda, cuda:1, mps (default: best)."),
]
DtypeOpt = Annotated[
    str | None,
    typer.Option("--dtype", callback=_check_dtype,
                 help="float32, bfloat16 or float16 (default: per device; the embedded model "
                 "runs in float32 only)."),
]
DebugOpt = Annotated[
    bool, typer.Option("--debug", help="Show full tracebacks instead of one-line errors.")
]

T = TypeVar("T")


def run_guarded(debug: bool, work: Callable[[], T]) -> T:
    """Run ``work``; any failure becomes one line on stderr and exit code 1 (unless debug).

    ``typer.Exit`` and ``KeyboardInterrupt`` keep their own meaning: a deliberate exit code and
    the user stopping the run (exit 130, no traceback either way).
    """
    try:
        return work()
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted", style="yellow")
        raise typer.Exit(130) from None
    except Exception as exc:
        if debug:
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        Console(stderr=True, soft_wrap=True).print(
            f"error: {text}", style="bold red", markup=False, highlight=False
        )
        raise typer.Exit(1) from None


def _looks_like_path(text: str) -> bool:
    return text.startswith((".", "/", "~")) or os.sep in text or text.count("/") > 1


def check_model_args(model: str, *, dtype: str | None = None, adapter: str | None = None) -> None:
    """Refuse a bad ``--model``/``--dtype``/``--adapter`` before any weights load.

    Every message names the flag and what to pass instead: a user reads flags, not the API's
    parameter names.
    """
    from mellea_local.embedded import trained_weights_dir
    from mellea_local.errors import ModelLoadError

    if model == EMBEDDED:
        if dtype not in (None, "float32"):
            raise ValueError(
                f"--dtype {dtype}: the embedded model runs in float32 only (its adapters were "
                "trained against float32 activations); leave out --dtype, or pass --model "
                "with another model."
            )
        base = str(trained_weights_dir())
    else:
        path = Path(model).expanduser()
        if not model.strip():
            raise ModelLoadError("--model is empty; pass a model folder, a cached hub id or "
                             "'embedded'.")
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
    from mellea_local.errors import AdapterError, AdapterNotFoundError

    path = Path(adapter).expanduser()
    if not adapter.strip():
        raise AdapterError("--adapter is empty; pass an adapter folder or an intrinsic name "
                         "such as 'requirement-check'.")
    if not path.is_dir() and (path.exists() or _looks_like_path(adapter)):
        raise AdapterNotFoundError(
            f"--adapter {adapter!r}: no such folder; pass a folder holding adapter_config.json, "
            "adapter_model.safetensors and io.yaml, or an intrinsic name such as "
            "'requirement-check'."
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
    adapter: str | None = None,
) -> Any:
    """The backend for ``--model``: the embedded model, a local folder or a cached hub id.

    The arguments (``adapter`` too, which is only checked here) are validated first, so a
    typo costs no model load.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_model_args(model, dtype=dtype, adapter=adapter)
    from mellea_local.backends.huggingface import LocalHFBackend

    if model == EMBEDDED:
        return LocalHFBackend.embedded(device=device or "cpu")
    path = Path(model).expanduser()
    return LocalHFBackend(path if path.exists() else model, device=device, dtype=dtype)


def add_cli_adapter(backend: Any, adapter: str) -> str:
    """Load ``--adapter`` (a folder or a library entry) and return its name on the backend."""
    # An existing folder wins over an intrinsic of the same name ("adapter" in the current
    # directory); otherwise the library tells a path from a name and words its own errors.
    path = Path(adapter).expanduser()
    loaded = backend.add_adapter(path if path.is_dir() else adapter, name="cli-adapter")
    return str(loaded.name)


def read_utf8(path: Path, what: str, error: type[Exception] = ValueError) -> str:
    """The text of ``path``; a file that is not UTF-8 is an ``error`` naming it and the byte."""
    try:
        return path.read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
            f"offset {exc.start}); save it as UTF-8."
        ) from None
    except OSError as exc:
        raise error(f"{what} {str(path)!r} cannot be read: {exc.strerror or exc}.") from None


def check_text(value: str, what: str) -> str:
    """Command-line text must be UTF-8: undecodable bytes arrive as lone surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} holds bytes that are not UTF-8 text (at character {exc.start}); pass "
            "UTF-8 text."
        ) from None
    return value
