"""How the command line reports a bad command line: the usage, then one ``error:`` line.

typer draws click's usage errors in a box whose last line is its border; a user (and a script
reading stderr) wants the same shape as every other failure of ours: a last line starting with
``error:`` that names the flag or the file. Exit codes stay click's (2 for a usage error).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
import typer.core

try:  # typer vendors its own click since 0.2x; before, it raised click's exceptions
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef]


def print_usage_error(exc: click_exceptions.ClickException) -> None:
    """The usage line, where help lives, then ``error: <message>`` on stderr."""
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        typer.echo(ctx.get_usage(), err=True)
        typer.echo(f"Try '{ctx.command_path} --help' for help.", err=True)
    message = " ".join(exc.format_message().split())
    typer.echo(f"error: {message}", err=True)


class CliGroup(typer.core.TyperGroup):
    """The root command group; runs in click's non-standalone mode to word errors itself."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None,
        complete_var: str | None = None, standalone_mode: bool = True, **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_exceptions.NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help(), err=True)
            sys.exit(exc.exit_code)
        except click_exceptions.ClickException as exc:
            print_usage_error(exc)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)
