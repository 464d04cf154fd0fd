"""Counting each call's prefilled and reused tokens from the server's own ``timings``.

A call (a check, a generation, a stepped generation) may take several requests; its counts
go to the backend's shared ``CacheStats`` and, per asyncio task, to ``last``, so concurrent
conversations each read their own last call.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Sequence

from mellea_local.backends.llama_server.client import Completion
from mellea_local.backends.stats import CacheCounts, CacheStats

_IDS = itertools.count()


class CallCounts:
    def __init__(self, stats: CacheStats) -> None:
        self.stats = stats
        self.full_reads = 0  # requests that asked for the whole vocabulary
        self._lock = threading.Lock()
        self._last: contextvars.ContextVar[CacheCounts | None] = contextvars.ContextVar(
            f"llama_last_call_{next(_IDS)}", default=None)

    def record(self, completions: Sequence[Completion], reusable: int) -> CacheCounts:
        """Count one call (all its requests): prompt tokens prefilled, and those the first
        request's slot reused, out of ``reusable``."""
        first = completions[0].timings
        prefilled = sum(c.timings.prompt_n for c in completions if c.timings)
        with self._lock:
            counts = self.stats.record(prefilled=prefilled, reused=first.cache_n if first else 0,
                                       reusable=reusable)
        self._last.set(counts)
        return counts

    @property
    def last(self) -> CacheCounts:
        return self._last.get() or CacheCounts()
