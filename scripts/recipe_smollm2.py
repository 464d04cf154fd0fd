"""Short training runs that compare SmolLM2 checker recipes on the same validation split.

    python scripts/recipe_smollm2.py \\
        --data benchmarks/data/requirement-check/SmolLM2-135M-Instruct.train.jsonl \\
        --steps 60 --out benchmarks/results/recipe_smollm2.json

Every variant trains with ``mellea_local.training.train_adapter`` (what ``mellea-local train``
runs; the Python API because the CLI has no flag for target modules) on the same file, seed
and validation split (``--validation``), for the same number of optimizer steps, one torch
thread, and is scored by the trainer's own validation accuracy (the data's labels are balanced
per family, so it is close to balanced accuracy). Adapters go under ``--runs``, outside
``adapters/``; a rerun resumes each variant from its checkpoints.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

SHIPPED = "adapters/requirement-check/SmolLM2-135M-Instruct/alora"
QKV = ("q_proj", "k_proj", "v_proj")
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
VARIANTS: dict[str, dict[str, Any]] = {
    "qkv-r16-lr1e-3-from-shipped": dict(rank=16, alpha=32, target_modules=QKV, lr=1e-3,
                                         init_from=SHIPPED),
    "qkv-r16-lr3e-4-from-shipped": dict(rank=16, alpha=32, target_modules=QKV, lr=3e-4,
                                         init_from=SHIPPED),
    "qkv-r16-lr1e-3-fresh": dict(rank=16, alpha=32, target_modules=QKV, lr=1e-3),
    "all-linear-r16-lr1e-3-fresh": dict(rank=16, alpha=32, target_modules=ALL, lr=1e-3),
    "all-linear-r32-lr1e-3-fresh": dict(rank=32, alpha=32, target_modules=ALL, lr=1e-3),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--validation", type=float, default=0.15)
    parser.add_argument("--only", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--runs", default="/tmp/recipe-runs")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/recipe_smollm2.json"))
    args = parser.parse_args(argv)

    from mellea_local.training import TrainConfig, train_adapter

    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    runs = results.setdefault("runs", {})
    for name in args.only:
        cfg = TrainConfig(data=args.data, model=args.model, out_root=f"{args.runs}/{name}",
                          max_steps=args.steps, validation=args.validation, threads=1,
                          checkpoint_every=10, **VARIANTS[name])
        started = time.perf_counter()
        report = train_adapter(cfg).report
        val = report["validation_accuracy"][-1]["accuracy"]
        runs[name] = {
            "settings": {k: (list(v) if isinstance(v, tuple) else v)
                         for k, v in VARIANTS[name].items()},
            "steps": report["steps"], "batch_size": cfg.batch_size,
            "validation_examples": report["data"]["validation_examples"],
            "validation_accuracy": round(val, 4), "final_loss": report["final_loss"],
            "seconds": round(time.perf_counter() - started, 1)}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"{name}: validation {val:.3f} after {report['steps']} steps", flush=True)


if __name__ == "__main__":
    main()
