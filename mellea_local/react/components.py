"""The components of a ReACT conversation: the goal with its tools, and the per-turn nudge.

History shape (decided here, relied on by ``react``)::

    ReactInitiator (user)  -> assistant (thinking, tool calls) -> tool x k
    -> ReactThought (user) -> assistant -> tool x k -> ... -> assistant (final_answer) -> tool

The peer opens with two consecutive user turns (the initiator, then a thought). Strict chat
templates reject that, so the initiator's single user turn already carries the "think, then
act" instruction and is the *action* of the first turn; a ``ReactThought`` is used from the
second turn on, where it always follows tool results, never another user turn. The history only
ever grows at its end, so each turn's prompt extends the previous one token for token and the
backend's KV prefix cache serves it.

The tools live on the initiator (``TemplateRepresentation.tools``), which stays in the context,
so the backend offers them on every turn. Compactors must keep it: ``pin_react_initiator``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, Span, TemplateRepresentation
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.errors import InvalidInputError, ToolError
from mellea_local.tools.tool import AbstractMelleaTool, MelleaTool

__all__ = [
    "MELLEA_FINALIZER_TOOL",
    "ReactInitiator",
    "ReactThought",
    "finalizer_tool",
    "pin_react_initiator",
]

MELLEA_FINALIZER_TOOL = "final_answer"

INITIATOR_TEMPLATE = (
    "Use the provided tools to complete the goal below as best you can. Work in steps: think "
    "about what to do next, call a tool, read its result, and repeat. When you know the final "
    "answer, call the `{{ finalizer_tool_name }}` tool with it, on its own. A tool call is "
    "always required as the final step. If you catch yourself repeating the same thing, call "
    "the `{{ finalizer_tool_name }}` tool.\n\nGoal: {{ goal }}"
)
THOUGHT_PROMPT = (
    "Think about what to do next and take the next step. If you need more information, call a "
    f"tool. If you have the final answer, call the `{MELLEA_FINALIZER_TOOL}` tool."
)
REPEAT_PROMPT = (
    "You repeated a call whose result you already have. Answer now: call the "
    f"`{MELLEA_FINALIZER_TOOL}` tool with the answer, using the results above."
)
NO_CALL_PROMPT = (
    "Your last reply called no tool. Take the next step with a tool call; if you have the "
    f"answer, call the `{MELLEA_FINALIZER_TOOL}` tool with it."
)
FORMAT_PROMPT = "Now write the final answer in the required format."


def _mellea_finalize_tool(answer: str) -> str:
    """Give the final answer to the user.

    Args:
        answer: The final answer.
    """
    return answer


def finalizer_tool() -> MelleaTool:
    """The ``final_answer`` tool: the identity on its ``answer: str`` argument."""
    return MelleaTool.from_callable(_mellea_finalize_tool, name=MELLEA_FINALIZER_TOOL)


def _as_tool(item: Any) -> AbstractMelleaTool:
    if isinstance(item, AbstractMelleaTool):
        return item
    if callable(item) and not isinstance(item, type):
        return MelleaTool.from_callable(item)
    raise ToolError(
        f"A ReACT tool must be a MelleaTool (or a function to wrap), got {type(item).__name__}; "
        "a bare JSON spec cannot be run. Use MelleaTool.from_callable(fn)."
    )


class ReactInitiator(Component[str]):
    """The goal, the tools and how to work: one user turn, the first action of the loop.

    ``tools`` is copied (the caller's list is never changed); plain functions are wrapped with
    ``MelleaTool.from_callable``. The ``final_answer`` tool is added here, once; a user tool of
    that name, or two tools of one name, is a ``ToolError``.
    """

    def __init__(
        self, goal: str, tools: Sequence[AbstractMelleaTool | Callable[..., Any]] | None = None
    ) -> None:
        if not isinstance(goal, str) or not goal.strip():
            raise InvalidInputError(
                f"A ReACT goal must be a non-empty string saying what to achieve, got "
                f"{goal!r}; e.g. react('What is 12 * 7?', ChatContext(), backend, tools=[...])."
            )
        self.goal = CBlock(goal)
        self.tools: tuple[AbstractMelleaTool, ...] = tuple(_as_tool(t) for t in tools or ())
        names: dict[str, AbstractMelleaTool] = {}
        for t in self.tools:
            if t.name == MELLEA_FINALIZER_TOOL:
                raise ToolError(
                    f"{MELLEA_FINALIZER_TOOL!r} is reserved: react adds it and ends the loop "
                    "when the model calls it. Rename your tool."
                )
            if t.name in names:
                raise ToolError(
                    f"Two tools are named {t.name!r}; the model could not tell them apart. "
                    "Give each tool a unique name (from_callable(fn, name=...))."
                )
            names[t.name] = t
        self.finalizer = finalizer_tool()
        names[MELLEA_FINALIZER_TOOL] = self.finalizer
        self._tool_map = names

    @property
    def tool_map(self) -> dict[str, AbstractMelleaTool]:
        """Tool name -> tool, ``final_answer`` last (a copy)."""
        return dict(self._tool_map)

    def parts(self) -> list[Span]:
        return [self.goal]

    def format_for_llm(self) -> TemplateRepresentation:
        return TemplateRepresentation(
            obj=self,
            args={"goal": str(self.goal), "finalizer_tool_name": MELLEA_FINALIZER_TOOL},
            tools=dict(self._tool_map),
            template=INITIATOR_TEMPLATE,
            role="user",
        )

    def _parse(self, computed: ModelOutputThunk[Any]) -> str:
        return computed.value or ""

    def __repr__(self) -> str:
        return f"ReactInitiator({str(self.goal)!r}, tools={list(self._tool_map)})"


class ReactThought(Component[str]):
    """The user turn that asks for the next step, after the tool results of a turn.

    ``prompt`` replaces the default wording (``react`` uses it to ask for the formatted final
    answer).
    """

    def __init__(self, prompt: str = THOUGHT_PROMPT) -> None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidInputError("A ReactThought prompt must be a non-empty string.")
        self.prompt = prompt

    def parts(self) -> list[Span]:
        return []

    def format_for_llm(self) -> TemplateRepresentation:
        return TemplateRepresentation(obj=self, args={"content": self.prompt}, role="user")

    def _parse(self, computed: ModelOutputThunk[Any]) -> str:
        return computed.value or ""

    def __repr__(self) -> str:
        return f"ReactThought({self.prompt!r})"


def pin_react_initiator(spans: list[Span]) -> int:
    """Pin everything up to and including the first ``ReactInitiator`` (nothing if none).

    Compose with a compactor so the goal and the tools survive compaction.
    """
    for i, span in enumerate(spans):
        if isinstance(span, ReactInitiator):
            return i + 1
    return 0
