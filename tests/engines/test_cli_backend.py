"""The command line picks an engine: ``check --backend llama-server`` gives the records the
default backend gives (scores within llama.cpp's f32 tolerance, the same verdicts), on a
real server; the shared options refuse what does not go together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mellea_local.cli import app

runner = CliRunner()
TOLERANCE = 2e-3  # as tests/backends/llama_server/test_llama_scores.py


def _data(tmp_path: Path) -> Path:
    rows = []
    for i in range(3):
        rows.append(json.dumps({
            "id": f"ex{i}",
            "messages": [{"role": "user", "content": f"Name a city ({i})."},
                         {"role": "assistant", "content": "Paris." if i % 2 else "a b c"}],
            "requirements": ["Answer briefly.", "Mention Paris."],
            "label": [True, bool(i % 2)],
        }))
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_check_on_a_running_llama_server_gives_the_default_records(
        engines_llama, engines_gguf, tmp_path, monkeypatch):
    data = _data(tmp_path)
    ref, mine = tmp_path / "hf.jsonl", tmp_path / "llama.jsonl"
    result = runner.invoke(app, ["check", str(data), "-o", str(ref), "--threads", "1"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("MELLEA_LOCAL_API_KEY", engines_llama._api_key)
    result = runner.invoke(app, [
        "check", str(data), "-o", str(mine), "--backend", "llama-server",
        "--model", str(engines_gguf), "--server-url", engines_llama.urls[0]])
    assert result.exit_code == 0, result.output
    a, b = _records(ref), _records(mine)
    assert [r["line"] for r in a] == [r["line"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert {k: v for k, v in x.items() if k != "scores"} == {
            k: v for k, v in y.items() if k != "scores"}
        assert all(abs(s - t) <= TOLERANCE for s, t in zip(x["scores"], y["scores"],
                                                           strict=True))


def test_the_api_key_file_is_read(engines_llama, engines_gguf, tmp_path, monkeypatch):
    monkeypatch.delenv("MELLEA_LOCAL_API_KEY", raising=False)
    data, out = _data(tmp_path), tmp_path / "out.jsonl"
    key = tmp_path / "key"
    key.write_text(engines_llama._api_key + "\n")
    result = runner.invoke(app, [
        "check", str(data), "-o", str(out), "--backend", "llama-server",
        "--model", str(engines_gguf), "--server-url", engines_llama.urls[0],
        "--api-key-file", str(key)])
    assert result.exit_code == 0, result.output
    key.write_text("wrong-key\n")
    result = runner.invoke(app, [
        "check", str(data), "-o", str(tmp_path / "other.jsonl"), "--backend", "llama-server",
        "--model", str(engines_gguf), "--server-url", engines_llama.urls[0],
        "--api-key-file", str(key)])
    assert result.exit_code == 1 and "error:" in result.output


@pytest.mark.parametrize("args, says", [
    (["--server-url", "http://127.0.0.1:1"], "--backend llama-server"),
    (["--backend", "vllm"], "use one of hf, llama-server"),
    (["--backend", "llama-server", "--api-key-file", "k"], "add --server-url"),
    (["--pool", "ray", "--backend", "llama-server"], "--pool local"),
])
def test_options_that_do_not_go_together_are_one_line_errors(tmp_path, args, says):
    data = _data(tmp_path)
    result = runner.invoke(app, ["check", str(data), "-o", str(tmp_path / "o.jsonl"), *args])
    assert result.exit_code != 0
    assert says in " ".join(result.output.split())


def test_engine_is_the_deprecated_spelling_of_pool(tmp_path):
    data = _data(tmp_path)
    result = runner.invoke(app, ["check", str(data), "-o", str(tmp_path / "o.jsonl"),
                                 "--engine", "local", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "--engine is deprecated, use --pool" in " ".join(result.output.split())


def test_demo_runs_on_a_running_llama_server(engines_llama, engines_gguf, monkeypatch):
    """Every act runs; what only a local model has (parameter count, torch device) says n/a
    and the header names the server instead."""
    monkeypatch.setenv("MELLEA_LOCAL_API_KEY", engines_llama._api_key)
    result = runner.invoke(app, [
        "demo", "--backend", "llama-server", "--model", str(engines_gguf),
        "--server-url", engines_llama.urls[0], "--threads", "1"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "parameters n/a, llama.cpp server(s) " + engines_llama.urls[0] in text
    assert "1. An answer" in text and "5. Instruct" in text and "done in" in text
    assert "JUDGE" not in text  # the export's requirement-check adapters were found


def _bench_accuracy(tmp_path: Path, data: Path, name: str, *extra: str) -> dict:
    out = tmp_path / name
    result = runner.invoke(app, ["bench", "--only", "accuracy", "--dataset", str(data),
                                 "--no-judge", "--threads", "1", "--out", str(out),
                                 "--name", name, *extra])
    assert result.exit_code == 0, result.output
    return json.loads((out / f"{name}.json").read_text())["accuracy"]


def test_bench_accuracy_on_a_running_llama_server_scores_as_the_default(
        engines_llama, engines_gguf, tmp_path, monkeypatch):
    data = _data(tmp_path)
    ref = _bench_accuracy(tmp_path, data, "hf")
    monkeypatch.setenv("MELLEA_LOCAL_API_KEY", engines_llama._api_key)
    mine = _bench_accuracy(tmp_path, data, "llama", "--backend", "llama-server",
                           "--model", str(engines_gguf), "--server-url", engines_llama.urls[0])
    assert sorted(mine["adapters"]) == sorted(ref["adapters"])
    [a], [b] = ref["splits"].values(), mine["splits"].values()
    assert a["examples"] == b["examples"] == 6
    for adapter in ref["adapters"]:
        # Counts of verdicts per family: the same verdicts, check by check.
        assert a["adapters"][adapter]["families"] == b["adapters"][adapter]["families"]


def test_bench_sections_that_need_a_local_model_refuse_another_engine(tmp_path):
    result = runner.invoke(app, ["bench", "--quick", "--backend", "llama-server",
                                 "--skip", "react", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "--backend llama-server: the section(s) generation, requirement_check, batched, " \
           "conversations time a model in this process" in text
    assert "--only accuracy" in text
    assert not (tmp_path / "o").exists()  # refused before anything ran or was written


def test_demo_and_bench_refuse_a_server_url_without_the_engine(tmp_path):
    for args in (["demo"], ["bench", "--only", "accuracy"]):
        result = runner.invoke(app, [*args, "--server-url", "http://127.0.0.1:1"])
        assert result.exit_code != 0
        assert "--backend llama-server" in " ".join(result.output.split())
