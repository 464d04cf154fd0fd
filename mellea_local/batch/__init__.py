"""Requirement checks over datasets on Ray Data: ``mellea-local check --engine ray``.

One process and one backend (``--engine local``) stop being enough at millions of
conversations x k requirements. This package runs the same checks on a Ray Data actor pool:
each actor holds one backend (one model per actor, per GPU on a cluster) and runs the
``check`` command's own per-line code, so the output file is record for record what the
local engine writes. ``ray.data.llm`` is not used: it drives vLLM, which has no aLoRA.

- ``run(input, output, ...)``: the pipeline (``pipeline``), with ``RayOptions`` for the pool.
- ``io``: reading and validating the input (JSONL or Parquet) in the driver.
- ``actor``: ``CheckActor`` and ``AccuracyActor`` (``mellea-local bench --engine ray``).
- ``accuracy``: the bench's adapter accuracy on the same pool.

Ray is an optional extra (``pip install 'mellea-local[ray]'``); it is imported only when a
pipeline runs, so importing this package never needs it.
"""

from mellea_local.batch.pipeline import INSTALL, BatchEvent, RayOptions, require_ray, run

__all__ = ["INSTALL", "BatchEvent", "RayOptions", "require_ray", "run"]
