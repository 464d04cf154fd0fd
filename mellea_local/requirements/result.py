"""Verdicts: what checking a requirement returns, and how a judge's output is read.

Apart from the requirement classes (``requirement.py``) so the checking engine
(``checking.py``), which the classes call, can build and read verdicts without importing them.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from typing import TYPE_CHECKING, Any

from mellea_local.core.blocks import CBlock
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import InputTypeError, InvalidInputError, ScoreJSONError
from mellea_local.intrinsics.score import requirement_check_value

if TYPE_CHECKING:
    from mellea_local.core.context import Context


class ValidationResult:
    """The verdict on one requirement; ``bool()`` is the verdict.

    ``score`` is the adapter's probability that the requirement holds (when an adapter judged
    it), ``thunk`` the judge's raw output, ``context`` what was judged. ``error`` records why
    the verdict could not be read; a result with an error is never truthy.
    """

    def __init__(
        self,
        result: bool,
        *,
        reason: str | None = None,
        score: float | None = None,
        thunk: ModelOutputThunk[Any] | None = None,
        context: Context | None = None,
        error: BaseException | None = None,
    ):
        if reason is not None and not isinstance(reason, str):
            raise InputTypeError(
                f"ValidationResult reason must be a str or None, got {type(reason).__name__} "
                f"({reason!r:.60}); pass reason=str(...)."
            )
        if score is not None and (isinstance(score, bool) or not isinstance(score, numbers.Real)
                                  or not math.isfinite(score)):
            raise InputTypeError(
                f"ValidationResult score must be a finite number or None, got {score!r:.60}; "
                "pass the check's probability or confidence, or leave it out."
            )
        self._result = bool(result)
        self._reason = reason
        self._score = score
        self._thunk = thunk
        self._context = context
        self._error = error

    @property
    def result(self) -> bool:
        return self._result

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def score(self) -> float | None:
        return self._score

    @property
    def thunk(self) -> ModelOutputThunk[Any] | None:
        return self._thunk

    @property
    def context(self) -> Context | None:
        return self._context

    @property
    def error(self) -> BaseException | None:
        return self._error

    def as_bool(self) -> bool:
        return self._result and self._error is None

    def __bool__(self) -> bool:
        return self.as_bool()

    def __repr__(self) -> str:
        extra = "".join(
            f", {k}={v!r}"
            for k, v in (("reason", self._reason), ("score", self._score), ("error", self._error))
            if v is not None
        )
        return f"ValidationResult({self._result}{extra})"


class PartialValidationResult:
    """A verdict on a partial output: ``"pass"``, ``"fail"`` or ``"unknown"`` (not yet).

    ``bool()`` is True only for ``"pass"``; the other fields are as in ``ValidationResult``.
    """

    STATES = ("pass", "fail", "unknown")

    def __init__(
        self,
        success: str,
        *,
        reason: str | None = None,
        score: float | None = None,
        thunk: ModelOutputThunk[Any] | None = None,
        context: Context | None = None,
    ):
        if success not in self.STATES:
            raise InvalidInputError(
                f"success must be one of {self.STATES}, got {success!r}."
            )
        self.success = success
        self.reason = reason
        self.score = score
        self.thunk = thunk
        self.context = context

    def as_bool(self) -> bool:
        return self.success == "pass"

    def __bool__(self) -> bool:
        return self.as_bool()

    def __repr__(self) -> str:
        return (f"PartialValidationResult({self.success!r}, reason={self.reason!r}, "
                f"score={self.score!r})")


def _as_text(x: CBlock | ModelOutputThunk[Any] | str) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, (CBlock, ModelOutputThunk)):
        return str(x)
    raise InputTypeError(
        f"Expected a str, CBlock or ModelOutputThunk, got {type(x).__name__}; pass the output "
        "text."
    )


def default_output_to_bool(x: CBlock | ModelOutputThunk[Any] | str) -> bool:
    """Read a judge's yes/no answer: ``yes``/``y`` alone, or the word ``yes`` anywhere."""
    text = _as_text(x).strip().upper()
    if text in ("YES", "Y"):
        return True
    return "YES" in re.split(r"\W+", text)


def requirement_check_score(x: CBlock | ModelOutputThunk[Any] | str) -> float:
    """The probability in a requirement-check output ``{"requirement_check": {"score": p}}``.

    Raises ``ScoreJSONError`` (a ``json.JSONDecodeError``) for text that is not JSON and
    ``AdapterSchemaMismatchError`` for JSON of the wrong shape or a score that is missing,
    a bool, not a real number, not finite, or outside [0, 1].
    """
    text = _as_text(x)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScoreJSONError(
            f"A requirement-check output is not JSON ({exc.msg}; output {text[:80]!r}); it "
            'must be {"requirement_check": {"score": p}}: check the adapter\'s io.yaml and '
            "that the adapter fits this base model",
            exc.doc, exc.pos,
        ) from exc
    except RecursionError as exc:  # JSON nested deeper than the parser's stack
        raise ScoreJSONError(
            "A requirement-check output nests too deeply to parse; it must be "
            '{"requirement_check": {"score": p}}', text, 0,
        ) from exc
    return requirement_check_value(data)


PASS_THRESHOLD = 0.5
"""A requirement-check score strictly above this is a pass (exactly 0.5 is not): the one
threshold ``validate``, ``check`` and ``requirement_check_to_bool`` share."""


def passes(score: float) -> bool:
    """The verdict of a requirement-check score (``score > PASS_THRESHOLD``)."""
    return score > PASS_THRESHOLD


def requirement_check_to_bool(x: CBlock | ModelOutputThunk[Any] | str) -> bool:
    """True iff the requirement-check score is above 0.5 (exactly 0.5 is not a pass)."""
    return passes(requirement_check_score(x))
