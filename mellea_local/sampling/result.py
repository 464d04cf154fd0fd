"""What a sampling run returns: every attempt with its verdicts, and which one was chosen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mellea_local.core.component import Span
from mellea_local.core.context import Context
from mellea_local.core.thunk import ComputedModelOutputThunk
from mellea_local.errors import IndexRangeError, InvalidInputError
from mellea_local.requirements import ValidationResult

__all__ = ["SamplingAttempt", "SamplingResult"]


@dataclass(frozen=True)
class SamplingAttempt:
    """One generation: the action asked, the sample, the context it ended and its verdicts.

    ``context`` is the context the sample was generated in, extended with the action and the
    sample: the conversation the requirements were judged over. ``validations`` are in the
    order of the requirements.
    """

    index: int
    action: Span
    sample: ComputedModelOutputThunk[Any]
    context: Context
    validations: list[ValidationResult] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        """The sample stopped at its token budget: an answer cut off, not a complete one."""
        return bool(getattr(self.sample, "truncated", False))

    @property
    def passed(self) -> bool:
        """Every requirement held (vacuously true without requirements). For a sample cut off
        at its budget (``truncated``) each verdict's reason says so (``avalidate``)."""
        return all(bool(v) for v in self.validations)

    @property
    def passed_count(self) -> int:
        return sum(1 for v in self.validations if v)


@dataclass(frozen=True)
class SamplingResult:
    """The outcome of a sampling strategy.

    ``success`` says whether the chosen attempt met every requirement. Without success the
    strategy still chose an attempt (``result_index``), so ``result`` is always a sample.
    """

    success: bool
    result_index: int
    attempts: list[SamplingAttempt]

    def __post_init__(self) -> None:
        if not self.attempts:
            raise InvalidInputError("A SamplingResult needs at least one attempt.")
        if not -len(self.attempts) <= self.result_index < len(self.attempts):
            raise IndexRangeError(
                f"result_index {self.result_index} is out of range for {len(self.attempts)} "
                "attempts."
            )

    @property
    def chosen(self) -> SamplingAttempt:
        return self.attempts[self.result_index]

    @property
    def result(self) -> ComputedModelOutputThunk[Any]:
        """The chosen sample."""
        return self.chosen.sample

    @property
    def sample(self) -> ComputedModelOutputThunk[Any]:
        """Alias of ``result``."""
        return self.chosen.sample

    @property
    def truncated(self) -> bool:
        """The chosen sample stopped at its token budget: an answer cut off, not a complete
        one (raise ``ModelOption.MAX_NEW_TOKENS``)."""
        return self.chosen.truncated

    @property
    def value(self) -> str:
        """The chosen sample's text."""
        return self.chosen.sample.value or ""

    @property
    def result_context(self) -> Context:
        """The context holding the chosen sample: continue the conversation from here."""
        return self.chosen.context

    @property
    def result_validations(self) -> list[ValidationResult]:
        return self.chosen.validations

    @property
    def sample_generations(self) -> list[ComputedModelOutputThunk[Any]]:
        return [a.sample for a in self.attempts]

    @property
    def sample_validations(self) -> list[list[ValidationResult]]:
        return [a.validations for a in self.attempts]

    @property
    def sample_contexts(self) -> list[Context]:
        return [a.context for a in self.attempts]

    @property
    def sample_actions(self) -> list[Span]:
        return [a.action for a in self.attempts]
