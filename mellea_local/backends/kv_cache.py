"""KV prefix cache: keep the base model's K/V of many conversations and reuse the longest prefix.

Why: a requirement check (or the next turn) shares everything but a short suffix with an
earlier call *of the same conversation*. Reusing that prefix's K/V turns an O(context) prefill
into an O(suffix) one; this is what puts an aLoRA check at the compute floor. Real workloads
interleave many conversations (several agents, several users, a data set being scored), so the
cache must hold all of them at once and never give up one conversation's K/V to serve another.

Design: a set of *branches* with copy-on-write, LRU-evicted by a token budget.

- An entry is one branch: the token ids it covers (its key) and a cache holding exactly their
  K/V, contiguous per layer, so a forward reads it as it is (no gather, no concatenation).
- :meth:`PrefixCache.take` finds the entry sharing the longest common token prefix with the
  query (shortest entry on ties). Two cases:

  * the query *continues* the whole entry (the common prefix is the entry): the entry is lent
    in place. The caller appends into the room at the end of its buffers (``GrowableLayer``);
    positions before the entry's end are never written, so nothing the entry holds changes.
    This is the hot path of one conversation (next turn, check after a generation): no copy.
  * the query diverges inside the entry (another conversation sharing a role header or a
    system prompt, a retry of the same prompt, a branch), or the entry is already lent: the
    common prefix is *copied* into a new cache (copy-on-write) and the entry is left intact.

- :meth:`PrefixCache.store` hands a cache back under the ids it covers. An entry whose key is a
  prefix of the new key is superseded (the new one serves every lookup it would); a new key that
  is a strict prefix of a stored one is redundant and dropped. So per branch each token is held
  once; different branches may hold a common prefix twice (the price of contiguous entries), and
  the budget counts every copy, so it is honest about memory.
- Budget: total tokens over all entries <= ``token_budget``; least recently used entries go
  first. Spare room at the end of an entry's buffers (kept so the next call can append without
  a copy) is capped at a quarter of the entry's length on ``store``, so the K/V actually
  allocated stays within 1.25x the tokens accounted (:attr:`PrefixCache.allocated_tokens`).

Why not hashed blocks (vLLM) or a radix tree of shared segments (SGLang)? Both share storage of
common prefixes, but eager transformers attention wants each layer's K/V as one tensor, so a
forward over shared segments would first concatenate them: a copy of the whole context on every
call, which is the cost this cache exists to avoid. Here the common case (a conversation
continuing its own entry) copies nothing, and only a divergence copies the part it reuses.

Usage (the caller holds the backend's model lock throughout):

(a) base generation - extend with base tokens, store back under the longer key::

        cache, n = prefix_cache.take(ids)             # None, 0 on a miss
        cache = cache if cache is not None else new_cache(model)
        out = model.generate(ids, return_dict_in_generate=True, **{cache_kwarg_name(model): cache})
        prefix_cache.store(out.sequences[0], output_cache(out))  # key = the ids the cache covers

(b) aLoRA call - extend with adapter tokens, crop back so the cache stays base-only::

        cache, n = prefix_cache.take(ids)             # ids = context + check suffix
        logits = peft_model(input_ids=ids[None, n:], **{kwarg: cache}).logits
        crop_to(cache, base_len)                      # drop the adapter-tainted K/V
        prefix_cache.store(ids[:base_len], cache)
        # (or give_back(cache) when the cache was lent in place and base_len == n: the
        # entry stays as it is, no re-keying; Engine.reusing does this for a warm check)

If the model call raises, call :meth:`PrefixCache.discard` with the cache instead of storing it
(some layers may have been extended and others not): a lent entry is cropped back, intact.
After ``store`` the caller must not touch the cache object again.

Keys are the token ids whose K/V an entry holds, never output strings (equal strings from
different contexts must not collide). :meth:`PrefixCache.lookup` keeps at least one token of the
query uncached, because a forward needs one new token to produce logits.

Only K/V computed by the *base* model may be stored (the cache is shared by every later call);
plain-LoRA calls must neither take nor store, and an aLoRA call crops back to its invocation
start before storing. Call :meth:`PrefixCache.clear` if the base weights change.

Thread-safety: none of its own. The backend serialises every model call with one lock and
uses the prefix cache only under that lock.
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicLayer

from mellea_local.backends.cache_compat import (
    cache_batch_size,
    cache_seq_length,
    croppable_reason,
)
from mellea_local.backends.growable_layer import MIN_SPARE_TOKENS, GrowableLayer
from mellea_local.errors import InvalidInputError, KVCacheError
from mellea_local.inputs import check_int

__all__ = ["DEFAULT_TOKEN_BUDGET", "CacheEntry", "PrefixCache", "TokenIds"]

logger = logging.getLogger(__name__)

# 32k tokens holds e.g. 8 conversations of 4k tokens, or 64 of 500. Memory is
# 2 * layers * kv_heads * head_dim * bytes per token: about 4 KiB for the tiny test models,
# 16 KiB for the 20 M-parameter bench model, 160 KiB for an 8B model with 8 KV heads in bf16
# (5 GiB at the full budget; allocated memory stays within 1.25x of it).
DEFAULT_TOKEN_BUDGET = 32_768

SPARE_FRACTION = 4
"""Spare room an entry keeps on ``store``: at most ``length // SPARE_FRACTION`` tokens."""

TokenIds = Sequence[int] | torch.Tensor


@dataclass(eq=False, slots=True)
class CacheEntry:
    """One stored branch and the token ids whose K/V it holds (``len(key) == seq length``)."""

    key: torch.Tensor  # 1-D int64 on CPU
    cache: Cache
    lent: bool = False
    _array: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._array = self.key.numpy()

    def __len__(self) -> int:
        return int(self.key.numel())

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(self.key.tolist())


def _as_ids(ids: TokenIds) -> torch.Tensor:
    """Token ids as a 1-D int64 CPU tensor; a batch of one (``[1, n]``) is accepted."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.dim() != 1:
            raise KVCacheError(
                f"Token ids of shape {tuple(ids.shape)} cannot key a prefix cache entry; pass one "
                f"sequence, as a 1-D tensor or a [1, n] batch."
            )
        return ids.detach().to(device="cpu", dtype=torch.long)
    # Through numpy: torch.tensor(list) cost ~0.2 ms per 1,000 ids, twice per warm check.
    return torch.from_numpy(np.fromiter(ids, dtype=np.int64, count=len(ids)))


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D id arrays (numpy: ~1 us per pair)."""
    m = min(a.shape[0], b.shape[0])
    if m == 0:
        return 0
    differs = a[:m] != b[:m]
    first = int(differs.argmax())
    return first if differs[first] else m


def _crop_layers(cache: Cache, length: int) -> None:
    """Crop each layer to ``length`` tokens on its own (they may disagree after a failure)."""
    for layer in cache.layers:
        extra = layer.get_seq_length() - length
        if extra > 0:
            layer.crop(-extra)


def _copy_prefix(cache: Cache, length: int, capacity: int) -> Cache:
    """A new cache holding a copy of ``cache``'s first ``length`` tokens (copy-on-write)."""
    clone = copy.copy(cache)
    layers = []
    for layer in cache.layers:
        if isinstance(layer, DynamicLayer) and type(layer) in (DynamicLayer, GrowableLayer):
            layers.append(GrowableLayer.copy_of(layer, length, capacity))
        else:
            other = copy.deepcopy(layer)
            extra = other.get_seq_length() - length
            if extra > 0:
                other.crop(-extra)
            layers.append(other)
    clone.layers = layers
    return clone


def _trim(cache: Cache, length: int) -> None:
    """Cap each growable layer's spare room at ``length // SPARE_FRACTION`` tokens (one copy)."""
    limit = length + length // SPARE_FRACTION
    for i, layer in enumerate(cache.layers):
        if isinstance(layer, GrowableLayer) and layer.capacity > limit:
            cache.layers[i] = GrowableLayer.copy_of(layer, length, limit)


def _allocated(cache: Cache) -> int:
    """Tokens of K/V memory the cache's first layer holds (all layers are alike)."""
    for layer in cache.layers:
        if isinstance(layer, GrowableLayer):
            return layer.capacity
        return int(layer.get_seq_length())
    return 0


class PrefixCache:
    """Base-model KV branches keyed by token ids, bounded by total stored tokens, LRU evicted.

    Invariant: no stored key is a prefix of another (a longer entry serves every lookup a
    shorter one would), so each token is held at most once per branch.
    """

    def __init__(self, token_budget: int = DEFAULT_TOKEN_BUDGET) -> None:
        """``token_budget``: most tokens held over all entries; 0 disables the cache."""
        check_int(token_budget, "PrefixCache token_budget", minimum=0,
                  fix="pass a whole number of tokens, or 0 to disable the prefix cache")
        if token_budget < 0:
            raise InvalidInputError(
                f"token_budget must be >= 0, got {token_budget}; use 0 to disable the prefix cache."
            )
        self._budget = token_budget
        # Keyed by id(entry): unique while the entry is stored, and O(1) to find again.
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()  # least recently used first
        self._lent: dict[int, CacheEntry] = {}  # id(cache) -> entry, for entries lent in place
        self._total = 0
        self.evictions = 0
        """Entries dropped to keep the budget, since creation."""
        self.copies = 0
        """Copy-on-write checkouts (a query diverging inside an entry), since creation."""

    @property
    def token_budget(self) -> int:
        return self._budget

    @property
    def enabled(self) -> bool:
        return self._budget > 0

    @property
    def total_tokens(self) -> int:
        """Tokens held over all entries (always <= ``token_budget`` after a ``store``)."""
        return self._total

    @property
    def allocated_tokens(self) -> int:
        """Tokens of K/V memory the entries hold, spare room included (<= 1.25x total)."""
        return sum(_allocated(e.cache) for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[CacheEntry]:
        """The stored entries, least recently used first (for inspection, not for mutation)."""
        return list(self._entries.values())

    def clear(self) -> None:
        """Drop every entry, e.g. after the base weights changed."""
        self._entries.clear()
        self._lent.clear()
        self._total = 0

    def lookup(self, ids: TokenIds) -> tuple[CacheEntry | None, int]:
        """The entry sharing the longest prefix with ``ids`` and how many of its tokens to reuse.

        Leaves the store untouched. The reused count is at most ``len(ids) - 1``. Among equally
        good entries one that can be lent without a copy wins, then the shortest.
        Returns ``(None, 0)`` on a miss.
        """
        query = _as_ids(ids)
        return self._best(query.numpy(), query.numel() - 1)

    def _best(self, query: np.ndarray, limit: int) -> tuple[CacheEntry | None, int]:
        if not self._entries or limit < 1:
            return None, 0
        best: CacheEntry | None = None
        best_rank: tuple[int, bool, int] = (0, False, 0)
        for entry in self._entries.values():
            n = min(_common_prefix(entry._array, query), limit)
            if n == 0:
                continue
            rank = (n, not entry.lent and n == len(entry), -len(entry))
            if rank > best_rank:
                best, best_rank = entry, rank
        return (best, best_rank[0]) if best is not None else (None, 0)

    def take(self, ids: TokenIds) -> tuple[Cache | None, int]:
        """The K/V of ``ids[:n]`` for the longest cached prefix ``n``; ``(None, 0)`` on a miss.

        The caller may extend the cache and must hand it back with :meth:`store` (or
        :meth:`discard` after a failure). No stored entry loses a token: a query that continues
        an entry gets that entry's cache in place, any other gets a copy of the common prefix.
        """
        query = _as_ids(ids)
        entry, n = self._best(query.numpy(), query.numel() - 1)
        if entry is None:
            logger.debug("prefix cache miss for %d tokens", query.numel())
            return None, 0
        self._entries.move_to_end(id(entry))
        if not entry.lent and n == len(entry):
            _crop_layers(entry.cache, n)  # a failed borrower may have left layers extended
            entry.lent = True
            self._lent[id(entry.cache)] = entry
            logger.debug("prefix cache hit: lending an entry of %d tokens in place", n)
            return entry.cache, n
        self.copies += 1
        capacity = query.numel() + MIN_SPARE_TOKENS
        logger.debug("prefix cache hit: copying %d of %d cached tokens", n, len(entry))
        return _copy_prefix(entry.cache, n, capacity), n

    def discard(self, cache: Cache) -> None:
        """Give ``cache`` up after a failed call; an entry lent in place is restored intact.

        A borrower only ever writes past the entry's end (some layers may have been extended
        and others not when the call failed), so cropping each layer back restores the entry.
        """
        entry = self._lent.pop(id(cache), None)
        if entry is not None:
            _crop_layers(entry.cache, len(entry))
            entry.lent = False

    def give_back(self, cache: Cache) -> bool:
        """Return a cache lent in place that holds exactly its entry's tokens again (an aLoRA
        call cropped back to its invocation): the entry stays as it was, under its key, with
        no re-keying. False when ``cache`` is not such a loan; then ``store`` it instead.

        What ``store`` under the entry's own key would do, without converting and comparing
        the key again (~0.1 ms a warm check at 2k tokens): no other entry can be superseded
        by an unchanged key, and the spare room is capped the same way.
        """
        entry = self._lent.get(id(cache))
        if entry is None or id(entry) not in self._entries or cache_seq_length(cache) != len(
                entry):
            return False
        del self._lent[id(cache)]
        entry.lent = False
        _trim(cache, len(entry))
        return True

    def store(self, ids: TokenIds, cache: Cache) -> bool:
        """Hand ``cache`` to the store, keyed by the ids it covers; True when it was kept.

        ``ids`` may run past the cache (as ``generate``'s sequences do: the last token has no
        K/V yet); the key is ``ids[:cache length]``. The cache must hold base-model K/V only.
        Entries whose key is a prefix of the new key are replaced; a new key that is a strict
        prefix of a stored one is redundant and dropped. Least recently used entries are
        evicted until the budget holds.
        """
        lent = self._lent.pop(id(cache), None)
        if lent is not None:
            lent.lent = False
            if id(lent) in self._entries:
                self._remove(lent)  # re-inserted below under its (possibly longer) key
        if not self.enabled:
            return False
        reason = croppable_reason(cache)
        if reason is not None:
            logger.debug("prefix cache: not storing a cache that cannot be cropped: %s", reason)
            return False
        key = _as_ids(ids)
        n = cache_seq_length(cache)
        if n > key.numel():
            raise KVCacheError(
                f"The KV cache holds {n} tokens but only {key.numel()} ids were given to key it; "
                f"pass the ids the cache was computed on (or crop the cache to them first)."
            )
        batch = cache_batch_size(cache)
        if batch is not None and batch != 1:
            raise KVCacheError(
                f"The KV cache has batch size {batch}; prefix cache entries hold one sequence. "
                f"Store the single-sequence cache, before any batch_repeat_interleave."
            )
        if n == 0:
            return False
        if n > self._budget:
            logger.debug("prefix cache: %d tokens exceed the budget of %d", n, self._budget)
            return False
        key = key[:n].clone()
        array = key.numpy()
        for entry in list(self._entries.values()):
            common = _common_prefix(entry._array, array)
            if common == n and len(entry) > n:
                logger.debug("prefix cache: a stored entry already covers these %d tokens", n)
                self._entries.move_to_end(id(entry))
                return False
            if common == len(entry):
                self._remove(entry)  # superseded: the new entry holds these tokens and more
        _trim(cache, n)
        entry = CacheEntry(key, cache)
        self._entries[id(entry)] = entry
        self._total += n
        while self._total > self._budget:
            _, evicted = self._entries.popitem(last=False)
            self._forget(evicted)
            self.evictions += 1
            logger.debug("prefix cache: evicted an entry of %d tokens", len(evicted))
        return True

    def _remove(self, entry: CacheEntry) -> None:
        del self._entries[id(entry)]
        self._forget(entry)

    def _forget(self, entry: CacheEntry) -> None:
        self._total -= len(entry)
        if entry.lent:
            self._lent.pop(id(entry.cache), None)
            entry.lent = False
