"""Checks of different conversations waiting together run as one batch, exactly as alone."""

from __future__ import annotations

import asyncio

import torch

from mellea_local.bench.conversations import run_together
from mellea_local.bench.subjects import REQUIREMENTS, conversation
from mellea_local.errors import AloraActivationError
from mellea_local.intrinsics.requirement_check import build_check_prompts, check_outputs

TOL = 1e-4


def _rows(bench, tokenizer, count: int) -> list[tuple[list[int], int]]:
    """Check rows (conversation + suffix + forced prefix) of different lengths, prefixes cached."""
    forced = tokenizer.encode('{"score": "', add_special_tokens=False)
    rows = []
    for i in range(count):
        ctx = conversation(tokenizer, 60 + 25 * i, seed=i)
        req = REQUIREMENTS[i % len(REQUIREMENTS)]
        [p] = build_check_prompts(bench.backend, ctx, [req], bench.alora)
        bench.check(ctx, bench.alora, [req])  # caches the conversation
        rows.append((p.ids + forced, p.shared))
    return rows


def test_waiting_checks_run_as_one_batch_equal_to_one_by_one(bench, tiny_tokenizer):
    backend, alora = bench.backend, bench.alora
    rows = _rows(bench, tiny_tokenizer, 5)
    alone = [backend.engine.batcher.run(alora, row, shared) for row, shared in rows]
    before = backend.engine.batcher.batches
    backend.stats.reset()
    batched = run_together(backend, [lambda r=r, s=s: backend.engine.batcher.run(alora, r, s)
                                for r, s in rows])
    assert backend.engine.batcher.batches == before + 1
    for a, b in zip(alone, batched, strict=True):
        assert float((a - b).abs().max()) <= TOL
    # Honest counts: each conversation's prefix reused whole, only suffixes prefilled.
    assert backend.stats.reused_tokens == sum(s for _, s in rows)
    assert backend.stats.prefilled_tokens == sum(len(r) - s for r, s in rows)
    assert backend.stats.cache_hits == len(rows)
    # The cached prefixes are untouched: a check alone afterwards still matches.
    row, shared = rows[2]
    assert float((backend.engine.batcher.run(alora, row, shared) - alone[2]).abs().max()) <= TOL


def test_a_bad_row_fails_alone_and_the_rest_of_its_batch_runs(bench, tiny_tokenizer):
    backend, alora = bench.backend, bench.alora
    rows = _rows(bench, tiny_tokenizer, 3)
    row, shared = rows[1]
    invocation = list(alora.invocation_tokens or ())
    bad = list(row)
    for k in range(shared, len(bad) - len(invocation) + 1):  # break the invocation
        if bad[k:k + len(invocation)] == invocation:
            bad[k] = bad[k - 1]
    alone = [backend.engine.batcher.run(alora, r, s) for r, s in (rows[0], rows[2])]
    out = run_together(backend, [lambda: backend.engine.batcher.run(alora, *rows[0]),
                            lambda: backend.engine.batcher.run(alora, bad, shared),
                            lambda: backend.engine.batcher.run(alora, *rows[2])])
    assert isinstance(out[1], AloraActivationError)
    assert float((out[0] - alone[0]).abs().max()) <= TOL
    assert float((out[2] - alone[1]).abs().max()) <= TOL
    assert backend.engine.holder.active_adapter is None


async def test_concurrent_checks_through_the_api_equal_the_slow_path(bench, tiny_tokenizer):
    backend, alora = bench.backend, bench.alora
    ctxs = [conversation(tiny_tokenizer, 50 + 20 * i, seed=10 + i) for i in range(6)]
    for ctx in ctxs:
        await check_outputs(backend, ctx, [REQUIREMENTS[0]], adapter=alora)
    fast = await asyncio.gather(*(check_outputs(backend, ctx, [REQUIREMENTS[k % 8]],
                                                adapter=alora) for k, ctx in enumerate(ctxs)))
    for k, ctx in enumerate(ctxs):
        [slow] = await check_outputs(backend, ctx, [REQUIREMENTS[k % 8]], adapter=alora,
                                     reuse=False)
        assert fast[k][0] == slow or abs(
            _score(fast[k][0]) - _score(slow)) <= TOL


def _score(output: str) -> float:
    import json

    return float(json.loads(output)["requirement_check"]["score"])


def test_batched_forward_keeps_the_cache_base_only(bench, tiny_tokenizer):
    backend, alora = bench.backend, bench.alora
    rows = _rows(bench, tiny_tokenizer, 3)
    run_together(backend, [lambda r=r, s=s: backend.engine.batcher.run(alora, r, s)
                           for r, s in rows])
    from mellea_local.backends.cache_compat import output_cache

    for entry in backend.prefix_cache.entries():
        with backend.engine.holder.lock, torch.no_grad():
            fresh = output_cache(backend.model(input_ids=torch.tensor([list(entry.token_ids)]),
                                               use_cache=True))
        for got, want in zip(entry.cache.layers, fresh.layers, strict=True):
            assert torch.allclose(got.keys, want.keys, atol=1e-5)
