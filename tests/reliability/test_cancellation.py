"""Cancelling a generation keeps what streamed, stops the worker and leaves the backend exact.

Before the fix ``cancel_generation()`` set the value to ``""`` whatever had streamed (D14).
"""

from __future__ import annotations

import asyncio

import pytest

from mellea_local.core.context import ChatContext
from mellea_local.core.thunk import ModelOutputThunk
from mellea_local.messages import Message
from mellea_local.options import ModelOption

# min_new_tokens keeps the tiny model writing far past its usual short answers, so a cancel
# after a few deltas lands mid-generation.
LONG = {ModelOption.MAX_NEW_TOKENS: 120, "min_new_tokens": 120, ModelOption.THINKING: True}
PROMPT = "Tell me about Paris."


async def _full(backend) -> str:
    mot, _ = await backend.generate_from_context(Message("user", PROMPT), ChatContext(),
                                                 model_options=LONG)
    await mot.avalue()
    return mot.meta["raw_text"]


async def test_cancel_keeps_the_streamed_text_on_the_real_backend(shared_embedded_backend):
    full = await _full(shared_embedded_backend)
    mot, _ = await shared_embedded_backend.generate_from_context(
        Message("user", PROMPT), ChatContext(), model_options={**LONG, ModelOption.STREAM: True})
    received = []
    while len(received) < 4:
        received.append(await mot.astream())
    await mot.cancel_generation()

    assert mot.cancelled and mot.is_computed()
    read = "".join(received)
    assert read and mot.value.startswith(read)
    # What was kept is exactly what the model wrote so far: a proper prefix of the full text.
    assert full.startswith(mot.value) and len(mot.value) < len(full)
    with pytest.raises(RuntimeError, match="already computed"):
        await mot.astream()
    # The backend is usable at once and the next call is exact (nothing half-cached).
    assert await _full(shared_embedded_backend) == full


async def test_cancel_before_any_delta_leaves_an_empty_value(shared_embedded_backend):
    mot, _ = await shared_embedded_backend.generate_from_context(
        Message("user", PROMPT), ChatContext(), model_options={**LONG, ModelOption.STREAM: True})
    mot.cancel_generation()
    assert mot.value == "" and mot.cancelled
    assert await _full(shared_embedded_backend) == await _full(shared_embedded_backend)


async def test_cancel_keeps_read_and_queued_deltas_in_order():
    stopped = []
    mot: ModelOutputThunk = ModelOutputThunk(None)
    mot._start_generation(action=None, cancel_hook=lambda: stopped.append(True))
    for piece in ("The ", "answer ", "is"):
        mot._push_delta(piece)
    await asyncio.sleep(0)  # the pushes land in the queue
    assert await mot.astream() == "The answer is"
    mot._push_delta(" 4")
    await asyncio.sleep(0)
    mot.cancel_generation()  # " 4" was queued, unread: it streamed, so it is kept
    assert stopped == [True]
    assert mot.value == "The answer is 4"
    mot._push_delta(" and more")  # a worker still pushing after the cancel changes nothing
    await asyncio.sleep(0)
    assert mot.value == "The answer is 4"


async def test_cancel_from_another_thread_keeps_what_was_read():
    mot: ModelOutputThunk = ModelOutputThunk(None)
    mot._start_generation(action=None)
    mot._push_delta("Hello")
    await asyncio.sleep(0)
    assert await mot.astream() == "Hello"
    await asyncio.to_thread(mot.cancel_generation)
    assert mot.value == "Hello" and mot.cancelled
