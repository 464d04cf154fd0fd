"""Balanced accuracy, its bootstrap interval and per-class F1 on hand-computed cases."""

import pytest

from mellea_local.errors import InvalidInputError
from mellea_local.requirements.metrics import binary_scores


def test_floors_score_one_half_whatever_the_balance():
    labels = [True] * 30 + [False] * 70
    for constant in (True, False):
        scores = binary_scores(labels, [constant] * 100)
        assert scores.balanced_accuracy == 0.5
    assert binary_scores(labels, [False] * 100).accuracy == 0.7


def test_hand_computed_case():
    labels = [True, True, True, True, False, False]
    predictions = [True, True, True, False, False, True]
    scores = binary_scores(labels, predictions)
    assert scores.balanced_accuracy == pytest.approx((3 / 4 + 1 / 2) / 2)
    assert scores.yes_f1 == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))
    assert scores.no_f1 == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    low, high = scores.interval
    assert 0 <= low <= scores.balanced_accuracy <= high <= 1
    assert scores.too_small


def test_interval_narrows_with_more_checks_and_is_reproducible():
    small = binary_scores([True, False] * 20, [True, False, True, True] * 10)
    large = binary_scores([True, False] * 500, [True, False, True, True] * 250)
    assert small.balanced_accuracy == large.balanced_accuracy == 0.75
    assert (large.interval[1] - large.interval[0]) < (small.interval[1] - small.interval[0])
    assert binary_scores([True, False] * 20, [True, False, True, True] * 10).interval \
        == small.interval
    assert not large.too_small
    assert "balanced 0.750" in large.describe()


def test_one_class_only_is_undefined_not_a_number():
    scores = binary_scores([True, True], [True, False])
    assert scores.balanced_accuracy is None and scores.interval is None
    assert "undefined" in scores.describe()


def test_bad_input_is_typed():
    with pytest.raises(InvalidInputError, match="one prediction per"):
        binary_scores([True], [True, False])
    with pytest.raises(InvalidInputError, match="no labelled checks"):
        binary_scores([], [])
