"""Helpers shared by the KV cache tests: forwards on top of a cache, K/V snapshots."""

from __future__ import annotations

import torch

from mellea_local.backends.cache_compat import cache_kwarg_name, new_cache, output_cache

ATOL = 1e-4
TEXT = (
    "The quick brown fox jumps over the lazy dog while the committee reviews every requirement "
    "of the quarterly report, twice, before a late lunch on a rainy Tuesday afternoon in May."
)


def _forward(model, input_ids: torch.Tensor, cache=None):
    """Logits of ``input_ids`` (1-D) on top of ``cache``; returns (logits [T, V], cache)."""
    if cache is None:
        cache = new_cache(model)
    with torch.no_grad():
        out = model(input_ids=input_ids[None], use_cache=True, **{cache_kwarg_name(model): cache})
    return out.logits[0], output_cache(out)


def _prefill(model, input_ids: torch.Tensor):
    return _forward(model, input_ids)[1]


def _kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())
