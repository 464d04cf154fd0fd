"""The semantic requirement-check files are what ``scripts/make_semantic_checks.py`` makes.

The script labels by construction (which hand-written table an inserted sentence came from),
so the files must repeat byte for byte from the seed, keep both labels equal per family, and
never let a held-out phrasing, topic, inserted sentence or held-out-only family into training.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "requirement-check"
sys.path.insert(0, str(ROOT / "scripts"))
import make_semantic_checks as msc  # noqa: E402


def _rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def shipped() -> tuple[list[dict], list[dict]]:
    return _rows(DATA / "semantic.train.jsonl"), _rows(DATA / "semantic.heldout.jsonl")


def test_same_seed_same_bytes_and_the_shipped_files_are_seed_zero(tmp_path):
    outs = []
    for run in ("a", "b"):
        tr, ho = tmp_path / f"{run}.train.jsonl", tmp_path / f"{run}.held.jsonl"
        msc.main(["--out-train", str(tr), "--out-heldout", str(ho)])
        outs.append((tr.read_bytes(), ho.read_bytes()))
    assert outs[0] == outs[1]
    assert outs[0] == (
        (DATA / "semantic.train.jsonl").read_bytes(),
        (DATA / "semantic.heldout.jsonl").read_bytes(),
    )
    other = tmp_path / "seed1.train.jsonl"
    msc.main(["--seed", "1", "--out-train", str(other), "--out-heldout", str(tmp_path / "h1")])
    assert other.read_bytes() != outs[0][0]


def test_labels_are_balanced_per_family_in_both_files(shipped):
    for rows in shipped:
        per = Counter((r["family"], r["label"]) for r in rows)
        for fam in {r["family"] for r in rows}:
            assert per[(fam, True)] == per[(fam, False)] >= 6, fam


def test_held_out_is_disjoint_from_training(shipped):
    train, held = shipped
    for key in ("phrasing", "requirement"):
        assert not {r[key] for r in train} & {r[key] for r in held}, key
    assert not {w for r in train for w in r["words"]} & {w for r in held for w in r["words"]}
    topics = [{t for r in rows for t in r["topic"].split(" / ")} - {"news"} for rows in shipped]
    assert not topics[0] & topics[1]
    assert {r["family"] for r in held} - {r["family"] for r in train} == msc.HELD_ONLY
    assert len(msc.HELD_ONLY) == 2


def test_the_disjointness_check_catches_a_leak(shipped):
    train, held = shipped
    leaked = [r for r in train if r["family"] == "polite"][:2]
    with pytest.raises(AssertionError):
        msc.check_disjoint(train, held + leaked)


def test_each_line_is_the_check_format_with_its_construction(shipped):
    for rows in shipped:
        for r in rows:
            assert [m["role"] for m in r["messages"]] == ["user", "assistant"]
            assert isinstance(r["label"], bool) and r["requirement"]
            assert r["verifier"] == f"construction:{r['family']}"
            assert len(r["messages"][1]["content"].split()) <= 120


def test_inserted_sentence_is_in_the_answer_and_lengths_do_not_give_the_label(shipped):
    train, _ = shipped
    for r in train:
        if r["inserted_at"] is not None:
            assert r["words"][0] in r["messages"][1]["content"]
    # a threshold on answer length (or on where the sentence went) cannot read the label off
    # a training family: what the best threshold reaches stays near what it reaches on
    # shuffled labels (about 0.6 on 40 lines)
    for fam in {r["family"] for r in train}:
        rs = [r for r in train if r["family"] == fam]
        labels = [r["label"] for r in rs]
        words = [len(r["messages"][1]["content"].split()) for r in rs]
        assert msc.best_threshold_accuracy(words, labels) <= 0.65, fam
        ins = [(r["inserted_at"], r["label"]) for r in rs if r["inserted_at"] is not None]
        if ins:
            pos = msc.best_threshold_accuracy([p for p, _ in ins], [lab for _, lab in ins])
            assert pos <= 0.70, fam
