"""Token counters that make the KV prefix cache observable (``backend.stats``).

They exist so a test or a benchmark can *prove* the compute floor: a requirement check after a
generation must prefill only its suffix, whatever the conversation's length. Counting tokens
(not seconds) makes that a deterministic assertion.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CacheCounts", "CacheStats"]


@dataclass(frozen=True, slots=True)
class CacheCounts:
    """Token and hit counts, for one call or summed over many.

    A call is a *hit* when it reused at least one cached token, else a *miss*.
    """

    prefilled_tokens: int = 0
    reused_tokens: int = 0
    cache_hits: int = 0
    cache_misses: int = 0

    def __add__(self, other: CacheCounts) -> CacheCounts:
        return CacheCounts(
            self.prefilled_tokens + other.prefilled_tokens,
            self.reused_tokens + other.reused_tokens,
            self.cache_hits + other.cache_hits,
            self.cache_misses + other.cache_misses,
        )


class CacheStats:
    """Running totals plus the figures of the last call.

    The backend calls :meth:`record` once per model call (a generation, a check, a batch of
    checks) while holding its model lock. Totals and ``last`` are immutable snapshots replaced
    whole, so a reader on another thread sees each of them consistent, never half-updated.
    """

    __slots__ = ("_last", "_total")

    def __init__(self) -> None:
        self._total = CacheCounts()
        self._last = CacheCounts()

    def record(self, prefilled: int, reused: int) -> CacheCounts:
        """Count one call that fed ``prefilled`` new tokens on top of ``reused`` cached ones."""
        if prefilled < 0 or reused < 0:
            raise ValueError(
                f"Token counts cannot be negative (prefilled={prefilled}, reused={reused}); "
                f"pass the numbers of tokens fed to the model and taken from the cache."
            )
        hit = reused > 0
        call = CacheCounts(prefilled, reused, int(hit), int(not hit))
        self._last = call
        self._total = self._total + call
        return call

    def reset(self) -> None:
        """Zero the totals and the last call, e.g. between benchmark phases."""
        self._total = CacheCounts()
        self._last = CacheCounts()

    @property
    def total(self) -> CacheCounts:
        """All four totals as one consistent snapshot."""
        return self._total

    @property
    def last(self) -> CacheCounts:
        """The figures of the most recent call (all zero before the first)."""
        return self._last

    @property
    def prefilled_tokens(self) -> int:
        return self._total.prefilled_tokens

    @property
    def reused_tokens(self) -> int:
        return self._total.reused_tokens

    @property
    def cache_hits(self) -> int:
        return self._total.cache_hits

    @property
    def cache_misses(self) -> int:
        return self._total.cache_misses

    def __repr__(self) -> str:
        t, last = self._total, self._last
        return (
            f"CacheStats(prefilled_tokens={t.prefilled_tokens}, reused_tokens={t.reused_tokens}, "
            f"cache_hits={t.cache_hits}, cache_misses={t.cache_misses}, "
            f"last=(prefilled={last.prefilled_tokens}, reused={last.reused_tokens}, "
            f"hit={bool(last.cache_hits)}))"
        )
