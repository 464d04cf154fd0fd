"""Long conversations of long turns on one reused llama-server score as LocalHFBackend does
(issue 34): the checks of a conversation checked at growing prefixes, then a second
conversation on the same server, and a conversation the slot cannot hold refused by type.

The bug these catch: far into a conversation of 60-word turns the embedded checker spreads its
mass, "yes" and "no" fell out of the server's top 256 tokens, and the check read them as
``-inf``: a confident 0.0 where PEFT said 0.56-0.99 (from ~1,080 tokens on). The client now
asks for the whole vocabulary when the top tokens do not decide the categories' mass
(``llama_server.probabilities``).
"""

from __future__ import annotations

import random

import pytest
import torch
from conftest import needs_server

from mellea_local.backends.llama_server import LlamaServerBackend
from mellea_local.backends.llama_server.probabilities import TOLERANCE, decided, dense_logprobs
from mellea_local.core.context import ChatContext
from mellea_local.errors import PromptTooLongError
from mellea_local.intrinsics import arequirement_check
from mellea_local.messages import Message

SCORE_TOLERANCE = 2e-3
TEXT = ("the river runs long and wide through green hills to the sea where boats carry fish "
        "and grain from town to town while people watch the water and talk about weather "
        "markets travel family stories music bread stone bridges old roads")
WORDS = TEXT.split(" ")
REQUIREMENTS = ("The answer talks about the river.", "The answer is polite.")


def _turn(rng: random.Random, words: int = 60) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def _grow(ctx: ChatContext, rng: random.Random) -> ChatContext:
    return ctx.add(Message("user", _turn(rng))).add(Message("assistant", _turn(rng)))


async def _compare_growing(llama, hf, seed: int, max_tokens: int) -> list[tuple[int, float]]:
    """Check one conversation every two long turns until it nears ``max_tokens``; return
    (prompt tokens, |server - PEFT|) per check, asserting each is within tolerance."""
    rng = random.Random(seed)
    ctx, seen = ChatContext(), []
    while True:
        ctx = _grow(_grow(ctx, rng), rng)
        n = len(hf.render(None, ctx, add_generation_prompt=False)[0])
        if n > max_tokens:
            return seen
        for requirement in REQUIREMENTS:
            mine = await arequirement_check(ctx, llama, requirement)
            ref = await arequirement_check(ctx, hf, requirement)
            assert abs(mine - ref) <= SCORE_TOLERANCE, (n, requirement, mine, ref)
            seen.append((n, abs(mine - ref)))


@needs_server
async def test_long_turns_score_as_peft_at_every_length_on_a_reused_server(llama, hf):
    """Two conversations one after the other on the shared server (slots=4, ctx=2048): each
    check reuses the slot's K/V of the previous one."""
    before = llama.full_reads
    first = await _compare_growing(llama, hf, seed=1, max_tokens=1900)
    assert max(n for n, _ in first) > 1400  # long enough to have scored 0.0 before the fix
    second = await _compare_growing(llama, hf, seed=2, max_tokens=1900)
    assert len(second) >= 6
    assert llama.stats.reused_tokens > 0  # the checks did reuse the slots
    assert llama.full_reads > before  # some checks needed the whole distribution


@needs_server
async def test_a_tiny_top_n_still_scores_exactly(llama, hf, gguf_dir):
    """With n_probs=2 the categories are rarely among the top tokens: every such check must
    ask for the whole vocabulary rather than read a missing category as probability 0."""
    narrow = LlamaServerBackend.connect(llama.urls, gguf_dir, n_probs=2,
                                        api_key=llama.processes[0].api_key)
    try:
        rng = random.Random(3)
        ctx = _grow(_grow(ChatContext(), rng), rng)
        for requirement in REQUIREMENTS:
            mine = await arequirement_check(ctx, narrow, requirement)
            ref = await arequirement_check(ctx, hf, requirement)
            assert abs(mine - ref) <= SCORE_TOLERANCE, (requirement, mine, ref)
            assert 0.0 < mine < 1.0
        assert narrow.full_reads >= 1
    finally:
        await narrow.aclose()


@needs_server
async def test_a_conversation_the_slot_cannot_hold_is_refused_by_type(llama):
    rng = random.Random(4)
    ctx = ChatContext()
    for _ in range(14):  # about 2,500 tokens: more than the fixture's 2048 per slot
        ctx = _grow(ctx, rng)
    with pytest.raises(PromptTooLongError, match="2048") as info:
        await arequirement_check(ctx, llama, REQUIREMENTS[0])
    assert "ctx=" in str(info.value)
    with pytest.raises(PromptTooLongError):
        await llama.generate_from_context(Message("user", "And then?"), ctx)
    # the backend stays usable
    short = _grow(ChatContext(), rng)
    assert 0.0 <= await arequirement_check(short, llama, REQUIREMENTS[0]) <= 1.0


# ----- the rule itself, on real tensors (no server) ------------------------------------------


def _reply(probs: dict[int, float], vocab: int = 8) -> torch.Tensor:
    return dense_logprobs([(i, float(torch.tensor(p).log())) for i, p in probs.items()], vocab)


def test_a_reply_without_the_wanted_tokens_decides_nothing():
    wanted = torch.zeros(8, dtype=torch.bool)
    wanted[[6, 7]] = True
    assert not decided(_reply({0: 0.5, 1: 0.3}), wanted, complete=False)
    assert decided(_reply({0: 0.5, 1: 0.3}), wanted, complete=True)


def test_missing_mass_is_bounded_by_the_smallest_entry_and_the_rest():
    wanted = torch.zeros(8, dtype=torch.bool)
    wanted[[0, 7]] = True
    # token 7 is missing; it can hold at most min(1 x 1e-6, 1 - total) of the mass
    almost_all = {0: 0.4, 1: 0.599998, 2: 1e-6}
    assert decided(_reply(almost_all), wanted, complete=False)
    # here it could hold up to 0.1: far more than TOLERANCE x 0.4
    assert not decided(_reply({0: 0.4, 1: 0.4, 2: 0.1}), wanted, complete=False)
    # every wanted token present: exact whatever is missing elsewhere
    wanted_present = torch.zeros(8, dtype=torch.bool)
    wanted_present[[0, 1]] = True
    assert decided(_reply({0: 0.4, 1: 0.1}), wanted_present, complete=False)
    assert TOLERANCE <= 1e-3


def test_reads_widen_to_4096_before_the_whole_vocabulary():
    """A 49k vocabulary's whole reply is ~10 MB of JSON: a top-4,096 one is asked first."""
    from mellea_local.backends.llama_server.probabilities import read_sizes

    assert read_sizes(256, 49_152) == (256, 4096, 49_152)
    assert read_sizes(256, 4096) == (256, 4096)  # the embedded model: as before
    assert read_sizes(8000, 49_152) == (8000, 49_152)
    assert read_sizes(1, 100) == (1, 100)
    assert read_sizes(100, 100) == (100,)
