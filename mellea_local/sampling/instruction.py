"""``Instruction``: a task description plus the requirements its answer must meet.

The requirements are written into the prompt (the model should know what it is judged on),
except ``check_only`` ones, which are checked but never shown. A repaired copy carries the
failures of the previous attempt, so the model can address them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, Span, TemplateRepresentation
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import InvalidInputError
from mellea_local.requirements import Requirement, reqify

__all__ = ["REPAIR_HEADER", "Instruction"]

REPAIR_HEADER = "The following requirements failed before:"

_TEMPLATE = (
    "{{ description }}"
    "{% if requirements %}\n\nRequirements:{% for r in requirements %}\n* {{ r }}{% endfor %}"
    "{% endif %}"
    "{% if repair %}\n\n{{ repair }}{% endif %}"
)


class Instruction(Component[str]):
    """One user turn asking for ``description``, listing the requirements to meet."""

    def __init__(
        self,
        description: str,
        requirements: Sequence[Requirement | str] | None = None,
        *,
        repair: str | None = None,
    ) -> None:
        if not isinstance(description, str) or not description.strip():
            raise InvalidInputError("An Instruction needs a non-empty description of the task.")
        self.description = CBlock(description)
        self.requirements = [reqify(r) for r in requirements or ()]
        self.repair = repair

    def copy_and_repair(self, repair: str) -> Instruction:
        """The same instruction with ``repair`` (what failed last time) appended."""
        return Instruction(str(self.description), self.requirements, repair=repair)

    def parts(self) -> list[Span]:
        return [self.description]

    def format_for_llm(self) -> TemplateRepresentation:
        shown = [r.description for r in self.requirements if r.description and not r.check_only]
        return TemplateRepresentation(
            obj=self,
            args={"description": str(self.description), "requirements": shown,
                  "repair": self.repair},
            template=_TEMPLATE,
            role="user",
        )

    def _parse(self, computed: ModelOutputThunk[Any]) -> str:
        return computed.value or ""

    def __repr__(self) -> str:
        return f"Instruction({str(self.description)!r}, requirements={self.requirements!r})"
