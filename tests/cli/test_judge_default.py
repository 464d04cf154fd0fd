"""``check`` without ``--model`` and no real model in the cache: the embedded demo model judges,
and one line says so with the command that gets the real one; ``--model`` still decides, and
``check`` says where its results went."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mellea_local.cli import app

from .data import read_jsonl, row

runner = CliRunner()
NOTE = "embedded demo model"


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("MELLEA_LOCAL_DEFAULT_MODEL", raising=False)
    monkeypatch.setenv("MELLEA_LOCAL_MODELS", str(tmp_path / "model-cache"))


def _data(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(row(1, label=True) + "\n" + row(2, label=False) + "\n")
    return data


def test_the_embedded_fallback_is_said_in_one_line(tmp_path, empty_cache):
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["check", str(_data(tmp_path)), "-o", str(out), "--threads", "1"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if NOTE in line]
    assert len(notes) == 1
    assert "3 M parameters" in notes[0] and "demo only" in notes[0]
    assert "`mellea-local models get smollm2-135m`" in notes[0] and "--model" in notes[0]
    assert [r["line"] for r in read_jsonl(out)] == [1, 2]
    assert f"results: {out.resolve()}" in result.stdout


def test_model_overrides_the_default_and_nothing_is_said(tmp_path, empty_cache):
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["check", str(_data(tmp_path)), "-o", str(out), "--model",
                                 "embedded", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert NOTE not in result.output and len(read_jsonl(out)) == 2


def test_the_pinned_default_is_used_as_named(tmp_path, empty_cache, monkeypatch):
    monkeypatch.setenv("MELLEA_LOCAL_DEFAULT_MODEL", "no-such-model-folder/x/y")
    result = runner.invoke(app, ["check", str(_data(tmp_path)), "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1
    assert "no-such-model-folder/x/y" in result.output and NOTE not in result.output
