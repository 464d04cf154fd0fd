"""Many conversations on one backend: reused/prefilled tokens and check latency per schedule.

N conversations (default 8, ~500-token histories), each one generation + 3 requirement checks,
run serially, interleaved and concurrently; one warm check against the bare PEFT forward
(the floor); and 4 concurrent forced ReACT agents (10 turns) against one alone. The measuring
code and its full description live in ``mellea_local.bench.conversations``.

Usage: python benchmarks/conversations.py [--quick] [--threads 1] [--size bench-20m]
Writes benchmarks/results/conversations.json and prints the tables.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mellea_local.bench.conversations import measure_conversations
from mellea_local.bench.requirement_check import open_check_bench
from mellea_local.bench.subjects import SIZES, build_sized_model
from mellea_local.embedded import build_tokenizer

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="3 conversations of ~200 tokens, 3 agents of 3 turns, tiny model")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--history", type=int, default=500)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--checks", type=int, default=3)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7, help="rounds of the floor measurement")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the three schedules, and of alone vs concurrent agents")
    ap.add_argument("--size", choices=sorted(SIZES), default="bench-20m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1, the default, is steadier on a busy machine)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.conversations, args.history, args.agents, args.turns = 3, 200, 3, 3
        args.repeats, args.rounds, args.size = 3, 1, "tiny"
    tokenizer = build_tokenizer()
    model = build_sized_model(tokenizer, args.size, device=args.device,
                              dtype=getattr(torch, args.dtype))
    bench = open_check_bench(model, tokenizer, model_id=args.size)
    try:
        result = measure_conversations(
            bench, n=args.conversations, history=args.history, new_tokens=args.new_tokens,
            checks=args.checks, agents=args.agents, turns=args.turns, repeats=args.repeats,
            rounds=args.rounds, agent_repeats=args.rounds,
            on_line=lambda line: print(line, flush=True))
    finally:
        bench.close()
    result["model"] = args.size
    out = args.out or RESULTS / "conversations.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
