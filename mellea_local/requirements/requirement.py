"""Requirements: plain objects that say what an output must satisfy and how they are judged.

A requirement is checked one of three ways: its own ``validation_fn``; an intrinsic adapter
that returns a score (``requirement_check_to_bool`` reads it); or a model asked for yes/no
(``output_to_bool`` reads the answer). Each class says which through two hooks,
``_judging_intrinsic(backend)`` and ``_judge_reader()``; the checking engine
(``checking.py``) asks them and runs the checks, so this module imports the engine and the
engine never imports it. The verdict types live in ``result.py`` and are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, Span, TemplateRepresentation
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import InputTypeError, RequirementDefinitionError
from mellea_local.inputs import description_of
from mellea_local.intrinsics.score import REQUIREMENT_CHECK
from mellea_local.requirements.checking import check_requirements
from mellea_local.requirements.result import (
    PartialValidationResult,
    ValidationResult,
    default_output_to_bool,
    requirement_check_score,
    requirement_check_to_bool,
)

if TYPE_CHECKING:
    from mellea_local.core.backend import Backend
    from mellea_local.core.context import Context

logger = logging.getLogger(__name__)


ValidationFn = Callable[["Context"], "ValidationResult | bool | Awaitable[ValidationResult | bool]"]


_JUDGE_PROMPT = (
    "Please check the following requirement against the following output. Reply with 'yes' "
    "if the requirement is satisfied and 'no' otherwise. Do not include any other text in "
    "your response.\n  Output: {output}\n  Requirement: {description}"
)


class Requirement(Component[bool]):
    """Something an output must satisfy.

    ``validation_fn(ctx)`` checks it in code (returning a ``ValidationResult`` or a bool);
    without one, a model judges ``description``. ``output_to_bool`` reads a yes/no judge's
    answer. ``check_only`` marks requirements that are reported but not used for repair.

    ``verifiable`` (our addition): a plain Requirement whose description a program can decide
    exactly ("Keep it under 50 words.") is routed to that program when validation routes (the
    default, ``requirements.verify``); the subclasses that name their judge set it False.
    """

    verifiable = True

    def __init__(
        self,
        description: str | None = None,
        validation_fn: ValidationFn | None = None,
        *,
        output_to_bool: Callable[[Any], bool] = default_output_to_bool,
        check_only: bool = False,
    ):
        if description is not None and not isinstance(description, str):
            raise InputTypeError(
                "Requirement description must be a str or None, got "
                f"{type(description).__name__}."
            )
        if validation_fn is not None and not callable(validation_fn):
            raise InputTypeError(
                "Requirement validation_fn must be callable: ctx -> ValidationResult."
            )
        if not callable(output_to_bool):
            raise InputTypeError(
                "Requirement output_to_bool must be callable: judge output -> bool."
            )
        if not isinstance(check_only, bool):
            raise InputTypeError(
                f"Requirement check_only must be True or False, got {check_only!r}; pass "
                "check_only=True to keep a requirement out of repair feedback."
            )
        self.description = description
        self.validation_fn = validation_fn
        self.output_to_bool = output_to_bool
        self.check_only = check_only

    def parts(self) -> list[Span]:
        return [CBlock(self.description)] if self.description else []

    def format_for_llm(self) -> TemplateRepresentation:
        return TemplateRepresentation(
            obj=self,
            args={"description": self.description},
            template_order=["*", "Requirement"],
            role="user",
        )

    def judge_prompt(self, output: str) -> str:
        """The yes/no question a judge model answers about ``output``."""
        if not self.description:
            raise RequirementDefinitionError(
                "A model can only judge a Requirement with a description; give it one or a "
                "validation_fn."
            )
        return _JUDGE_PROMPT.format(output=output, description=self.description)

    def _parse(self, computed: ModelOutputThunk[Any]) -> bool:
        return bool(self.output_to_bool(computed))

    def _judging_intrinsic(self, backend: Backend) -> str | None:
        """The intrinsic adapter that judges this requirement on ``backend``, or None for the
        model's yes/no answer: requirement-check when the backend defaults to it."""
        if backend.default_to_constraint_checking_alora and backend.supports_intrinsic(
            REQUIREMENT_CHECK
        ):
            return REQUIREMENT_CHECK
        return None

    def _judge_reader(self) -> Callable[[Any], bool]:
        """How a yes/no judge's answer is read."""
        return self.output_to_bool

    async def validate(
        self,
        backend: Backend,
        ctx: Context,
        *,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
        route: bool = True,
    ) -> ValidationResult:
        """Check this requirement against the last output in ``ctx`` (the peer's method form).

        The same routing as ``avalidate``: ``validation_fn`` if any, else (``route``, on by
        default, our deviation) a program when the description maps to one exactly, else the
        backend's requirement-check adapter when it has one (the KV-reuse fast path), else the
        model's yes/no answer, whose bare "yes"/"no" becomes ``description`` as the reason.
        """
        if self.validation_fn is None:
            description_of(self, "requirement", fn_ok=True)
        [result] = await check_requirements(
            [self], ctx, backend, format=format, model_options=model_options, route=route
        )
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.description!r})"


class LLMaJRequirement(Requirement):
    """A requirement always judged by the model's own yes/no answer, never by an adapter."""

    use_aloras = False
    verifiable = False  # it names its judge: the model's yes/no answer

    def _judging_intrinsic(self, backend: Backend) -> str | None:
        return None


class ALoraRequirement(Requirement):
    """A requirement judged by an intrinsic adapter (``requirement-check`` by default).

    Without such an adapter on the backend it is judged by the model's yes/no answer, read
    with the yes/no parser (not the adapter's JSON parser). A malformed adapter output raises
    ``AdapterSchemaMismatchError``; it never falls back.
    """

    use_aloras = True
    verifiable = False  # it names its judge: the adapter

    def __init__(self, description: str, intrinsic_name: str | None = REQUIREMENT_CHECK):
        if not isinstance(description, str) or not description.strip():
            raise RequirementDefinitionError(
                f"ALoraRequirement needs a non-empty description, got {description!r:.60}: the "
                "adapter judges the output against that text. Pass it, e.g. "
                "ALoraRequirement('The answer is polite.')."
            )
        if intrinsic_name is not None and (not isinstance(intrinsic_name, str)
                                           or not intrinsic_name.strip()):
            raise InputTypeError(
                f"ALoraRequirement intrinsic_name must be an intrinsic's name (str) or None, got "
                f"{intrinsic_name!r}; leave it out for {REQUIREMENT_CHECK!r}."
            )
        super().__init__(description, output_to_bool=requirement_check_to_bool)
        self.intrinsic_name = intrinsic_name or REQUIREMENT_CHECK

    def _judging_intrinsic(self, backend: Backend) -> str | None:
        return self.intrinsic_name if backend.supports_intrinsic(self.intrinsic_name) else None

    def _judge_reader(self) -> Callable[[Any], bool]:
        # Without its adapter the model answers yes/no: this requirement's own parser reads
        # the adapter's JSON and would reject every "yes".
        return default_output_to_bool

    def __repr__(self) -> str:
        return f"ALoraRequirement({self.description!r}, intrinsic_name={self.intrinsic_name!r})"


def reqify(r: str | Requirement) -> Requirement:
    """A Requirement from a description string; a Requirement is returned as is."""
    if isinstance(r, Requirement):
        return r
    if isinstance(r, str):
        return Requirement(r)
    raise InputTypeError(
        f"reqify takes a str or requirement (a description or a Requirement), got "
        f"{type(r).__name__}."
    )


def req(*args: Any, **kwargs: Any) -> Requirement:
    """Shorthand for ``Requirement(...)``."""
    return Requirement(*args, **kwargs)


def check(*args: Any, **kwargs: Any) -> Requirement:
    """Shorthand for ``Requirement(..., check_only=True)``."""
    return Requirement(*args, **kwargs, check_only=True)


def simple_validate(
    fn: Callable[[str], Any], *, reason: str | None = None
) -> Callable[[Context], ValidationResult]:
    """A validation function over the last model output's text.

    ``fn`` returns a bool (``reason`` is then the static reason) or ``(bool, reason)``.
    With no output to check, the result is a failure that says so, without calling ``fn``.
    """
    if not callable(fn):
        raise InputTypeError(
            f"simple_validate needs a function of the output text returning a bool, got "
            f"{type(fn).__name__} ({fn!r:.60}); pass e.g. simple_validate(lambda text: "
            "len(text) < 100)."
        )

    def validate_last_output(ctx: Context) -> ValidationResult:
        last = ctx.last_output()
        if last is None or last.value is None:
            logger.warning("simple_validate: the context holds no computed model output.")
            return ValidationResult(
                False,
                reason="No model output to validate: the context's last entries hold no "
                "computed ModelOutputThunk; validate after generating, or pass output=.",
            )
        verdict = fn(last.value)
        if isinstance(verdict, bool):
            return ValidationResult(verdict, reason=reason)
        if (
            isinstance(verdict, tuple)
            and len(verdict) == 2
            and isinstance(verdict[0], bool)
            and isinstance(verdict[1], str)
        ):
            return ValidationResult(verdict[0], reason=verdict[1])
        raise RequirementDefinitionError(
            f"A simple_validate function must return a bool or (bool, str), got {verdict!r}."
        )

    return validate_last_output


__all__ = [
    "ALoraRequirement",
    "LLMaJRequirement",
    "PartialValidationResult",
    "Requirement",
    "ValidationFn",
    "ValidationResult",
    "check",
    "default_output_to_bool",
    "req",
    "reqify",
    "requirement_check_score",
    "requirement_check_to_bool",
    "simple_validate",
]
