"""ModelOutputThunk: the producer/consumer contract backends and callers rely on."""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mellea_local.core.blocks import CBlock
from mellea_local.core.component import Component, TemplateRepresentation
from mellea_local.core.generation import GenerateLog
from mellea_local.core.thunk import ComputedModelOutputThunk, ModelOutputThunk
from mellea_local.core.tool_call import ModelToolCall
from mellea_local.errors import ComponentParseError, ThunkStateError


class Upper(Component[str]):
    """A component whose parse is observable: the upper-cased value."""

    def __init__(self) -> None:
        self.seen_computed: bool | None = None

    def parts(self):
        return []

    def format_for_llm(self):
        return TemplateRepresentation(obj=self)

    def _parse(self, computed):
        self.seen_computed = computed.is_computed()
        return (computed.value or "").upper()


class Broken(Upper):
    def _parse(self, computed):
        raise KeyError("no field")


def feed_from_thread(mot: ModelOutputThunk, chunks: list[str], *, error: Exception | None = None):
    def run() -> None:
        for chunk in chunks:
            mot._push_delta(chunk)
        if error is not None:
            mot._push_error(error)
        else:
            mot._push_done()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_built_with_a_value_is_computed_and_without_is_not():
    assert ModelOutputThunk("hi").is_computed()
    assert ModelOutputThunk("hi").value == "hi"
    pending = ModelOutputThunk(None)
    assert not pending.is_computed()
    assert pending.value is None
    assert str(pending) == ""


def test_non_string_value_is_rejected():
    with pytest.raises(TypeError, match="parsed_repr"):
        ModelOutputThunk(42)  # type: ignore[arg-type]
    mot = ModelOutputThunk("a")
    with pytest.raises(TypeError):
        mot.value = b"bytes"  # type: ignore[assignment]


async def test_stream_from_worker_thread_joins_deltas_and_parses_with_component():
    action = Upper()
    mot = ModelOutputThunk(None)
    mot._start_generation(action=action)
    feed_from_thread(mot, ["hel", "lo ", "world"]).join()
    pieces = []
    while not mot.is_computed():
        pieces.append(await mot.astream())
    assert "".join(pieces) == "hello world"
    assert mot.value == "hello world"
    assert mot.parsed_repr == "HELLO WORLD"
    assert action.seen_computed is True  # parse runs after the thunk is marked computed
    assert mot.action is action


async def test_astream_returns_only_new_text_and_raises_once_computed():
    mot = ModelOutputThunk(None)
    mot._start_generation(action=CBlock("q"))
    mot._push_delta("ab")
    assert await mot.astream() == "ab"
    mot._push_delta("cd")
    assert await mot.astream() == "cd"
    mot._push_done()
    assert await mot.astream() == ""
    assert mot.value == "abcd"
    assert mot.parsed_repr == "abcd"  # a CBlock action parses to the value
    with pytest.raises(RuntimeError, match="already computed"):
        await mot.astream()


async def test_astream_waits_for_output_instead_of_returning_empty():
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None)
    task = asyncio.create_task(mot.astream())
    await asyncio.sleep(0.01)
    assert not task.done()
    mot._push_delta("late")
    assert await asyncio.wait_for(task, 2) == "late"
    mot._push_done()
    assert await mot.avalue() == "late"


async def test_post_process_runs_before_computed_and_may_rewrite_fields():
    observed: dict[str, object] = {}
    calls = [ModelToolCall("x", lambda: 1, {}, "call-1")]

    def post(mot: ModelOutputThunk) -> None:
        observed["value"] = mot.value
        observed["computed"] = mot.is_computed()
        mot.value = "answer"
        mot.thinking = "thought"
        mot.tool_calls = calls
        mot.usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        mot.finish_reason = "tool_calls"

    action = Upper()
    mot = ModelOutputThunk(None)
    mot._start_generation(action=action, post_process=post)
    feed_from_thread(mot, ["<think>thought</think>", "answer"]).join()
    assert await mot.avalue() == "answer"
    assert observed == {"value": "<think>thought</think>answer", "computed": False}
    assert (mot.thinking, mot.tool_calls, mot.finish_reason) == ("thought", calls, "tool_calls")
    assert mot.usage["total_tokens"] == 5
    assert mot.parsed_repr == "ANSWER"  # parsed from the rewritten value


async def test_async_post_process_is_awaited_and_its_parse_wins():
    async def post(mot: ModelOutputThunk) -> None:
        await asyncio.sleep(0)
        mot.parsed_repr = {"validated": mot.value}

    mot = ModelOutputThunk(None)
    mot._start_generation(action=Upper(), post_process=post)
    mot._push_delta("{}")
    mot._push_done()
    await mot.avalue()
    assert mot.parsed_repr == {"validated": "{}"}


async def test_parse_failure_is_wrapped_and_sticks():
    mot = ModelOutputThunk(None)
    mot._start_generation(action=Broken())
    mot._push_delta("x")
    mot._push_done()
    with pytest.raises(ComponentParseError, match=r"Broken\._parse") as info:
        await mot.avalue()
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(ComponentParseError):
        await mot.avalue()
    with pytest.raises(ValueError, match="ended with an error"):
        ComputedModelOutputThunk(mot)


async def test_pushed_error_is_reraised_and_later_pushes_are_ignored():
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None)
    boom = OSError("device lost")
    feed_from_thread(mot, ["par"], error=boom).join()
    with pytest.raises(OSError) as info:
        await mot.avalue()
    assert info.value is boom
    assert mot.error is boom
    mot._push_delta("more")  # a worker still running must not crash or revive the thunk
    mot._push_done()
    with pytest.raises(OSError):
        await mot.astream()
    assert not mot.is_computed()


async def test_cancel_calls_hook_marks_computed_and_wakes_waiting_consumer():
    stopped = threading.Event()
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None, cancel_hook=stopped.set)
    waiter = asyncio.create_task(mot.avalue())
    await asyncio.sleep(0.01)
    await mot.cancel_generation()  # awaiting works, and so does a plain call
    assert stopped.is_set()
    assert await asyncio.wait_for(waiter, 2) == ""
    assert mot.is_computed() and mot.cancelled and mot.value == ""
    mot._push_delta("too late")  # the worker may still push after the hook
    mot.cancel_generation()  # idempotent
    assert mot.value == ""


async def test_context_manager_cancels_unfinished_generation():
    hook_calls = []
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None, cancel_hook=lambda: hook_calls.append(1))
    async with mot:
        pass
    assert hook_calls == [1] and mot.cancelled


async def test_async_iteration_is_single_consumer():
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None)
    feed_from_thread(mot, ["a", "b", "c"])
    iterator = mot.__aiter__()
    with pytest.raises(RuntimeError, match="one place"):
        mot.__aiter__()
    text = "".join([d async for d in iterator])
    assert text == mot.value == "abc"
    # A finished thunk has nothing left to stream: iterating it yields nothing.
    assert [d async for d in mot] == []


async def test_generation_misuse_raises():
    with pytest.raises(RuntimeError, match="No generation"):
        await ModelOutputThunk(None).astream()
    with pytest.raises(RuntimeError, match="_start_generation"):
        ModelOutputThunk(None)._push_delta("x")
    with pytest.raises(RuntimeError, match="already computed"):
        ModelOutputThunk("done")._start_generation(action=None)
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None)
    with pytest.raises(RuntimeError, match="already running"):
        mot._start_generation(action=None)
    with pytest.raises(TypeError):
        mot._push_delta(b"bytes")  # type: ignore[arg-type]


def test_start_generation_needs_a_running_loop():
    with pytest.raises(RuntimeError):
        ModelOutputThunk(None)._start_generation(action=None)


async def test_copy_of_uncomputed_thunk_raises():
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None)
    with pytest.raises(RuntimeError, match="uncomputed"):
        copy.copy(mot)
    with pytest.raises(RuntimeError, match="uncomputed"):
        copy.deepcopy(mot)


def test_copies_of_computed_thunk_are_independent_and_repoint_self_parse():
    mot = ModelOutputThunk("v", meta={"k": [1]}, thinking="t")
    mot.parsed_repr = mot
    shallow = copy.copy(mot)
    deep = copy.deepcopy(mot)
    for dup in (shallow, deep):
        assert dup is not mot and dup.value == "v" and dup.thinking == "t"
        assert dup.parsed_repr is dup
        dup.value = "changed"
    assert mot.value == "v"
    deep.meta["k"].append(2)
    assert mot.meta["k"] == [1]


def test_computed_thunk_reclasses_in_place_and_guards_its_state():
    mot = ModelOutputThunk("final")
    same = ComputedModelOutputThunk(mot)
    assert same is mot and type(mot) is ComputedModelOutputThunk
    same.value = "replaced"  # the agent loop swaps the answer text
    same.parsed_repr = "anything"
    for name, bad in (("value", None), ("value", 3), ("_underlying_value", None),
                      ("_computed", False)):
        with pytest.raises(ThunkStateError, match="computed invariant"):
            setattr(same, name, bad)
    assert same.value == "replaced" and same.is_computed()
    dup = copy.copy(same)
    assert type(dup) is ComputedModelOutputThunk


def test_computed_wrapper_rejects_unfinished_or_foreign_objects():
    with pytest.raises(ValueError, match="avalue"):
        ComputedModelOutputThunk(ModelOutputThunk(None))
    with pytest.raises(TypeError):
        ComputedModelOutputThunk("text")  # type: ignore[arg-type]


async def test_computed_thunk_cannot_stream():
    with pytest.raises(RuntimeError, match="finished"):
        await ComputedModelOutputThunk(ModelOutputThunk("x")).astream()


def test_loop_closed_before_producer_finishes_does_not_crash_producer():
    async def start() -> ModelOutputThunk:
        mot = ModelOutputThunk(None)
        mot._start_generation(action=None)
        return mot

    mot = asyncio.run(start())  # asyncio.run closes the loop on return
    mot._push_delta("orphan")
    mot._push_done()
    assert not mot.is_computed()


@given(st.lists(st.text(max_size=8), max_size=12), st.integers(min_value=1, max_value=4))
def test_any_chunking_streams_back_exactly_the_pushed_text(chunks, every):
    async def run() -> tuple[list[str], ModelOutputThunk]:
        mot = ModelOutputThunk(None)
        mot._start_generation(action=None)
        deltas = []
        for i, chunk in enumerate(chunks):
            mot._push_delta(chunk)
            if i % every == 0:
                deltas.append(await mot.astream())
        mot._push_done()
        while not mot.is_computed():
            deltas.append(await mot.astream())
        return deltas, mot

    deltas, mot = asyncio.run(run())
    assert "".join(deltas) == mot.value == "".join(chunks)
    assert mot.parsed_repr == mot.value


def test_tool_calls_are_a_list_in_call_order_and_a_dict_is_refused():
    first, second = ModelToolCall("add", None, {"a": 1}), ModelToolCall("add", None, {"a": 2})
    mot = ModelOutputThunk("", tool_calls=[first, second])
    assert mot.tool_calls == [first, second]
    with pytest.raises(TypeError, match="list of ModelToolCall"):
        mot.tool_calls = {"add": first}  # type: ignore[assignment]
    with pytest.raises(TypeError, match="ModelToolCall"):
        ModelOutputThunk("", tool_calls=["add"])  # type: ignore[list-item]
    assert mot.tool_calls == [first, second]


def test_usage_and_finish_reason_live_in_generation_and_copies_do_not_share_it():
    mot = ModelOutputThunk("v", usage={"total_tokens": 3}, finish_reason="stop")
    assert mot.generation.usage == {"total_tokens": 3}
    assert mot.generation.finish_reasons == ["stop"] and mot.finish_reason == "stop"
    mot.raw.provider = "huggingface"
    dup = copy.copy(mot)
    dup.generation.model = "other"
    dup.raw.provider = "other"
    assert mot.generation.model is None and mot.raw.provider == "huggingface"
    deep = copy.deepcopy(mot)
    assert deep.generation == mot.generation and deep.generation is not mot.generation


def test_copy_from_takes_over_the_output_in_place():
    source = ModelOutputThunk("new", thinking="t", usage={"total_tokens": 1})
    source._generate_log = GenerateLog(is_final_result=True)
    target = ModelOutputThunk("old")
    target._copy_from(source)
    assert (target.value, target.thinking, target.usage) == ("new", "t", {"total_tokens": 1})
    assert target.generate_log is source.generate_log


async def test_streamed_generation_records_time_to_first_token():
    mot = ModelOutputThunk(None)
    mot._start_generation(action=None)
    feed_from_thread(mot, ["a", "b"])
    await mot.avalue()
    assert mot.generation.ttfb_ms is not None and mot.generation.ttfb_ms >= 0
    assert mot.generation.streaming
