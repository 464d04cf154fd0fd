"""Every help text of every command shows what it says: typer renders help as Rich markup, where
a bracketed word (``'mellea-local[ray]'``) is a style tag and silently vanishes."""

from __future__ import annotations

import typer
from rich.markup import render
from typer.testing import CliRunner

from mellea_local.cli import app


def _help_texts() -> list[tuple[str, str]]:
    root = typer.main.get_command(app)
    found = [("root", root.help or "")]
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        found += [(name, command.help or ""), (f"{name} epilog", command.epilog or "")]
        found += [(f"{name} {param.name}", getattr(param, "help", None) or "")
                  for param in command.params]
    return [(where, text) for where, text in found if text]


def test_no_help_text_loses_a_bracketed_word_to_markup():
    # "\b" is click's keep-my-line-breaks marker; Rich drops it as a control code.
    eaten = [(where, text) for where, text in _help_texts()
             if render(text).plain != text.replace("\\[", "[").replace("\b", "")]
    assert eaten == []


def test_the_engine_help_shows_the_ray_install_line():
    for command in ("check", "bench"):
        shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
        assert shown.exit_code == 0
        assert "pip install 'mellea-local[ray]'" in shown.output, command


def test_the_checker_sees_an_eaten_tag():
    assert render("pip install 'mellea-local[ray]'").plain == "pip install 'mellea-local'"
