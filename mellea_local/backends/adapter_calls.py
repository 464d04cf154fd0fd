"""Adapter forward passes, with the base model's KV cache reused for aLoRAs.

An aLoRA leaves every token before its invocation exactly as the base model computes it, so the
base cache of the conversation is valid for it as-is: a check feeds only the tokens from the
cached prefix on (in practice: the check suffix) through the adapter. Afterwards the cache is
cropped back to the invocation start, so it holds base K/V only and serves the next call.

A plain LoRA changes every token's K/V: it never reads or writes the shared cache.

Every function here runs in a worker thread under the model lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache, LogitsProcessorList

from mellea_local.backends.adapter_registry import Adapter
from mellea_local.backends.cache_compat import (
    cache_kwarg_name,
    crop_to,
    new_cache,
    output_cache,
)
from mellea_local.backends.kv_cache import PrefixCache
from mellea_local.backends.model_holder import ModelHolder
from mellea_local.backends.stats import CacheStats
from mellea_local.errors import AloraActivationError


def find_run(ids: Sequence[int], run: Sequence[int]) -> int:
    """Index of the last occurrence of ``run`` in ``ids``, or -1 (PEFT uses the last one)."""
    n = len(run)
    for start in range(len(ids) - n, -1, -1):
        if list(ids[start:start + n]) == list(run):
            return start
    return -1


def require_invocation(adapter: Adapter, fed: Sequence[int]) -> None:
    """Refuse to run an aLoRA whose invocation tokens are not in the tokens it is fed.

    PEFT would silently run the base model instead; a check that quietly ignores its adapter
    returns a confident wrong answer.
    """
    if adapter.is_alora and find_run(fed, adapter.invocation_tokens or ()) < 0:
        raise AloraActivationError(
            f"aLoRA {adapter.name!r} would not activate: its invocation tokens "
            f"{list(adapter.invocation_tokens or ())} do not occur in the {len(fed)} tokens fed "
            "to it. Build the prompt so the invocation lies after the reused cache (in token "
            "space), or use a plain LoRA."
        )


@dataclass
class _Prefix:
    """The base cache for ``ids[:length]`` checked out for one call (None: no reuse)."""

    cache: Any
    length: int
    reused: int


def _checkout(
    holder: ModelHolder, prefix_cache: PrefixCache, ids: Sequence[int], shared: int,
    *, extend: bool,
) -> _Prefix:
    """Take the longest cached prefix of ``ids[:shared]``; with ``extend``, prefill the rest.

    The rest is prefilled by the *base* model, so the cache stays base-only.
    """
    # Keyed one token past the prefix: take() keeps one token uncached, so reused <= shared.
    cache, reused = prefix_cache.take(list(ids[: shared + 1]))
    if cache is None:
        cache = new_cache(holder.model)
    length = reused
    if extend and reused < shared:
        holder.assert_base()
        holder.model(
            input_ids=torch.tensor([list(ids[reused:shared])], device=holder.model.device),
            use_cache=True, **{cache_kwarg_name(holder.model): cache},
        )
        length = shared
    return _Prefix(cache, length, reused)


def _repeat(cache: Any, k: int, model: Any) -> DynamicCache:
    """A new cache holding ``k`` copies of a one-row cache (the original stays untouched)."""
    out = new_cache(model)
    for idx, layer in enumerate(cache.layers):
        out.update(layer.keys.repeat_interleave(k, dim=0),
                   layer.values.repeat_interleave(k, dim=0), idx)
    return out


def last_logits(
    holder: ModelHolder,
    prefix_cache: PrefixCache,
    stats: CacheStats,
    adapter: Adapter,
    rows: Sequence[Sequence[int]],
    shared: int,
    *,
    reuse: bool = True,
) -> torch.Tensor:
    """Next-token logits after each row, computed with ``adapter`` active: shape ``[k, vocab]``.

    All rows share their first ``shared`` tokens (the conversation up to the invocation). With
    ``reuse`` (aLoRA only) the base cache of that prefix is reused and kept base-only; several
    rows then run as one batch over k copies of it, right-padded (causal attention never lets a
    real token see the padding after it).
    """
    reuse = reuse and adapter.is_alora and prefix_cache.enabled
    model, kw = holder.model, cache_kwarg_name(holder.model)
    pad = holder.tokenizer.pad_token_id or 0
    with holder.lock, torch.no_grad():
        holder.assert_base()
        prefix = (_checkout(holder, prefix_cache, rows[0], shared, extend=len(rows) > 1)
                  if reuse else None)
        start = prefix.length if prefix else 0
        fed = [list(r[start:]) for r in rows]
        for f in fed:
            require_invocation(adapter, f)
        width = max(len(f) for f in fed)
        batch = torch.tensor([f + [pad] * (width - len(f)) for f in fed], device=model.device)
        kwargs: dict[str, Any] = {"use_cache": prefix is not None}
        if prefix is not None:
            kwargs[kw] = prefix.cache if len(rows) == 1 else _repeat(prefix.cache, len(rows),
                                                                       model)
        with holder.using(adapter.name) as peft:
            logits = peft(input_ids=batch, **kwargs).logits
        last = torch.tensor([len(f) - 1 for f in fed], device=model.device)
        out = logits[torch.arange(len(rows), device=model.device), last].float()
        if prefix is not None:
            crop_to(prefix.cache, shared)  # drop the adapter's K/V: the cache is base-only again
            prefix_cache.store(list(rows[0][:shared]), prefix.cache)
        stats.record(prefilled=sum(map(len, fed)) + (start - prefix.reused if prefix else 0),
                     reused=prefix.reused if prefix else 0)
    return out


def adapter_generate(
    holder: ModelHolder,
    prefix_cache: PrefixCache,
    stats: CacheStats,
    adapter: Adapter,
    ids: Sequence[int],
    shared: int,
    *,
    processors: Sequence[Any] = (),
    max_new_tokens: int = 16,
    reuse: bool = True,
) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy generation with ``adapter`` active; returns new ids and the processed scores.

    The scores are the logits after every processor (e.g. the grammar mask), one tensor per
    generated token: what top-k logprobs are read from.
    """
    reuse = reuse and adapter.is_alora and prefix_cache.enabled
    model, kw = holder.model, cache_kwarg_name(holder.model)
    with holder.lock, torch.no_grad():
        holder.assert_base()
        prefix = _checkout(holder, prefix_cache, ids, shared, extend=False) if reuse else None
        start = prefix.length if prefix else 0
        require_invocation(adapter, ids[start:])
        tensor = torch.tensor([list(ids)], device=model.device)
        kwargs: dict[str, Any] = {kw: prefix.cache if prefix else new_cache(model)}
        with holder.using(adapter.name) as peft:
            out = peft.generate(
                input_ids=tensor, attention_mask=torch.ones_like(tensor),
                max_new_tokens=max_new_tokens, do_sample=False, use_cache=True,
                logits_processor=LogitsProcessorList(list(processors)),
                output_scores=True, return_dict_in_generate=True,
                pad_token_id=holder.tokenizer.pad_token_id, **kwargs,
            )
        if prefix is not None:
            cache = output_cache(out)
            crop_to(cache, shared)
            prefix_cache.store(list(ids[:shared]), cache)
        stats.record(prefilled=len(ids) - start, reused=prefix.reused if prefix else 0)
    new_ids = out.sequences[0, len(ids):].tolist()
    return new_ids, [s[0].float() for s in out.scores]
