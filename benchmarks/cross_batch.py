"""Cross-conversation batching: k checks of k conversations, one by one vs one batched forward.

Both sides go through the backend's ``CheckBatcher`` (``mellea_local.backends.hf.cross_batch``):
"singles" calls it k times in a row; "batched" queues the k calls on threads while the model is
busy, so the first to get the model serves all k in one padded forward (the prefix copies
included in its time). Prefixes are cached before timing; rounds alternate so drift hits both.
Also checks the batched logits against the single ones (fp32).

Usage: python benchmarks/cross_batch.py [--size bench-20m] [--k 2 4] [--threads 1]
Writes benchmarks/results/cross_batch.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from mellea_local.bench.conversations import run_together
from mellea_local.bench.requirement_check import open_check_bench
from mellea_local.bench.subjects import REQUIREMENTS, SIZES, build_sized_model, conversation
from mellea_local.bench.timing import machine_info
from mellea_local.embedded import build_tokenizer
from mellea_local.intrinsics.requirement_check import build_check_prompts

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="bench-20m")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--history", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = build_tokenizer()
    bench = open_check_bench(build_sized_model(tokenizer, args.size), tokenizer)
    backend, alora = bench.backend, bench.alora
    forced = tokenizer.encode('{"score": "', add_special_tokens=False)
    rows = []
    for i in range(max(args.k)):
        ctx = conversation(tokenizer, args.history + 20 * i, seed=i)
        req = REQUIREMENTS[i % len(REQUIREMENTS)]
        [p] = build_check_prompts(backend, ctx, [req], alora)
        bench.check(ctx, alora, [req])
        rows.append((p.ids + forced, p.shared))
    result = {"benchmark": "cross_batch", "model": args.size, **machine_info(), "rows": []}
    try:
        for k in args.k:
            calls = [lambda r=r, s=s: backend.engine.batcher.run(alora, r, s) for r, s in rows[:k]]
            singles = [c() for c in calls]
            batched = run_together(backend, calls)
            diff = max(float((a - b).abs().max()) for a, b in zip(singles, batched, strict=True))
            times = {"singles": [], "batched": []}
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for c in calls:
                    c()
                times["singles"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                run_together(backend, calls)
                times["batched"].append(time.perf_counter() - t0)
            med = {m: 1000 * statistics.median(v) for m, v in times.items()}
            row = {"k": k, "median_ms": med, "batched_over_singles": med["batched"]
                   / med["singles"], "max_abs_diff": diff}
            result["rows"].append(row)
            print(f"k={k}: singles {med['singles']:.1f} ms, batched {med['batched']:.1f} ms "
                  f"-> {row['batched_over_singles']:.3f}x (max |diff| {diff:.1e})", flush=True)
    finally:
        bench.close()
    out = args.out or RESULTS / "cross_batch.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
