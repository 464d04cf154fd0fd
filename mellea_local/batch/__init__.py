"""Requirement checks over datasets on Ray Data: ``mellea-local check --engine ray``.

One process and one backend (``--engine local``) stop being enough at millions of
conversations x k requirements. This package runs the same checks on a Ray Data actor pool:
each actor holds one backend (one model per actor, per GPU on a cluster) and runs the
``check`` command's own per-line code, so the output file is record for record what the
local engine writes. ``ray.data.llm`` is not used: it drives vLLM, which has no aLoRA.

- ``run(input, output, ...)``: the pipeline (``pipeline``), with ``RayOptions`` for the pool.
- ``io``: reading and validating the input (JSONL or Parquet) in the driver.
- ``actor``: ``CheckActor``, one backend per actor.
- ``watchdog``: ends a private Ray with its driver, even a SIGKILLed one.
- ``local``: the in-process engine (``--engine local``) and the per-line code both share.

``mellea-local bench --engine ray`` runs its accuracy section on the same pool
(``mellea_local.bench.ray_accuracy``).

Ray is an optional extra (``pip install 'mellea-local[ray]'``); it is imported only when a
pipeline runs, so importing this package never needs it.
"""

from mellea_local.batch.io import INSTALL, require_ray
from mellea_local.batch.pipeline import BatchEvent, RayOptions, run

__all__ = ["INSTALL", "BatchEvent", "RayOptions", "require_ray", "run"]
