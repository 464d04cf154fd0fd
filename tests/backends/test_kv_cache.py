"""KV prefix cache on a real tiny Llama: reuse must be exact, bounded and base-only."""

from __future__ import annotations

import logging

import pytest
import torch
from kv_helpers import ATOL, _forward, _kv, _max_diff, _prefill
from peft import LoraConfig, get_peft_model
from transformers import DynamicCache, MistralConfig, MistralForCausalLM

from mellea_local.backends.cache_compat import (
    cache_kwarg_name,
    cache_seq_length,
    crop_to,
    croppable_reason,
    new_cache,
    output_cache,
)
from mellea_local.backends.kv_cache import DEFAULT_TOKEN_BUDGET, PrefixCache
from mellea_local.backends.stats import CacheCounts, CacheStats
from mellea_local.embedded import END_OF_ROLE, START_OF_ROLE, build_model
from mellea_local.errors import KVCacheError


@pytest.fixture(scope="module")
def invocation(tiny_tokenizer, ids) -> list[int]:
    tokens = tiny_tokenizer.encode(START_OF_ROLE + "user" + END_OF_ROLE, add_special_tokens=False)
    assert not set(tokens) & set(ids.tolist())
    return tokens


@pytest.mark.parametrize("split", [1, 5, 16, 31, 47])
def test_reused_prefix_gives_the_logits_of_a_full_prefill(model, ids, split):
    prefix_cache = PrefixCache()
    assert prefix_cache.store(ids[:split], _prefill(model, ids[:split]))

    cache, n = prefix_cache.take(ids)
    assert n == split and cache_seq_length(cache) == split
    logits, _ = _forward(model, ids[n:], cache)
    scratch, _ = _forward(model, ids)
    assert _max_diff(logits, scratch[n:]) <= ATOL


@pytest.mark.parametrize("diverge_at", [3, 20, 40])
def test_entry_longer_than_the_shared_prefix_is_cropped_exactly(model, ids, vocab, diverge_at):
    prefix_cache = PrefixCache()
    prefix_cache.store(ids, _prefill(model, ids))
    query = ids.clone()
    query[diverge_at:] = (query[diverge_at:] + 1) % vocab

    cache, n = prefix_cache.take(query)
    assert n == diverge_at and cache_seq_length(cache) == diverge_at
    logits, _ = _forward(model, query[n:], cache)
    scratch, _ = _forward(model, query)
    assert _max_diff(logits, scratch[n:]) <= ATOL


def test_generate_output_is_stored_under_the_tokens_its_cache_covers(model, ids):
    prompt = ids[:20]
    cache = new_cache(model)
    with torch.no_grad():
        out = model.generate(
            prompt[None],
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=0,
            return_dict_in_generate=True,
            **{cache_kwarg_name(model): cache},
        )
    sequence = out.sequences[0]
    prefix_cache = PrefixCache()
    assert prefix_cache.store(sequence, output_cache(out))
    # The last generated token has no K/V yet, so the entry covers one token less.
    assert [len(e) for e in prefix_cache.entries()] == [sequence.numel() - 1]

    follow_up = torch.cat([sequence, ids[30:40]])
    cache, n = prefix_cache.take(follow_up)
    assert n == sequence.numel() - 1
    logits, _ = _forward(model, follow_up[n:], cache)
    scratch, _ = _forward(model, follow_up)
    assert _max_diff(logits, scratch[n:]) <= ATOL


def test_lookup_picks_the_longest_common_prefix(model, ids, vocab):
    prefix_cache = PrefixCache()
    other = (ids + 7) % vocab
    short = torch.cat([ids[:8], other[:8]])
    long = torch.cat([ids[:14], other[:6]])
    unrelated = other[:30]
    for key in (short, long, unrelated):
        assert prefix_cache.store(key, _prefill(model, key))

    entry, n = prefix_cache.lookup(ids)
    assert n == 14 and torch.equal(entry.key, long)
    assert len(prefix_cache) == 3  # lookup only peeks

    cache, n = prefix_cache.take(ids)
    assert n == 14 and len(prefix_cache) == 3  # diverges inside `long`: a copy, long stays
    logits, _ = _forward(model, ids[n:], cache)
    scratch, _ = _forward(model, ids)
    assert _max_diff(logits, scratch[n:]) <= ATOL


def test_equal_matches_prefer_the_shortest_entry(model, ids, vocab):
    prefix_cache = PrefixCache()
    other = (ids + 3) % vocab
    longer = torch.cat([ids[:10], other[:20]])
    shorter = torch.cat([ids[:10], other[20:25]])
    prefix_cache.store(longer, _prefill(model, longer))
    prefix_cache.store(shorter, _prefill(model, shorter))

    entry, n = prefix_cache.lookup(ids)
    assert n == 10 and torch.equal(entry.key, shorter)


def test_at_least_one_token_is_left_to_feed(model, ids):
    prefix_cache = PrefixCache()
    key = ids[:10]
    prefix_cache.store(key, _prefill(model, key))

    assert prefix_cache.lookup(key)[1] == 9
    assert prefix_cache.lookup(ids[:11])[1] == 10
    assert prefix_cache.lookup(ids[:1]) == (None, 0)
    assert prefix_cache.lookup([]) == (None, 0)

    # Same prompt again: the last token is recomputed and its logits are the full prefill's.
    cache, n = prefix_cache.take(key)
    assert n == 9
    logits, _ = _forward(model, key[n:], cache)
    scratch, _ = _forward(model, key)
    assert _max_diff(logits[-1], scratch[-1]) <= ATOL


def test_alora_extension_cropped_back_restores_the_base_cache(tiny_tokenizer, ids, invocation):
    base = build_model(tiny_tokenizer)  # private copy: get_peft_model patches it in place
    config = LoraConfig(
        r=4,
        target_modules=["q_proj", "k_proj", "v_proj"],
        alora_invocation_tokens=invocation,
        init_lora_weights=False,  # random B: the adapter visibly changes K/V
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(base, config).eval()
    context, tail = ids[:30], ids[30:]
    check_suffix = torch.cat([torch.tensor(invocation), ids[40:44]])

    prefix_cache = PrefixCache()
    with peft_model.disable_adapter():
        prefix_cache.store(context, _prefill(peft_model, context))
    cache, n = prefix_cache.take(torch.cat([context, check_suffix]))
    assert n == context.numel()
    base_kv = _kv(cache)

    _forward(peft_model, check_suffix, cache)  # the aLoRA call extends the shared cache
    with peft_model.disable_adapter():
        base_ext = _prefill(peft_model, torch.cat([context, check_suffix]))
    tainted = [layer.keys[..., n:, :] for layer in cache.layers]
    clean = [layer.keys[..., n:, :] for layer in base_ext.layers]
    assert any(_max_diff(t, c) > 1e-3 for t, c in zip(tainted, clean, strict=True))

    crop_to(cache, n)
    for (k0, v0), layer in zip(base_kv, cache.layers, strict=True):
        assert torch.equal(layer.keys, k0) and torch.equal(layer.values, v0)
    assert prefix_cache.store(context, cache)

    # The stored entry serves a base continuation exactly.
    follow_up = torch.cat([context, tail])
    cache, n = prefix_cache.take(follow_up)
    with peft_model.disable_adapter():
        logits, _ = _forward(peft_model, follow_up[n:], cache)
        scratch, _ = _forward(peft_model, follow_up)
    assert _max_diff(logits, scratch[n:]) <= ATOL


def test_least_recently_stored_entries_are_evicted_by_token_budget(model, ids):
    prefix_cache = PrefixCache(token_budget=20)
    a, b, c, d = (torch.cat([torch.tensor([k]), ids[:7]]) for k in (1, 2, 3, 4))
    for key in (a, b, c):
        prefix_cache.store(key, _prefill(model, key))
    assert [e.token_ids[0] for e in prefix_cache.entries()] == [2, 3]
    assert prefix_cache.total_tokens == 16

    cache, n = prefix_cache.take(torch.cat([b, ids[:3]]))  # use b, hand it back
    prefix_cache.store(b[:n], cache)
    prefix_cache.store(d, _prefill(model, d))
    assert [e.token_ids[0] for e in prefix_cache.entries()] == [2, 4]
    assert prefix_cache.total_tokens <= prefix_cache.token_budget

    too_long = ids[:21]
    assert not prefix_cache.store(too_long, _prefill(model, too_long))
    assert prefix_cache.total_tokens == 16


def test_extending_key_replaces_its_prefix_and_a_prefix_is_not_stored_twice(model, ids):
    prefix_cache = PrefixCache()
    prefix_cache.store(ids[:10], _prefill(model, ids[:10]))
    prefix_cache.store(ids[:25], _prefill(model, ids[:25]))
    assert [len(e) for e in prefix_cache.entries()] == [25]
    assert not prefix_cache.store(ids[:12], _prefill(model, ids[:12]))
    assert [len(e) for e in prefix_cache.entries()] == [25]
    assert prefix_cache.total_tokens == 25


def test_budget_zero_disables_the_cache(model, ids):
    prefix_cache = PrefixCache(token_budget=0)
    assert not prefix_cache.enabled
    assert not prefix_cache.store(ids[:10], _prefill(model, ids[:10]))
    assert len(prefix_cache) == 0 and prefix_cache.total_tokens == 0
    assert prefix_cache.lookup(ids) == (None, 0)
    assert prefix_cache.take(ids) == (None, 0)
    assert PrefixCache().token_budget == DEFAULT_TOKEN_BUDGET > 0
    with pytest.raises(ValueError, match="token_budget"):
        PrefixCache(token_budget=-1)


def test_stats_count_a_miss_then_a_hit(model, ids):
    prefix_cache, stats = PrefixCache(), CacheStats()
    for query in (ids[:20], ids):
        cache, n = prefix_cache.take(query)
        _, cache = _forward(model, query[n:], cache)
        stats.record(prefilled=query.numel() - n, reused=n)
        prefix_cache.store(query, cache)

    # First call: a miss that prefills 20 tokens. Second: all 20 stored tokens are reused.
    rest = ids.numel() - 20
    assert stats.total == CacheCounts(
        prefilled_tokens=20 + rest, reused_tokens=20, cache_hits=1, cache_misses=1,
        reusable_tokens=20,
    )
    assert (stats.prefilled_tokens, stats.reused_tokens) == (20 + rest, 20)
    assert (stats.cache_hits, stats.cache_misses) == (1, 1)
    assert stats.last == CacheCounts(rest, 20, 1, 0, 20)
    assert f"prefilled_tokens={20 + rest}" in repr(stats) and "reused=20" in repr(stats)

    stats.reset()
    assert stats.total == stats.last == CacheCounts()
    with pytest.raises(ValueError, match="negative"):
        stats.record(-1, 0)


def test_sliding_window_cache_is_refused_with_a_reason(ids, vocab, caplog):
    torch.manual_seed(0)
    config = MistralConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        sliding_window=4,
    )
    mistral = MistralForCausalLM(config).eval()
    cache = _prefill(mistral, ids[:12])
    # transformers itself calls this cache croppable, though it kept only the window.
    assert cache.layers[0].keys.shape[-2] < 12
    assert "sliding" in croppable_reason(cache)

    prefix_cache = PrefixCache()
    with caplog.at_level(logging.DEBUG, logger="mellea_local.backends.kv_cache"):
        assert not prefix_cache.store(ids[:12], cache)
    assert "sliding" in caplog.text
    assert prefix_cache.lookup(ids) == (None, 0)


def test_legacy_and_empty_caches_are_refused(model, ids):
    legacy = tuple((layer.keys, layer.values) for layer in _prefill(model, ids[:5]).layers)
    assert "legacy" in croppable_reason(legacy)
    assert croppable_reason(DynamicCache()) is not None
    prefix_cache = PrefixCache()
    assert not prefix_cache.store(ids[:5], legacy)
    assert not prefix_cache.store(ids[:5], DynamicCache())
    assert len(prefix_cache) == 0


def test_mismatched_caches_raise(model, ids):
    prefix_cache = PrefixCache()
    cache = _prefill(model, ids[:10])
    with pytest.raises(KVCacheError, match="holds 10 tokens"):
        prefix_cache.store(ids[:9], cache)
    with pytest.raises(KVCacheError, match="between 0 and"):
        crop_to(cache, 11)
    cache.batch_repeat_interleave(2)
    with pytest.raises(KVCacheError, match="batch size 2"):
        prefix_cache.store(ids[:10], cache)
    with pytest.raises(KVCacheError, match="one sequence"):
        prefix_cache.lookup(ids.reshape(2, -1))


def test_cache_kwarg_name_follows_the_forward_signature(model, tiny_tokenizer):
    import inspect

    params = inspect.signature(type(model).forward).parameters
    expected = "cache" if "cache" in params else "past_key_values"
    assert cache_kwarg_name(model) == expected
    peft_model = get_peft_model(
        build_model(tiny_tokenizer), LoraConfig(r=2, target_modules=["q_proj"])
    )
    assert cache_kwarg_name(peft_model) == expected
