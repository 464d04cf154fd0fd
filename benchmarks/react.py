"""ReACT turn latency against history length, with and without KV prefix reuse.

The same random bench-size model runs the same agent loop twice: once behind a backend with
its prefix cache on, once with ``kv_cache_tokens=0``. Every turn is forced to write the same
tool call, whose tool returns the same paragraph, so only the history grows: without reuse a
turn prefills the whole history, with reuse only its new tokens. The ratio uses each turn's
fastest run (medians are reported too); the measuring code and the full description live in
``mellea_local.bench.react_turns``.

Usage: python benchmarks/react.py [--turns 10] [--repeats 3] [--device cpu] [--threads 1]
Writes benchmarks/results/react.json.
(`mellea-local bench` runs this with the other benchmarks and draws the figures.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mellea_local.bench.react_turns import format_react, measure_react
from mellea_local.embedded import build_model, build_tokenizer
from mellea_local.threads import apply_threads

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    # One thread by default: on a shared CPU box, multi-threaded kernels stall at every barrier
    # whenever a neighbour holds a core (observed: 40x slower turns, and noise over the signal).
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (0: usable CPUs less the load)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    apply_threads(args.threads or None)  # the report states the count (machine_info)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=args.hidden, num_layers=args.layers,
                        num_heads=8, num_kv_heads=4)
    model.to(device=args.device, dtype=getattr(torch, args.dtype))
    result = measure_react(model, tokenizer, turns=args.turns, repeats=args.repeats)
    result["device"], result["dtype"] = args.device, args.dtype  # as typed, like before
    for line in format_react(result):
        print(line)
    out = args.out or RESULTS / ("react.json" if args.device == "cpu"
                                 else f"react-{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
