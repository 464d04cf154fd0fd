"""The cache rule of ``Engine.reusing``, on a real tiny model: take, discard on failure, crop to
base, store, record. Every call site (generation, checks, adapter generation, the batcher) goes
through it, so these are the invariants all of them keep."""

from __future__ import annotations

import pytest
import torch
from kv_helpers import ATOL, _forward, _kv, _max_diff

from mellea_local.backends.cache_compat import cache_seq_length
from mellea_local.backends.hf import Engine


class Boom(Exception):
    pass


@pytest.fixture()
def engine(model, tiny_tokenizer):
    return Engine(model, tiny_tokenizer, kv_cache_tokens=4096)


def _store_prefix(engine: Engine, ids: torch.Tensor, n: int) -> None:
    with engine.reusing(ids[: n + 1].tolist(), base=n, reusable=n) as prefix:
        _forward(engine.model, ids[:n], prefix.cache)
        prefix.fed = n


def test_a_miss_then_a_hit_store_base_kv_and_record(engine, ids):
    _store_prefix(engine, ids, 24)
    assert engine.stats.last.prefilled_tokens == 24 and engine.stats.last.reused_tokens == 0
    [entry] = engine.prefix_cache.entries()
    assert entry.token_ids == tuple(ids[:24].tolist())
    expected = _kv(entry.cache)

    # A call that extends the borrowed prefix (as an adapter forward does) is cropped back.
    with engine.reusing(ids[:25].tolist(), base=24, reusable=24) as prefix:
        assert prefix.reused == 24
        _forward(engine.model, ids[24:40], prefix.cache)
        prefix.fed = 16
    [entry] = engine.prefix_cache.entries()
    assert cache_seq_length(entry.cache) == 24
    for (k, v), (k0, v0) in zip(_kv(entry.cache), expected, strict=True):
        assert _max_diff(k, k0) <= ATOL and _max_diff(v, v0) <= ATOL
    assert engine.stats.last.reused_tokens == 24 and engine.stats.last.prefilled_tokens == 16


def test_a_failed_call_leaves_the_cache_as_it_was_and_records_nothing(engine, ids):
    _store_prefix(engine, ids, 24)
    before = _kv(engine.prefix_cache.entries()[0].cache)
    calls = engine.stats.total
    with pytest.raises(Boom), engine.reusing(ids[:25].tolist(), base=24, reusable=24) as prefix:
        _forward(engine.model, ids[24:40], prefix.cache)  # half-extended, then the call fails
        raise Boom
    [entry] = engine.prefix_cache.entries()
    assert not entry.lent and cache_seq_length(entry.cache) == 24
    for (k, v), (k0, v0) in zip(_kv(entry.cache), before, strict=True):
        assert _max_diff(k, k0) <= ATOL and _max_diff(v, v0) <= ATOL
    assert engine.stats.total == calls
    # The entry is usable again: the next call borrows it in place.
    with engine.reusing(ids[:25].tolist(), base=24, reusable=24) as prefix:
        assert prefix.reused == 24


def test_reuse_off_neither_takes_nor_stores(engine, ids):
    _store_prefix(engine, ids, 24)
    with engine.reusing(ids[:25].tolist(), reuse=False, base=24, reusable=0) as prefix:
        assert prefix.reused == 0 and cache_seq_length(prefix.cache) == 0
        _forward(engine.model, ids[:30], prefix.cache)
        prefix.fed = 30
    assert len(engine.prefix_cache) == 1 and not engine.prefix_cache.entries()[0].lent
    assert engine.stats.last.reused_tokens == 0 and engine.stats.last.prefilled_tokens == 30


def test_an_abandoned_checkout_gives_the_prefix_back_unrecorded(engine, ids):
    _store_prefix(engine, ids, 24)
    calls = engine.stats.total
    with engine.reusing(ids[:25].tolist(), base=24, reusable=24) as prefix:
        prefix.abandon()
    assert not engine.prefix_cache.entries()[0].lent and engine.stats.total == calls


def test_a_generation_stores_what_it_returned_under_its_ids(engine, ids):
    # base=None: the call hands back the cache it ended with and the ids that cache covers.
    with engine.reusing(ids[:20].tolist(), reusable=19) as prefix:
        _, out = _forward(engine.model, ids[:30], prefix.cache)
        prefix.result, prefix.result_ids, prefix.fed = out, ids[:30], 30
    [entry] = engine.prefix_cache.entries()
    assert entry.token_ids == tuple(ids[:30].tolist())
    assert engine.stats.last.reusable_tokens == 19
