"""Checks from different conversations that wait at the same time run as one batched forward.

Why: several conversations checked at once (agents, a server, a scored data set) each need one
adapter forward over a short suffix on their own cached prefix. Run one by one, each forward is
a thin matrix product (suffix ~100 tokens); stacked, the same weights serve all rows in one
pass. Measured on the 20 M bench model, 1 thread, ~500-token prefixes: four checks batched
took 0.87x the time of four single forwards, the prefix copy included
(``benchmarks/cross_batch.py``); on a GPU it is the point.

How: :meth:`CheckBatcher.run` is called from a worker thread per request (the backend's
``next_token_logprobs`` for one row of an aLoRA that reuses the base cache). The request joins
a queue, then waits for the model lock. Whoever gets the lock takes every request queued for
the same adapter (up to ``max_batch``) and serves them together; the others find their result
ready. A batch:

- checks out each conversation's prefix from the prefix cache (a request whose prefix is not
  fully cached runs alone, the ordinary way, so its prefix gets cached);
- copies the prefixes into one left-padded batch cache (ragged lengths: padding + a 2-D
  attention mask, each row's suffix at its own positions), and right-pads the suffixes;
- runs one forward with the adapter on. PEFT finds each row's invocation itself; offsets are
  counted from the row's end, so right padding after it is adapted and never read;
- hands every prefix back to the prefix cache unchanged (the batch wrote only into its copy).

Exact against one by one (fp32, 1e-4; tested). A request whose invocation is missing fails
alone with ``AloraActivationError``; the rest of its batch still runs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from mellea_local.backends.hf.adapter_calls import padded_suffix_logits

if TYPE_CHECKING:
    from mellea_local.backends.hf.engine import Checkout, Engine

__all__ = ["MAX_BATCH", "CheckBatcher"]

MAX_BATCH = 8
"""Most requests in one batched forward (each adds a copy of its prefix)."""


@dataclass(eq=False)
class _Request:
    adapter: Any
    row: list[int]
    shared: int
    future: concurrent.futures.Future[torch.Tensor] = field(
        default_factory=concurrent.futures.Future)


SingleRun = Callable[[Any, list[int], int], torch.Tensor]
"""Runs one request the ordinary way (the caller holds the model lock): logits ``[1, V]``."""


class CheckBatcher:
    """Coalesces concurrent one-row adapter forwards over cached prefixes (module docstring)."""

    def __init__(self, engine: Engine, single: SingleRun, max_batch: int = MAX_BATCH) -> None:
        self._engine = engine
        self._single = single
        self._max_batch = max_batch
        self._pending: list[_Request] = []
        self._guard = threading.Lock()
        self.batches = 0
        """Batched forwards run (of two requests or more), since creation."""

    @property
    def pending(self) -> int:
        """Requests queued and not yet taken into a forward (a benchmark waits on this)."""
        with self._guard:
            return len(self._pending)

    def run(self, adapter: Any, row: Sequence[int], shared: int) -> torch.Tensor:
        """Next-token logits ``[1, vocab]`` after ``row`` with ``adapter`` on; blocks."""
        request = _Request(adapter, list(row), shared)
        with self._guard:
            self._pending.append(request)
        with self._engine.lock:
            if not request.future.done():
                with self._guard:
                    others = [p for p in self._pending
                              if p.adapter is adapter and p is not request]
                    batch = [request, *others[: self._max_batch - 1]]
                    for p in batch:
                        self._pending.remove(p)
                self._serve(batch)
        return request.future.result()

    def _serve(self, batch: list[_Request]) -> None:
        """Run ``batch`` (model lock held) and settle every request's future.

        Each prefix is checked out through the engine's cache rule (``Engine.reusing``) and
        handed back unchanged when the batch is done: the batch writes into its own copy.
        """
        ready: list[tuple[_Request, Checkout, contextlib.ExitStack]] = []
        for request in batch:
            if len(batch) > 1:
                stack = contextlib.ExitStack()
                prefix = stack.enter_context(self._engine.reusing(
                    request.row[: request.shared + 1], base=request.shared,
                    reusable=request.shared))
                if prefix.reused == request.shared:
                    ready.append((request, prefix, stack))
                    continue
                prefix.abandon()  # not fully cached: runs alone, so its prefix gets cached
                stack.close()
            _settle(request, lambda r=request: self._single(r.adapter, r.row, r.shared))
        if len(ready) == 1:  # the rest ran alone: no batch left to form
            request, _, stack = ready[0]
            stack.close()
            _settle(request, lambda: self._single(request.adapter, request.row, request.shared))
            return
        if ready:
            self._batched(ready)

    def _batched(self, ready: list[tuple[_Request, Checkout, contextlib.ExitStack]]) -> None:
        adapter = ready[0][0].adapter
        strategy = adapter.strategy
        runnable = []
        for request, prefix, stack in ready:
            try:
                strategy.require_activation(adapter, request.row[request.shared:])
            except BaseException as exc:
                request.future.set_exception(exc)
                stack.close()
            else:
                runnable.append((request, prefix, stack))
        if not runnable:
            return
        try:
            with torch.no_grad():
                logits = self._forward(adapter, [(r, p.cache) for r, p, _ in runnable])
        except BaseException as exc:
            for request, _, _ in runnable:
                request.future.set_exception(exc)
        else:
            self.batches += 1
            for k, (request, prefix, _) in enumerate(runnable):
                prefix.fed = len(request.row) - request.shared
                request.future.set_result(logits[k : k + 1])
        finally:
            for _, _, stack in runnable:  # untouched: the batch wrote into its own copy
                stack.close()

    def _forward(self, adapter: Any, runnable: list[tuple[_Request, Any]]) -> torch.Tensor:
        """One forward over every request's suffix on its own prefix (left-padded batch
        cache, right-padded suffixes: ``adapter_calls.padded_suffix_logits``)."""
        pad_id = self._engine.tokenizer.pad_token_id or 0
        with self._engine.holder.using(adapter.name) as peft:
            return padded_suffix_logits(
                peft, self._engine.model, [(cache, r.shared) for r, cache in runnable],
                [r.row[r.shared:] for r, _ in runnable], pad_id)


def _settle(request: _Request, run: Callable[[], torch.Tensor]) -> None:
    try:
        request.future.set_result(run())
    except BaseException as exc:
        request.future.set_exception(exc)
