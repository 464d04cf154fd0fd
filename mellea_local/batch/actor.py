"""The Ray Data actors: one backend per actor, the ``check`` command's own code per row.

``map_batches`` gets these classes (not instances): Ray builds one per actor process, so the
model loads once per actor (per GPU) and every batch after that is pure model time. They need
no Ray import, which keeps ``mellea_local.batch`` importable without the extra.

Each batch is a dict of numpy columns, ``line`` and ``text`` (the input line's JSON); the
result has ``line``, ``record`` (the JSON output line, as ``check`` writes it; empty when the
line failed), ``error`` (the reason, empty when it did not) and ``pid`` (the actor process, so
a driver or a test can tell restarted actors apart). A line that fails (a prompt longer than
the model) is an error row, never an exception: one bad conversation must not fail, and then
retry, a whole block of good ones.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BackendSpec:
    """How each actor builds its backend: the ``check`` flags, plus torch threads.

    ``threads`` caps torch's intra-op threads on a CPU actor: N actors on N cores each get
    one, instead of N x N threads fighting over the cores.
    """

    model: str = "embedded"
    device: str | None = None
    dtype: str | None = None
    adapter: str | None = None
    threads: int | None = 1
    route: bool = True
    """Let a program decide what it can verify exactly (``check --no-route``: False)."""

    def prepare(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if self.threads and (self.device or "cpu").startswith("cpu"):
            import torch

            torch.set_num_threads(self.threads)


class CheckActor:
    """Scores rows of the ``check`` format; records identical to ``--engine local``'s."""

    def __init__(self, spec: BackendSpec) -> None:
        from mellea_local.batch.local import load_check_backend

        spec.prepare()
        self.backend, self.adapter = load_check_backend(
            spec.model, device=spec.device, dtype=spec.dtype, adapter=spec.adapter)
        # One loop for the actor's life: the backend's async machinery stays on one loop.
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.route = spec.route

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.loop.run_until_complete(self._run(batch))

    async def _run(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from mellea_local.batch.local import check_item, encode_record, failure_reason, parse_line

        records, errors = [], []
        for line, text in zip(batch["line"].tolist(), batch["text"].tolist(), strict=True):
            try:
                rec = await check_item(self.backend, parse_line(line, text), self.adapter,
                                      route=self.route)
            except Exception as exc:
                records.append("")
                errors.append(failure_reason(exc))
                continue
            records.append(encode_record(rec))
            errors.append("")
        n = len(records)
        return {"line": np.asarray(batch["line"], dtype=np.int64),
                "record": np.array(records, dtype=object), "error": np.array(errors, dtype=object),
                "pid": np.full(n, self.pid, dtype=np.int64)}
