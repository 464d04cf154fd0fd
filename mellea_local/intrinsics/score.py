"""Reading the number out of a requirement-check result (no torch: the requirements layer and
``import mellea_local`` use it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.errors import AdapterSchemaMismatchError

__all__ = ["REQUIREMENT_CHECK", "requirement_check_value"]


def requirement_check_value(result: Any, name: str = REQUIREMENT_CHECK) -> float:
    """The score in ``{"requirement_check": {"score": p}}``, checked: a real number in [0, 1].

    Raises ``AdapterSchemaMismatchError`` for the wrong shape or a score that is missing, a
    bool, not a number, not finite, or outside [0, 1].
    """
    def mismatch(observed: Any, expected: set[str], note: str) -> AdapterSchemaMismatchError:
        keys = observed.keys() if isinstance(observed, Mapping) else ()
        err = AdapterSchemaMismatchError(name, keys, expected)
        err.add_note(
            f'{note} Expected {{"requirement_check": {{"score": p}}}} with p a finite number '
            "in [0, 1]; check the adapter's io.yaml transformations (likelihood, then nest)."
        )
        return err

    if not isinstance(result, Mapping):
        raise mismatch(result, {"requirement_check"}, f"The output is a {type(result).__name__}.")
    check = result.get("requirement_check")
    if not isinstance(check, Mapping):
        raise mismatch(result, {"requirement_check"}, "requirement_check is not an object.")
    if "score" not in check:
        raise mismatch(check, {"score"}, "requirement_check has no score.")
    score = check["score"]
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise mismatch(check, {"score"}, f"The score is {score!r}, not a number.")
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise mismatch(check, {"score"}, f"The score {score!r} is not in [0, 1].")
    return float(score)
