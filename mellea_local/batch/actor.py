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
import time
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

    def prepare(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if self.threads and (self.device or "cpu").startswith("cpu"):
            import torch

            torch.set_num_threads(self.threads)


class CheckActor:
    """Scores rows of the ``check`` format; records identical to ``--engine local``'s."""

    def __init__(self, spec: BackendSpec) -> None:
        from mellea_local.cli.check import load_check_backend

        spec.prepare()
        self.backend, self.adapter = load_check_backend(
            spec.model, device=spec.device, dtype=spec.dtype, adapter=spec.adapter)
        # One loop for the actor's life: the backend's async machinery stays on one loop.
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.loop.run_until_complete(self._run(batch))

    async def _run(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from mellea_local.cli.check import check_item, encode_record, failure_reason, parse_line

        records, errors = [], []
        for line, text in zip(batch["line"].tolist(), batch["text"].tolist(), strict=True):
            try:
                rec = await check_item(self.backend, parse_line(line, text), self.adapter)
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


@dataclass(frozen=True)
class AccuracySpec:
    """How each accuracy actor builds its backend: ``mellea-local bench``'s accuracy flags."""

    model: str | None = None  # None: the embedded model with its trained aLoRA and LoRA
    adapter: str | None = None
    device: str | None = None
    dtype: str | None = None
    threads: int | None = 1

    def prepare(self) -> None:
        BackendSpec(device=self.device, threads=self.threads).prepare()


class AccuracyActor:
    """Scores labelled rows with every requirement-check adapter the bench would score.

    Per row and adapter: the verdicts (``requirement_check_to_bool`` of each output, as the
    local accuracy section decides them) and the seconds the batched call took.
    """

    def __init__(self, spec: AccuracySpec) -> None:
        from mellea_local.bench.suite import accuracy_backend

        spec.prepare()
        self.backend, self.adapters, why = accuracy_backend(
            spec.model, spec.adapter, device=spec.device or "cpu", dtype=spec.dtype)
        if self.backend is None:
            raise RuntimeError(f"accuracy cannot run: {why}")
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.loop.run_until_complete(self._run(batch))

    async def _run(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import json

        from mellea_local.bench.accuracy import context_of
        from mellea_local.intrinsics.requirement_check import check_outputs
        from mellea_local.requirements.requirement import requirement_check_to_bool

        results = []
        for text in batch["text"].tolist():
            row = json.loads(text)
            ctx = context_of(row["messages"])
            per_adapter = {}
            for adapter in self.adapters:
                t0 = time.perf_counter()
                raws = await check_outputs(self.backend, ctx, row["requirements"],
                                           adapter=adapter)
                per_adapter[adapter.name] = {
                    "kind": "alora" if adapter.is_alora else "lora",
                    "verdicts": [requirement_check_to_bool(r) for r in raws],
                    "seconds": time.perf_counter() - t0}
            results.append(json.dumps(per_adapter))
        return {"index": np.asarray(batch["index"], dtype=np.int64),
                "result": np.array(results, dtype=object),
                "pid": np.full(len(results), self.pid, dtype=np.int64)}
