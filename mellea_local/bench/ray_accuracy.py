"""``mellea-local bench --engine ray``: adapter accuracy on the same actor pool as ``check``.

It lives in the bench stage (it builds the bench's own accuracy backend and tallies) and uses
``mellea_local.batch``'s pool machinery, so batch never imports bench.

Each actor builds the backend the local accuracy section would (``bench.suite.
accuracy_backend``: the embedded model's aLoRA and LoRA, or ``--model`` / ``--adapter``) and
scores each labelled conversation with every requirement-check adapter, all of its checks in
one batched call per adapter. The driver tallies the verdicts with the local section's own
``adapter_accuracy``, so both engines produce the same JSON shape, and the same numbers: the
verdicts are ``score > 0.5`` of the same calls. ``ms_per_check`` is the actors' summed model
time per check, comparable with the local figure; the wall time of the pool is not in it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mellea_local.batch.actor import BackendSpec
from mellea_local.batch.pipeline import (
    RayOptions,
    StreamStats,
    actor_device,
    check_resources,
    ray_session,
    require_ray,
    stream,
)
from mellea_local.bench.accuracy import LabelledItem, accuracy_frame, adapter_accuracy
from mellea_local.errors import BatchRunError

BackendBuilder = Callable[..., tuple[Any, list[Any], str]]
"""(model, adapter, *, device, dtype) -> (backend, adapters, label or why not)."""


@dataclass(frozen=True)
class AccuracySpec:
    """How each accuracy actor builds its backend: ``mellea-local bench``'s accuracy flags."""

    build: BackendBuilder  # bench.suite.accuracy_backend: the local section's own choice
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
        spec.prepare()
        self.backend, self.adapters, why = spec.build(
            spec.model, spec.adapter, device=spec.device or "cpu", dtype=spec.dtype)
        if self.backend is None:
            raise BatchRunError(f"accuracy cannot run: {why}")
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
                    "kind": adapter.kind.value,
                    "verdicts": [requirement_check_to_bool(r) for r in raws],
                    "seconds": time.perf_counter() - t0}
            results.append(json.dumps(per_adapter))
        return {"index": np.asarray(batch["index"], dtype=np.int64),
                "result": np.array(results, dtype=object),
                "pid": np.full(len(results), self.pid, dtype=np.int64)}


def evaluate_accuracy_ray(
    items: list[LabelledItem], *, model: str | None = None, adapter: str | None = None,
    device: str | None = None, dtype: str | None = None, options: RayOptions | None = None,
    tick: Callable[[], None] | None = None, build: BackendBuilder,
) -> dict[str, Any]:
    """Accuracy per family per adapter over ``items``, computed by a Ray actor pool.

    Same result as ``bench.accuracy.evaluate_accuracy`` on the backend each actor builds with
    ``build`` (the suite passes its ``accuracy_backend``; Ray ships the function by reference).
    """
    from mellea_local.launch import EMBEDDED, check_model_args

    options = options or RayOptions()
    options.validate()
    require_ray()
    check_model_args(model or EMBEDDED, dtype=dtype, adapter=adapter)
    device = actor_device(device, options)
    spec = AccuracySpec(build=build, model=model, adapter=adapter, device=device, dtype=dtype,
                        threads=options.threads)
    rows = [{"index": i, "text": json.dumps({"messages": it.messages,
                                             "requirements": it.requirements})}
            for i, it in enumerate(items)]
    results: dict[int, dict[str, Any]] = {}
    with ray_session(options) as ray:
        check_resources(ray, options)
        for row in stream(ray, rows, AccuracyActor, spec, options, "index", StreamStats()):
            results[int(row["index"])] = json.loads(str(row["result"]))
            if tick:
                tick()
    if len(results) != len(items):
        raise BatchRunError(
            f"The Ray pool returned {len(results)} of {len(items)} labelled conversations; "
            "rerun the benchmark.")
    out = accuracy_frame(items)
    ordered = [results[i] for i in range(len(items))]
    for name, first in ordered[0].items() if ordered else ():
        out["adapters"][name] = adapter_accuracy(
            items, out["families"], first["kind"], [r[name]["verdicts"] for r in ordered],
            sum(r[name]["seconds"] for r in ordered))
    return out
