"""``mellea-local react``: run the agent on a goal with the built-in tools, step by step.

``react()`` returns only when the task ends, so the steps are shown by a thin backend wrapper:
it first says which tool format the model is given and whether its calls are constrained,
then before each generation it prints the observations the loop just added to the context (the tool
results), after it the model's thought and tool calls. The agent loop itself stays untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from mellea_local.core.backend import Backend
from mellea_local.core.context import ChatContext, Context
from mellea_local.errors import InvalidInputError
from mellea_local.messages import ToolMessage
from mellea_local.options import ModelOption
from mellea_local.parsing.tool_grammar import constrain_tool_calls
from mellea_local.react import react
from mellea_local.rendering.tool_prompt import (
    HERMES_FORMAT,
    template_renders_tools,
    tool_format,
)
from mellea_local.tools.builtin import calculator, lookup_tool

__all__ = ["StepPrinter", "agent_adapter_line", "build_tools", "parse_lookup", "run_react",
           "template_renders_tools", "tool_format_line"]


class StepPrinter(Backend):
    """Delegates to ``inner`` and prints each ReACT step as it happens."""

    def __init__(self, inner: Any, console: Console) -> None:
        self.inner = inner
        self.console = console
        self.turn = 0

    @property
    def default_to_constraint_checking_alora(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.inner, "default_to_constraint_checking_alora", False))

    def supports_intrinsic(self, name: str) -> bool:
        return bool(self.inner.supports_intrinsic(name))

    async def score_requirements(self, *args: Any, **kwargs: Any) -> list[str]:
        return list(await self.inner.score_requirements(*args, **kwargs))

    def _say(self, label: str, text: str, style: str) -> None:
        self.console.print(f"{label}: ", style=f"bold {style}", end="", markup=False)
        self.console.print(text, style=style, markup=False, highlight=False)

    def print_observations(self, ctx: Context) -> None:
        """The tool results at the end of ``ctx``, oldest first."""
        tail: list[ToolMessage] = []
        for item in reversed(ctx.as_list() or []):
            if not isinstance(item, ToolMessage):
                break
            tail.append(item)
        for message in reversed(tail):
            self._say(f"  observation ({message.name})", message.content, "green")

    async def generate_from_context(
        self, action: Any, ctx: Context, **kwargs: Any
    ) -> tuple[Any, Context]:
        self.print_observations(ctx)
        self.turn += 1
        self.console.rule(f"step {self.turn}", style="dim")
        mot, new_ctx = await self.inner.generate_from_context(action, ctx, **kwargs)
        await mot.avalue()
        if mot.thinking:
            self._say("thought", mot.thinking.strip(), "dim")
        if mot.value and mot.value.strip():
            self._say("says", mot.value.strip(), "white")
        for call in mot.tool_calls or []:
            args = call.raw_arguments if call.error else json.dumps(call.args)
            self._say("  tool call", f"{call.name}({args})", "cyan")
        if not mot.tool_calls:
            self._say("  tool call", "(none)", "dim")
        return mot, new_ctx


def tool_format_line(backend: Any, constrain: bool | None) -> str:
    """One line saying how the tools reach the model and whether its calls are constrained.

    A template with a tool slot keeps its own format; one without (SmolLM2's ChatML) gets the
    Hermes format written into the messages (``rendering.tool_prompt``). Constrained calls
    follow ``ModelOption.CONSTRAIN_TOOL_CALLS`` (``--constrain/--no-constrain``; unset: on
    exactly for the Hermes fallback).
    """
    tokenizer = backend.tokenizer
    on = constrain_tool_calls({ModelOption.CONSTRAIN_TOOL_CALLS: constrain}, tokenizer)
    if tool_format(tokenizer) == HERMES_FORMAT:
        how = ("hermes (the chat template has no tool slot: tool schemas in a <tools> system "
               "block, calls as <tool_call> JSON, results as <tool_response> turns)")
    else:
        how = "the chat template's own"
    state = "on" if on else "off"
    why = "" if constrain is not None else " (default for this format)"
    return f"tool format: {how}; calls constrained to the tools' schemas: {state}{why}"


def agent_adapter_line(backend: Any, agent: bool | None) -> str:
    """One line saying which adapter the steps are decoded with (``ModelOption.AGENT_ADAPTER``:
    unset, the shipped ``adapters/agent/<model>/alora`` when there is one)."""
    find = getattr(backend, "agent_adapter", None)
    adapter = find({ModelOption.AGENT_ADAPTER: agent}) if callable(find) else None
    if adapter is None:
        why = " (--no-agent-adapter)" if agent is False else (
            "" if callable(find) else " (this backend has none)")
        return f"agent adapter: none, steps decoded by the base model{why}"
    return (f"agent adapter: {adapter.name} ({adapter.kind.value} invoked at the assistant "
            f"header) from {adapter.path}")


def build_tools(lookup: Mapping[str, Any] | None) -> list[Any]:
    """The calculator, plus a lookup table when one is given."""
    return [calculator, lookup_tool(lookup)] if lookup else [calculator]


def parse_lookup(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs from the command line into a lookup table."""
    table: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(
                f"--lookup takes KEY=VALUE, got {pair!r}; e.g. --lookup paris=france"
            )
        table[key.strip()] = value.strip()
    return table


def run_react(
    backend: Any, goal: str, *, console: Console, tools: list[Any], loop_budget: int = 6,
    max_new_tokens: int = 256, thinking: bool = True, constrain: bool | None = None,
    agent: bool | None = None,
) -> str:
    """Run the agent and print every step; returns the final answer."""
    printer = StepPrinter(backend, console)
    options = {ModelOption.MAX_NEW_TOKENS: max_new_tokens, ModelOption.THINKING: thinking,
               ModelOption.CONSTRAIN_TOOL_CALLS: constrain, ModelOption.AGENT_ADAPTER: agent}
    if getattr(backend, "tokenizer", None) is not None:  # a backend that renders itself
        console.print(tool_format_line(backend, constrain), style="dim", markup=False,
                      highlight=False)
        console.print(agent_adapter_line(backend, agent), style="dim", markup=False,
                      highlight=False)
    console.print(f"goal: {goal}", style="bold", markup=False, highlight=False)
    result, ctx = asyncio.run(react(goal, ChatContext(), printer, tools=tools,
                                    model_options=options, loop_budget=loop_budget))
    printer.print_observations(ctx)
    answer = str(result.value or "")
    console.print("final answer: ", style="bold magenta", end="")
    console.print(answer, markup=False, highlight=False)
    return answer
