"""LLMSummarizeCompactor: summaries through the backend, valid chats, pinned goal."""

from __future__ import annotations

import itertools
import logging

import pytest
from doubles import ScriptedBackend
from scripted import call, final, scripted, turn

from mellea_local.core.backend import Backend
from mellea_local.core.compactor import pin_system
from mellea_local.core.context import ChatContext, SimpleContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.messages import Message, ToolMessage
from mellea_local.react import (
    DEFAULT_SUMMARY_PROMPT,
    LLMSummarizeCompactor,
    ReactInitiator,
    ReactThought,
    react,
    react_summary_prompt,
)
from mellea_local.rendering import to_chat_messages
from mellea_local.tools import calculator


def react_history(turns: int) -> tuple[ChatContext, ReactInitiator]:
    """[initiator, (answer, tool, thought) x turns-1, answer, tool] with real objects."""
    init = ReactInitiator("Compute things.", [calculator])
    ctx = ChatContext().add(init)
    for i in range(turns):
        if i:
            ctx = ctx.add(ReactThought())
        c = call("calculator", expression=f"{i} + 1")
        ctx = ctx.add(ModelOutputThunk(f"step {i}", tool_calls=[c]))
        ctx = ctx.add(ToolMessage("tool", str(i + 1), i + 1, "calculator", c.args, c))
    return ctx, init


def roles(ctx) -> list[str]:
    return [m.role for m in to_chat_messages(ctx.as_list())]


def test_short_history_is_returned_as_is_without_a_model_call():
    backend = scripted()
    ctx, _ = react_history(2)  # body of 5 entries
    assert LLMSummarizeCompactor(backend, keep_n=5).compact(ctx) is ctx
    assert backend.generate_calls == []


def test_older_turns_become_one_summary_between_the_goal_and_a_thought():
    backend = scripted("They computed 0+1=1 and 1+1=2.")
    ctx, init = react_history(4)
    out = LLMSummarizeCompactor(backend, keep_n=3).compact(ctx)

    entries = out.as_list()
    assert entries[0] is init
    summary = entries[1]
    assert isinstance(summary, Message) and summary.role == "assistant"
    assert summary.content == "[CONTEXT SUMMARY]\nThey computed 0+1=1 and 1+1=2."
    assert isinstance(entries[2], ReactThought)
    assert entries[2:] == ctx.as_list()[-3:]
    assert roles(out) == ["user", "assistant", "user", "assistant", "tool"]

    [gen] = backend.generate_calls
    assert isinstance(gen.ctx, SimpleContext)  # the summary sees only its own prompt
    prompt = gen.action.content
    assert prompt.startswith(DEFAULT_SUMMARY_PROMPT.split("{conversation}")[0])
    transcript = prompt.split("Conversation:\n", 1)[1]
    lines = transcript.split("\n")
    assert lines[0] == "assistant: step 0"
    assert lines[1] == "assistant called tools: calculator({'expression': '0 + 1'})"
    assert lines[2] == "tool (calculator): 1"
    assert lines[3].startswith("user: Think about what to do next")
    assert "Compute things." not in transcript  # the pinned goal is not summarised


def test_keep_n_zero_summarises_the_whole_body():
    backend = scripted("All done so far.")
    ctx, init = react_history(2)
    out = LLMSummarizeCompactor(backend, keep_n=0).compact(ctx)
    assert out.as_list()[0] is init and len(out.as_list()) == 2
    assert roles(out) == ["user", "assistant"]


def test_a_plain_chat_keeps_alternating_roles():
    backend = scripted("Summary.")
    ctx = ChatContext().add(Message("system", "sys"))
    for u, a in itertools.islice(zip(itertools.count(), itertools.count(100)), 4):
        ctx = ctx.add(Message("user", f"q{u}")).add(Message("assistant", f"a{a}"))
    out = LLMSummarizeCompactor(backend, keep_n=2, pin_predicate=pin_system).compact(ctx)
    # The summary is a user turn after the system prompt; the kept part opens with an answer.
    assert roles(out) == ["system", "user", "assistant", "user", "assistant"]
    assert [m.content for m in out.as_list()[-3:]] == ["a102", "q3", "a103"]


async def test_works_inside_a_running_event_loop():
    backend = scripted("Summary from a thread.")
    ctx, _ = react_history(4)
    out = LLMSummarizeCompactor(backend, keep_n=3).compact(ctx)  # sync call, loop running
    assert out.as_list()[1].content.endswith("Summary from a thread.")


class Failing(Backend):
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def generate_from_context(self, action, ctx, **kw):
        raise self.exc


def test_backend_failures_keep_the_context_and_warn(caplog):
    ctx, _ = react_history(4)
    with caplog.at_level(logging.WARNING):
        assert LLMSummarizeCompactor(Failing(RuntimeError("down")), keep_n=3).compact(ctx) is ctx
    assert "summarisation backend call failed" in caplog.text and "RuntimeError" in caplog.text
    empty = scripted("   ")
    assert LLMSummarizeCompactor(empty, keep_n=3).compact(ctx) is ctx


def test_programming_errors_propagate():
    ctx, _ = react_history(4)
    with pytest.raises(TypeError):
        LLMSummarizeCompactor(Failing(TypeError("bug")), keep_n=3).compact(ctx)
    with pytest.raises(ValueError, match="Pin predicate"):
        LLMSummarizeCompactor(scripted(), pin_predicate=lambda s: 99).compact(ctx)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="keep_n"):
        LLMSummarizeCompactor(scripted(), keep_n=-1)
    with pytest.raises(ValueError, match="conversation"):
        LLMSummarizeCompactor(scripted(), prompt_template="Summarise.")
    with pytest.raises(TypeError, match="default_backend is None"):
        LLMSummarizeCompactor(None)  # type: ignore[arg-type]


def test_custom_template_is_a_format_template_with_doubled_literal_braces():
    backend = scripted("S.")
    ctx, _ = react_history(4)
    LLMSummarizeCompactor(backend, keep_n=3,
                          prompt_template='JSON {{"a": 1}}\n{conversation}').compact(ctx)
    assert backend.generate_calls[0].action.content.startswith('JSON {"a": 1}\nassistant: ')
    with pytest.raises(ValueError, match="doubled"):
        LLMSummarizeCompactor(backend, prompt_template='JSON {"a": 1}\n{conversation}')


def test_histories_without_a_turn_boundary_are_cut_at_keep_n_and_backend_can_be_overridden():
    default, other = scripted("unused"), scripted("Earlier: m0 to m3.")
    ctx = ChatContext()
    for i in range(6):
        ctx = ctx.add(Message("user", f"m{i}"))
    out = LLMSummarizeCompactor(default, keep_n=2).compact(ctx, backend=other)
    assert [m.content for m in out.as_list()] == [
        "[CONTEXT SUMMARY]\nEarlier: m0 to m3.", "m4", "m5"]
    assert not default.generate_calls and len(other.generate_calls) == 1
    with pytest.raises(AttributeError):  # not a backend: a programming error, propagated
        LLMSummarizeCompactor(default).compact(ctx, backend="hf")  # type: ignore[arg-type]


def test_react_summary_prompt():
    plain = react_summary_prompt()
    assert "GOAL:" not in plain and "Be at most" not in plain
    assert plain.endswith("Context to summarize:\n{conversation}")
    assert react_summary_prompt("g") == react_summary_prompt("g", max_tokens_hint=None)
    LLMSummarizeCompactor(scripted(), prompt_template=react_summary_prompt("a {b}", 50))
    prompt = react_summary_prompt("Find {x}", max_tokens_hint=100)
    assert "GOAL: Find {{x}}" in prompt and "~100 tokens (roughly 75 words)" in prompt
    assert prompt.endswith("{conversation}")
    assert "GOAL: Find {x}" in prompt.format(conversation="")


async def test_inside_react_the_goal_and_tools_survive_and_the_chat_stays_valid():
    replies = [
        turn(call("calculator", expression="1 + 1")),
        turn(call("calculator", expression="2 + 2")),
        "Computed 1+1=2.",  # the summary, written after turn 2
        final("4"),
    ]
    backend = ScriptedBackend.scripted(replies)
    comp = LLMSummarizeCompactor(backend, keep_n=3)
    out, _ = await react("goal", ChatContext(), backend, tools=[calculator], compactor=comp)
    assert out.value == "4"
    seen = backend.generate_calls[-1].ctx.as_list()
    assert isinstance(seen[0], ReactInitiator)
    assert seen[1].content == "[CONTEXT SUMMARY]\nComputed 1+1=2."
    assert [m.role for m in to_chat_messages(seen)] == [
        "user", "assistant", "user", "assistant", "tool"]
