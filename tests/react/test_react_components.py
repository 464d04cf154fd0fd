"""ReactInitiator, ReactThought and pin_react_initiator."""

from __future__ import annotations

import pytest

from mellea_local.core.blocks import CBlock
from mellea_local.errors import ToolError
from mellea_local.messages import Message
from mellea_local.react import (
    MELLEA_FINALIZER_TOOL,
    ReactInitiator,
    ReactThought,
    pin_react_initiator,
)
from mellea_local.rendering import collect_tools, to_chat_messages
from mellea_local.tools import MelleaTool, calculator


def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()


def test_initiator_is_one_user_turn_with_goal_and_finalizer_instruction():
    init = ReactInitiator("Add {{2}} and 3.", [calculator])
    [msg] = to_chat_messages([init])
    assert msg.role == "user"
    assert msg.content.endswith("Goal: Add {{2}} and 3.")  # the goal is data, not a template
    assert f"call the `{MELLEA_FINALIZER_TOOL}` tool" in msg.content
    assert "think about what to do next" in msg.content  # the first thought, same turn


def test_initiator_offers_its_tools_plus_final_answer_every_time():
    init = ReactInitiator("g", [calculator, shout])
    first = collect_tools(None, [init], None)
    second = collect_tools(None, [init], None)
    assert list(first) == ["calculator", "shout", MELLEA_FINALIZER_TOOL]
    # The same objects on every render: no fresh finalizer per turn.
    assert all(first[n][0] is second[n][0] for n in first)
    assert isinstance(first["shout"][0], MelleaTool)  # a plain function was wrapped
    assert init.tool_map[MELLEA_FINALIZER_TOOL] is init.finalizer


def test_callers_tool_list_is_not_changed():
    tools = [calculator]
    ReactInitiator("g", tools)
    assert tools == [calculator]


def test_a_user_final_answer_tool_and_duplicate_names_are_errors():
    def final_answer(answer: str) -> str:
        """Mine."""
        return answer

    with pytest.raises(ToolError, match="reserved"):
        ReactInitiator("g", [final_answer])
    with pytest.raises(ToolError, match="Two tools are named 'calculator'"):
        ReactInitiator("g", [calculator, MelleaTool.from_callable(shout, "calculator")])
    with pytest.raises(ToolError, match="cannot be run"):
        ReactInitiator("g", [calculator.as_json_tool])
    with pytest.raises(ValueError, match="non-empty"):
        ReactInitiator("  ", [])


def test_thought_is_a_user_turn_without_tools():
    thought = ReactThought()
    [msg] = to_chat_messages([thought])
    assert msg.role == "user" and MELLEA_FINALIZER_TOOL in msg.content
    assert collect_tools(None, [], thought) == {}
    assert to_chat_messages([ReactThought("Custom.")])[0].content == "Custom."


def test_pin_react_initiator():
    init = ReactInitiator("g")
    sys = Message("system", "s")
    assert pin_react_initiator([sys, init, CBlock("x"), ReactInitiator("h")]) == 2
    assert pin_react_initiator([sys, CBlock("x")]) == 0
    assert pin_react_initiator([]) == 0
