"""``mellea-local bench --engine ray``: adapter accuracy on the same actor pool as ``check``.

Each actor builds the backend the local accuracy section would (``bench.suite.
accuracy_backend``: the embedded model's aLoRA and LoRA, or ``--model`` / ``--adapter``) and
scores each labelled conversation with every requirement-check adapter, all of its checks in
one batched call per adapter. The driver tallies the verdicts with the local section's own
``adapter_accuracy``, so both engines produce the same JSON shape, and the same numbers: the
verdicts are ``score > 0.5`` of the same calls. ``ms_per_check`` is the actors' summed model
time per check, comparable with the local figure; the wall time of the pool is not in it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mellea_local.batch.actor import AccuracyActor, AccuracySpec
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


def evaluate_accuracy_ray(
    items: list[LabelledItem], *, model: str | None = None, adapter: str | None = None,
    device: str | None = None, dtype: str | None = None, options: RayOptions | None = None,
    tick: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Accuracy per family per adapter over ``items``, computed by a Ray actor pool.

    Same result as ``bench.accuracy.evaluate_accuracy`` on the backend each actor builds.
    """
    from mellea_local.cli.options import EMBEDDED, check_model_args

    options = options or RayOptions()
    options.validate()
    require_ray()
    check_model_args(model or EMBEDDED, dtype=dtype, adapter=adapter)
    device = actor_device(device, options)
    spec = AccuracySpec(model=model, adapter=adapter, device=device, dtype=dtype,
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
