"""How a binary checker is scored: balanced accuracy with a bootstrap interval, and F1 per class.

Why balanced accuracy: a requirement-check set is rarely half met, half not, and plain accuracy
rewards a checker that always says the majority answer (an always-no checker scored 0.518 on
our own held-out set). Balanced accuracy is the mean of the recall on met and on unmet checks,
so both floors (always yes, always no) score exactly 0.5, and it is how the field reports
requirement-check adapters (IBM's granitelib cards, IFEval-style evaluations).

Why an interval: on 40 checks, 0.75 and 0.60 are not different results. The 95 % interval is a
percentile bootstrap over the checks, stratified by label so every resample keeps both classes
(otherwise balanced accuracy is undefined on a resample), seeded so a report is reproducible.

This module is the one owner of these rules: the benchmark (``bench --only accuracy``) and the
training report (``train``'s validation line) both call it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from mellea_local.errors import InvalidInputError

SMALL_SPLIT = 50
"""Below this many checks (or ``SMALL_CLASS`` of one label), a score is flagged as too small to
mean much: a 32-line validation split read 0.750 and the same adapter measured 0.55 held out."""
SMALL_CLASS = 10
BOOTSTRAP_ROUNDS = 1000
BOOTSTRAP_SEED = 20_261_207


@dataclass(frozen=True)
class BinaryScores:
    """A checker's scores on labelled checks: the field's figures, with their sample sizes."""

    n: int
    positives: int
    """Checks whose label is True (the requirement is met)."""
    accuracy: float
    balanced_accuracy: float | None
    """Mean recall of the two classes; ``None`` when one class is absent (it is undefined)."""
    interval: tuple[float, float] | None
    """95 % stratified bootstrap interval of ``balanced_accuracy``; ``None`` when undefined."""
    yes_f1: float
    no_f1: float

    @property
    def negatives(self) -> int:
        return self.n - self.positives

    @property
    def too_small(self) -> bool:
        """Whether the sample is too small for the figure to mean much (see ``SMALL_SPLIT``)."""
        return self.n < SMALL_SPLIT or min(self.positives, self.negatives) < SMALL_CLASS

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["interval"] = list(self.interval) if self.interval is not None else None
        out["too_small"] = self.too_small
        return out

    def describe(self) -> str:
        """One line a user reads, e.g. ``balanced 0.742 [0.701, 0.780] on 572 (291 met)``."""
        if self.balanced_accuracy is None:
            head = f"accuracy {self.accuracy:.3f} (balanced undefined: every label is " \
                   f"{'met' if self.positives else 'unmet'})"
        else:
            low, high = self.interval or (self.balanced_accuracy, self.balanced_accuracy)
            head = f"balanced {self.balanced_accuracy:.3f} [{low:.3f}, {high:.3f}]"
        line = f"{head} on {self.n} ({self.positives} met)"
        if self.too_small:
            line += (f"; too few checks to mean much (fewer than {SMALL_SPLIT}, or fewer than "
                     f"{SMALL_CLASS} of one label)")
        return line


def _balanced(labels: Sequence[bool], predictions: Sequence[bool]) -> float | None:
    hits = {True: 0, False: 0}
    totals = {True: 0, False: 0}
    for label, prediction in zip(labels, predictions, strict=True):
        totals[label] += 1
        hits[label] += label == prediction
    if not totals[True] or not totals[False]:
        return None
    return (hits[True] / totals[True] + hits[False] / totals[False]) / 2


def _f1(labels: Sequence[bool], predictions: Sequence[bool], positive: bool) -> float:
    tp = sum(1 for y, p in zip(labels, predictions, strict=True) if y == positive and p == positive)
    fp = sum(1 for y, p in zip(labels, predictions, strict=True) if y != positive and p == positive)
    fn = sum(1 for y, p in zip(labels, predictions, strict=True) if y == positive and p != positive)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def bootstrap_interval(labels: Sequence[bool], predictions: Sequence[bool], *,
                       rounds: int = BOOTSTRAP_ROUNDS, seed: int = BOOTSTRAP_SEED,
                       level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap of balanced accuracy, resampling within each label."""
    pairs = {True: [p for y, p in zip(labels, predictions, strict=True) if y],
             False: [p for y, p in zip(labels, predictions, strict=True) if not y]}
    if not pairs[True] or not pairs[False]:
        return None
    rng = random.Random(seed)
    values = []
    for _ in range(rounds):
        recall = []
        for label, group in pairs.items():
            draw = rng.choices(group, k=len(group))
            recall.append(sum(1 for p in draw if p == label) / len(draw))
        values.append(sum(recall) / 2)
    values.sort()
    tail = (1 - level) / 2
    low = values[int(tail * (rounds - 1))]
    high = values[round((1 - tail) * (rounds - 1))]
    return (low, high)


def binary_scores(labels: Sequence[bool], predictions: Sequence[bool]) -> BinaryScores:
    """Score ``predictions`` against ``labels`` (both one bool per check)."""
    labels = [bool(y) for y in labels]
    predictions = [bool(p) for p in predictions]
    if len(labels) != len(predictions):
        raise InvalidInputError(
            f"binary_scores: {len(labels)} labels but {len(predictions)} predictions; pass one "
            "prediction per labelled check.")
    if not labels:
        raise InvalidInputError("binary_scores: no labelled checks; score at least one.")
    return BinaryScores(
        n=len(labels),
        positives=sum(labels),
        accuracy=sum(y == p for y, p in zip(labels, predictions, strict=True)) / len(labels),
        balanced_accuracy=_balanced(labels, predictions),
        interval=bootstrap_interval(labels, predictions),
        yes_f1=_f1(labels, predictions, True),
        no_f1=_f1(labels, predictions, False),
    )
