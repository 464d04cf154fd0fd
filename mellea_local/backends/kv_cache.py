"""KV prefix cache: reuse the base model's K/V of recent calls for the next one.

Why: a requirement check (or the next turn) after a generation shares everything but a short
suffix with the call before it. Reusing that prefix's K/V turns an O(context) prefill into an
O(suffix) one; this is what puts an aLoRA check at the compute floor.

Ownership, not copies. An entry is *checked out* by :meth:`PrefixCache.take`: it leaves the
store, is cropped in place (O(1)) to the reused length and belongs to the caller, who may extend
it. No deepcopy on the hot path, at the price of one consumer per entry at a time. Two flows:

(a) base generation - extend with base tokens, store back under the longer key::

        cache, n = prefix_cache.take(ids)             # None, 0 on a miss
        cache = cache if cache is not None else new_cache(model)
        out = model.generate(ids, return_dict_in_generate=True, **{cache_kwarg_name(model): cache})
        prefix_cache.store(out.sequences[0], output_cache(out))  # key = the ids the cache covers

(b) aLoRA call - extend with adapter tokens, crop back so the cache stays base-only::

        cache, n = prefix_cache.take(ids)             # ids = context + check suffix
        base_len = cache_seq_length(cache)            # == n
        logits = peft_model(input_ids=ids[None, n:], **{kwarg: cache}).logits
        crop_to(cache, base_len)                      # drop the adapter-tainted K/V
        prefix_cache.store(ids[:base_len], cache)

If the model call raises, drop the cache instead of storing it: some layers may have been
extended and others not. After ``store`` the caller must not touch the cache object again.

Keys are the token ids whose K/V an entry holds, never output strings (equal strings from
different contexts must not collide). :meth:`PrefixCache.lookup` keeps at least one token of the
query uncached, because a forward needs one new token to produce logits.

Only K/V computed by the *base* model may be stored (the cache is shared by every later call);
plain-LoRA calls must neither take nor store. Call :meth:`PrefixCache.clear` if the base weights
change.

Thread-safety: none of its own. The backend serialises every model call with one lock and
uses the prefix cache only under that lock.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from mellea_local.backends.cache_compat import (
    cache_batch_size,
    cache_seq_length,
    crop_to,
    croppable_reason,
)
from mellea_local.errors import KVCacheError

__all__ = ["DEFAULT_TOKEN_BUDGET", "CacheEntry", "PrefixCache", "TokenIds"]

logger = logging.getLogger(__name__)

# 32k tokens covers one long conversation plus a few branches (retries, checks). Memory is
# 2 * layers * kv_heads * head_dim * bytes per token: about 4 KiB for the tiny test models,
# 160 KiB for an 8B model with 8 KV heads in bf16 (5 GiB at the full budget). Entries made by
# ``new_cache`` also hold spare room for appends (GrowableLayer: max(256, n / 8) tokens per
# entry), which the budget does not count.
DEFAULT_TOKEN_BUDGET = 32_768

TokenIds = Sequence[int] | torch.Tensor


@dataclass(eq=False, slots=True)
class CacheEntry:
    """One stored cache and the token ids whose K/V it holds (``len(key) == seq length``)."""

    key: torch.Tensor  # 1-D int64 on CPU
    cache: Cache

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
    return torch.tensor(list(ids), dtype=torch.long)


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the longest common prefix of two 1-D id tensors (vectorised: keys run to 32k)."""
    m = min(a.numel(), b.numel())
    if m == 0:
        return 0
    differs = a[:m] != b[:m]
    return int(differs.int().argmax()) if bool(differs.any()) else m


class PrefixCache:
    """Base-model KV caches keyed by token ids, bounded by total stored tokens, LRU evicted.

    Invariant: no stored key is a prefix of another (a longer entry serves every lookup a
    shorter one would), so each token is stored at most once per branch.
    """

    def __init__(self, token_budget: int = DEFAULT_TOKEN_BUDGET) -> None:
        """``token_budget``: most tokens held over all entries; 0 disables the cache."""
        if token_budget < 0:
            raise ValueError(
                f"token_budget must be >= 0, got {token_budget}; use 0 to disable the prefix cache."
            )
        self._budget = token_budget
        # Keyed by id(entry): unique while the entry is stored, and O(1) to find again.
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()  # least recently used first
        self._total = 0

    @property
    def token_budget(self) -> int:
        return self._budget

    @property
    def enabled(self) -> bool:
        return self._budget > 0

    @property
    def total_tokens(self) -> int:
        """Tokens held over all entries (always <= ``token_budget``)."""
        return self._total

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[CacheEntry]:
        """The stored entries, least recently used first (for inspection, not for mutation)."""
        return list(self._entries.values())

    def clear(self) -> None:
        """Drop every entry, e.g. after the base weights changed."""
        self._entries.clear()
        self._total = 0

    def lookup(self, ids: TokenIds) -> tuple[CacheEntry | None, int]:
        """The entry sharing the longest prefix with ``ids`` and how many of its tokens to reuse.

        Leaves the store untouched. The reused count is at most ``len(ids) - 1``. Among equally
        good entries the shortest wins, since taking it discards the fewest cached tokens.
        Returns ``(None, 0)`` on a miss.
        """
        query = _as_ids(ids)
        limit = query.numel() - 1
        if not self._entries or limit < 1:
            return None, 0
        best: CacheEntry | None = None
        best_n = 0
        for entry in self._entries.values():
            n = min(_common_prefix(entry.key, query), limit)
            if n > best_n or (n == best_n and best is not None and len(entry) < len(best)):
                best, best_n = entry, n
        return (best, best_n) if best_n > 0 else (None, 0)

    def take(self, ids: TokenIds) -> tuple[Cache | None, int]:
        """Check out the best entry for ``ids``, cropped in place to the reused length.

        Returns ``(cache, n)``: ``cache`` holds the K/V of ``ids[:n]``, belongs to the caller and
        has left the store (hand it back with :meth:`store`). ``(None, 0)`` on a miss.
        """
        entry, n = self.lookup(ids)
        if entry is None:
            logger.debug("prefix cache miss for %d tokens", _as_ids(ids).numel())
            return None, 0
        self._remove(entry)
        crop_to(entry.cache, n)
        logger.debug("prefix cache hit: reusing %d of %d cached tokens", n, len(entry))
        return entry.cache, n

    def store(self, ids: TokenIds, cache: Cache) -> bool:
        """Hand ``cache`` to the store, keyed by the ids it covers; True when it was kept.

        ``ids`` may run past the cache (as ``generate``'s sequences do: the last token has no
        K/V yet); the key is ``ids[:cache length]``. The cache must hold base-model K/V only.
        Entries whose key is a prefix of the new key are replaced; a new key that is a strict
        prefix of a stored one is redundant and dropped. Least recently stored entries are
        evicted until the budget holds.
        """
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
        for entry in list(self._entries.values()):
            common = _common_prefix(entry.key, key)
            if common == n and len(entry) > n:
                logger.debug("prefix cache: a stored entry already covers these %d tokens", n)
                self._entries.move_to_end(id(entry))
                return False
            if common == len(entry):
                self._remove(entry)  # superseded: the new entry holds these tokens and more
        entry = CacheEntry(key, cache)
        self._entries[id(entry)] = entry
        self._total += n
        while self._total > self._budget:
            _, evicted = self._entries.popitem(last=False)
            self._total -= len(evicted)
            logger.debug("prefix cache: evicted an entry of %d tokens", len(evicted))
        return True

    def _remove(self, entry: CacheEntry) -> None:
        del self._entries[id(entry)]
        self._total -= len(entry)
