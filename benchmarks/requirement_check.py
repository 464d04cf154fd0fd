"""Requirement-check latency by mode and context length, as ratios measured in one run.

Modes, all on the same random-init model and the same conversation (the measuring code and the
full description live in ``mellea_local.bench.requirement_check``):

- ``ours``: aLoRA + base KV reuse + the one-forward fast path (what the library does);
- ``floor``: a bare adapter forward over the same suffix tokens with the same cached prefix;
- ``alora_scratch``: the same aLoRA check, prefilling the whole conversation;
- ``lora``: a plain LoRA check (must prefill everything: LoRA changes every token's K/V);
- ``llm_judge``: the base model asked the requirement as a question, generating its answer;
- ``batch8`` (per length): eight checks in one call, against one check.

Usage: python benchmarks/requirement_check.py [--quick] [--device cpu] [--dtype float32]
Writes benchmarks/results/requirement_check.json and prints a table of medians.
(`mellea-local bench` runs this with the other benchmarks and draws the figures.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mellea_local.bench.requirement_check import (
    HEADER,
    format_row,
    measure_requirement_checks,
    open_check_bench,
)
from mellea_local.bench.subjects import SIZES, build_sized_model
from mellea_local.embedded import build_tokenizer
from mellea_local.threads import apply_threads

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="lengths 256/1024, 3 repeats")
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--size", choices=sorted(SIZES), default="bench-20m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: usable CPUs less the load)")
    ap.add_argument("--skip-slow", action="store_true", help="leave out the LLM-as-judge mode")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    apply_threads(args.threads or None)  # the report states the count (machine_info)
    if args.quick:
        args.lengths, args.repeats = [256, 1024], 3
    print(HEADER)
    tokenizer = build_tokenizer()
    model = build_sized_model(tokenizer, args.size, device=args.device,
                              dtype=getattr(torch, args.dtype),
                              max_position=max(args.lengths) + 512)
    bench = open_check_bench(model, tokenizer, model_id=args.size)
    try:
        result = measure_requirement_checks(
            bench, lengths=args.lengths, repeats=args.repeats, skip_slow=args.skip_slow,
            model_label=args.size, on_row=lambda row: print(format_row(row), flush=True))
    finally:
        bench.close()
    result["device"], result["dtype"] = args.device, args.dtype  # as typed, like before
    suffix = "" if args.device == "cpu" else f"-{args.device}"
    out = args.out or RESULTS / f"requirement_check{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
