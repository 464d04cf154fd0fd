"""One warm check against a bare PEFT aLoRA forward over the same suffix on the same base cache.

The floor runs on a model object of its own through plain transformers + PEFT (a DynamicCache
of the base prefix, the adapter's forward over the suffix): nothing of this package is in its
timed region. The measuring code lives in ``mellea_local.bench.check_floor``.

Usage: python benchmarks/check_floor.py [--threads 1 2] [--lengths 1024 2048 4096] [--repeats 15]
Writes benchmarks/results/check_floor.json (one block per thread count).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mellea_local.bench.check_floor import TARGET, bare_peft_model, format_row, measure_check_floor
from mellea_local.bench.requirement_check import open_check_bench
from mellea_local.bench.subjects import SIZES, build_sized_model
from mellea_local.embedded import build_tokenizer

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--size", choices=sorted(SIZES), default="bench-20m")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    tokenizer = build_tokenizer()
    max_position = max(8192, max(args.lengths) + 512)

    def build() -> torch.nn.Module:
        return build_sized_model(tokenizer, args.size, max_position=max_position, seed=0)

    bench = open_check_bench(build(), tokenizer, model_id=args.size)
    try:
        assert bench.workdir is not None
        floor_model = bare_peft_model(build, bench.workdir / "alora")
        result: dict[str, object] = {"benchmark": "check_floor", "model": args.size,
                                     "target": TARGET, "by_threads": {}}
        for threads in args.threads:
            torch.set_num_threads(threads)
            print(f"torch threads: {threads}", flush=True)
            block = measure_check_floor(bench, floor_model, lengths=args.lengths,
                                        repeats=args.repeats,
                                        on_row=lambda row: print(format_row(row), flush=True))
            result["by_threads"][str(threads)] = block  # type: ignore[index]
    finally:
        bench.close()
    result["met"] = all(b["met"] for b in result["by_threads"].values())  # type: ignore[union-attr]
    out = args.out or RESULTS / "check_floor.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
