"""The ``mellea-local`` command line (typer): ``demo``, ``check``, ``chat`` and ``react``.

Heavy imports (torch, transformers) happen inside the commands so ``--help`` stays instant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from mellea_local.cli.options import (
    EMBEDDED,
    AdapterOpt,
    DebugOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    run_guarded,
)

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


@app.command()
def check(
    input_path: Annotated[Path, typer.Argument(
        metavar="INPUT", help="JSONL dataset: messages, requirement(s), optional label.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="JSONL of scores and verdicts; appended to, resumed from.")],
    model: ModelOpt = EMBEDDED,
    adapter: AdapterOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Run requirement checks over a JSONL dataset (resumable; bad lines are reported, skipped)."""
    from rich.console import Console

    def work() -> None:
        from mellea_local.cli.check import report, run_check
        from mellea_local.cli.options import add_cli_adapter, load_backend

        if not input_path.is_file():
            raise FileNotFoundError(
                f"The input dataset {str(input_path)!r} does not exist; pass a JSONL file.")
        backend = load_backend(model, device=device, dtype=dtype)
        name = add_cli_adapter(backend, adapter) if adapter else None
        if name is None and not backend.supports_intrinsic("requirement-check"):
            name = add_cli_adapter(backend, "requirement-check")
        output.parent.mkdir(parents=True, exist_ok=True)
        summary = run_check(input_path, output, backend, adapter=name)
        report(summary, output, Console(soft_wrap=True))

    run_guarded(debug, work)


@app.command()
def chat(
    model: ModelOpt = EMBEDDED,
    adapter: AdapterOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    thinking: Annotated[bool, typer.Option(help="Let the model think first.")] = True,
    max_new_tokens: Annotated[int, typer.Option(help="Answer length limit.")] = 256,
) -> None:
    """Chat with the model; thinking shown dimmed, /reset starts over, /quit leaves."""
    from rich.console import Console

    def work() -> None:
        from mellea_local.cli.chat import run_chat
        from mellea_local.cli.options import add_cli_adapter, load_backend

        backend = load_backend(model, device=device, dtype=dtype)
        if adapter:
            add_cli_adapter(backend, adapter)
        run_chat(backend, console=Console(), system=system, thinking=thinking,
                 max_new_tokens=max_new_tokens)

    run_guarded(debug, work)


@app.command("react")
def react_command(
    goal: Annotated[str, typer.Argument(help="What the agent should achieve.")],
    model: ModelOpt = EMBEDDED,
    adapter: AdapterOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
    lookup: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE for the lookup tool (repeatable); without any, only the calculator.")
    ] = None,
    budget: Annotated[int, typer.Option(help="Most model turns before giving up.")] = 6,
    thinking: Annotated[bool, typer.Option(help="Let the model think first.")] = True,
    max_new_tokens: Annotated[int, typer.Option(help="Length limit per turn.")] = 256,
) -> None:
    """Run the ReACT agent on GOAL with the calculator (and a lookup table), step by step."""
    from rich.console import Console

    def work() -> None:
        from mellea_local.cli.options import add_cli_adapter, load_backend
        from mellea_local.cli.react_cmd import build_tools, parse_lookup, run_react

        tools = build_tools(parse_lookup(lookup or []))
        backend = load_backend(model, device=device, dtype=dtype)
        if adapter:
            add_cli_adapter(backend, adapter)
        run_react(backend, goal, console=Console(), tools=tools, loop_budget=budget,
                  max_new_tokens=max_new_tokens, thinking=thinking)

    run_guarded(debug, work)


def main() -> None:
    app()
