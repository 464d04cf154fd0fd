"""Generation overhead: ``generate_from_context`` against a bare ``model.generate``.

Same model, same prompt ids, same number of new tokens (``min_new_tokens`` pins it), greedy,
both run from a worker thread, the backend's prefix cache off: the difference is our overhead
(the measuring code lives in ``mellea_local.bench.generation``). Runs alternate between the
two so machine drift hits both alike.

Without ``--model`` the subject is a random-init model (``--hidden``, ``--layers``) on the
embedded tokenizer. ``--model`` (a registered name such as ``smollm2-135m``, a folder or a
cached hub id) loads real weights and their tokenizer with transformers alone; the prompt is
rendered by that tokenizer's chat template, after a conversation of ``--context-tokens``
prompt tokens when given (each value one run; 0 is the question alone).

Usage: python benchmarks/generate.py [--new-tokens 256] [--repeats 7] [--device cpu]
       [--model smollm2-135m] [--context-tokens 1024 2048] [--out FILE]
Writes benchmarks/results/generate.json, or with --model generate_<model folder name>.json.
(`mellea-local bench` runs this with the other benchmarks and draws the figures.)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import torch

from mellea_local.bench.generation import format_generation, measure_generation
from mellea_local.threads import apply_threads

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--model", default=None,
                    help="real weights (registered name, folder or cached hub id) instead of "
                         "a random-init model")
    ap.add_argument("--context-tokens", type=int, nargs="+", default=None,
                    help="prompt lengths: the question follows a conversation this long "
                         "(0: the question alone)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: usable CPUs less the load)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    apply_threads(args.threads or None)  # the report states the count (machine_info)

    dtype = getattr(torch, args.dtype)
    if args.model is None:
        from mellea_local.embedded import build_model, build_tokenizer

        tokenizer = build_tokenizer()
        model = build_model(tokenizer, hidden_size=args.hidden, num_layers=args.layers,
                            num_heads=8, num_kv_heads=4)
        model.to(device=args.device, dtype=dtype)
        stem = "generate"
    else:
        from mellea_local.bench.subjects import bare_pretrained, real_model_folder

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        folder = real_model_folder(args.model)
        model, tokenizer = bare_pretrained(folder, dtype=dtype, device=args.device)
        stem = f"generate_{Path(folder).name}"
    runs = []
    for context in args.context_tokens or [None]:
        result = measure_generation(model, tokenizer, new_tokens=args.new_tokens,
                                    repeats=args.repeats, context_tokens=context)
        result["device"], result["dtype"] = args.device, args.dtype  # as typed, like before
        print(format_generation(result), flush=True)
        runs.append(result)
    if len(runs) == 1:
        output: dict[str, object] = runs[0]
    else:
        output = {"benchmark": "generate", "runs": runs,
                  "overhead_pct_max": max(r["overhead_pct"] for r in runs)}
    output["model"] = args.model or f"random-init hidden {args.hidden}, {args.layers} layers"
    output["command"] = command
    out = args.out or RESULTS / (f"{stem}.json" if args.device == "cpu"
                                 else f"{stem}-{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(output, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
