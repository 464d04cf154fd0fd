"""Token counters that make the KV prefix cache observable (``backend.stats``).

They exist so a test or a benchmark can *prove* the compute floor: a requirement check after a
generation must prefill only its suffix, whatever the conversation's length. Counting tokens
(not seconds) makes that a deterministic assertion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mellea_local.backends.delegate import delegated
from mellea_local.errors import InvalidInputError

if TYPE_CHECKING:
    from mellea_local.backends.kv_cache import PrefixCache

__all__ = ["HIT_FRACTION", "CacheCounts", "CacheStats"]

HIT_FRACTION = 0.5
"""A call is a hit when it reused at least this share of the prefix it offered for reuse."""


@dataclass(frozen=True, slots=True)
class CacheCounts:
    """Token and hit counts, for one call or summed over many.

    ``reusable_tokens`` is the prefix a call offered for reuse: the prompt but its last token
    for a generation, the conversation up to the invocation for an aLoRA call (0 for a plain
    LoRA, which cannot reuse base K/V). A call is a *hit* when the cache covered at least
    ``HIT_FRACTION`` of that prefix, so another conversation's shared role header (a few
    tokens of a long prompt) counts as the miss it is; else a *miss*.

    ``unreusable_calls`` counts the calls whose adapter *cannot* reuse the conversation's
    cache whatever it holds: a plain LoRA adapts every token, so it prefills the whole prompt
    itself (its ``reusable_tokens`` is 0 and it is also a miss). After a call,
    ``backend.stats.last.unreusable_calls == 1`` says that call was such a one; the total says
    how many intrinsic calls paid a full prefill for that reason (an aLoRA of the same
    intrinsic would have prefilled only its suffix).
    """

    prefilled_tokens: int = 0
    reused_tokens: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    reusable_tokens: int = 0
    unreusable_calls: int = 0

    def __add__(self, other: CacheCounts) -> CacheCounts:
        return CacheCounts(
            self.prefilled_tokens + other.prefilled_tokens,
            self.reused_tokens + other.reused_tokens,
            self.cache_hits + other.cache_hits,
            self.cache_misses + other.cache_misses,
            self.reusable_tokens + other.reusable_tokens,
            self.unreusable_calls + other.unreusable_calls,
        )


class CacheStats:
    """Running totals plus the figures of the last call.

    The backend calls :meth:`record` once per model call (a generation, a check, a batch of
    checks) while holding its model lock. Totals and ``last`` are immutable snapshots replaced
    whole, so a reader on another thread sees each of them consistent, never half-updated.
    With a ``prefix_cache`` it also reports the cache's current state (``cache_entries``,
    ``cache_tokens``, ``cache_evictions``...).
    """

    __slots__ = ("_last", "_prefix_cache", "_total")

    def __init__(self, prefix_cache: PrefixCache | None = None) -> None:
        self._total = CacheCounts()
        self._last = CacheCounts()
        self._prefix_cache = prefix_cache

    def record(self, prefilled: int, reused: int, reusable: int | None = None, *,
               unreusable: bool = False) -> CacheCounts:
        """Count one call that fed ``prefilled`` new tokens on top of ``reused`` cached ones.

        ``reusable``: the prefix the call offered for reuse (default: ``reused``, i.e. the
        call could not have reused more). ``unreusable``: the call's adapter cannot read the
        base cache at all (a plain LoRA), counted in ``unreusable_calls``.
        """
        reusable = reused if reusable is None else reusable
        if prefilled < 0 or reused < 0 or reusable < 0:
            raise InvalidInputError(
                f"Token counts cannot be negative (prefilled={prefilled}, reused={reused}, "
                f"reusable={reusable}); pass the numbers of tokens fed to the model, taken "
                f"from the cache and offered for reuse."
            )
        hit = reused > 0 and reused >= HIT_FRACTION * reusable
        call = CacheCounts(prefilled, reused, int(hit), int(not hit), reusable, int(unreusable))
        self._last = call
        self._total = self._total + call
        return call

    def reset(self) -> None:
        """Zero the totals and the last call, e.g. between benchmark phases."""
        self._total = CacheCounts()
        self._last = CacheCounts()

    @property
    def total(self) -> CacheCounts:
        """All the totals as one consistent snapshot."""
        return self._total

    @property
    def last(self) -> CacheCounts:
        """The figures of the most recent call (all zero before the first)."""
        return self._last

    # The totals, one by one.
    prefilled_tokens: delegated[int] = delegated("_total.prefilled_tokens")
    reused_tokens: delegated[int] = delegated("_total.reused_tokens")
    cache_hits: delegated[int] = delegated("_total.cache_hits")
    cache_misses: delegated[int] = delegated("_total.cache_misses")
    reusable_tokens: delegated[int] = delegated("_total.reusable_tokens")
    unreusable_calls: delegated[int] = delegated(
        "_total.unreusable_calls",
        "Calls that could not reuse the conversation's cache (plain-LoRA adapter calls).")

    # The prefix cache's current state (0 without one).

    @property
    def cache_entries(self) -> int:
        """Entries (conversation branches) the prefix cache holds now."""
        return len(self._prefix_cache) if self._prefix_cache is not None else 0

    @property
    def cache_tokens(self) -> int:
        """Tokens the prefix cache holds now (<= ``cache_budget``)."""
        return self._prefix_cache.total_tokens if self._prefix_cache is not None else 0

    @property
    def cache_budget(self) -> int:
        return self._prefix_cache.token_budget if self._prefix_cache is not None else 0

    @property
    def cache_evictions(self) -> int:
        """Entries evicted to keep the budget, since the backend started."""
        return self._prefix_cache.evictions if self._prefix_cache is not None else 0

    @property
    def cache_copies(self) -> int:
        """Copy-on-write checkouts (a call reusing part of another branch), since start."""
        return self._prefix_cache.copies if self._prefix_cache is not None else 0

    def __repr__(self) -> str:
        t, last = self._total, self._last
        return (
            f"CacheStats(prefilled_tokens={t.prefilled_tokens}, reused_tokens={t.reused_tokens}, "
            f"cache_hits={t.cache_hits}, cache_misses={t.cache_misses}, "
            f"unreusable_calls={t.unreusable_calls}, "
            f"last=(prefilled={last.prefilled_tokens}, reused={last.reused_tokens}, "
            f"hit={bool(last.cache_hits)}), cache=(entries={self.cache_entries}, "
            f"tokens={self.cache_tokens}/{self.cache_budget}, "
            f"evictions={self.cache_evictions}))"
        )
