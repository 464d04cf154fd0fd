"""Many conversations through one backend: each keeps its prefix, and results stay exact."""

from __future__ import annotations

import asyncio
import json
import random

from mellea_local.bench.conversations import _Workload, measure_schedules
from mellea_local.bench.subjects import REQUIREMENTS, conversation
from mellea_local.intrinsics.requirement_check import check_outputs

TOL = 1e-4


def test_interleaved_and_concurrent_reuse_what_serial_does(bench):
    """The old cache reused ~75 of ~4,100 tokens here: each call cut the last entry down."""
    rows = measure_schedules(bench, n=4, history=150, new_tokens=6, checks=3)
    serial = rows["serial"]
    assert serial["reused_tokens"] > 0.5 * serial["prefilled_tokens"]
    for name in ("interleaved", "concurrent"):
        assert rows[name]["reused_tokens"] >= 0.95 * serial["reused_tokens"], name
        assert rows[name]["prefilled_tokens"] <= 1.1 * serial["prefilled_tokens"], name
        assert rows[name]["hits"] == serial["hits"], name
    assert rows["concurrent"]["cache_entries"] >= 4  # every conversation is still cached


def _score(output: str) -> float:
    return json.loads(output)["requirement_check"]["score"]


async def test_100_concurrent_mixed_calls_equal_the_slow_path(bench):
    """Generations and checks of 10 conversations at once: scores equal uncached ones."""
    backend = bench.backend
    backend.prefix_cache.clear()
    work = _Workload(bench, 10, 60, 4, 1)
    contexts = list(await asyncio.gather(*(work.generate(i) for i in range(10))))
    rng = random.Random(1)
    calls, expected = [], []
    for _ in range(100):
        i, req = rng.randrange(10), rng.choice(REQUIREMENTS)
        if rng.random() < 0.2:  # a generation in between: grows another branch of i
            calls.append(work.generate(i))
            expected.append(None)
        else:
            calls.append(check_outputs(backend, contexts[i], [req], adapter=bench.alora))
            expected.append((i, req))
    outputs = await asyncio.gather(*calls)
    assert backend.stats.cache_hits > 50
    for out, want in zip(outputs, expected, strict=True):
        if want is None:
            continue
        i, req = want
        [slow] = await check_outputs(backend, contexts[i], [req], adapter=bench.alora,
                                     reuse=False)
        assert abs(_score(out[0]) - _score(slow)) <= TOL


def test_a_conversation_stays_cached_across_others(bench, tiny_tokenizer):
    backend = bench.backend
    backend.prefix_cache.clear()
    ctxs = [conversation(tiny_tokenizer, 120, seed=s) for s in range(5)]
    for ctx in ctxs:
        bench.check(ctx, bench.alora, [REQUIREMENTS[0]])
    for ctx in ctxs:  # every second check reuses its whole conversation
        bench.check(ctx, bench.alora, [REQUIREMENTS[1]])
        last = backend.stats.last
        assert last.reused_tokens == last.reusable_tokens and last.cache_hits == 1
    assert backend.stats.cache_entries == 5 and backend.stats.cache_evictions == 0
    assert backend.stats.cache_tokens == backend.prefix_cache.total_tokens
    assert "entries=5" in repr(backend.stats)
