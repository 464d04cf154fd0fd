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
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from transformers import LogitsProcessorList

from mellea_local.adapters.loaded import Adapter
from mellea_local.backends.cache_compat import cache_kwarg_name, output_cache

if TYPE_CHECKING:
    from mellea_local.backends.hf.engine import Engine


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


def padded_suffix_logits(
    peft: Any, model: Any, prefixes: Sequence[tuple[Any, int]], suffixes: Sequence[list[int]],
    pad_id: int, **extra: Any,
) -> torch.Tensor:
    """Next-token logits ``[k, V]`` after each suffix, each on its own cached prefix, in one
    forward: the batched-forward assembly of ``cross_batch`` and ``mixed_last_logits``.

    ``prefixes`` holds each row's base cache and how many of its tokens the row reads
    (``shared``); the prefixes are left-padded to the longest into one batch cache (a copy: the
    caches given are not written), the suffixes right-padded, each row at its own positions
    with a 2-D attention mask. ``extra`` goes to the forward (PEFT's ``adapter_names``,
    ``alora_offsets``).
    """
    from transformers import DynamicCache

    device = model.device
    rows = len(suffixes)
    prefix = max(shared for _, shared in prefixes)
    width = max(map(len, suffixes))
    batch_cache = DynamicCache()
    for index in range(len(prefixes[0][0].layers)):
        keys, values = [], []
        for cache, shared in prefixes:
            layer, pad = cache.layers[index], prefix - shared
            keys.append(F.pad(layer.keys[:, :, :shared], (0, 0, pad, 0)))
            values.append(F.pad(layer.values[:, :, :shared], (0, 0, pad, 0)))
        batch_cache.update(torch.cat(keys), torch.cat(values), index)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros(rows, prefix + width, dtype=torch.long)
    positions = torch.zeros(rows, width, dtype=torch.long)
    last = []
    for k, ((_, shared), suffix) in enumerate(zip(prefixes, suffixes, strict=True)):
        ids[k, : len(suffix)] = torch.tensor(suffix)
        mask[k, prefix - shared : prefix + len(suffix)] = 1
        positions[k] = shared + torch.arange(width)
        last.append(len(suffix) - 1)
    keep = sorted(set(last))  # the lm_head runs on these positions only
    out = peft(input_ids=ids.to(device), attention_mask=mask.to(device),
               position_ids=positions.to(device), use_cache=True,
               logits_to_keep=torch.tensor(keep, device=device),
               **{cache_kwarg_name(model): batch_cache}, **extra)
    at = torch.tensor([keep.index(n) for n in last], device=device)
    return out.logits[torch.arange(rows, device=device), at].float()


def last_logits(engine: Engine, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Next-token logits after each row, computed with ``adapter`` active: shape ``[k, vocab]``.

    Takes the model lock, then runs :func:`last_logits_locked` (same arguments).
    """
    with engine.lock:
        return last_logits_locked(engine, *args, **kwargs)


def last_logits_locked(
    engine: Engine,
    adapter: Adapter,
    rows: Sequence[Sequence[int]],
    shared: int,
    *,
    reuse: bool = True,
) -> torch.Tensor:
    """Next-token logits after each row with ``adapter`` active (``[k, vocab]``); lock held.

    All rows share their first ``shared`` tokens (the conversation, up to the invocation for
    an aLoRA). With ``reuse`` (when the adapter's kind allows it) the base cache of that prefix
    is reused and left base-only. Several rows run as one forward: the shared part once, then
    each suffix.
    """
    strategy = adapter.strategy
    suffixes = [list(r[shared:]) for r in rows]
    if len(rows) > 1 and not strategy.batchable(adapter, suffixes):
        # One offset must serve every suffix; if a requirement repeats the invocation, PEFT
        # would start the adapter there, so run such checks one by one instead.
        return torch.cat([last_logits_locked(engine, adapter, [r], shared, reuse=reuse)
                          for r in rows])
    base = strategy.base_cache_prefix(shared, reuse=reuse and engine.prefix_cache.enabled)
    holder, model = engine.holder, engine.model
    kw = cache_kwarg_name(model)
    with torch.no_grad():
        holder.assert_base()
        with engine.reusing(rows[0][: shared + 1], reuse=base > 0, base=shared,
                            reusable=base,
                            unreusable=strategy.base_cache_prefix(shared) == 0 < shared) as prefix:
            head = list(rows[0][prefix.reused : shared])
            if len(rows) == 1:
                fed = head + suffixes[0]
                start = strategy.require_activation(adapter, fed)
                kwargs: dict[str, Any] = {
                    # where the ids are read; model.device walks the parameters (~20 us)
                    "input_ids": torch.tensor(
                        [fed], device=model.get_input_embeddings().weight.device),
                    "logits_to_keep": 1,
                    # where PEFT would place the adapter, found once (holder.forward)
                    **strategy.peft_forward_kwargs(len(fed) - start),
                }
            else:
                for s in suffixes:
                    strategy.require_activation(adapter, s)
                kwargs = _shared_batch(head, suffixes, prefix.reused, model.device)
                kwargs.update(strategy.peft_forward_kwargs(sum(map(len, suffixes))))
            logits = holder.forward(adapter.name, use_cache=True, **{kw: prefix.cache},
                                    **kwargs).logits[0].float()
            prefix.fed = len(head) + sum(map(len, suffixes))
    return logits


def adapter_generate(
    engine: Engine,
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
    base = strategy.base_cache_prefix(shared, reuse=reuse and engine.prefix_cache.enabled)
    holder, model = engine.holder, engine.model
    kw = cache_kwarg_name(model)
    with engine.lock, torch.no_grad():
        holder.assert_base()
        with engine.reusing(ids[: shared + 1], reuse=base > 0, base=shared,
                            reusable=base,
                            unreusable=strategy.base_cache_prefix(shared) == 0 < shared) as prefix:
            tensor = torch.tensor([list(ids)], device=model.device)
            strategy.require_activation(adapter, ids[prefix.reused:])
            with holder.using(adapter.name) as peft:
                out = peft.generate(
                    input_ids=tensor, attention_mask=torch.ones_like(tensor),
                    max_new_tokens=max_new_tokens, do_sample=False, use_cache=True,
                    logits_processor=LogitsProcessorList(list(processors)),
                    output_scores=True, return_dict_in_generate=True,
                    pad_token_id=holder.tokenizer.pad_token_id, **{kw: prefix.cache},
                )
            prefix.result = output_cache(out)
            prefix.fed = len(ids) - prefix.reused
    new_ids = out.sequences[0, len(ids):].tolist()
    return new_ids, [s[0].float() for s in out.scores]


def mixed_batchable(calls: Sequence[tuple[Adapter, Sequence[int]]], shared: int) -> bool:
    """Whether ``calls`` (adapter, row) can run as one mixed-adapter forward after ``shared``.

    Every adapter must reuse the base cache (aLoRA: the rows' first ``shared`` tokens are base
    K/V for all of them, so one cache serves every row), the rows must agree on those tokens,
    and each suffix must start with its adapter's invocation and not repeat it (one offset,
    the suffix's length, then places each adapter exactly where PEFT alone would).
    """
    if len(calls) < 2 or shared < 1 or not all(
            a.strategy.base_cache_prefix(shared) == shared for a, _ in calls):
        return False
    head = list(calls[0][1][:shared])
    return all(list(r[:shared]) == head and len(r) > shared
               and a.strategy.batchable(a, [list(r[shared:])]) for a, r in calls)


def mixed_last_logits(
    engine: Engine, calls: Sequence[tuple[Adapter, Sequence[int]]], shared: int,
) -> torch.Tensor:
    """Next-token logits after each row, each with its own aLoRA on: one forward, ``[k, V]``.

    For several intrinsics on one turn (``mixed_batchable`` holds): the conversation's base
    cache is taken once (its missing tail prefilled by the base model, exactly what each aLoRA
    computes before its invocation), shared by every row as a broadcast copy, and the suffixes
    run as one batch of rows, right-padded, with PEFT's mixed-adapter batching
    (``adapter_names``: each row's adapter; ``alora_offsets``: each row's whole suffix). The
    prefix cache is left base-only, holding the conversation. Takes the model lock.
    """
    holder, model = engine.holder, engine.model
    kw = cache_kwarg_name(model)
    rows = [list(r) for _, r in calls]
    suffixes = [r[shared:] for r in rows]
    k = len(rows)
    device = model.device
    with engine.lock, torch.no_grad():
        holder.assert_base()
        with engine.reusing(rows[0][: shared + 1], base=shared, reusable=shared) as prefix:
            for adapter, suffix in zip((a for a, _ in calls), suffixes, strict=True):
                adapter.strategy.require_activation(adapter, suffix)
            head = rows[0][prefix.reused : shared]
            if head:  # the conversation's uncached tail: base K/V, as every aLoRA computes it
                model(input_ids=torch.tensor([head], device=device), use_cache=True,
                      logits_to_keep=1, **{kw: prefix.cache})
            pad_id = holder.tokenizer.pad_token_id or 0
            with holder.using(calls[0][0].name) as peft:
                logits = padded_suffix_logits(
                    peft, model, [(prefix.cache, shared)] * k, suffixes, pad_id,
                    adapter_names=[a.name for a, _ in calls],
                    alora_offsets=[max(map(len, suffixes))] * k)
            prefix.fed = len(head) + sum(map(len, suffixes))
    return logits
