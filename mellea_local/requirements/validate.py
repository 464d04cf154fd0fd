"""Validation: check requirements against the output in a context.

Each requirement goes one of three ways, decided here and not by the backend:

1. it has a ``validation_fn``: run it on the validation context;
2. an intrinsic adapter judges it (an ``ALoraRequirement`` whose adapter the backend has, or
   a plain ``Requirement`` when the backend defaults to the requirement-check adapter): all
   such requirements of one call go to the backend as ONE ``score_requirements`` batch per
   intrinsic, and each score is read with ``requirement_check_score`` (never the yes/no
   parser, which would fail every JSON verdict);
3. otherwise the model answers a yes/no question, read with the requirement's
   ``output_to_bool`` (the yes/no parser for an ``ALoraRequirement`` without its adapter).

Validation runs over the caller's real context, with ``output`` appended when it is given and
not already the last entry, so an adapter sees the whole conversation.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Sequence
from typing import Any

from mellea_local.adapters.runner import AdapterRunner
from mellea_local.core.backend import Backend
from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import AdapterSchemaMismatchError, InvalidInputError, MelleaLocalError
from mellea_local.inputs import check_backend, check_context, description_of, requirement_list
from mellea_local.intrinsics.score import requirement_check_value
from mellea_local.messages import Message
from mellea_local.options import check_options
from mellea_local.requirements.requirement import (
    REQUIREMENT_CHECK,
    ALoraRequirement,
    LLMaJRequirement,
    Requirement,
    ValidationResult,
    default_output_to_bool,
    reqify,
    requirement_check_score,
)

Reqs = Requirement | str | Sequence[Requirement | str]


def _requirements(value: Any, argument: str = "reqs") -> list[Requirement]:
    """``reqs`` as Requirements: each has a validation_fn or a non-blank description."""
    items = requirement_list(value, argument, single_ok=True)
    for i, item in enumerate(items):
        if not (isinstance(item, Requirement) and item.validation_fn is not None):
            description_of(item, f"{argument}[{i}]", fn_ok=True)
    return [reqify(item) for item in items]


def _validation_context(context: Context, output: Any) -> Context:
    if output is None or (not context.is_root_node and context.node_data is output):
        return context
    return context.add(output)


def _adapter_name(r: Requirement, backend: Backend) -> str | None:
    """The intrinsic that judges ``r``, or None when the model must answer yes/no.

    Only a ``Backend`` is asked about adapters: a duck-typed object offering just
    ``generate_from_context`` (a test double, a peer-style wrapper) gets the yes/no path.
    """
    if isinstance(r, LLMaJRequirement) or not isinstance(backend, Backend):
        return None
    if isinstance(r, ALoraRequirement):
        return r.intrinsic_name if backend.supports_intrinsic(r.intrinsic_name) else None
    if backend.default_to_constraint_checking_alora and backend.supports_intrinsic(
        REQUIREMENT_CHECK
    ):
        return REQUIREMENT_CHECK
    return None


def _output_text(ctx: Context) -> str:
    for entry in reversed(ctx.as_list(3) or []):
        if isinstance(entry, ModelOutputThunk) and entry.value is not None:
            return entry.value
        if isinstance(entry, Message) and entry.role == "assistant":
            return entry.content
    raise InvalidInputError(
        "No model output to judge: the context's last entries hold no computed "
        "ModelOutputThunk or assistant Message; generate first or pass output=."
    )


async def _run_fn(r: Requirement, ctx: Context) -> ValidationResult:
    verdict = r.validation_fn(ctx)  # type: ignore[misc]
    if inspect.isawaitable(verdict):
        verdict = await verdict
    if isinstance(verdict, ValidationResult):
        return verdict
    if isinstance(verdict, bool):
        return ValidationResult(verdict, context=ctx)
    raise TypeError(
        f"The validation_fn of {r!r} returned {type(verdict).__name__}; it must return a "
        "ValidationResult or a bool."
    )


async def _judge(
    r: Requirement,
    ctx: Context,
    backend: Backend,
    format: type[Any] | None,
    model_options: dict[str, Any] | None,
) -> ValidationResult:
    # The yes/no parser for an ALoraRequirement without its adapter: its own parser reads
    # the adapter's JSON and would reject every "yes".
    to_bool = default_output_to_bool if isinstance(r, ALoraRequirement) else r.output_to_bool
    question = Message("user", r.judge_prompt(_output_text(ctx)))
    mot, _ = await backend.generate_from_context(
        question, ctx, format=format, model_options=model_options
    )
    answer = await mot.avalue()
    reason = r.description if answer.strip().lower() in ("yes", "no") else answer
    try:
        verdict = bool(to_bool(mot))
    except AdapterSchemaMismatchError:
        raise
    except Exception as exc:  # an unreadable verdict fails closed, with the cause attached
        return ValidationResult(False, reason=reason, thunk=mot, context=ctx, error=exc)
    return ValidationResult(verdict, reason=reason, thunk=mot, context=ctx)


async def _scores(
    name: str,
    descriptions: list[str],
    ctx: Context,
    backend: Backend,
    model_options: dict[str, Any] | None,
) -> tuple[list[float], list[str]]:
    """Each description's score and the intrinsic's output text.

    An adapter runner hands the scores over as numbers (the text is built from them for the
    thunk); any other backend answers through the peer's ``score_requirements`` text.
    """
    if isinstance(backend, AdapterRunner):
        from mellea_local.intrinsics.requirement_check import check_results

        adapter = backend.adapter_for(name)
        results = await check_results(backend, ctx, descriptions, adapter=adapter,
                                      model_options=model_options)
        scores = [requirement_check_value(r, adapter.name) for r in results]
        return scores, [json.dumps(r) for r in results]
    outputs = await backend.score_requirements(
        ctx, descriptions, intrinsic_name=name, model_options=model_options
    )
    if len(outputs) != len(descriptions):
        raise MelleaLocalError(
            f"{type(backend).__name__}.score_requirements returned {len(outputs)} results for "
            f"{len(descriptions)} requirements; a backend must return one result per description."
        )
    return [requirement_check_score(text) for text in outputs], list(outputs)


async def _score_batch(
    name: str,
    batch: list[Requirement],
    ctx: Context,
    backend: Backend,
    model_options: dict[str, Any] | None,
) -> list[ValidationResult]:
    descriptions = [r.description or "" for r in batch]
    scores, outputs = await _scores(name, descriptions, ctx, backend, model_options)
    results = []
    for r, score, text in zip(batch, scores, outputs, strict=True):
        verdict = score > 0.5
        state = "satisfied" if verdict else "not satisfied"
        results.append(
            ValidationResult(
                verdict,
                reason=f"Requirement {state} ({name} score {score:.3f}): {r.description}",
                score=score,
                thunk=ModelOutputThunk(text),
                context=ctx,
            )
        )
    return results


async def avalidate(
    reqs: Reqs,
    context: Context,
    backend: Backend,
    *,
    output: Any = None,
    format: type[Any] | None = None,
    model_options: dict[str, Any] | None = None,
) -> list[ValidationResult]:
    """Check each requirement (strings become Requirements); results keep their order.

    ``reqs`` is one requirement or a list of them; each needs a validation_fn or a non-blank
    description (``InvalidInputError`` / ``InputTypeError`` otherwise, before anything runs).
    """
    checked = _requirements(reqs)
    ctx = _validation_context(check_context(context), output)
    check_backend(backend)
    check_options(model_options)

    # Plan every check before starting any, so a planning error leaves nothing running.
    singles: list[int] = []
    batches: dict[str, list[int]] = {}
    for i, r in enumerate(checked):
        name = None if r.validation_fn is not None else _adapter_name(r, backend)
        if name is None:
            singles.append(i)
        else:
            batches.setdefault(name, []).append(i)
    if batches and not ctx.view_for_generation():
        raise InvalidInputError(
            f"{type(ctx).__name__} shows the adapter an empty conversation, so it would judge "
            "nothing; validate over a ChatContext holding the exchange (or pass output=)."
        )

    jobs: list[tuple[list[int], Any]] = []
    for i in singles:
        r = checked[i]
        if r.validation_fn is not None:
            jobs.append(([i], _run_fn(r, ctx)))
        else:
            jobs.append(([i], _judge(r, ctx, backend, format, model_options)))
    for name, idxs in batches.items():
        batch = [checked[i] for i in idxs]
        jobs.append((idxs, _score_batch(name, batch, ctx, backend, model_options)))

    outcomes = await asyncio.gather(*(job[1] for job in jobs), return_exceptions=True)
    # Re-raise in requirement order so the same input always surfaces the same error.
    failures = sorted(
        (
            (min(idxs), outcome)
            for (idxs, _), outcome in zip(jobs, outcomes, strict=True)
            if isinstance(outcome, BaseException)
        ),
        key=lambda failure: failure[0],
    )
    if failures:
        raise failures[0][1]
    results: list[ValidationResult | None] = [None] * len(checked)
    for (idxs, _), outcome in zip(jobs, outcomes, strict=True):
        verdicts = outcome if isinstance(outcome, list) else [outcome]
        for i, verdict in zip(idxs, verdicts, strict=True):
            results[i] = verdict
    return results  # type: ignore[return-value]


def validate(
    reqs: Reqs,
    context: Context,
    backend: Backend,
    *,
    output: Any = None,
    format: type[Any] | None = None,
    model_options: dict[str, Any] | None = None,
) -> list[ValidationResult]:
    """Synchronous ``avalidate`` for code that has no event loop running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(
            avalidate(
                reqs, context, backend, output=output, format=format, model_options=model_options
            )
        )
    raise RuntimeError(
        "validate() cannot run inside a running event loop; use `await avalidate(...)`."
    )
