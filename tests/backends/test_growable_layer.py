"""GrowableLayer: in-place appends give bit-identical logits to transformers' torch.cat layer."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, MistralConfig, MistralForCausalLM
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from mellea_local.backends.cache_compat import (
    cache_kwarg_name,
    cache_seq_length,
    crop_to,
    croppable_reason,
    new_cache,
)
from mellea_local.backends.growable_layer import MIN_SPARE_TOKENS, GrowableLayer


def _plain_cache(model) -> DynamicCache:
    return DynamicCache(config=model.config)


def _step(model, cache, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True,
                    **{cache_kwarg_name(model): cache})
    return out.logits[0]


def _decode(model, cache, prompt: list[int], steps: list[int]) -> list[torch.Tensor]:
    """A prefill then one forward per token of ``steps``: the decode loop of generate()."""
    logits = [_step(model, cache, prompt)]
    logits += [_step(model, cache, [t]) for t in steps]
    return logits


@pytest.fixture(scope="module")
def ids(tiny_tokenizer) -> list[int]:
    text = "The committee reviews every requirement of the quarterly report twice. " * 8
    return tiny_tokenizer.encode(text, add_special_tokens=False)[:80]


def test_new_cache_uses_growable_layers_for_full_attention(tiny_model):
    cache = new_cache(tiny_model)
    assert cache.layers and all(type(layer) is GrowableLayer for layer in cache.layers)
    _step(tiny_model, cache, [5, 6, 7])
    assert croppable_reason(cache) is None  # the prefix cache may crop and reuse it


def test_decode_is_bit_identical_to_torch_cat(tiny_model, ids):
    ours = new_cache(tiny_model)
    plain = _plain_cache(tiny_model)
    a = _decode(tiny_model, ours, ids[:40], ids[40:70])
    b = _decode(tiny_model, plain, ids[:40], ids[40:70])
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    for mine, theirs in zip(ours.layers, plain.layers, strict=True):
        assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)


def test_appends_write_in_place_until_the_spare_room_runs_out(tiny_model, ids):
    cache = new_cache(tiny_model)
    _step(tiny_model, cache, ids[:10])
    layer = cache.layers[0]
    buffer = layer.keys.data_ptr()
    capacity = 10 + MIN_SPARE_TOKENS
    token = ids[10]
    for n in range(11, capacity + 1):
        _step(tiny_model, cache, [token])
        assert layer.keys.data_ptr() == buffer, f"reallocated at {n} tokens"
    _step(tiny_model, cache, [token])  # one past the room: a new, larger buffer
    assert layer.keys.data_ptr() != buffer
    assert cache_seq_length(cache) == capacity + 1

    plain = _plain_cache(tiny_model)
    _step(tiny_model, plain, ids[:10])
    for _ in range(capacity + 1 - 10):
        _step(tiny_model, plain, [token])
    assert torch.equal(layer.keys, plain.layers[0].keys)
    assert torch.equal(layer.values, plain.layers[0].values)


def test_crop_then_append_overwrites_the_dropped_tokens_exactly(tiny_model, ids):
    cache = new_cache(tiny_model)
    _step(tiny_model, cache, ids[:60])
    crop_to(cache, 30)
    other = [(t + 11) % tiny_model.config.vocab_size for t in ids[30:45]]
    reused = _step(tiny_model, cache, other)
    fresh = _step(tiny_model, _plain_cache(tiny_model), ids[:30] + other)
    assert torch.equal(reused, fresh[30:])
    assert cache_seq_length(cache) == 45


def test_replaced_tensors_start_a_new_buffer(tiny_model, ids):
    """Batch expansion swaps keys for a new tensor; the next append must not write the old one."""
    cache = new_cache(tiny_model)
    _step(tiny_model, cache, ids[:20])
    old = cache.layers[0].keys.data_ptr()
    cache.batch_repeat_interleave(2)
    with torch.no_grad():
        out = tiny_model(input_ids=torch.tensor([ids[20:25], ids[25:30]]), use_cache=True,
                         **{cache_kwarg_name(tiny_model): cache})
    assert cache.layers[0].keys.data_ptr() != old
    for row, suffix in enumerate((ids[20:25], ids[25:30])):
        fresh = _step(tiny_model, _plain_cache(tiny_model), ids[:20] + suffix)
        # a batch of two against a batch of one: BLAS may block the two shapes differently
        # (exact on some CPUs, not all), so within 1e-5; a write into the old buffer would move
        # these logits by orders of magnitude more
        torch.testing.assert_close(out.logits[row], fresh[20:], rtol=0, atol=1e-5)


def test_gradients_through_the_cache_match_torch_cat(tiny_model, ids):
    """Training runs a no-grad prefix then a graded suffix on one cache (the aLoRA recipe)."""
    grads = []
    for cache in (new_cache(tiny_model), _plain_cache(tiny_model)):
        tiny_model.zero_grad(set_to_none=True)
        _step(tiny_model, cache, ids[:20])
        out = tiny_model(input_ids=torch.tensor([ids[20:30]]), use_cache=True,
                         **{cache_kwarg_name(tiny_model): cache})
        out.logits.float().square().mean().backward()
        grads.append(tiny_model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    tiny_model.zero_grad(set_to_none=True)
    assert torch.equal(grads[0], grads[1])


def test_sliding_window_layers_are_left_to_transformers(tiny_tokenizer):
    config = MistralConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           sliding_window=4)
    cache = new_cache(MistralForCausalLM(config))
    assert all(type(layer) is DynamicSlidingWindowLayer for layer in cache.layers)
    assert not any(type(layer) is DynamicLayer for layer in cache.layers)
