"""``mellea-local bench``: the quick suite end to end, in process and through a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from mellea_local.cli import app

from .data import row

runner = CliRunner()
SPEED_SECTIONS = ("generation", "requirement_check", "batched", "react", "conversations")
MODES = {"ours", "floor", "alora_scratch", "lora", "llm_judge", "batch8"}


def _embedded_shipped() -> bool:
    import mellea_local.embedded as embedded

    return (Path(embedded.__file__).parent / "weights" / "mellea-tiny-chat"
            / "model.safetensors").is_file()


def test_quick_bench_writes_json_and_report_and_judges_nothing(tmp_path):
    result = runner.invoke(app, ["bench", "--quick", "--threads", "1", "--out-dir",
                                 str(tmp_path), "--name", "q"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "q.json").read_text())
    assert data["benchmark"] == "suite" and data["name"] == "q"
    assert data["config"]["quick"] is True
    assert data["config"]["speed_model"] == "random-init tiny"
    env = data["environment"]  # the thread count, where it came from, and the load beside it
    assert env["torch_threads"] == 1 and env["threads_source"] == "flag"
    assert env["usable_cpus"] >= 1 and "load_average" in env
    assert data["config"]["command"] == "mellea-local bench --quick --name q --out-dir " \
        f"{tmp_path} --threads 1"
    for section in SPEED_SECTIONS:
        assert section in data, section
    rows = data["requirement_check"]["rows"]
    assert len(rows) == 2 and rows[0]["context_tokens"] < rows[1]["context_tokens"]
    # The lengths asked (quick: 128, 512) are the lengths measured, within the stated tolerance.
    assert [r["requested_tokens"] for r in rows] == [128, 512]
    assert all(abs(r["context_tokens"] - r["requested_tokens"]) <= max(8, 0.02 * 512)
               for r in rows)
    assert all(set(r["median_ms"]) == MODES for r in rows)
    assert all(r["suffix_tokens"] > 0 and r["ours_over_floor"] > 0 for r in rows)
    assert [r["checks"] for r in data["batched"]["rows"]] == [1, 4, 8]
    assert data["generation"]["new_tokens"] == 32
    assert data["react"]["turns"] == 2
    reuse = data["react"]["reuse"]["per_turn"]
    # The second turn reuses the first one's history: it prefills less than its prompt.
    assert reuse[1]["reused_tokens"] > 0
    assert reuse[1]["prefilled_tokens"] < reuse[1]["prompt_tokens"]
    # The bare-model floor of each reuse turn: positive, and a turn never beats it by much.
    assert all(t["floor_min_ms"] > 0 and t["over_floor"] > 0.5 for t in reuse)
    assert data["react"]["floor"]["turn2_over_turn1"] > 0
    conv = data["conversations"]
    assert conv["conversations"] == 3 and set(conv["schedules"]) == {
        "serial", "interleaved", "concurrent"}
    # Every schedule reuses what serial does: each conversation keeps its own prefix.
    assert conv["schedules"]["interleaved"]["reused_vs_serial"] >= 0.95
    assert conv["react"]["agents"] == 3 and conv["floor"]["floor_ms"] > 0
    assert {t["ratio"] for t in data["targets"]} >= {"ours/floor", "batch8/one", "scratch/ours",
                                                     "reused/serial", "prefilled/serial"}
    # A smoke run judges nothing and draws nothing; it says so instead of reporting misses.
    assert all(t["met"] is None for t in data["targets"])
    assert "MISSED" not in result.output and "not judged (--quick)" in result.output
    assert not list(tmp_path.glob("*.png"))
    md = (tmp_path / "q.md").read_text()
    assert "## Ratios vs targets" in md and data["plots_note"] in md
    assert f"1 thread(s) (flag; {env['usable_cpus']} usable CPU(s), load average" in md
    assert f"128 -> {rows[0]['context_tokens']}, 512 -> {rows[1]['context_tokens']}" in md
    acc = data["accuracy"]
    if _embedded_shipped():
        # the two trained adapters, and the base model asked as a judge beside them
        synthetic = acc["splits"]["synthetic"]
        # (routing on by default: each adapter also has its +route row)
        assert {a["kind"] for a in synthetic["adapters"].values()} == {
            "alora", "lora", "judge", "alora+route", "lora+route"}
        assert set(synthetic["floors"]) == {"always yes", "always no"}
    else:  # no trained adapters in this build: a note, not a failure
        assert "not in this build" in acc["skipped"]
        assert "Skipped: the embedded model" in md
        assert "accuracy skipped:" in result.output
    assert f"wrote {tmp_path / 'q.json'}" in result.output
    assert f"results in {tmp_path.resolve()}/ (the report: q.md)" in result.output


def test_accuracy_of_a_given_model_and_adapter_matches_its_checks(cli_model, tmp_path):
    """Accuracy only, on a saved model with a random aLoRA: the verdicts are check's."""
    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.core.context import ChatContext
    from mellea_local.intrinsics import arequirement_checks
    from mellea_local.messages import Message

    model_dir, adapter_dir = cli_model
    lines = [row(1, label=[True, False], family="city"), row(2, label=True),
             row(3, label=[False, False], family=["a", "b"])]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    skip = [arg for s in SPEED_SECTIONS for arg in ("--skip", s)]
    result = runner.invoke(app, ["bench", "--quick", "--model", str(model_dir), "--adapter",
                                 str(adapter_dir), "--dataset", str(data), "--out-dir",
                                 str(tmp_path), "--name", "acc", *skip])
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "acc.json").read_text())
    assert not any(s in out for s in SPEED_SECTIONS)
    assert list(out["accuracy"]["splits"]) == ["data"]  # --dataset: its own split
    assert out["accuracy"]["adapters"] == {"cli-adapter": {"kind": "alora",
                                                           "path": str(adapter_dir)}}
    acc = out["accuracy"]["splits"]["data"]
    assert list(acc["adapters"]) == ["cli-adapter", "cli-adapter+route", "judge (greedy)",
                                     "judge (probability)"]
    assert set(acc["vs_judge"]["cli-adapter"]) == {"greedy", "probability"}
    assert acc["families"] == ["city", "Answer briefly.", "Mention paris.", "a", "b"]

    backend = LocalHFBackend(model_dir, device="cpu")
    name = backend.add_adapter(adapter_dir).name
    right: dict[str, list[bool]] = {f: [] for f in acc["families"]}
    for text in lines:
        obj = json.loads(text)
        ctx = ChatContext()
        for m in obj["messages"]:
            ctx = ctx.add(Message(m["role"], m["content"]))
        scores = asyncio.run(arequirement_checks(ctx, backend, obj["requirements"],
                                                 adapter=name))
        labels = obj["label"] if isinstance(obj["label"], list) else [obj["label"]] * 2
        fam = obj.get("family", obj["requirements"])
        fams = fam if isinstance(fam, list) else [fam] * 2
        for s, lab, f in zip(scores, labels, fams, strict=True):
            right[f].append((s > 0.5) == lab)
    got = acc["adapters"]["cli-adapter"]["families"]
    assert {f: (c["n"], c["correct"]) for f, c in got.items()} == {
        f: (len(r), sum(r)) for f, r in right.items()}
    assert not list(tmp_path.glob("*.png"))  # a --quick run draws nothing


def test_a_model_without_trained_adapters_skips_accuracy_with_a_note(cli_model, tmp_path):
    model_dir, _ = cli_model
    skip = [arg for s in SPEED_SECTIONS for arg in ("--skip", s)]
    result = runner.invoke(app, ["bench", "--quick", "--model", str(model_dir), "--out-dir",
                                 str(tmp_path), "--name", "none", *skip])
    assert result.exit_code == 0, result.output
    skipped = json.loads((tmp_path / "none.json").read_text())["accuracy"]["skipped"]
    assert "no trained requirement-check adapter" in skipped and "--adapter" in skipped
    assert "speed sections skipped" in (tmp_path / "none.md").read_text()


def test_missing_dataset_is_one_line_and_nonzero(tmp_path):
    out_dir = tmp_path / "out"
    result = runner.invoke(app, ["bench", "--quick", "--dataset", str(tmp_path / "nope.jsonl"),
                                 "--out-dir", str(out_dir)])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: --dataset: the labelled dataset")
    assert "nope.jsonl" in lines[0]
    assert "Traceback" not in result.output
    assert not out_dir.exists()  # it failed before building anything


def test_bad_options_are_one_line(tmp_path):
    for args, words in ((["--size", "huge"], "--size 'huge': no such shape"),
                        (["--lengths", "12x"], "comma-separated"),
                        (["--skip", "everything"], "--skip everything: no such section")):
        result = runner.invoke(app, ["bench", "--quick", "--out-dir", str(tmp_path), *args])
        assert result.exit_code == 1, args
        assert result.output.startswith("error: ") and words in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1


def test_debug_keeps_the_traceback(tmp_path):
    from mellea_local.bench.accuracy import DatasetError

    result = runner.invoke(app, ["bench", "--dataset", str(tmp_path / "nope.jsonl"), "--debug"])
    assert result.exit_code != 0 and isinstance(result.exception, DatasetError)


def test_quick_bench_through_a_subprocess(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mellea_local", "bench", "--quick", "--threads", "1",
         "--out-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "bench-quick.json").read_text())
    assert all(s in data for s in SPEED_SECTIONS)
    assert ("adapters" in data["accuracy"]) == _embedded_shipped()
    assert (tmp_path / "bench-quick.md").is_file()
    assert not list(tmp_path.glob("*.png"))
    assert "ours/floor" in proc.stdout and "wrote " in proc.stdout
    assert "Traceback" not in proc.stderr
