"""Options every model-running command shares, loading the backend, and one-line errors.

A command line user wants one readable line when something is wrong (a missing model folder, an
adapter for another base), not a traceback; ``--debug`` brings the traceback back for bug
reports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from mellea_local.errors import BackendArgumentError, InvalidInputError
from mellea_local.launch import (  # noqa: F401  (the CLI's loaders live in launch.py)
    EMBEDDED,
    add_cli_adapter,
    check_adapter_arg,
    check_model_args,
    load_backend,
    read_utf8,
)

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="A registered name (mellea-local models list, e.g. smollm2-135m), a .gguf file, a "
        "model folder or hub id (offline cache only), or 'embedded' for the shipped model.",
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


def _check_threads(value: int | None) -> int | None:
    """Bounded by the usable CPUs when the command line is parsed, before any thread exists
    (``threads.check_threads`` owns the rule)."""
    if value is None:
        return None
    from mellea_local.threads import check_threads

    try:
        return check_threads(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


ThreadsOpt = Annotated[
    int | None,
    typer.Option("--threads", min=1, callback=_check_threads,
                 help="torch CPU threads (default: the CPUs this process may use less the "
                 "current load average, at least 1; more threads than free cores run slower, "
                 "not faster)."),
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


def apply_cli_threads(threads: int | None) -> None:
    """``--threads`` when given; without it the backend picks the default on a CPU device."""
    if threads is not None:
        from mellea_local.threads import apply_threads

        apply_threads(threads)


def check_text(value: str, what: str) -> str:
    """Command-line text must be UTF-8: undecodable bytes arrive as lone surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{what} holds bytes that are not UTF-8 text (at character {exc.start}); pass "
            "UTF-8 text."
        ) from None
    return value


# --- which engine runs the model (--backend, --server-url, the API key) ---------------------

API_KEY_ENV = "MELLEA_LOCAL_API_KEY"
"""Where ``--server-url``'s API key is read when ``--api-key-file`` is not given."""


def _backend_names() -> tuple[str, ...]:
    from mellea_local.backends.registry import BACKENDS

    return tuple(BACKENDS)


def _check_backend(value: str) -> str:
    names = _backend_names()
    if value not in names:
        raise typer.BadParameter(f"{value!r}; use one of {', '.join(names)}.")
    return value


BackendOpt = Annotated[str, typer.Option(
    "--backend", callback=_check_backend,
    help="The engine: hf (transformers + PEFT in this process) or llama-server (--model is "
    "an export-gguf folder or a model to export; a server is started unless --server-url).")]
ServerUrlOpt = Annotated[list[str] | None, typer.Option(
    "--server-url", help="--backend llama-server: a running server (repeatable), started on "
    "the export-gguf folder given as --model.")]
ApiKeyFileOpt = Annotated[Path | None, typer.Option(
    "--api-key-file", help=f"--server-url: a file holding the servers' API key (default: "
    f"${API_KEY_ENV}, else none).")]


@dataclass(frozen=True)
class BackendChoice:
    """What ``--backend``, ``--server-url`` and ``--api-key-file`` chose (checked together)."""

    backend: str = "hf"
    server_urls: tuple[str, ...] = ()
    api_key_file: Path | None = None

    @classmethod
    def from_options(cls, backend: str, server_urls: list[str] | None,
                     api_key_file: Path | None) -> BackendChoice:
        urls = tuple(server_urls or ())
        if backend == "hf" and (urls or api_key_file is not None):
            raise BackendArgumentError(
                "--server-url and --api-key-file are for --backend llama-server; add it, or "
                "leave them out to run the model in this process.")
        if api_key_file is not None and not urls:
            raise BackendArgumentError(
                "--api-key-file is the key of the servers --server-url names; add "
                "--server-url, or leave the key out (a started server gets a random one).")
        return cls(backend, urls, api_key_file)

    def api_key(self) -> str | None:
        """The key for ``--server-url``: the file's first line, else ``$MELLEA_LOCAL_API_KEY``."""
        if not self.server_urls:
            return None
        if self.api_key_file is not None:
            text = read_utf8(self.api_key_file, "--api-key-file", BackendArgumentError)
            key = text.strip()
            if not key or "\n" in key:
                raise BackendArgumentError(
                    f"--api-key-file {str(self.api_key_file)!r} must hold the key on one line.")
            return key
        return os.environ.get(API_KEY_ENV) or None

    def load(self, model: str, *, device: str | None = None, dtype: str | None = None,
             adapter: str | None = None, model_options: dict[str, Any] | None = None,
             threads: int | None = None) -> Any:
        """The backend (``launch.load_backend`` on this engine)."""
        return load_backend(model, device=device, dtype=dtype, adapter=adapter,
                            model_options=model_options, backend=self.backend,
                            server_urls=self.server_urls, api_key=self.api_key(),
                            threads=threads)


# --- --pool (was --engine): where the lines of `check` run -----------------------------------

POOLS = ("local", "ray")


def _check_pool(value: str | None) -> str | None:
    if value is not None and value not in POOLS:
        raise typer.BadParameter(f"{value!r}; use local (one process) or ray (an actor pool).")
    return value


PoolOpt = Annotated[str | None, typer.Option(
    "--pool", callback=_check_pool,
    help="local: one backend in this process; ray: a Ray Data actor pool, one backend per "
    "actor (needs pip install 'mellea-local\\[ray]'). Same output either way.")]
OldEngineOpt = Annotated[str | None, typer.Option(
    "--engine", callback=_check_pool, hidden=True,
    help="Deprecated spelling of --pool.")]


def pool_choice(pool: str | None, engine: str | None) -> str:
    """``--pool``, or the deprecated ``--engine`` with a one-line warning (default local)."""
    if engine is not None:
        Console(stderr=True, soft_wrap=True).print(
            "warning: --engine is deprecated, use --pool (same values: local, ray)",
            style="yellow", markup=False, highlight=False)
        if pool is not None and pool != engine:
            raise typer.BadParameter(f"--pool {pool} and --engine {engine} disagree; pass "
                                     "--pool only.")
        return engine
    return pool or "local"
