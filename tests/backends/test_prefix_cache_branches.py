"""The prefix cache holds many conversations: no lookup destroys another's K/V, memory bounded."""

from __future__ import annotations

import random

import torch
from kv_helpers import ATOL, _forward, _kv, _max_diff, _prefill

from mellea_local.backends.cache_compat import crop_to, new_cache
from mellea_local.backends.kv_cache import PrefixCache


def _conversation(seed: int, length: int, vocab: int, header: list[int]) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.tensor(header), torch.randint(5, vocab, (length,), generator=g)])


def test_a_diverging_query_gets_a_copy_and_the_entry_stays_intact(model, ids, vocab):
    prefix_cache = PrefixCache()
    prefix_cache.store(ids, _prefill(model, ids))
    [entry] = prefix_cache.entries()
    before = _kv(entry.cache)
    query = ids.clone()
    query[20:] = (query[20:] + 1) % vocab

    cache, n = prefix_cache.take(query)
    assert n == 20 and cache is not entry.cache and prefix_cache.copies == 1
    logits, cache = _forward(model, query[n:], cache)
    scratch, _ = _forward(model, query)
    assert _max_diff(logits, scratch[n:]) <= ATOL
    # The other branch lost nothing, bit for bit, and still serves its own continuation.
    assert len(entry) == ids.numel()
    for (k0, v0), layer in zip(before, entry.cache.layers, strict=True):
        assert torch.equal(layer.keys, k0) and torch.equal(layer.values, v0)
    assert prefix_cache.store(query, cache)
    assert sorted(len(e) for e in prefix_cache.entries()) == [ids.numel(), ids.numel()]
    follow = torch.cat([ids, query[:5]])
    cache, n = prefix_cache.take(follow)
    assert n == ids.numel() and cache is entry.cache  # a continuation: lent in place
    logits, _ = _forward(model, follow[n:], cache)
    assert _max_diff(logits, _forward(model, follow)[0][n:]) <= ATOL


def test_a_continuation_is_lent_in_place_and_stored_under_the_longer_key(model, ids):
    prefix_cache = PrefixCache()
    prefix_cache.store(ids[:30], _prefill(model, ids[:30]))
    [entry] = prefix_cache.entries()
    before = _kv(entry.cache)
    cache, n = prefix_cache.take(ids)
    assert (cache, n) == (entry.cache, 30) and prefix_cache.copies == 0
    logits, cache = _forward(model, ids[n:], cache)
    assert _max_diff(logits, _forward(model, ids)[0][n:]) <= ATOL
    for (k0, v0), layer in zip(before, cache.layers, strict=True):
        assert torch.equal(layer.keys[..., :30, :], k0)
        assert torch.equal(layer.values[..., :30, :], v0)
    assert prefix_cache.store(ids, cache)
    assert [len(e) for e in prefix_cache.entries()] == [ids.numel()]
    assert prefix_cache.total_tokens == ids.numel()


def test_a_failed_borrower_is_discarded_and_the_entry_restored(model, ids):
    prefix_cache = PrefixCache()
    prefix_cache.store(ids[:30], _prefill(model, ids[:30]))
    cache, n = prefix_cache.take(ids)
    _forward(model, ids[n:40], cache)  # extended, then the "call" fails
    cache.layers[0].crop(-3)  # layers disagree, as after a failure mid-forward
    prefix_cache.discard(cache)
    [entry] = prefix_cache.entries()
    assert len(entry) == 30 and not entry.lent
    assert all(layer.get_seq_length() == 30 for layer in entry.cache.layers)
    cache, n = prefix_cache.take(ids)
    assert n == 30 and cache is entry.cache
    logits, _ = _forward(model, ids[n:], cache)
    assert _max_diff(logits, _forward(model, ids)[0][n:]) <= ATOL


def test_a_loan_cropped_back_is_given_back_under_its_key(model, ids):
    """An aLoRA call's loan: extended past the entry (past its spare room too), cropped back
    to it; ``give_back`` keeps the same entry, exact, its spare room capped as ``store``'s."""
    from mellea_local.backends.growable_layer import MIN_SPARE_TOKENS

    prefix_cache = PrefixCache()
    prefix_cache.store(ids[:30], _prefill(model, ids[:30]))
    [entry] = prefix_cache.entries()
    before = _kv(entry.cache)
    assert not prefix_cache.give_back(entry.cache)  # not lent: nothing to give back
    cache, n = prefix_cache.take(ids)
    long = torch.cat([ids] * (MIN_SPARE_TOKENS // ids.numel() + 2))
    _forward(model, long[n:], cache)  # grows each layer's buffer
    assert not prefix_cache.give_back(cache)  # longer than the entry: store it instead
    crop_to(cache, 30)
    assert prefix_cache.give_back(cache)
    assert prefix_cache.entries() == [entry] and len(entry) == 30 and not entry.lent
    assert torch.equal(entry.key, ids[:30])
    for (k0, v0), layer in zip(before, entry.cache.layers, strict=True):
        assert torch.equal(layer.keys, k0) and torch.equal(layer.values, v0)
    assert prefix_cache.allocated_tokens <= 1.25 * prefix_cache.total_tokens
    cache, n = prefix_cache.take(ids)
    assert (cache, n) == (entry.cache, 30)
    assert _max_diff(_forward(model, ids[n:], cache)[0], _forward(model, ids)[0][n:]) <= ATOL


def test_many_conversations_sharing_a_role_header_all_stay_cached(model, vocab):
    """The old cache cut the last conversation down to the common header on every lookup."""
    header = [1, 2, 3]
    prefix_cache = PrefixCache()
    conversations = [_conversation(i, 20 + i, vocab, header) for i in range(12)]
    for conv in conversations:
        cache, n = prefix_cache.take(conv)
        assert n <= len(header)
        cache = cache if cache is not None else new_cache(model)
        _, cache = _forward(model, conv[n:], cache)
        assert prefix_cache.store(conv, cache)
    assert len(prefix_cache) == len(conversations)
    copies = prefix_cache.copies  # the shared header was copied, never cut out of an entry
    for conv in conversations:  # each continues its own history in full, exactly
        query = torch.cat([conv, torch.tensor([7, 8, 9])])
        cache, n = prefix_cache.take(query)
        assert n == conv.numel()
        logits, cache = _forward(model, query[n:], cache)
        assert _max_diff(logits, _forward(model, query)[0][n:]) <= ATOL
        crop_to(cache, n)
        prefix_cache.store(conv, cache)
    assert prefix_cache.copies == copies and len(prefix_cache) == len(conversations)


def _allocated_bytes(prefix_cache: PrefixCache) -> int:
    """K/V bytes the entries' tensors really hold (their storages, spare room included)."""
    seen: set[int] = set()
    total = 0
    for entry in prefix_cache.entries():
        for layer in entry.cache.layers:
            for t in (layer.keys, layer.values):
                storage = t.untyped_storage()
                if storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    total += storage.nbytes()
    return total


def test_1000_checks_over_200_conversations_stay_within_the_budget(model, vocab):
    """Accounted tokens <= budget and allocated K/V <= 1.25x accounted, with exact results."""
    budget = 4096
    prefix_cache = PrefixCache(budget)
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4
    rng = random.Random(0)
    histories = [_conversation(i, rng.randint(10, 40), vocab, [1, 2, 3]) for i in range(200)]
    suffix = torch.tensor([4, 5, 6, 7])
    reused = 0
    for step in range(1000):
        i = rng.randrange(200) if step % 3 else step % 200
        if step % 7 == 0:  # now and then a conversation grows by a turn
            histories[i] = torch.cat([histories[i], torch.randint(5, vocab, (rng.randint(5, 30),))])
        history = histories[i]
        query = torch.cat([history, suffix])
        cache, n = prefix_cache.take(query[: history.numel() + 1])
        cache = cache if cache is not None else new_cache(model)
        logits, cache = _forward(model, query[n:], cache)
        if step % 50 == 0:
            assert _max_diff(logits[-1], _forward(model, query)[0][-1]) <= ATOL
        crop_to(cache, history.numel())
        prefix_cache.store(history, cache)
        reused += n
        assert prefix_cache.total_tokens <= budget
        accounted = prefix_cache.total_tokens * per_token
        assert _allocated_bytes(prefix_cache) <= 1.25 * accounted
        assert prefix_cache.allocated_tokens <= 1.25 * prefix_cache.total_tokens
    assert prefix_cache.evictions > 0 and len(prefix_cache) > 50
    assert reused > 0
