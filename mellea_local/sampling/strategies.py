"""Sampling strategies: generate, validate, repair, until the requirements hold or the budget ends.

Every strategy runs the same loop; they differ only in how the next attempt is set up after a
failure (``repair``) and which attempt is returned when none passes (``select_from_failure``):

* ``RejectionSamplingStrategy``: ask again, the same way, from the same context.
* ``RepairTemplateStrategy``: ask again with the instruction amended by what failed.
* ``MultiTurnStrategy``: keep the failed answer in the conversation and reply to it with what
  failed, as a user turn (the next prompt extends the last, so the KV cache serves it).

Validation runs over the real conversation (the attempt's context, ending with the sample),
and all requirement checks of an attempt go to ``avalidate`` as one list, which sends the
adapter-judged ones to the backend as one batch. Requirement order is kept everywhere.

An attempt after the first reuses the caller's ``ModelOption.SEED`` plus the attempt's index
(when a seed is given): re-sampling with the very seed that just failed would only repeat it.

A sample cut off at its token budget (``sample.truncated``, finish reason ``"length"``) is
judged as it stands, and every verdict's reason says it was cut off (``avalidate``), so a
pass is never mistaken for a pass of a complete answer; the attempt, the result
(``SamplingResult.truncated``) and the thunk carry the mark. The budget is not raised behind
the caller's back: doubling it on a cut answer was measured to cost 13 min of CPU on SmolLM2
for an answer that repeated one sentence to the end. Raise ``ModelOption.MAX_NEW_TOKENS``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, cast

from mellea_local.core.backend import Backend
from mellea_local.core.component import Span
from mellea_local.core.context import ChatContext, Context
from mellea_local.core.thunk import ComputedModelOutputThunk
from mellea_local.errors import InputTypeError, InvalidInputError
from mellea_local.inputs import requirement_list
from mellea_local.messages import Message
from mellea_local.options import ModelOption, merge_options
from mellea_local.requirements import Requirement, avalidate, reqify
from mellea_local.requirements.validate import TRUNCATED
from mellea_local.sampling.instruction import REPAIR_HEADER, Instruction
from mellea_local.sampling.result import SamplingAttempt, SamplingResult

__all__ = [
    "BaseSamplingStrategy",
    "MultiTurnStrategy",
    "RejectionSamplingStrategy",
    "RepairTemplateStrategy",
    "combine_requirements",
    "failure_feedback",
]

MULTI_TURN_HEADER = "The following requirements have not been met:"
MULTI_TURN_FOOTER = "Please try again to fulfill the requirements."


def combine_requirements(
    *groups: Sequence[Requirement | str] | None,
) -> list[Requirement]:
    """The requirements of all groups, in order, each once (strings become Requirements).

    Requirement objects are de-duplicated by identity, strings by text; order is never changed.
    """
    seen_ids: set[int] = set()
    seen_text: set[str] = set()
    out: list[Requirement] = []
    for group in groups:
        items = requirement_list(group, "requirements", single_ok=False) \
            if group is not None else ()
        for item in items:
            if isinstance(item, str):
                if item in seen_text:
                    continue
                seen_text.add(item)
            elif id(item) in seen_ids:
                continue
            r = reqify(item)
            seen_ids.add(id(r))
            out.append(r)
    return out


def failure_feedback(attempt: SamplingAttempt, requirements: Sequence[Requirement]) -> list[str]:
    """One line per failed requirement the model can act on (``check_only`` ones excluded).

    A code check's own reason says most (e.g. "57 words, at most 50"); for a model- or
    adapter-judged requirement the description is the clearest statement of what is wanted.
    """
    lines = []
    for i, (r, verdict) in enumerate(zip(requirements, attempt.validations, strict=True)):
        if verdict or r.check_only:
            continue
        # The truncation note is for the caller (raise the budget), not the model.
        reason = (verdict.reason or "").removesuffix(TRUNCATED).removesuffix("; ")
        if r.validation_fn is not None and reason:
            lines.append(reason)
        else:
            lines.append(r.description or reason or f"requirement {i + 1}")
    return lines


def _attempt_options(model_options: dict[str, Any] | None, index: int) -> dict[str, Any] | None:
    if index == 0 or not model_options:
        return model_options
    opts = merge_options(None, model_options)
    seed = opts.get(ModelOption.SEED)
    if seed is not None:
        opts[ModelOption.SEED] = int(seed) + index
    return opts


class BaseSamplingStrategy(abc.ABC):
    """Generate up to ``loop_budget`` samples, stopping at the first that meets every requirement.

    ``requirements`` given here come first, then those of each call (both are used; nothing is
    replaced or reordered).
    """

    def __init__(
        self, *, loop_budget: int = 1, requirements: Sequence[Requirement | str] | None = None
    ) -> None:
        if isinstance(loop_budget, bool) or not isinstance(loop_budget, int) or loop_budget < 1:
            raise InvalidInputError(f"loop_budget must be an int >= 1, got {loop_budget!r}.")
        self._loop_budget = loop_budget
        self._requirements = tuple(combine_requirements(requirements))

    @property
    def loop_budget(self) -> int:
        return self._loop_budget

    @property
    def requirements(self) -> list[Requirement]:
        return list(self._requirements)

    def check_call(self, action: Span, context: Context) -> None:
        """Refuse an action or context this strategy cannot repair, before anything runs."""
        return None

    @abc.abstractmethod
    def repair(
        self,
        action: Span,
        context: Context,
        attempt: SamplingAttempt,
        requirements: Sequence[Requirement],
    ) -> tuple[Span, Context]:
        """The action and context of the next attempt, after ``attempt`` failed.

        ``action`` and ``context`` are the caller's originals.
        """

    def select_from_failure(self, attempts: Sequence[SamplingAttempt]) -> int:
        """The attempt to return when none passed: most requirements met, earliest on ties."""
        best = max(a.passed_count for a in attempts)
        return next(i for i, a in enumerate(attempts) if a.passed_count == best)

    async def sample(
        self,
        action: Span,
        context: Context,
        backend: Backend,
        requirements: Sequence[Requirement | str] | None = None,
        *,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> SamplingResult:
        """Run the generate / validate / repair loop for ``action`` after ``context``."""
        reqs = combine_requirements(self._requirements, requirements)
        self.check_call(action, context)
        attempts: list[SamplingAttempt] = []
        next_action, next_context = action, context
        for index in range(self._loop_budget):
            mot, new_context = await backend.generate_from_context(
                next_action, next_context, format=format,
                model_options=_attempt_options(model_options, index),
            )
            await mot.avalue()
            sample: ComputedModelOutputThunk[Any] = ComputedModelOutputThunk(mot)
            validations = await avalidate(reqs, new_context, backend) if reqs else []
            attempt = SamplingAttempt(index, next_action, sample, new_context, validations)
            attempts.append(attempt)
            if attempt.passed:
                return SamplingResult(True, index, attempts)
            if index + 1 < self._loop_budget:
                next_action, next_context = self.repair(action, context, attempt, reqs)
        return SamplingResult(False, self.select_from_failure(attempts), attempts)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(loop_budget={self._loop_budget}, "
            f"requirements={list(self._requirements)!r})"
        )


class RejectionSamplingStrategy(BaseSamplingStrategy):
    """Draw fresh samples of the same request until one passes.

    Deterministic decoding repeats itself: use sampling options (a temperature, a seed).
    """

    def repair(
        self,
        action: Span,
        context: Context,
        attempt: SamplingAttempt,
        requirements: Sequence[Requirement],
    ) -> tuple[Span, Context]:
        return action, context


class RepairTemplateStrategy(BaseSamplingStrategy):
    """Ask again with the instruction amended by the requirements that failed."""

    def check_call(self, action: Span, context: Context) -> None:
        if not isinstance(action, Instruction):
            raise InputTypeError(
                f"RepairTemplateStrategy repairs an Instruction, got {type(action).__name__}; "
                "use RejectionSamplingStrategy or MultiTurnStrategy for other actions."
            )

    def repair(
        self,
        action: Span,
        context: Context,
        attempt: SamplingAttempt,
        requirements: Sequence[Requirement],
    ) -> tuple[Span, Context]:
        lines = failure_feedback(attempt, requirements)
        if not lines:  # only check_only requirements failed: nothing to tell the model
            return action, context
        instruction = cast(Instruction, action)  # check_call refused anything else
        repair = REPAIR_HEADER + "".join(f"\n* {x}" for x in lines)
        return instruction.copy_and_repair(repair), context


class MultiTurnStrategy(BaseSamplingStrategy):
    """Reply to a failed answer with what failed, in the same conversation.

    Needs a ``ChatContext``. When none passes, the latest of the best attempts is returned:
    later attempts have seen more feedback.
    """

    def check_call(self, action: Span, context: Context) -> None:
        if not isinstance(context, ChatContext):
            raise InputTypeError(
                f"MultiTurnStrategy continues the conversation, so it needs a ChatContext, "
                f"got {type(context).__name__}."
            )

    def repair(
        self,
        action: Span,
        context: Context,
        attempt: SamplingAttempt,
        requirements: Sequence[Requirement],
    ) -> tuple[Span, Context]:
        lines = failure_feedback(attempt, requirements)
        if not lines:  # only check_only requirements failed: start afresh
            return action, context
        text = MULTI_TURN_HEADER + "".join(f"\n* {x}" for x in lines) + "\n" + MULTI_TURN_FOOTER
        return Message("user", text), attempt.context

    def select_from_failure(self, attempts: Sequence[SamplingAttempt]) -> int:
        best = max(a.passed_count for a in attempts)
        return max(i for i, a in enumerate(attempts) if a.passed_count == best)
