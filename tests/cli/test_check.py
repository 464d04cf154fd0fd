"""``mellea-local check`` end to end on a real tiny model and a real random aLoRA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mellea_local.batch.local import LineError, parse_line, read_done
from mellea_local.cli import app

from .data import read_jsonl, row

runner = CliRunner()


def _check(cli_model, data: Path, out: Path, *extra: str):
    model_dir, adapter_dir = cli_model
    return runner.invoke(app, ["check", str(data), "-o", str(out), "--model", str(model_dir),
                               "--adapter", str(adapter_dir), *extra])


def _accuracy_from(records: list[dict]) -> float:
    pairs = [(v, lab) for r in records for v, lab in zip(r["verdicts"], r["labels"], strict=True)]
    return sum(v == lab for v, lab in pairs) / len(pairs)


def test_labelled_dataset_gives_the_accuracy_its_verdicts_imply(cli_model, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join([row(1, label=True), row(2, label=[True, False]),
                               row(3, label=False), row(4, label=[False, True])]) + "\n")
    out = tmp_path / "out.jsonl"
    result = _check(cli_model, data, out)
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)
    assert [r["line"] for r in records] == [1, 2, 3, 4]
    assert [r["id"] for r in records] == ["ex1", "ex2", "ex3", "ex4"]
    for r in records:
        assert len(r["scores"]) == 2 and all(0.0 <= s <= 1.0 for s in r["scores"])
        assert r["verdicts"] == [s > 0.5 for s in r["scores"]]
        assert r["correct"] == [v == lab for v, lab in zip(r["verdicts"], r["labels"],
                                                           strict=True)]
    assert records[0]["labels"] == [True, True]  # a single bool labels every requirement
    assert f"accuracy: {_accuracy_from(records):.4f}" in result.output
    assert "/8 labelled checks)" in result.output


def test_scores_match_the_library_call(cli_model, tmp_path):
    """The CLI is a thin shell over arequirement_checks: same conversation, same scores."""
    import asyncio

    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.core.context import ChatContext
    from mellea_local.intrinsics import arequirement_checks
    from mellea_local.messages import Message

    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\n")
    out = tmp_path / "out.jsonl"
    assert _check(cli_model, data, out).exit_code == 0
    model_dir, adapter_dir = cli_model
    backend = LocalHFBackend(model_dir, device="cpu")
    name = backend.add_adapter(adapter_dir).name
    obj = json.loads(row(1))
    ctx = ChatContext()
    for m in obj["messages"]:
        ctx = ctx.add(Message(m["role"], m["content"]))
    expected = asyncio.run(arequirement_checks(ctx, backend, obj["requirements"], adapter=name))
    assert read_jsonl(out)[0]["scores"] == pytest.approx(expected, abs=1e-5)
    assert "accuracy" not in _check(cli_model, data, tmp_path / "o2.jsonl").output


def test_broken_lines_are_reported_and_skipped(cli_model, tmp_path):
    lines = [
        row(1, label=True),
        "{not json",
        json.dumps({"messages": [{"role": "bot", "content": "x"}], "requirement": "a"}),
        json.dumps({"messages": [{"role": "user", "content": "x"}], "requirement": "a"}),
        row(5).replace('"requirements"', '"reqs"'),
        row(6, label=[True]),
        "",
        row(8, label=False),
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    result = _check(cli_model, data, out)
    assert result.exit_code == 3, result.output  # finished, but lines were skipped
    assert [r["line"] for r in read_jsonl(out)] == [1, 8]
    for number, words in [(2, "not valid JSON"), (3, "role 'bot'"), (4, "last message"),
                          (5, "requirements"), (6, "label")]:
        assert any(ln.startswith(f"line {number}: skipped: ") and words in ln
                   for ln in result.output.splitlines()), (number, result.output)
    assert "5 malformed/failed" in result.output
    assert f"accuracy: {_accuracy_from(read_jsonl(out)):.4f}" in result.output


def test_interrupted_run_resumes_without_duplicates(cli_model, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(row(i, label=bool(i % 2)) for i in range(1, 6)) + "\n")
    full = tmp_path / "full.jsonl"
    assert _check(cli_model, data, full).exit_code == 0
    reference = read_jsonl(full)

    # A run killed while writing line 3: two whole records (one marked so we can tell it was
    # kept, not recomputed) and a torn third.
    kept = dict(reference[1], scores=[0.0, 1.0], verdicts=[False, True])
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps(reference[0]) + "\n" + json.dumps(kept) + "\n"
                   + json.dumps(reference[2])[:40])
    assert read_done(out) == {1, 2}
    result = _check(cli_model, data, out)
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5]
    assert records[1] == kept
    for got, want in zip(records[2:], reference[2:], strict=True):
        assert got["scores"] == pytest.approx(want["scores"], abs=1e-5)
    assert "checked 3 lines, 2 already done" in result.output

    again = _check(cli_model, data, out)
    assert again.exit_code == 0 and "checked 0 lines, 5 already done" in again.output
    assert read_jsonl(out) == records


def test_missing_model_is_one_line_and_nonzero(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\n")
    result = runner.invoke(app, ["check", str(data), "-o", str(tmp_path / "o.jsonl"),
                                 "--model", str(tmp_path / "no-such-model")])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no-such-model" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_debug_keeps_the_traceback(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\n")
    result = runner.invoke(app, ["check", str(data), "-o", str(tmp_path / "o.jsonl"),
                                 "--model", str(tmp_path / "no-such-model"), "--debug"])
    assert result.exit_code != 0
    from mellea_local.errors import ModelLoadError

    assert isinstance(result.exception, ModelLoadError)


def test_missing_input_file_is_one_line(cli_model, tmp_path):
    result = _check(cli_model, tmp_path / "absent.jsonl", tmp_path / "o.jsonl")
    assert result.exit_code == 1
    assert result.output.strip().startswith("error: ") and len(result.output.splitlines()) == 1


def test_check_through_a_subprocess(cli_model, tmp_path):
    model_dir, adapter_dir = cli_model
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join([row(1, label=True), "[1, 2]", row(3, label=False)]) + "\n")
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-m", "mellea_local", "check", str(data), "-o", str(out),
         "--model", str(model_dir), "--adapter", str(adapter_dir)],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 3, proc.stderr  # line 2 was skipped
    records = read_jsonl(out)
    assert [r["line"] for r in records] == [1, 3]
    assert "line 2: skipped: expected a JSON object, got list" in proc.stderr
    assert f"accuracy: {_accuracy_from(records):.4f}" in proc.stdout


@pytest.mark.parametrize(("text", "words"), [
    ('{"messages": [], "requirement": "a"}', "non-empty list"),
    ('{"messages": [{"role": "assistant"}], "requirement": "a"}', 'string "content"'),
    ('{"messages": [{"role": "assistant", "content": "x"}], "requirements": [""]}',
     "non-empty strings"),
    ('{"messages": [{"role": "assistant", "content": "x"}], "requirement": "a", "label": "y"}',
     "true/false"),
])
def test_parse_line_names_the_problem(text, words):
    with pytest.raises(LineError, match=words):
        parse_line(1, text)


def test_parse_line_accepts_a_single_requirement():
    item = parse_line(7, '{"messages": [{"role": "system", "content": "s"}, {"role": '
                         '"assistant", "content": "x"}], "requirement": "a", "label": false}')
    assert (item.line, item.requirements, item.labels) == (7, ["a"], [False])


def test_default_model_is_the_embedded_one(tmp_path):
    """Without --model the shipped embedded model and its aLoRA run."""
    data = tmp_path / "data.jsonl"
    data.write_text(row(1, label=True) + "\n")
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["check", str(data), "-o", str(out)])
    assert result.exit_code == 0, result.output
    [record] = read_jsonl(out)
    assert record["line"] == 1 and len(record["scores"]) == 2


def test_parse_line_keeps_reasoning_content_and_refuses_a_non_string_one():
    item = parse_line(3, '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", '
                         '"content": "a", "reasoning_content": "why"}], "requirement": "r"}')
    assert item.messages == [("user", "q", None), ("assistant", "a", "why")]
    with pytest.raises(LineError, match="reasoning_content"):
        parse_line(4, '{"messages": [{"role": "assistant", "content": "a", '
                      '"reasoning_content": 5}], "requirement": "r"}')


def test_bad_lines_exit_3_unless_allowed(cli_model, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\n{oops\n")
    first = _check(cli_model, data, tmp_path / "a.jsonl")
    assert first.exit_code == 3 and "line 2: skipped" in first.output
    allowed = _check(cli_model, data, tmp_path / "b.jsonl", "--allow-bad-lines")
    assert allowed.exit_code == 0 and "line 2: skipped" in allowed.output
    clean = tmp_path / "clean.jsonl"
    clean.write_text(row(1) + "\n\n")  # a blank line is not a bad line
    assert _check(cli_model, clean, tmp_path / "c.jsonl").exit_code == 0


def test_a_complete_last_record_without_newline_is_kept(cli_model, tmp_path):
    """D8: the last record of an output that lacks its final newline used to be deleted."""
    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\n" + row(2) + "\n")
    out = tmp_path / "out.jsonl"
    assert _check(cli_model, data, out).exit_code == 0
    out.write_text(out.read_text().rstrip("\n"))  # e.g. saved by an editor
    kept = read_jsonl(out)
    result = _check(cli_model, data, out)
    assert result.exit_code == 0, result.output
    assert read_jsonl(out) == kept and "checked 0 lines, 2 already done" in result.output


def test_output_equal_to_input_is_refused_before_the_model_loads(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\n")
    before = data.read_bytes()
    for out in (data, tmp_path / "." / "data.jsonl"):
        result = runner.invoke(app, ["check", str(data), "-o", str(out),
                                     "--model", str(tmp_path / "no-such-model")])
        assert result.exit_code == 1
        assert "is the input dataset itself" in result.output, result.output
    link = tmp_path / "link.jsonl"
    link.symlink_to(data)
    result = runner.invoke(app, ["check", str(data), "-o", str(link)])
    assert result.exit_code == 1 and "is the input dataset itself" in result.output
    assert data.read_bytes() == before


@pytest.mark.parametrize("content", [row(1) + "\n", row(1), "just some notes\n", "{}\n"])
def test_an_output_that_is_not_check_records_is_left_untouched(tmp_path, content):
    """-o naming a copy of a dataset (or any other file) must not be appended to or cut."""
    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\n")
    out = tmp_path / "other.jsonl"
    out.write_text(content)
    result = runner.invoke(app, ["check", str(data), "-o", str(out),
                                 "--model", str(tmp_path / "no-such-model")])
    assert result.exit_code == 1 and "not a check record" in result.output, result.output
    assert out.read_text() == content


def test_help_documents_the_input_format_and_exit_status():
    result = runner.invoke(app, ["check", "--help"], terminal_width=120)
    assert result.exit_code == 0
    text = result.output
    for words in ('"messages"', '"role": "assistant"', '"requirements"', '"label": true',
                  "Exit status", "--allow-bad-lines"):
        assert words in text, words


def test_routing_is_the_default_and_no_route_sends_everything_to_the_adapter(cli_model,
                                                                              tmp_path):
    """A requirement a program decides exactly is decided by it (decided_by names it, score
    1.0 or 0.0); --no-route gives the adapter's score for it, the same as for the rest."""
    line = {"messages": [{"role": "user", "content": "Capital of France?"},
                         {"role": "assistant", "content": "Paris."}],
            "requirements": ["Answer in under 5 words.", "Mention paris."], "label": True}
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(line) + "\n")
    routed, plain = tmp_path / "routed.jsonl", tmp_path / "plain.jsonl"
    assert _check(cli_model, data, routed).exit_code == 0
    assert _check(cli_model, data, plain, "--no-route").exit_code == 0
    [r], [p] = read_jsonl(routed), read_jsonl(plain)
    assert r["decided_by"] == [
        "ifeval length_constraints:number_words(num_words=5, relation='less than')", "adapter"]
    assert r["scores"][0] == 1.0 and p["decided_by"] == ["adapter", "adapter"]
    assert p["scores"][0] != 1.0  # the random adapter's own score
    assert r["scores"][1] == pytest.approx(p["scores"][1], abs=1e-5)
