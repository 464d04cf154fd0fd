"""The README table written by scripts/eval_embedded.py, from a results record."""

from __future__ import annotations

from mellea_local.embedded import synthetic as S


def _results(react: dict) -> dict:
    cell = {f: 0.5 for f in S.FAMILIES} | {"mean": 0.5}
    return {"requirement_check": {"alora": {"train": cell}}, "react": react}


def test_the_table_has_a_row_per_adapter_and_vocabulary_and_one_per_react_kind(eval_script):
    react = {"off": {"calculator": {"first_call_accuracy": 1.0, "solved": 0.98}}}
    table = eval_script.markdown(_results(react)).splitlines()
    assert table[2] == "| alora | train | " + " | ".join(["50.0"] * len(S.FAMILIES)) + " | 50.0 |"
    assert table[-1] == "| calculator | off | 100.0 | 98.0 |"


def test_without_react_tasks_there_is_no_empty_react_table(eval_script):
    table = eval_script.markdown(_results({}))
    assert "ReACT" not in table and len(table.splitlines()) == 3
