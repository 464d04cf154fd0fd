"""The checking engine: one call's requirements planned, batched, run and put back in order.

Each requirement goes one of three ways, decided here and not by the backend:

1. it has a ``validation_fn``: run it on the validation context;
2. an intrinsic adapter judges it (the requirement names the intrinsic through its
   ``_judging_intrinsic(backend)`` hook: an ``ALoraRequirement`` whose adapter the backend has,
   a plain ``Requirement`` when the backend defaults to the requirement-check adapter): all
   such requirements of one call go to the backend as ONE batch per intrinsic, and each score
   travels as a number (an adapter runner) or is read with ``requirement_check_score`` (a peer
   backend's ``score_requirements`` text), never with the yes/no parser;
3. otherwise the model answers a yes/no question, read with the requirement's
   ``_judge_reader()`` (the yes/no parser for an ``ALoraRequirement`` without its adapter).

Routing, on by default (``route=True``; our deviation from mellea 0.8, which has no such
option; ``route=False`` restores the peer's behaviour exactly): a plain ``Requirement`` without a
``validation_fn`` whose whole description maps confidently to one verifier of Google's IFEval
registry or one of our exact rules (``verify.route``: "Keep it under 50 words.", "Reply in
JSON.", "End with a question.") is decided by that program instead, with no forward at all:
score 1.0 or 0.0 and a ``reason`` naming who decided ("verified by ifeval <id>(<kwargs>)" or
"verified by rule <name>(<kwargs>)"). An ``ALoraRequirement`` or ``LLMaJRequirement`` names its
judge and is never routed (``verifiable = False``). Without the ``[verify]`` extra, registry
verifiers are skipped (one logged warning per process) and those requirements go on as above.

The engine sees requirements only through those hooks and the plain attributes
(``validation_fn``, ``description``, ``judge_prompt``), so it depends on no requirement class:
``Requirement.validate`` and ``validate.avalidate`` both call it.

Validation runs over the caller's real context, with ``output`` appended when it is given and
not already the last entry, so an adapter sees the whole conversation.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mellea_local.adapters.runner import AdapterRunner
from mellea_local.core.backend import Backend
from mellea_local.core.context import Context
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import (
    AdapterSchemaMismatchError,
    InputTypeError,
    InvalidInputError,
    MelleaLocalError,
)
from mellea_local.inputs import check_backend, check_context
from mellea_local.intrinsics.score import requirement_check_value
from mellea_local.messages import Message
from mellea_local.options import check_options
from mellea_local.requirements.result import (
    ValidationResult,
    passes,
    requirement_check_score,
)


class Checkable(Protocol):
    """What the engine needs of a requirement (``Requirement`` provides all of it)."""

    description: str | None
    validation_fn: Callable[[Context], Any] | None

    def judge_prompt(self, output: str) -> str: ...

    def _judging_intrinsic(self, backend: Backend) -> str | None: ...

    def _judge_reader(self) -> Callable[[Any], bool]: ...


def _validation_context(context: Context, output: Any) -> Context:
    if output is None or (not context.is_root_node and context.node_data is output):
        return context
    return context.add(output)


def _adapter_name(r: Checkable, backend: Backend) -> str | None:
    """The intrinsic that judges ``r``, or None when the model must answer yes/no.

    Only a ``Backend`` is asked about adapters: a duck-typed object offering just
    ``generate_from_context`` (a test double, a peer-style wrapper) gets the yes/no path.
    """
    if not isinstance(backend, Backend):
        return None
    return r._judging_intrinsic(backend)


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


def _last_user_text(ctx: Context) -> str | None:
    """The user's last message (a routed "repeat the request" is checked against it)."""
    for entry in reversed(ctx.as_list() or []):
        if isinstance(entry, Message) and entry.role == "user":
            return entry.content if isinstance(entry.content, str) else None
    return None


async def _run_fn(r: Checkable, ctx: Context) -> ValidationResult:
    verdict = r.validation_fn(ctx)  # type: ignore[misc]
    if inspect.isawaitable(verdict):
        verdict = await verdict
    if isinstance(verdict, ValidationResult):
        return verdict
    if isinstance(verdict, bool):
        return ValidationResult(verdict, context=ctx)
    raise InputTypeError(
        f"The validation_fn of {r!r} returned {type(verdict).__name__}; it must return a "
        "ValidationResult or a bool."
    )


async def _verified(r: Checkable, mapping: Any, ctx: Context) -> ValidationResult:
    """The program's verdict on the output text (a registry verifier or our rule): no model
    call at all."""
    from mellea_local.requirements.verify import verify

    verdict = verify(mapping, _output_text(ctx))
    state = "satisfied" if verdict else "not satisfied"
    return ValidationResult(
        verdict,
        reason=f"Requirement {state} (verified by {mapping.decider()}): {r.description}",
        score=1.0 if verdict else 0.0,
        context=ctx,
    )


async def _judge(
    r: Checkable,
    ctx: Context,
    backend: Backend,
    format: type[Any] | None,
    model_options: dict[str, Any] | None,
) -> ValidationResult:
    to_bool = r._judge_reader()
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
        # Imported on first use: the intrinsic pulls in torch, which a plain
        # ``import mellea_local`` (contexts and requirements only) does not need.
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
    batch: list[Checkable],
    ctx: Context,
    backend: Backend,
    model_options: dict[str, Any] | None,
) -> list[ValidationResult]:
    descriptions = [r.description or "" for r in batch]
    scores, outputs = await _scores(name, descriptions, ctx, backend, model_options)
    results = []
    for r, score, text in zip(batch, scores, outputs, strict=True):
        verdict = passes(score)
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


async def check_requirements(
    checked: Sequence[Checkable],
    context: Context,
    backend: Backend,
    *,
    output: Any = None,
    format: type[Any] | None = None,
    model_options: dict[str, Any] | None = None,
    route: bool = True,
) -> list[ValidationResult]:
    """Check requirements already known to be checkable (a validation_fn or a non-blank
    description); results keep their order. The context, backend and options are checked
    here, before anything runs. ``route`` (default on) lets a program decide what it can
    verify exactly (module docstring); ``route=False`` sends everything to the model."""
    if not isinstance(route, bool):
        raise InputTypeError(f"route must be True or False, got {route!r:.60}.")
    ctx = _validation_context(check_context(context), output)
    check_backend(backend)
    check_options(model_options)

    # Plan every check before starting any, so a planning error leaves nothing running.
    singles: list[int] = []
    batches: dict[str, list[int]] = {}
    routed: dict[int, Any] = {}
    if route:
        from mellea_local.requirements.verify import route as route_of

        prompt = _last_user_text(ctx)
        for i, r in enumerate(checked):
            if (r.validation_fn is None and r.description
                    and getattr(r, "verifiable", True)):
                mapping = route_of(r.description, prompt)
                if mapping is not None:
                    routed[i] = mapping
    for i, r in enumerate(checked):
        if i in routed:
            continue
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
    for i, mapping in routed.items():
        jobs.append(([i], _verified(checked[i], mapping, ctx)))
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
