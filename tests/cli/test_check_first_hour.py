"""``check`` as a new user meets it: a resume that trusts only records of the same input
lines, a folder or a Parquet file where a JSONL file belongs."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mellea_local.batch.local import check_resume, input_hash, items_by_line, parse_line
from mellea_local.cli import app
from mellea_local.errors import CheckFileError

from .data import read_jsonl, row

runner = CliRunner()


def _check(cli_model, data: Path, out: Path, *extra: str):
    model_dir, adapter_dir = cli_model
    return runner.invoke(app, ["check", str(data), "-o", str(out), "--model", str(model_dir),
                               "--adapter", str(adapter_dir), *extra])


def _labelled(tmp_path: Path, name: str, rows: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return path


def test_records_carry_the_hash_of_what_they_judged(cli_model, tmp_path):
    data = _labelled(tmp_path, "data.jsonl", [row(1, label=True), row(2, label=False)])
    out = tmp_path / "out.jsonl"
    assert _check(cli_model, data, out).exit_code == 0
    lines = data.read_text().splitlines()
    assert [r["input_hash"] for r in read_jsonl(out)] == [
        input_hash(parse_line(n, t)) for n, t in enumerate(lines, start=1)]
    again = _check(cli_model, data, out)  # the same input resumes: nothing redone
    assert again.exit_code == 0 and "checked 0 lines, 2 already done" in again.output


def test_an_edited_input_is_refused_not_counted(cli_model, tmp_path):
    data = _labelled(tmp_path, "data.jsonl", [row(1, label=True), row(2, label=False),
                                              row(3, label=True)])
    out = tmp_path / "out.jsonl"
    assert _check(cli_model, data, out).exit_code == 0
    before = out.read_bytes()
    # The user fixes line 2's label and drops line 3: records 2 and 3 no longer describe it.
    data.write_text("\n".join([row(1, label=True), row(2, label=True)]) + "\n")
    result = _check(cli_model, data, out)
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "holds 2 record(s) that do not match the input" in text
    assert "first: line 2" in text and "Pass -o a new file" in text
    assert "accuracy" not in text and out.read_bytes() == before


def test_the_output_of_another_dataset_is_refused_before_the_model_loads(cli_model, tmp_path):
    first = _labelled(tmp_path, "a.jsonl", [row(1, label=True), row(2, label=False)])
    out = tmp_path / "out.jsonl"
    assert _check(cli_model, first, out).exit_code == 0
    other = _labelled(tmp_path, "b.jsonl", [row(7, label=True), row(8, label=True),
                                            row(9, label=False)])
    result = runner.invoke(app, ["check", str(other), "-o", str(out),
                                 "--model", str(tmp_path / "no-such-model")])
    assert result.exit_code == 1
    assert "do not match the input" in result.output and "no-such-model" not in result.output


def test_a_record_from_before_the_hash_is_compared_by_its_requirements(tmp_path):
    data = _labelled(tmp_path, "data.jsonl", [row(1), row(2)])
    items = items_by_line(enumerate(data.read_text().splitlines(), start=1))
    out = tmp_path / "old.jsonl"
    legacy = {"line": 1, "id": "ex1", "requirements": ["Answer briefly.", "Mention paris."],
              "scores": [0.1, 0.9], "verdicts": [False, True]}
    out.write_text(json.dumps(legacy) + "\n")
    check_resume(out, items, "data.jsonl")  # same requirements: kept
    out.write_text(json.dumps(dict(legacy, requirements=["Be rude."])) + "\n")
    try:
        check_resume(out, items, "data.jsonl")
    except CheckFileError as exc:
        assert "line 1, the line's requirements changed" in str(exc)
    else:
        raise AssertionError("a stale legacy record was accepted")


def test_output_that_is_a_folder_is_a_typed_line(tmp_path):
    data = _labelled(tmp_path, "data.jsonl", [row(1)])
    folder = tmp_path / "results"
    folder.mkdir()
    result = runner.invoke(app, ["check", str(data), "-o", str(folder)])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "is a directory; -o must name a regular file" in text and "Errno" not in text


def test_parquet_on_the_local_engine_names_the_ray_engine(tmp_path):
    for name, head in (("data.parquet", b"PAR1\x00\x00"), ("renamed.jsonl", b"PAR1\x15\x04")):
        data = tmp_path / name
        data.write_bytes(head + bytes(range(128, 256)) + b"PAR1")
        result = runner.invoke(app, ["check", str(data), "-o", str(tmp_path / "o.jsonl")])
        assert result.exit_code == 1
        text = " ".join(result.output.split())
        assert "is a Parquet file; the local engine reads JSONL" in text
        assert "--engine ray" in text and "mellea-local[ray]" in text
        assert "UTF-8" not in text


def test_the_ray_engine_refuses_a_stale_output_before_ray_starts(tmp_path):
    # Written by hand as an earlier run would have: a record of another line-1 conversation.
    data = _labelled(tmp_path, "data.jsonl", [row(1), row(2)])
    stale = parse_line(1, row(5))
    stale.line = 1
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"line": 1, "id": "ex5", "requirements": stale.requirements,
                               "scores": [0.5, 0.5], "verdicts": [False, False],
                               "input_hash": input_hash(stale)}) + "\n")
    result = runner.invoke(app, ["check", str(data), "-o", str(out), "--engine", "ray",
                                 "--model", str(tmp_path / "no-such-model")])
    assert result.exit_code == 1
    assert "do not match the input" in " ".join(result.output.split())


def test_a_line_holding_a_raw_line_separator_stays_one_line(cli_model, tmp_path):
    # Legal JSON: json.dumps(ensure_ascii=False) writes U+2028/U+2029/U+0085 raw in strings.
    odd = json.dumps({"id": "odd", "messages": [
        {"role": "user", "content": "Two\u2028lines\u2029and\u0085more?"},
        {"role": "assistant", "content": "paris"}], "requirement": "Answer briefly."},
        ensure_ascii=False)
    data = tmp_path / "data.jsonl"
    data.write_text(row(1) + "\r\n" + odd + "\n" + row(3) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = _check(cli_model, data, out)
    assert result.exit_code == 0, result.output
    assert [(r["line"], r["id"]) for r in read_jsonl(out)] == [(1, "ex1"), (2, "odd"),
                                                             (3, "ex3")]
    again = _check(cli_model, data, out)
    assert again.exit_code == 0 and "checked 0 lines, 3 already done" in again.output


def test_a_fifo_or_folder_is_refused_without_waiting(tmp_path):
    import os

    data = _labelled(tmp_path, "data.jsonl", [row(1)])
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    refused = runner.invoke(app, ["check", str(data), "-o", str(fifo)])
    assert refused.exit_code == 1 and "is not a regular file" in refused.output
    for bad_input, words in ((fifo, "is not a regular file"), (tmp_path, "is a folder")):
        result = runner.invoke(app, ["check", str(bad_input), "-o", str(tmp_path / "o.jsonl")])
        assert result.exit_code == 1 and words in " ".join(result.output.split())
