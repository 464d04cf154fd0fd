"""Validation, the public entry: check requirements against the output in a context.

``avalidate`` / ``validate`` take requirements as the caller writes them (one or a list, each a
``Requirement`` or a description string), refuse what nothing could check before anything runs,
and hand the rest to the checking engine (``checking.py``), which decides per requirement how it
is judged (its validation_fn, an intrinsic adapter in one batch per intrinsic, or the model's
yes/no answer) and returns the verdicts in order.

An output cut off at its token budget (``thunk.truncated``) is judged as it stands, since a
requirement may hold of a partial answer too, but never as if it were complete: every
verdict's ``reason`` says the answer was cut off and how to let it finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea_local.core.backend import Backend
from mellea_local.core.context import Context
from mellea_local.core.sync import sync_twin
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import InputTypeError
from mellea_local.inputs import description_of, requirement_list
from mellea_local.requirements.checking import check_requirements
from mellea_local.requirements.requirement import Requirement, ValidationResult, reqify

Reqs = Requirement | str | Sequence[Requirement | str]


def _requirements(value: Any, argument: str = "reqs") -> list[Requirement]:
    """``reqs`` as Requirements: each has a validation_fn or a non-blank description."""
    items = requirement_list(value, argument, single_ok=True)
    for i, item in enumerate(items):
        if not (isinstance(item, Requirement) and item.validation_fn is not None):
            description_of(item, f"{argument}[{i}]", fn_ok=True)
    return [reqify(item) for item in items]


async def avalidate(
    reqs: Reqs,
    context: Context,
    backend: Backend,
    *,
    output: Any = None,
    format: type[Any] | None = None,
    model_options: dict[str, Any] | None = None,
    route: bool = True,
) -> list[ValidationResult]:
    """Check each requirement (strings become Requirements); results keep their order.

    ``reqs`` is one requirement or a list of them; each needs a validation_fn or a non-blank
    description (``InvalidInputError`` / ``InputTypeError`` otherwise, before anything runs).

    ``route`` (on by default; our deviation, mellea 0.8 has no such option): a plain
    requirement whose whole text maps confidently to one IFEval registry verifier or one of
    our exact rules ("Keep it under 50 words.", "Reply in JSON.", "End with a question.") is
    decided by that program, exactly and with no forward; its ``reason`` says "verified by
    ifeval <verifier>(<kwargs>)" or "verified by rule <name>(<kwargs>)". Everything else is
    judged as without it; ``route=False`` judges everything with the model, as the peer does.
    Registry verifiers need the ``[verify]`` extra; without it they are skipped with one
    logged warning per process.
    """
    if not isinstance(route, bool):
        raise InputTypeError(f"route must be True or False, got {route!r:.60}.")
    results = await check_requirements(
        _requirements(reqs), context, backend,
        output=output, format=format, model_options=model_options, route=route,
    )
    judged = output if output is not None else context.last_output()
    return mark_truncated(results, judged)


TRUNCATED = ("the answer judged was cut off at its token budget (finish_reason 'length'), so "
             "it is not a complete answer; raise ModelOption.MAX_NEW_TOKENS and generate again")


def mark_truncated(results: list[ValidationResult], judged: Any) -> list[ValidationResult]:
    """``results`` with the truncation note in every reason when ``judged`` was cut off."""
    if not (isinstance(judged, ModelOutputThunk) and judged.truncated):
        return results
    return [
        ValidationResult(r.result, reason=f"{r.reason}; {TRUNCATED}" if r.reason else TRUNCATED,
                         score=r.score, thunk=r.thunk, context=r.context, error=r.error)
        for r in results
    ]


validate = sync_twin(avalidate)
"""Synchronous ``avalidate`` for code that has no event loop running (same signature)."""
