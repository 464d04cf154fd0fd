"""The first hour on the real model: the peer's quick-start ported by renaming writes a complete
email on SmolLM2, ``check`` without ``--model`` judges with SmolLM2 and its aLoRA, and ``chat``
prints each answer once. ``real_model``: deselected with a one-line hint without the model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import mellea_local
from mellea_local.cli import app

pytestmark = pytest.mark.real_model
runner = CliRunner()

# The peer's quick-start (docs/docs/getting-started/quickstart.md) with the model named, as the
# issue's user wrote it; ported by replacing `mellea` with `mellea_local`, nothing else.
PEER = '''\
import mellea

m = mellea.start_session(model_id="smollm2-135m")
email = m.instruct("Write a short email to Olivia thanking her for organizing the intern events.")
print(str(email))
'''


@pytest.fixture
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_ported_quickstart_writes_a_complete_email(one_thread, capsys):
    namespace: dict = {}
    exec(compile(PEER.replace("mellea", "mellea_local"), "<peer quick-start>", "exec"),
         namespace)
    m, email = namespace["m"], namespace["email"]
    assert isinstance(m, mellea_local.MelleaSession)
    assert type(m.backend) is mellea_local.LocalHFBackend
    assert "requirement-check_alora" in m.backend.adapters  # the shipped aLoRA judges
    assert isinstance(email, mellea_local.ComputedModelOutputThunk)
    # Complete: the model ended it (not the budget), so nothing is cut mid-sentence.
    assert email.finish_reason == "stop" and email.truncated is False
    text = str(email)
    assert "Olivia" in text and len(text.split()) > 20
    assert text.rstrip()[-1] not in ",;:-"
    assert capsys.readouterr().out == text + "\n"


def test_check_without_model_judges_with_smollm2(tmp_path, monkeypatch):
    import mellea_local.cli.options as options

    monkeypatch.delenv("MELLEA_LOCAL_DEFAULT_MODEL", raising=False)
    loaded = []
    real_load = options.load_backend

    def spy(model, **kwargs):
        loaded.append(model)
        return real_load(model, **kwargs)

    monkeypatch.setattr(options, "load_backend", spy)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({
        "messages": [{"role": "user", "content": "Capital of France?"},
                     {"role": "assistant", "content": "Paris."}],
        "requirement": "Answer in one word.", "label": True}) + "\n")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["check", str(data), "-o", str(out), "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert loaded == ["smollm2-135m"]
    assert "embedded demo model" not in result.output
    assert f"results: {out.resolve()}" in result.output
    assert len(out.read_text().splitlines()) == 1


def test_chat_prints_an_answer_once_with_thinking_on():
    result = runner.invoke(app, ["chat", "--model", "smollm2-135m", "--threads", "1",
                                 "--max-new-tokens", "12"],
                           input="What is the capital of France?\n/quit\n")
    assert result.exit_code == 0, result.output
    answer = result.output.split("assistant> ", 1)[1].split("you> ", 1)[0].strip()
    assert answer and result.output.count("assistant> ") == 1
    # SmolLM2 produced no thinking block, so nothing was shown as one: the answer once.
    assert result.output.count(answer) == 1
