"""The first hour on SmolLM2-135M-Instruct: ``demo``, ``chat``, ``react`` and ``check`` with
``--model smollm2-135m --threads 1``, each once through the real command line (typer's
CliRunner), as a new user would try them: with the requirement-check aLoRA this repository
ships for it, and (libraries emptied) as a user of a model without one sees them.
``real_model``: deselected with a one-line hint when the model is not in the cache."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mellea_local.cli import app

pytestmark = pytest.mark.real_model
runner = CliRunner()
MODEL = ["--model", "smollm2-135m", "--threads", "1"]
MISSING = "no requirement-check adapter exists for model 'SmolLM2-135M-Instruct'"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_chat_answers_and_quits():
    result = runner.invoke(app, ["chat", *MODEL, "--max-new-tokens", "16", "--no-thinking"],
                           input="What is the capital of France?\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "SmolLM2-135M-Instruct" in result.output
    assert "Paris" in result.output.split("assistant>", 1)[1]


@pytest.fixture
def no_libraries(tmp_path, monkeypatch):
    """Adapter libraries with nothing in them: a model no adapter was trained for."""
    import mellea_local.adapters.library as library

    monkeypatch.setattr(library, "_REPO_LIBRARY", tmp_path / "empty-repo-library")
    monkeypatch.setattr(library, "_BUNDLED_LIBRARY", tmp_path / "empty-bundled-library")


def test_check_scores_with_the_shipped_alora(tmp_path):
    data = tmp_path / "data.jsonl"
    answer = {"messages": [{"role": "user", "content": "Tell me about tea. Reply in ALL CAPS."},
                           {"role": "assistant", "content": "TEA IS A HOT DRINK."}]}
    lines = [{**answer, "requirement": "Every letter must be uppercase.", "label": True},
             {**answer, "requirement": "Include at least one number.", "label": False}]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out.jsonl"
    # --no-route: a program verifies both requirements by default (decided_by says so);
    # this test is about the shipped aLoRA's scores.
    routed_out = tmp_path / "routed.jsonl"
    routed = runner.invoke(app, ["check", str(data), "-o", str(routed_out), *MODEL])
    assert routed.exit_code == 0, routed.output
    assert [json.loads(line)["scores"][0]
            for line in routed_out.read_text().splitlines()] == [1.0, 0.0]
    result = runner.invoke(app, ["check", str(data), "-o", str(out), *MODEL, "--no-route"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    scores = [r["scores"][0] for r in records]
    assert all(0.0 < s < 1.0 for s in scores)
    # the scores are the shipped aLoRA's, as the Python API gives them (quality: bench)
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.intrinsics.requirement_check import requirement_checks
    from mellea_local.messages import chat_context as context_of

    backend = LocalHFBackend("smollm2-135m", device="cpu")
    adapter = backend.add_adapter("requirement-check")
    assert adapter.kind == "alora" and "SmolLM2-135M-Instruct" in str(adapter.path)
    ctx = context_of(tuple((m["role"], m["content"]) for m in answer["messages"]))
    direct = requirement_checks(ctx, backend, [line["requirement"] for line in lines])
    assert direct == pytest.approx(scores, abs=1e-5)


def test_check_stops_with_the_missing_adapter_line(tmp_path, no_libraries):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "Capital of France?"},
                                             {"role": "assistant", "content": "Paris."}],
                                "requirement": "Answer in one word.", "label": True}) + "\n")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["check", str(data), "-o", str(out), *MODEL])
    assert result.exit_code == 1
    text = _flat(result.output)
    assert text.startswith(f"error: {MISSING}")
    assert "mellea-local train data.jsonl --model smollm2-135m" in text
    assert "Traceback" not in result.output and not out.exists()


def test_react_runs_with_the_hermes_tool_format_and_constrained_calls():
    result = runner.invoke(app, ["react", "What is 12 * 7?", *MODEL, "--max-new-tokens", "48",
                                 "--budget", "2"])
    text = _flat(result.output)
    assert text.startswith("tool format: hermes (the chat template has no tool slot")
    assert "constrained to the tools' schemas: on" in text
    assert "step 1" in result.output and "Traceback" not in result.output
    # Every step is a valid call under the grammar: an answer, or the plain budget error.
    assert result.exit_code == 0 or "never called final_answer alone" in text, result.output


def test_demo_checks_with_the_shipped_alora():
    result = runner.invoke(app, ["demo", *MODEL])
    assert result.exit_code == 0, result.output
    text = _flat(result.output)
    assert "with adapters cli-adapter" in text and "JUDGE" not in text
    assert "prefilled" in text and "reused" in text  # the aLoRA checks table, at the floor
    assert "Paris" in text.split("assistant", 1)[1]
    assert "done in" in text


def test_demo_runs_with_a_labelled_judge(no_libraries):
    result = runner.invoke(app, ["demo", *MODEL])
    assert result.exit_code == 0, result.output
    text = _flat(result.output)
    assert MISSING in text and "mellea-local train" in text
    assert "checks below use the base model as a yes/no JUDGE" in text
    assert "Paris" in text.split("assistant", 1)[1]
    assert "no tool-call format" in text  # the agent act says why it is skipped
    assert "done in" in text
