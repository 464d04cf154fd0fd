"""``scripts/eval_check_adapter.py`` scores an adapter and the base-as-judge per family."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
ROOT = SCRIPTS.parent


def test_per_family_accuracy_for_adapter_and_judge(tmp_path):
    sys.path.insert(0, str(SCRIPTS))
    try:
        make = importlib.import_module("make_check_dataset")
        evaluate = importlib.import_module("eval_check_adapter")
    finally:
        sys.path.remove(str(SCRIPTS))
    from mellea_local.embedded import trained_weights_dir

    make.main(["--out", str(tmp_path), "--train", "2", "--eval", "4"])
    out = tmp_path / "acc.json"
    evaluate.main([str(tmp_path / "eval.jsonl"), "--model", str(trained_weights_dir()),
                   "--adapter", str(ROOT / "adapters/requirement-check/mellea-tiny-chat/alora"),
                   "--judge", "--out", str(out)])
    result = json.loads(out.read_text())
    (split,) = result["splits"].values()
    assert split["lines"] == 4 and result["torch_threads"] == 1
    families = {json.loads(line)["family"] for line in
                (tmp_path / "eval.jsonl").read_text().splitlines()}
    adapter = str(ROOT / "adapters/requirement-check/mellea-tiny-chat/alora")
    assert set(split["who"]) == {adapter, "judge"}
    for who in (adapter, "judge"):
        assert set(split["who"][who]["per_family"]) == families
        overall = split["who"][who]["overall"]
        assert overall["n"] == 4 and 0.0 <= overall["accuracy"] <= 1.0
