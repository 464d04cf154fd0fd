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
DeviceOpt = Annotated[
    str | None,
    typer.Option("--device", help="torch device: cpu, cuda, cuda:1, mps (default: best)."),
]
DtypeOpt = Annotated[
    str | None, typer.Option("--dtype", help="float32, bfloat16 or float16 (default: per device).")
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


def load_backend(
    model: str, *, device: str | None = None, dtype: str | None = None
) -> Any:
    """The backend for ``--model``: the embedded model, a local folder or a cached hub id."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    # The command draws its own progress; transformers' per-load bars only add noise.
    hf_logging.disable_progress_bar()
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.errors import ModelLoadError

    if model == EMBEDDED:
        embedded = getattr(LocalHFBackend, "embedded", None)
        if embedded is None:
            raise ModelLoadError(
                "This build of mellea-local has no embedded model; pass --model with a model "
                "folder or hub id."
            )
        return embedded(device=device or "cpu")
    path = Path(model).expanduser()
    if not path.exists() and (model.startswith((".", "/", "~")) or model.count("/") > 1):
        # Looks like a path, not a hub id: say so instead of a confusing hub lookup failure.
        raise ModelLoadError(
            f"The model folder {model!r} does not exist; pass --model with an existing folder, "
            "a cached hub id, or 'embedded'."
        )
    return LocalHFBackend(path if path.exists() else model, device=device, dtype=dtype)


def add_cli_adapter(backend: Any, adapter: str) -> str:
    """Load ``--adapter`` (a folder or a library entry) and return its name on the backend."""
    # An existing folder wins over an intrinsic of the same name ("adapter" in the current
    # directory); otherwise the library tells a path from a name and words its own errors.
    path = Path(adapter).expanduser()
    loaded = backend.add_adapter(path if path.is_dir() else adapter, name="cli-adapter")
    return str(loaded.name)
