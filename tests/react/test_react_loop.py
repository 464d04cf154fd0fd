"""The ReACT loop's rules, driven by a scripted backend (no model)."""

from __future__ import annotations

import asyncio
import itertools

import pydantic
import pytest
from scripted import call, final, scripted, turn

from mellea_local.core.compactor import WindowCompactor
from mellea_local.core.context import ChatContext, SimpleContext
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.errors import ToolError
from mellea_local.messages import Message, ToolMessage
from mellea_local.options import ModelOption
from mellea_local.react import (
    MELLEA_FINALIZER_TOOL,
    ReactInitiator,
    ReactThought,
    pin_react_initiator,
    react,
)
from mellea_local.react.components import FORMAT_PROMPT
from mellea_local.rendering import to_chat_messages
from mellea_local.rendering.chat import to_message_dicts
from mellea_local.tools import MelleaTool, calculator, lookup_tool


def roles(entries) -> list[str]:
    return [m.role for m in to_chat_messages(entries)]


def assert_no_two_user_turns_in_a_row(entries) -> None:
    r = roles(entries)
    assert not any(a == b == "user" for a, b in itertools.pairwise(r)), r


async def test_think_act_observe_until_final_answer():
    calc = call("calculator", expression="3 * (4 + 5)")
    backend = scripted(
        turn(calc, text="Let me compute.", thinking="I need arithmetic."),
        final("27", text="Done."),
    )
    tools = [calculator]
    out, ctx = await react("What is 3 * (4 + 5)?", ChatContext(), backend, tools=tools)

    assert out.value == "27"  # the final answer ...
    assert out.parsed_repr == "Done."  # ... while the parse keeps the model's own text
    entries = ctx.as_list()
    kinds = [type(e).__name__ for e in entries]
    assert kinds == ["ReactInitiator", "ComputedModelOutputThunk", "ToolMessage",
                     "ReactThought", "ComputedModelOutputThunk", "ToolMessage"]
    observation = entries[2]
    assert observation.content == "27" and observation.tool_output == 27
    assert observation.tool_call_id == calc.tool_call_id and observation.name == "calculator"
    assert entries[-1].content == "27" and entries[-1].name == MELLEA_FINALIZER_TOOL
    assert out is entries[-2]

    first, second = backend.generate_calls
    assert isinstance(first.action, ReactInitiator) and first.tool_calls
    assert isinstance(second.action, ReactThought) and second.tool_calls
    assert tools == [calculator]


async def test_no_two_consecutive_user_turns_in_any_prompt():
    backend = scripted(
        turn(call("calculator", expression="1 + 1")),
        turn(text="no tool this time"),
        turn(call("calculator", expression="2 + 2"), call("calculator", expression="3 + 3")),
        final("4"),
    )
    ctx0 = ChatContext().add(Message("system", "Be exact."))
    _, ctx = await react("goal", ctx0, backend, tools=[calculator])
    for c in backend.generate_calls:
        assert_no_two_user_turns_in_a_row([*c.ctx.as_list(), c.action])
    assert_no_two_user_turns_in_a_row(ctx.as_list())
    assert roles(ctx.as_list()) == [
        "system", "user", "assistant", "tool", "user", "assistant", "user", "assistant",
        "tool", "tool", "user", "assistant", "tool"]


async def test_a_context_ending_with_a_user_turn_is_refused():
    ctx = ChatContext().add(Message("user", "Hi"))
    with pytest.raises(ValueError, match="two user turns in a row"):
        await react("goal", ctx, scripted(), tools=[])


async def test_only_a_chat_context_is_accepted():
    with pytest.raises(TypeError, match="ChatContext"):
        await react("goal", SimpleContext(), scripted(), tools=[])  # type: ignore[arg-type]


async def test_tool_calls_run_in_order_and_each_result_is_linked_to_its_call():
    log: list[str] = []

    def note(text: str) -> str:
        """Write a note."""
        log.append(text)
        return f"noted {text}"

    calls = [call("note", text="a"), call("note", text="b"), call("note", text="c")]
    backend = scripted(turn(*calls), final("ok"))
    _, ctx = await react("goal", ChatContext(), backend, tools=[note])
    observations = [e for e in ctx.as_list() if isinstance(e, ToolMessage)][:3]
    assert log == ["a", "b", "c"]
    assert [o.content for o in observations] == ["noted a", "noted b", "noted c"]
    assert [o.tool_call_id for o in observations] == [c.tool_call_id for c in calls]
    dicts = to_message_dicts(to_chat_messages(ctx.as_list()))
    assert [d.get("tool_call_id") for d in dicts if d["role"] == "tool"][:3] == [
        c.tool_call_id for c in calls]


async def test_model_mistakes_become_observations_and_the_loop_goes_on():
    ran: list[str] = []

    def fragile(n: int) -> int:
        """Fail on zero."""
        ran.append(str(n))
        return 10 // n

    async def async_echo(text: str) -> str:
        """Echo, asynchronously."""
        await asyncio.sleep(0)
        return text

    backend = scripted(
        turn(call("nope", x=1)),                                  # unknown tool
        turn(call("fragile", n="3")),                             # invalid argument type
        turn(call("fragile", n=0)),                               # the tool raises
        turn(call("calculator", error="arguments.expression: expected string")),  # parser error
        turn(call("async_echo", text="hi"), call("fragile", n=5)),
        turn(call("fragile", n=1, self=2)),                      # a name that clashes with run()
        final("done"),
    )
    out, ctx = await react("goal", ChatContext(), backend, tools=[fragile, async_echo])
    obs = [e.content for e in ctx.as_list() if isinstance(e, ToolMessage)]
    assert obs[0] == ("Error: there is no tool named 'nope'. Available tools: fragile, "
                      "async_echo, final_answer.")
    assert obs[1].startswith("Invalid arguments for tool 'fragile': n: Input should be a "
                             "valid integer")
    assert obs[2] == "Error: tool 'fragile' failed: ZeroDivisionError: integer division or " \
                     "modulo by zero"
    assert obs[3] == "Error: arguments.expression: expected string"
    assert obs[4:6] == ["hi", "2"]
    assert "self: unexpected argument" in obs[6]
    assert ran == ["0", "5"]  # the invalid "3" never reached the function
    assert out.value == "done"


async def test_arguments_that_are_not_an_object_are_reported():
    bad = ModelToolCall("calculator", None, ["1 + 1"], tool_call_id="c1")  # type: ignore[arg-type]
    backend = scripted(turn(bad), final("2"))
    _, ctx = await react("goal", ChatContext(), backend, tools=[calculator])
    obs = next(e for e in ctx.as_list() if isinstance(e, ToolMessage))
    assert obs.content.startswith("Error: the arguments of 'calculator' must be a JSON object")


async def test_final_answer_mixed_with_other_calls_asks_for_it_alone():
    backend = scripted(
        turn(call("calculator", expression="2 + 2"), call("final_answer", answer="4")),
        final("4"),
    )
    out, ctx = await react("goal", ChatContext(), backend, tools=[calculator])
    obs = [e for e in ctx.as_list() if isinstance(e, ToolMessage)]
    assert obs[0].content == "4"  # the other call ran
    assert obs[1].name == MELLEA_FINALIZER_TOOL and "alone" in obs[1].content
    assert len(backend.generate_calls) == 2 and out.value == "4"


async def test_final_answer_with_invalid_arguments_does_not_end_the_loop():
    backend = scripted(final(42), turn(call("final_answer")), final("42"))
    out, ctx = await react("goal", ChatContext(), backend, tools=[])
    obs = [e.content for e in ctx.as_list() if isinstance(e, ToolMessage)]
    assert "answer: Input should be a valid string" in obs[0]
    assert "answer: missing required argument" in obs[1]
    assert out.value == "42" and len(backend.generate_calls) == 3


async def test_budget_spent_raises_runtime_error():
    backend = scripted(turn(call("calculator", expression="1 + 1")), turn(text="hmm"))
    with pytest.raises(RuntimeError, match="could not complete react loop in 2 iterations"):
        await react("goal", ChatContext(), backend, tools=[calculator], loop_budget=2)
    assert len(backend.generate_calls) == 2


async def test_budget_zero_raises_at_once_and_bad_budgets_are_refused():
    backend = scripted()
    with pytest.raises(RuntimeError, match="0 iterations"):
        await react("goal", ChatContext(), backend, tools=[], loop_budget=0)
    assert backend.generate_calls == []
    for bad in (-2, True, 1.5):
        with pytest.raises(ValueError, match="loop_budget"):
            await react("goal", ChatContext(), backend, tools=[], loop_budget=bad)


async def test_budget_minus_one_is_unlimited():
    backend = scripted(*[turn(text=f"step {i}") for i in range(25)], final("x"))
    out, _ = await react("goal", ChatContext(), backend, tools=[], loop_budget=-1)
    assert out.value == "x" and len(backend.generate_calls) == 26


async def test_user_tool_named_final_answer_is_an_error():
    def final_answer(answer: str) -> str:
        """Mine."""
        return answer

    with pytest.raises(ToolError, match="reserved"):
        await react("goal", ChatContext(), scripted(), tools=[final_answer])


async def test_option_tools_join_and_no_caller_object_is_changed():
    kv = lookup_tool({"k": "v"})
    tools = [calculator]
    opts = {ModelOption.TOOLS: [kv], ModelOption.MAX_NEW_TOKENS: 50, "temperature": 0.0}
    backend = scripted(turn(call("lookup", key="k")), final("v"))
    _, ctx = await react("goal", ChatContext(), backend, tools=tools, model_options=opts)
    assert tools == [calculator]
    assert opts == {ModelOption.TOOLS: [kv], ModelOption.MAX_NEW_TOKENS: 50, "temperature": 0.0}
    assert next(e.content for e in ctx.as_list() if isinstance(e, ToolMessage)) == "v"
    for c in backend.generate_calls:
        # Offered once, through the initiator; every other option reaches every turn.
        assert c.model_options == {ModelOption.MAX_NEW_TOKENS: 50, "temperature": 0.0}
    init = ctx.as_list()[0]
    assert list(init.tool_map) == ["calculator", "lookup", MELLEA_FINALIZER_TOOL]


async def test_thinking_stays_in_the_history_the_next_turn_sees():
    backend = scripted(
        turn(call("calculator", expression="6 * 7"), thinking="Multiply first."),
        final("42", thinking="The tool said 42."),
    )
    _, ctx = await react("goal", ChatContext(), backend, tools=[calculator])
    seen = backend.generate_calls[1].ctx.as_list()
    dicts = to_message_dicts(to_chat_messages(seen))
    assert dicts[1]["role"] == "assistant"
    assert dicts[1]["reasoning_content"] == "Multiply first."
    assert dicts[1]["tool_calls"][0]["function"] == {
        "name": "calculator", "arguments": {"expression": "6 * 7"}}
    final_dicts = to_message_dicts(to_chat_messages(ctx.as_list()))
    assert final_dicts[-2]["reasoning_content"] == "The tool said 42."


class Answer(pydantic.BaseModel):
    value: int


async def test_format_adds_one_constrained_generation_without_tools():
    backend = scripted(final("42"), '{"value": 42}')
    out, ctx = await react("goal", ChatContext(), backend, tools=[], format=Answer)
    last = backend.generate_calls[-1]
    assert last.format is Answer and last.tool_calls is False
    assert isinstance(last.action, ReactThought) and last.action.prompt == FORMAT_PROMPT
    assert out.value == '{"value": 42}' and ctx.as_list()[-1] is out
    assert Answer.model_validate_json(out.value) == Answer(value=42)
    assert_no_two_user_turns_in_a_row(ctx.as_list())


class Recording:
    def __init__(self, inner=None):
        self.seen: list[list] = []
        self.inner = inner

    def compact(self, ctx):
        self.seen.append(ctx.as_list())
        return self.inner.compact(ctx) if self.inner else ctx


async def test_compactor_runs_once_per_turn_after_the_observations():
    comp = Recording()
    backend = scripted(turn(call("calculator", expression="1 + 1")), turn(text="x"), final("2"))
    await react("goal", ChatContext(), backend, tools=[calculator], compactor=comp)
    assert len(comp.seen) == 2  # not after the final turn
    assert isinstance(comp.seen[0][-1], ToolMessage)
    assert len(comp.seen[1]) == len(comp.seen[0]) + 2  # thought + answer, no observation


async def test_compacted_context_is_what_the_next_turn_sees():
    comp = Recording(WindowCompactor(2, pin_predicate=pin_react_initiator))
    backend = scripted(*[turn(call("calculator", expression=f"{i} + 1")) for i in range(4)],
                       final("ok"))
    await react("goal", ChatContext(), backend, tools=[calculator], compactor=comp)
    last_seen = backend.generate_calls[-1].ctx.as_list()
    assert isinstance(last_seen[0], ReactInitiator)
    assert len(last_seen) == 3  # the pinned initiator + a window of 2


async def test_a_compactor_must_return_a_chat_context_and_keep_the_initiator():
    class ToSimple:
        def compact(self, ctx):
            return SimpleContext().with_history(ctx.as_list())

    class DropAll:
        def compact(self, ctx):
            return ctx.with_history(ctx.as_list()[1:])

    class EndOnUser:
        def compact(self, ctx):
            return ctx.with_history(ctx.as_list()[:1])

    for comp, err, match in ((ToSimple(), TypeError, "must return a ChatContext"),
                             (DropAll(), ValueError, "pin_react_initiator"),
                             (EndOnUser(), ValueError, "two consecutive user turns")):
        backend = scripted(turn(call("calculator", expression="1 + 1")), final("2"))
        with pytest.raises(err, match=match):
            await react("goal", ChatContext(), backend, tools=[calculator], compactor=comp)
    with pytest.raises(TypeError, match="compact"):
        await react("goal", ChatContext(), scripted(), tools=[], compactor=object())


async def test_repeated_calls_of_one_tool_all_run():
    backend = scripted(
        turn(call("calculator", expression="1 + 1"), call("calculator", expression="2 + 2")),
        final("ok"),
    )
    _, ctx = await react("goal", ChatContext(), backend, tools=[calculator])
    assert [e.content for e in ctx.as_list() if isinstance(e, ToolMessage)] == ["2", "4", "ok"]


async def test_a_bound_tool_the_loop_does_not_know_still_runs():
    """A tool offered by an earlier component in the context is bound by the backend."""
    def legacy(x: int) -> int:
        """Old tool."""
        return x + 1

    bound = MelleaTool.from_callable(legacy)
    backend = scripted(turn(call("legacy", func=bound, x=1)), final("2"))
    _, ctx = await react("goal", ChatContext(), backend, tools=[])
    assert next(e.content for e in ctx.as_list() if isinstance(e, ToolMessage)) == "2"


async def test_a_hand_written_tool_runs_through_its_own_run():
    from mellea_local.tools import AbstractMelleaTool

    class Echo(AbstractMelleaTool):
        name = "echo"

        @property
        def as_json_tool(self):
            return {"type": "function", "function": {
                "name": "echo", "description": "Echo.",
                "parameters": {"type": "object", "properties": {"s": {"type": "string"}}}}}

        def run(self, /, **kwargs):
            return kwargs["s"] * 2

    backend = scripted(turn(call("echo", s="ab")), final("abab"))
    _, ctx = await react("goal", ChatContext(), backend, tools=[Echo()])
    assert next(e.content for e in ctx.as_list() if isinstance(e, ToolMessage)) == "abab"
    offered = backend.generate_calls[0].action.format_for_llm().tools
    assert list(offered) == ["echo", MELLEA_FINALIZER_TOOL]
