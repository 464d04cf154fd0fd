"""Training data read as ``check`` reads it, and what training would learn wrong refused or
repaired: every case here used to be accepted silently, raise a raw error, or hang."""

from __future__ import annotations

import json
import os
import threading

import pytest

from mellea_local.errors import TrainingDataError
from mellea_local.training.data import add_replay, load_training_data, read_examples

GOOD = {"messages": [{"role": "user", "content": "Capital of France?"},
                     {"role": "assistant", "content": "Paris."}],
        "requirement": "Answer in one word.", "label": True}


def row(i: int, label: bool = True, **extra) -> dict:
    return {**GOOD, "messages": [{"role": "user", "content": f"Question {i}?"},
                                 {"role": "assistant", "content": f"Answer {i}."}],
            "label": label, **extra}


def write(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def balanced(n: int) -> list[dict]:
    return [row(i, i % 2 == 0) for i in range(n)]


def test_u2028_and_u0085_inside_a_line_do_not_split_it(tmp_path):
    rows = balanced(6)
    rows[1]["messages"][1]["content"] = "one\u2028two\u0085three\u2029four"
    path = write(tmp_path / "d.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
    examples, _, lines = read_examples(path)
    assert lines == 6 and len(examples) == 6
    assert examples[1].messages[1][1] == "one\u2028two\u0085three\u2029four"


def test_a_fifo_is_refused_before_it_blocks(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    got: list[BaseException] = []
    worker = threading.Thread(target=lambda: _catch(got, fifo), daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "reading a FIFO blocked"
    assert isinstance(got[0], TrainingDataError) and "FIFO" in str(got[0])


def _catch(got, path) -> None:
    try:
        load_training_data(path)
    except BaseException as exc:  # the test inspects whatever was raised
        got.append(exc)


def test_dev_zero_is_refused_not_read_forever():
    with pytest.raises(TrainingDataError, match="character device"):
        load_training_data("/dev/zero")


def test_a_folder_is_named_as_one(tmp_path):
    with pytest.raises(TrainingDataError, match="is a folder"):
        load_training_data(tmp_path)


def test_a_line_nested_100k_deep_is_a_typed_error_naming_the_line(tmp_path):
    path = write(tmp_path / "d.jsonl", [*balanced(4), "[" * 100_000 + "]" * 100_000])
    with pytest.raises(TrainingDataError, match=r"line 5: nests deeper than 200 levels"):
        load_training_data(path)


def test_a_key_given_twice_is_refused(tmp_path):
    twice = json.dumps(row(9, True))[:-1] + ', "label": false}'
    path = write(tmp_path / "d.jsonl", [*balanced(4), twice])
    with pytest.raises(TrainingDataError, match=r"line 5: holds the key 'label' twice"):
        load_training_data(path)


def test_label_and_labels_disagreeing_on_one_line_is_refused(tmp_path):
    path = write(tmp_path / "d.jsonl", [*balanced(4), row(9, True, labels=[False])])
    with pytest.raises(TrainingDataError, match=r'line 5: "label" True and "labels" \[False\] '
                                                r"disagree"):
        load_training_data(path)
    agree = write(tmp_path / "ok.jsonl", [*balanced(4), row(9, True, labels=[True])])
    assert len(read_examples(agree)[0]) == 5


def test_the_same_check_labelled_both_ways_is_refused_naming_both_lines(tmp_path):
    path = write(tmp_path / "d.jsonl", [*balanced(4), row(2, False)])
    with pytest.raises(TrainingDataError) as info:
        load_training_data(path)
    assert "line 5: the check of line 3" in str(info.value)
    assert "'no' there 'yes'" in str(info.value)


def test_duplicates_are_dropped_counted_and_never_cross_the_split(tmp_path):
    rows = balanced(20)
    path = write(tmp_path / "d.jsonl", rows + rows[:10])  # every one of the first 10 twice
    data = load_training_data(path, validation=0.5, seed=1)
    assert data.duplicates == 10
    assert len(data.train) + len(data.validation) == 20
    train = {e.key for e in data.train}
    assert train.isdisjoint(e.key for e in data.validation)


def test_validation_never_shares_a_row_with_training_across_seeds(tmp_path):
    rows = balanced(30)
    path = write(tmp_path / "d.jsonl", rows + rows[::3] + rows[::2])
    for seed in range(10):
        data = load_training_data(path, validation=0.3, seed=seed)
        assert {e.key for e in data.train}.isdisjoint(e.key for e in data.validation)
        assert {e.line for e in data.train}.isdisjoint(e.line for e in data.validation)


def test_a_training_side_of_one_class_is_refused(tmp_path):
    # 2 "no" lines and 8 "yes": a validation share of 0.75 holds both "no" lines
    rows = [row(i, i < 8) for i in range(10)]
    path = write(tmp_path / "d.jsonl", rows)
    refused = 0
    for seed, share in [(0, 0.75), (1, 0.75), (0, 0.2), (1, 0.5)]:
        try:
            data = load_training_data(path, validation=share, seed=seed)
        except TrainingDataError as exc:
            assert "training side of the split holds only ['yes']" in str(exc)
            refused += 1
        else:
            assert {e.label for e in data.train} == {"yes", "no"}
    assert refused == 2


def test_the_split_is_stratified_so_validation_holds_both_labels(tmp_path):
    rows = [row(i, i % 5 == 0) for i in range(40)]  # 8 met, 32 unmet
    path = write(tmp_path / "d.jsonl", rows)
    for seed in range(10):
        held = load_training_data(path, validation=0.2, seed=seed).validation
        assert sorted(e.label for e in held).count("yes") == 2 and len(held) == 8


def test_replay_is_drawn_at_the_ratio_and_never_holds_a_user_check(tmp_path):
    user = balanced(10)
    general = [row(i, i % 3 == 0, family=f"f{i % 4}") for i in range(5, 200)]
    upath = write(tmp_path / "u.jsonl", user)
    gpath = write(tmp_path / "g.jsonl", general)
    data = load_training_data(upath, validation=0.2, seed=0)
    mixed = add_replay(data, gpath, ratio=1.0, validation=0.2, seed=0)
    replayed = [e for e in mixed.train + mixed.validation if e.origin == "replay"]
    assert len(replayed) == 10 and mixed.replay.dropped == 5  # questions 5..9 are the user's
    user_keys = {e.key for e in data.train + data.validation}
    assert user_keys.isdisjoint(e.key for e in replayed)
    assert {e.key for e in mixed.train}.isdisjoint(e.key for e in mixed.validation)
    assert {e.family for e in replayed} <= {"f0", "f1", "f2", "f3"}
