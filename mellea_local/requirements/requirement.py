"""Requirements: plain objects that say what an output must satisfy, and how to read verdicts.

A requirement is checked one of three ways (``validate.py`` decides which): its own
``validation_fn``; an intrinsic adapter that returns a score (``requirement_check_to_bool``
reads it); or a model asked for yes/no (``output_to_bool`` reads the answer).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, Span, TemplateRepresentation
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import InputTypeError, InvalidInputError, ScoreJSONError
from mellea_local.intrinsics.score import REQUIREMENT_CHECK, requirement_check_value

if TYPE_CHECKING:
    from mellea_local.core.backend import Backend
    from mellea_local.core.context import Context

logger = logging.getLogger(__name__)


ValidationFn = Callable[["Context"], "ValidationResult | bool | Awaitable[ValidationResult | bool]"]


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
            raise ValueError(
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


def requirement_check_to_bool(x: CBlock | ModelOutputThunk[Any] | str) -> bool:
    """True iff the requirement-check score is above 0.5 (exactly 0.5 is not a pass)."""
    return requirement_check_score(x) > 0.5


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
    """

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
            raise ValueError(
                "A model can only judge a Requirement with a description; give it one or a "
                "validation_fn."
            )
        return _JUDGE_PROMPT.format(output=output, description=self.description)

    def _parse(self, computed: ModelOutputThunk[Any]) -> bool:
        return bool(self.output_to_bool(computed))

    async def validate(
        self,
        backend: Backend,
        ctx: Context,
        *,
        format: type[Any] | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> ValidationResult:
        """Check this requirement against the last output in ``ctx`` (the peer's method form).

        The same routing as ``avalidate``: ``validation_fn`` if any, else the backend's
        requirement-check adapter when it has one (the KV-reuse fast path), else the model's
        yes/no answer, whose bare "yes"/"no" becomes ``description`` as the reason.
        """
        from mellea_local.requirements.validate import avalidate

        [result] = await avalidate(
            [self], ctx, backend, format=format, model_options=model_options
        )
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.description!r})"


class LLMaJRequirement(Requirement):
    """A requirement always judged by the model's own yes/no answer, never by an adapter."""

    use_aloras = False


class ALoraRequirement(Requirement):
    """A requirement judged by an intrinsic adapter (``requirement-check`` by default).

    Without such an adapter on the backend it is judged by the model's yes/no answer, read
    with the yes/no parser (not the adapter's JSON parser). A malformed adapter output raises
    ``AdapterSchemaMismatchError``; it never falls back.
    """

    use_aloras = True

    def __init__(self, description: str, intrinsic_name: str | None = REQUIREMENT_CHECK):
        if not isinstance(description, str) or not description.strip():
            raise InvalidInputError(
                "ALoraRequirement needs a non-empty description: the adapter judges the output "
                "against that text."
            )
        super().__init__(description, output_to_bool=requirement_check_to_bool)
        self.intrinsic_name = intrinsic_name or REQUIREMENT_CHECK

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
        raise ValueError(
            f"A simple_validate function must return a bool or (bool, str), got {verdict!r}."
        )

    return validate_last_output
