"""Two servers, eight concurrent conversations: sticky routing keeps every conversation's
reuse, and killing a server mid-run re-prefills its conversations on the other one: every call
completes with the result LocalHFBackend gives, or ends in a typed error; nothing hangs."""

from __future__ import annotations

import asyncio

import pytest
from conftest import needs_server

from mellea_local.core.context import ChatContext
from mellea_local.errors import LlamaServerUnavailableError, MelleaLocalError
from mellea_local.intrinsics import arequirement_check
from mellea_local.messages import Message
from mellea_local.options import ModelOption

pytestmark = needs_server

OPTS = {ModelOption.MAX_NEW_TOKENS: 24}
QUESTIONS = ["What is the capital of France?", "Name a colour.", "What is 2 + 3?",
             "Tell me about the river.", "Name an animal.", "What is the capital of Italy?",
             "Say hello.", "What is 7 * 6?"]
REQUIREMENT = "The answer is short."
HANG_LIMIT = 240.0


async def _conversation(backend, question, *, turns=2, between=None):
    """Generate, check, generate again; the counts of each step from this task."""
    ctx, out = ChatContext(), []
    for turn in range(turns):
        mot, ctx = await backend.generate_from_context(
            Message("user", question if turn == 0 else "And why?"), ctx, model_options=OPTS)
        text = await mot.avalue()
        counts = mot.meta.get("cache_counts")
        score = await arequirement_check(ctx, backend, REQUIREMENT)
        out.append((text, score, counts, backend.last_call
                    if hasattr(backend, "last_call") else None,
                    len(backend.render(None, ctx, add_generation_prompt=False)[0])))
        if between is not None and turn == 0:
            await between()
    return out


@pytest.fixture(scope="module")
def reference(server_binary, shared_embedded_backend):
    async def run():
        return [await _conversation(shared_embedded_backend, q) for q in QUESTIONS]

    return asyncio.run(run())


@pytest.fixture()
def fleet(server_binary, gguf_dir):
    """Eight slots each: a server keeps as many conversations' KV as it has slots, and
    rendezvous hashing may put most of the eight on one server."""
    from mellea_local.backends.llama_server import LlamaServerBackend

    with LlamaServerBackend.launch(gguf_dir, servers=2, threads=1, slots=8,
                                   ctx=2048) as backend:
        yield backend


def _same(mine, ref):
    assert [t for t, *_ in mine] == [t for t, *_ in ref]
    for (_, a, *_), (_, b, *_) in zip(mine, ref, strict=True):
        assert abs(a - b) <= 2e-3


async def test_eight_concurrent_conversations_on_two_servers_keep_their_reuse(fleet,
                                                                              reference):
    results = await asyncio.wait_for(
        asyncio.gather(*(_conversation(fleet, q) for q in QUESTIONS)), HANG_LIMIT)
    for mine, ref in zip(results, reference, strict=True):
        _same(mine, ref)
        for turn, (_, _, gen, check, conv_len) in enumerate(mine):
            assert check.reused_tokens >= conv_len - 2  # the check reused the conversation
            if turn > 0:
                assert gen.reused_tokens > 0  # the second turn reused the first
                assert gen.prefilled_tokens <= gen.reusable_tokens + 1 - gen.reused_tokens + 1
    owners = {s.client.url: {slot.owner for slot in s.slots if slot.owner}
              for s in fleet.fleet.servers}
    assert all(owners.values()), "both servers serve conversations"


async def test_killing_a_server_mid_run_fails_over_with_exact_results(fleet, reference):
    victim = fleet.processes[0]
    started = asyncio.Event()
    gate = asyncio.Event()
    waiting = 0

    async def between():
        nonlocal waiting
        waiting += 1
        if waiting == len(QUESTIONS):
            started.set()
        await gate.wait()

    async def killer():
        await started.wait()
        victim.kill()  # as a crash: SIGKILL
        gate.set()

    async def one(question):
        try:
            return await _conversation(fleet, question, between=between)
        except MelleaLocalError as exc:  # typed errors are allowed, wrong results are not
            return exc

    results, _ = await asyncio.wait_for(asyncio.gather(
        asyncio.gather(*(one(q) for q in QUESTIONS)), killer()), HANG_LIMIT)
    assert not victim.alive()
    completed = 0
    for mine, ref in zip(results, reference, strict=True):
        if isinstance(mine, MelleaLocalError):
            continue
        _same(mine, ref)
        completed += 1
    assert completed == len(QUESTIONS)  # one server is left: every call completes there
    assert sum(s.alive for s in fleet.fleet.servers) == 1

    assert await fleet.ahealth() == {fleet.urls[0]: False, fleet.urls[1]: True}
    fleet.processes[1].kill()
    with pytest.raises(LlamaServerUnavailableError, match="restart them"):
        await asyncio.wait_for(_conversation(fleet, QUESTIONS[0], turns=1), 60)


async def test_killing_a_server_while_requests_are_in_flight(fleet, reference):
    """No gate this time: the server dies while streams and checks are under way on it."""
    victim = fleet.processes[1]

    async def killer():
        while fleet.stats.total.prefilled_tokens < 200:  # some calls have run, others run now
            await asyncio.sleep(0.005)
        victim.kill()

    async def one(question):
        try:
            return await _conversation(fleet, question)
        except MelleaLocalError as exc:
            return exc

    results, _ = await asyncio.wait_for(asyncio.gather(
        asyncio.gather(*(one(q) for q in QUESTIONS)), killer()), HANG_LIMIT)
    assert not victim.alive()
    for mine, ref in zip(results, reference, strict=True):
        assert not isinstance(mine, MelleaLocalError), mine  # the other server took over
        _same(mine, ref)
