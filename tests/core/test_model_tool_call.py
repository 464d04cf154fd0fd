"""ModelToolCall: running the bound tool and its chat shape."""

from __future__ import annotations

import pytest

from mellea_local.core.tool_call import ModelToolCall
from mellea_local.errors import ToolError


def add(a: int, b: int) -> int:
    return a + b


async def slow_add(a: int, b: int) -> int:
    return a + b


class Wrapper:
    def run(self, **kwargs):
        return ("ran", kwargs)


def test_call_func_runs_plain_callables_and_run_objects():
    assert ModelToolCall("add", add, {"a": 2, "b": 3}).call_func() == 5
    assert ModelToolCall("w", Wrapper(), {"k": 1}).call_func() == ("ran", {"k": 1})


async def test_async_tools_need_acall_func():
    call = ModelToolCall("slow_add", slow_add, {"a": 1, "b": 1})
    with pytest.raises(ToolError, match="acall_func"):
        call.call_func()
    assert await call.acall_func() == 2
    assert await ModelToolCall("add", add, {"a": 1, "b": 2}).acall_func() == 3


def test_a_call_carrying_an_error_refuses_to_run():
    call = ModelToolCall("nope", None, {"x": 1}, "c9", error="unknown tool 'nope'")
    with pytest.raises(ToolError, match="unknown tool"):
        call.call_func()
    with pytest.raises(ToolError, match="no callable"):
        ModelToolCall("x", 42, {}).call_func()


def test_chat_dict_shape_copies_arguments():
    call = ModelToolCall("add", add, {"a": 1, "b": 2}, tool_call_id="call_0")
    shaped = call.as_chat_dict()
    assert shaped == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "add", "arguments": {"a": 1, "b": 2}},
    }
    shaped["function"]["arguments"]["a"] = 99
    assert call.args["a"] == 1
