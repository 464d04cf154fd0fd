"""The shipped SmolLM2 requirement-check splits mean what their names say.

``scripts/make_ifeval_checks.py`` writes them; these checks read the files as shipped, so a
hand edit or a rerun with other pools cannot quietly leak held-out phrasings, words, topics or
whole requirement types into training. IFEval-labelled lines are re-verified with the registry
when ``if-verifiable`` is installed (scripts-only tool, not a dependency of the package).
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "requirement-check"
BASE = "SmolLM2-135M-Instruct"


def _rows(name: str) -> list[dict]:
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return {"train": _rows(f"{BASE}.train.jsonl"), "held": _rows(f"{BASE}.jsonl"),
            "families": _rows(f"{BASE}.families.jsonl")}


def _values(rows: list[dict], key: str) -> set:
    out: set = set()
    for r in rows:
        v = r[key]
        out |= set(v) if isinstance(v, list) else {v}
    return out


def test_every_line_is_the_check_format_with_its_provenance(splits):
    for rows in splits.values():
        assert rows
        for r in rows:
            assert r["messages"][-1]["role"] == "assistant"
            assert isinstance(r["requirement"], str) and r["requirement"]
            assert isinstance(r["label"], bool)
            assert r["verifier"].startswith(("rule:", "keywords:", "language:", "length_",
                                             "detectable_", "startend:", "change_case:",
                                             "punctuation:", "combination:"))
            for key in ("family", "phrasing", "topic", "words", "source", "kwargs"):
                assert key in r, (key, r)


def test_phrasings_words_and_topics_never_cross_from_training_to_held_out(splits):
    train, held, families = splits["train"], splits["held"], splits["families"]
    for key in ("phrasing", "words", "topic"):
        assert not _values(train, key) & _values(held, key), key
    assert not _values(train, "topic") & _values(families, "topic")
    assert not _values(train, "phrasing") & _values(families, "phrasing")


def test_held_out_families_are_at_least_six_types_never_trained(splits):
    trained = _values(splits["train"], "family")
    held_families = _values(splits["families"], "family")
    assert len(held_families) >= 6
    assert not trained & held_families
    assert _values(splits["held"], "family") <= trained


def test_labels_are_balanced_per_family(splits):
    for rows in splits.values():
        per = Counter((r["family"], r["label"]) for r in rows)
        for fam in _values(rows, "family"):
            assert per[(fam, True)] == per[(fam, False)] > 0, fam


def test_registry_labels_repeat_when_the_registry_is_installed(splits):
    if importlib.util.find_spec("if_verifiable") is None:
        pytest.skip("if-verifiable not installed (scripts-only tool)")
    import sys

    sys.path.insert(0, str(DATA.parents[2] / "scripts"))
    import make_ifeval_checks as m

    m.REGISTRY.update(m.load_registry())
    for rows in splits.values():
        for r in rows[:200]:
            if not r["verifier"].startswith("rule:"):
                got = m.verify(r["verifier"], r["kwargs"], r["messages"][-1]["content"])
                assert got is r["label"], r
