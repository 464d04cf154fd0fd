"""``mellea-local chat`` and ``react``: the real tiny model through the CLI, plus the step
printer on a scripted agent run (a random model never calls a tool)."""

from __future__ import annotations

import pytest
from doubles import Reply, ScriptedBackend
from rich.console import Console
from typer.testing import CliRunner

from mellea_local.cli import app
from mellea_local.cli.chat import run_chat
from mellea_local.cli.react_cmd import build_tools, parse_lookup, run_react
from mellea_local.core.tool_call import ModelToolCall

runner = CliRunner()


def _model_args(cli_model) -> list[str]:
    model_dir, adapter_dir = cli_model
    return ["--model", str(model_dir), "--adapter", str(adapter_dir), "--max-new-tokens", "4"]


def test_chat_answers_resets_and_quits(cli_model):
    result = runner.invoke(app, ["chat", *_model_args(cli_model)],
                           input="hello\nagain\n/reset\nhi\n/quit\nnever answered\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("assistant> ") == 3
    assert "(history cleared)" in result.output


def test_chat_ends_at_end_of_input(cli_model):
    result = runner.invoke(app, ["chat", *_model_args(cli_model)], input="hello\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("assistant> ") == 1


def test_chat_keeps_history_until_reset(monkeypatch):
    backend = ScriptedBackend.scripted(["one", "two", "three"])
    inputs = iter(["first", "second", "/reset", "third", "/quit"])
    monkeypatch.setattr("builtins.input", lambda _prompt="": next(inputs))
    console = Console(record=True, width=200)
    assert run_chat(backend, console=console, system="Be brief.") == 3
    sizes = [len(c.ctx.as_list() or []) for c in backend.generate_calls]
    # system; system+user+answer; after /reset back to the system turn alone.
    assert sizes == [1, 3, 1]
    assert "assistant> two" in console.export_text()


def test_react_streams_steps_then_stops_at_the_budget(cli_model):
    result = runner.invoke(app, ["react", "what is 2+3", *_model_args(cli_model),
                                 "--budget", "1", "--lookup", "paris=france"])
    assert result.exit_code == 1
    assert "step 1" in result.output and "tool call" in result.output
    assert result.output.strip().splitlines()[-1].startswith("error: could not complete react")
    assert "Traceback" not in result.output


def test_react_prints_thought_call_observation_and_answer():
    first = ModelToolCall("calculator", None, {"expression": "6*7"}, tool_call_id="c1")
    last = ModelToolCall("final_answer", None, {"answer": "42"}, tool_call_id="c2")
    backend = ScriptedBackend.scripted([
        Reply("", thinking="I should multiply.", tool_calls=[first]),
        Reply("", tool_calls=[last]),
    ])
    console = Console(record=True, width=200)
    answer = run_react(backend, "What is 6*7?", console=console, tools=build_tools(None))
    assert answer == "42"
    text = console.export_text()
    order = ["goal: What is 6*7?", "step 1", "thought: I should multiply.",
             'tool call: calculator({"expression": "6*7"})', "observation (calculator): 42",
             "step 2", "tool call: final_answer", "final answer: 42"]
    positions = [text.index(part) for part in order]
    assert positions == sorted(positions), text


def test_lookup_pairs():
    assert parse_lookup(["paris = france", "k=v=w"]) == {"paris": "france", "k": "v=w"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_lookup(["novalue"])
    assert [t.name for t in build_tools({"a": "b"})] == ["calculator", "lookup"]


def test_bad_lookup_is_one_line(cli_model):
    result = runner.invoke(app, ["react", "x", *_model_args(cli_model), "--lookup", "oops"])
    assert result.exit_code == 1
    assert result.output.strip().startswith("error: --lookup takes KEY=VALUE")
