"""Cancelling the task that awaits a generation stops the worker and frees the model."""

from __future__ import annotations

import asyncio
import time

import pytest

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model
from mellea_local.messages import Message
from mellea_local.options import ModelOption

LONG = {ModelOption.STREAM: True, ModelOption.MAX_NEW_TOKENS: 3000, "min_new_tokens": 3000}


@pytest.fixture(scope="module")
def backend(tiny_tokenizer):
    return LocalHFBackend.from_loaded(build_model(tiny_tokenizer, seed=4), tiny_tokenizer,
                                      model_id="tiny")


async def _released(backend, within: float = 5.0) -> float:
    """Seconds until the model lock is free (fails past ``within``)."""
    t0 = time.perf_counter()
    while backend.engine.holder.lock.locked() and time.perf_counter() - t0 < within:
        await asyncio.sleep(0.01)
    assert not backend.engine.holder.lock.locked(), "the generation worker still holds the model"
    return time.perf_counter() - t0


async def _usable(backend) -> None:
    again, _ = await backend.generate_from_context(
        Message("user", "Hi"), ChatContext(), model_options={ModelOption.MAX_NEW_TOKENS: 2})
    assert isinstance(await asyncio.wait_for(again.avalue(), 30), str)


async def _long(backend):
    # No special tokens: they stream as no text, and a consumer would wait for the first delta.
    banned = {"bad_words_ids": [[i] for i in backend.tokenizer.all_special_ids]}
    mot, _ = await backend.generate_from_context(Message("user", "Go on"), ChatContext(),
                                                 model_options={**LONG, **banned})
    return mot


async def test_task_cancel_stops_the_worker(backend):
    mot = await _long(backend)
    read: list[str] = []

    async def consume() -> None:
        async for delta in mot:
            read.append(delta)

    task = asyncio.create_task(consume())
    deadline = time.perf_counter() + 10
    while not read and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _released(backend)
    assert mot.cancelled and mot.is_computed()
    # What was streamed stays readable: the read deltas (plus any still queued) are the value.
    assert read and mot.value.startswith("".join(read))
    await _usable(backend)


async def test_wait_for_timeout_stops_the_worker(backend):
    mot = await _long(backend)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(mot.avalue(), 0.3)
    await _released(backend)
    assert mot.cancelled
    await _usable(backend)


async def test_leaving_async_with_stops_the_worker(backend):
    mot = await _long(backend)
    with pytest.raises(KeyError):
        async with mot:
            await mot.astream()
            raise KeyError("the caller gave up")
    await _released(backend)
    assert mot.cancelled
    await _usable(backend)


async def test_a_call_cancelled_while_queued_never_runs(backend):
    def calls() -> int:
        return backend.stats.cache_hits + backend.stats.cache_misses

    before = calls()
    first, second = await _long(backend), await _long(backend)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(second.avalue(), 0.2)  # cancelled while `first` holds the model
    first.cancel_generation()
    await _released(backend)
    await asyncio.sleep(0.3)
    await _released(backend)
    assert calls() - before == 1  # only `first` ran; `second` gave the model straight back
    await _usable(backend)
