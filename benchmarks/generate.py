"""Generation overhead: ``generate_from_context`` against a bare ``model.generate``.

Same model, same prompt ids, same number of new tokens (``min_new_tokens`` pins it), greedy,
both run from a worker thread, the backend's prefix cache off: the difference is our overhead
(the measuring code lives in ``mellea_local.bench.generation``). Runs alternate between the
two so machine drift hits both alike.

Usage: python benchmarks/generate.py [--new-tokens 256] [--repeats 7] [--device cpu]
Writes benchmarks/results/generate.json.
(`mellea-local bench` runs this with the other benchmarks and draws the figures.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mellea_local.bench.generation import format_generation, measure_generation
from mellea_local.embedded import build_model, build_tokenizer
from mellea_local.threads import apply_threads

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: usable CPUs less the load)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    apply_threads(args.threads or None)  # the report states the count (machine_info)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=args.hidden, num_layers=args.layers,
                        num_heads=8, num_kv_heads=4)
    model.to(device=args.device, dtype=getattr(torch, args.dtype))
    result = measure_generation(model, tokenizer, new_tokens=args.new_tokens,
                                repeats=args.repeats)
    result["device"], result["dtype"] = args.device, args.dtype  # as typed, like before
    print(format_generation(result))
    out = args.out or RESULTS / ("generate.json" if args.device == "cpu"
                                 else f"generate-{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
