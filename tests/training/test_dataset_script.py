"""``scripts/make_check_dataset.py``: the same files from the same seed, labels that the rules
compute from the answer text, both labels in every family, and evaluation phrasings and words
kept out of training."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module("make_check_dataset")
    finally:
        sys.path.remove(str(SCRIPTS))


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_reproducible_rule_labelled_balanced_and_split(script, tmp_path):
    script.main(["--out", str(tmp_path / "a"), "--train", "300", "--eval", "150"])
    script.main(["--out", str(tmp_path / "b"), "--train", "300", "--eval", "150"])
    for name in ("train.jsonl", "eval.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    train, held = rows(tmp_path / "a" / "train.jsonl"), rows(tmp_path / "a" / "eval.jsonl")
    families = {f.name: f for f in script.FAMILIES}
    for row in train + held:
        family = families[row["family"]]
        answer = row["messages"][-1]["content"]
        assert family.rule(answer, row["slot"]) is row["label"], row
        assert row["slot"] is None or str(row["slot"]) in row["requirement"]
    for name in families:
        labels = {r["label"] for r in train if r["family"] == name}
        assert labels == {True, False}, name
    assert not {r["requirement"] for r in train} & {r["requirement"] for r in held}
    held_text = " ".join(r["requirement"] + r["messages"][0]["content"] for r in held)
    train_text = " ".join(r["requirement"] + r["messages"][0]["content"] for r in train)
    assert not [w for w in script.WORDS_TRAIN if f" {w}" in held_text]
    assert not [w for w in script.WORDS_EVAL if f" {w}" in train_text]


def test_the_files_train_directly(script, tmp_path):
    from mellea_local.training.data import load_training_data

    script.main(["--out", str(tmp_path), "--train", "60", "--eval", "30"])
    data = load_training_data(tmp_path / "train.jsonl")
    assert len(data.train) + len(data.validation) == 60


def test_the_rules_judge_hand_written_answers(script):
    rule = {f.name: f.rule for f in script.FAMILIES}
    assert rule["length"]("One two three.", 3) and not rule["length"]("One two three four.", 3)
    assert rule["sentences"]("A b. C d!", 2) and not rule["sentences"]("A b.", 2)
    assert rule["json"]('{"a": 1}', None) and not rule["json"]("a = 1", None)
    assert rule["question"]("Why?", None) and not rule["question"]("Why.", None)
    assert rule["numbered"]("1. a\n2. b", None) and not rule["numbered"]("- a\n- b", None)
    assert rule["bullets"]("- a\n- b", None) and not rule["bullets"]("a, b", None)
    assert rule["mentions"]("A Lantern glows.", "lantern")
    assert not rule["avoids"]("A Lantern glows.", "lantern")
    assert not rule["english"]("Bonjour, friend.", None) and rule["english"]("Hello.", None)
    assert rule["refusal"]("I can't do that.", None) and not rule["refusal"]("Sure.", None)


def test_the_format_rules_of_the_instruction_following_families(script):
    rule = {f.name: f.rule for f in script.FAMILIES}
    assert rule["starts"]("Sure, here it is.", "Sure") and not rule["starts"]("Here. Sure.", "Sure")
    assert rule["ends"]("Done. Enjoy your day.", "Enjoy your day.")
    assert not rule["ends"]("Enjoy your day. Done.", "Enjoy your day.")
    assert rule["postscript"]("Hi.\n\nP.S. Bye.", None) and not rule["postscript"]("PS bye", None)
    assert rule["title"]("<<Tea>>\nHot.", None) and not rule["title"]("<Tea>\nHot.", None)
    assert rule["quotes"]('"All of it."', None) and not rule["quotes"]("'All of it.'", None)
    assert rule["commas"]("No commas here.", None) and not rule["commas"]("One, two.", None)
    assert rule["placeholders"]("At [place] on [date].", None)
    assert not rule["placeholders"]("At [place] today.", None)
    assert rule["uppercase"]("LOUD 42.", None) and not rule["uppercase"]("42.", None)


def test_every_family_keeps_its_phrasings_and_slots_apart(script):
    for family in script.FAMILIES:
        assert family.train and family.held_out, family.name
        assert not set(family.train) & set(family.held_out), family.name
    for train, held in ((script.WORDS_TRAIN, script.WORDS_EVAL),
                        (script.TOPICS_TRAIN, script.TOPICS_EVAL),
                        (script.OPENERS_TRAIN, script.OPENERS_EVAL),
                        (script.CLOSERS_TRAIN, script.CLOSERS_EVAL)):
        assert not set(train) & set(held)
