"""Adapter forward passes, with the base model's KV cache reused for aLoRAs.

An aLoRA leaves every token before its invocation exactly as the base model computes it, so the
base cache of the conversation is valid for it as-is: a check feeds only the tokens from the
cached prefix on (in practice: the check suffix) through the adapter. Afterwards the cache is
cropped back to the invocation start, so it holds base K/V only and serves the next call.

A plain LoRA changes every token's K/V: it never reads or writes the shared cache.

Every function here runs in a worker thread under the model lock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessorList

from mellea_local.adapters.loaded import Adapter
from mellea_local.adapters.transformations import TokenLogprob
from mellea_local.backends.cache_compat import (
    cache_kwarg_name,
    crop_to,
    new_cache,
    output_cache,
)
from mellea_local.backends.kv_cache import PrefixCache
from mellea_local.backends.model_holder import ModelHolder
from mellea_local.backends.stats import CacheStats


@dataclass
class _Prefix:
    """A cache checked out for one call, holding the K/V of the first ``reused`` tokens."""

    cache: Any
    reused: int


def _checkout(prefix_cache: PrefixCache, model: Any, ids: Sequence[int], shared: int) -> _Prefix:
    """Take the longest cached prefix of ``ids[:shared]`` (a fresh cache on a miss)."""
    # Keyed one token past the prefix: take() keeps one token uncached, so reused <= shared.
    cache, reused = prefix_cache.take(list(ids[: shared + 1]))
    return _Prefix(cache if cache is not None else new_cache(model), reused)


def _shared_batch(
    prefix: list[int], suffixes: list[list[int]], past: int, device: torch.device
) -> dict[str, Any]:
    """One row holding ``prefix`` then every suffix, each suffix blind to the others.

    Every suffix attends to the past (cached) tokens, to ``prefix`` and causally to itself, at
    the positions it would have alone: k checks cost one forward over their own tokens, with no
    copy of the cache. Exact: attention only ever sees what a lone check would see.
    """
    p = len(prefix)
    q = p + sum(len(s) for s in suffixes)
    mask = torch.zeros(1, 1, q, past + q, dtype=torch.bool, device=device)
    mask[0, 0, :, : past + p] = True
    mask[0, 0, :p, past : past + p] = torch.tril(torch.ones(p, p, dtype=torch.bool))
    positions = [past + i for i in range(p)]
    last, at = [], p
    for s in suffixes:
        n = len(s)
        mask[0, 0, at : at + n, past + at : past + at + n] = torch.tril(
            torch.ones(n, n, dtype=torch.bool))
        positions += [past + p + i for i in range(n)]
        at += n
        last.append(at - 1)
    return {
        "input_ids": torch.tensor([prefix + [t for s in suffixes for t in s]], device=device),
        "position_ids": torch.tensor([positions], device=device),
        "attention_mask": mask,
        "logits_to_keep": torch.tensor(last, device=device),
    }


def last_logits(holder: ModelHolder, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Next-token logits after each row, computed with ``adapter`` active: shape ``[k, vocab]``.

    Takes the model lock, then runs :func:`last_logits_locked` (same arguments).
    """
    with holder.lock:
        return last_logits_locked(holder, *args, **kwargs)


def last_logits_locked(
    holder: ModelHolder,
    prefix_cache: PrefixCache,
    stats: CacheStats,
    adapter: Adapter,
    rows: Sequence[Sequence[int]],
    shared: int,
    *,
    reuse: bool = True,
) -> torch.Tensor:
    """Next-token logits after each row with ``adapter`` active (``[k, vocab]``); lock held.

    All rows share their first ``shared`` tokens (the conversation, up to the invocation for
    an aLoRA). With ``reuse`` (aLoRA only) the base cache of that prefix is reused and left
    base-only. Several rows run as one forward: the shared part once, then each suffix.
    """
    strategy = adapter.strategy
    suffixes = [list(r[shared:]) for r in rows]
    if len(rows) > 1 and not strategy.batchable(adapter, suffixes):
        # One offset must serve every suffix; if a requirement repeats the invocation, PEFT
        # would start the adapter there, so run such checks one by one instead.
        return torch.cat([last_logits_locked(holder, prefix_cache, stats, adapter, [r], shared,
                                             reuse=reuse) for r in rows])
    reuse = reuse and strategy.reuses_base_cache and prefix_cache.enabled
    model, kw = holder.model, cache_kwarg_name(holder.model)
    with torch.no_grad():
        holder.assert_base()
        if reuse:
            prefix = _checkout(prefix_cache, model, rows[0], shared)
        else:
            prefix = _Prefix(new_cache(model), 0)
        head = list(rows[0][prefix.reused : shared])
        try:
            for s in suffixes:
                strategy.require_activation(adapter, head + s if len(rows) == 1 else s)
            if len(rows) == 1:
                kwargs: dict[str, Any] = {
                    "input_ids": torch.tensor([head + suffixes[0]], device=model.device),
                    "logits_to_keep": 1,
                }
            else:
                kwargs = _shared_batch(head, suffixes, prefix.reused, model.device)
                kwargs.update(strategy.peft_forward_kwargs(sum(map(len, suffixes))))
            with holder.using(adapter.name) as peft:
                logits = peft(use_cache=True, **{kw: prefix.cache}, **kwargs).logits[0].float()
        except BaseException:
            prefix_cache.discard(prefix.cache)
            raise
        if reuse:
            crop_to(prefix.cache, shared)  # drop the adapter's K/V: the cache is base-only again
            prefix_cache.store(list(rows[0][:shared]), prefix.cache)
        stats.record(prefilled=len(head) + sum(map(len, suffixes)), reused=prefix.reused,
                     reusable=shared if reuse else 0)
    return logits


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
    strategy = adapter.strategy
    reuse = reuse and strategy.reuses_base_cache and prefix_cache.enabled
    model, kw = holder.model, cache_kwarg_name(holder.model)
    with holder.lock, torch.no_grad():
        holder.assert_base()
        prefix = _checkout(prefix_cache, model, ids, shared) if reuse else None
        start = prefix.reused if prefix else 0
        tensor = torch.tensor([list(ids)], device=model.device)
        kwargs: dict[str, Any] = {kw: prefix.cache if prefix else new_cache(model)}
        try:
            strategy.require_activation(adapter, ids[start:])
            with holder.using(adapter.name) as peft:
                out = peft.generate(
                    input_ids=tensor, attention_mask=torch.ones_like(tensor),
                    max_new_tokens=max_new_tokens, do_sample=False, use_cache=True,
                    logits_processor=LogitsProcessorList(list(processors)),
                    output_scores=True, return_dict_in_generate=True,
                    pad_token_id=holder.tokenizer.pad_token_id, **kwargs,
                )
        except BaseException:
            if prefix is not None:
                prefix_cache.discard(prefix.cache)
            raise
        if prefix is not None:
            cache = output_cache(out)
            crop_to(cache, shared)
            prefix_cache.store(list(ids[:shared]), cache)
        stats.record(prefilled=len(ids) - start, reused=prefix.reused if prefix else 0,
                     reusable=shared if prefix else 0)
    new_ids = out.sequences[0, len(ids):].tolist()
    return new_ids, [s[0].float() for s in out.scores]


def compact_json_grammar(schema: Mapping[str, Any]) -> str:
    """The llguidance grammar an intrinsic's output is held to: ``response_format`` with the
    separators the adapters were trained on (``": "``, ``", "``) and no free whitespace."""
    from llguidance import LLMatcher

    return LLMatcher.grammar_from_json_schema(
        json.dumps(schema),
        overrides={"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "},
    )


def token_logprobs(
    tokenizer: Any, new_ids: Sequence[int], scores: Sequence[torch.Tensor], top_k: int
) -> list[TokenLogprob]:
    """Generated tokens up to end-of-text, each with its logprob and the top-k alternatives
    under the processed scores (what a grammar allowed), as OpenAI-style entries."""
    new_ids, scores = list(new_ids), list(scores)
    eos = tokenizer.eos_token_id
    if eos in new_ids:
        cut = new_ids.index(eos)
        new_ids, scores = new_ids[:cut], scores[:cut]
    tokens = []
    for token_id, step in zip(new_ids, scores, strict=True):
        logp = torch.log_softmax(step, dim=-1)
        top = torch.topk(logp, top_k)
        alternatives = tuple(
            (tokenizer.decode([int(i)]), float(v))
            for v, i in zip(top.values, top.indices, strict=True) if math.isfinite(float(v))
        )
        tokens.append(TokenLogprob(tokenizer.decode([token_id]), float(logp[token_id]),
                                   alternatives))
    return tokens
