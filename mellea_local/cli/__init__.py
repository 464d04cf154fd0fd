"""The ``mellea-local`` command line (typer): ``demo`` for now; more commands build on it."""

from __future__ import annotations

import os

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Local-model inference with Activated LoRA adapters.",
)


@app.callback()
def _root() -> None:
    """Local-model inference with Activated LoRA adapters."""


@app.command()
def demo() -> None:
    """Show the product working offline: generate, then check requirements at the floor."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mellea_local.cli.demo import run_demo

    run_demo()


def main() -> None:
    app()
