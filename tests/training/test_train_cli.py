"""``mellea-local train``: progress and result on success, one error line on bad data."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mellea_local.cli import app

runner = CliRunner()


def test_train_writes_the_library_folder_and_says_how_to_use_it(check_jsonl, tmp_path):
    result = runner.invoke(app, ["train", str(check_jsonl), "-o", str(tmp_path), "--epochs",
                                 "1", "--batch-size", "4", "--rank", "4", "--lr", "1e-3",
                                 "--threads", "1", "--max-steps", "3"])
    assert result.exit_code == 0, result.output
    folder = result.stdout.strip().splitlines()[-1]
    assert folder == str(tmp_path / "requirement-check" / "mellea-tiny-chat" / "alora")
    assert "loss" in result.stderr and "validation accuracy" in result.stderr
    assert "torch threads: 1" in result.stderr
    report = json.loads((tmp_path / "requirement-check" / "mellea-tiny-chat" / "alora" /
                         "training.json").read_text())
    assert report["steps"] == 3 and report["hyperparameters"]["rank"] == 4


def test_bad_data_is_one_error_naming_every_bad_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"messages": []}\n[1]\n', encoding="utf-8")
    result = runner.invoke(app, ["train", str(data), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "line 1:" in result.output and "line 2:" in result.output
    assert not (tmp_path / "out").exists()
