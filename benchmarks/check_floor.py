"""One warm check against a bare PEFT aLoRA forward over the same suffix on the same base cache.

The floor runs on a model object of its own through plain transformers + PEFT (a DynamicCache
of the base prefix, the adapter's forward over the suffix): nothing of this package is in its
timed region. The measuring code lives in ``mellea_local.bench.check_floor``.

Without ``--model`` both sides are a random-init ``--size`` model with a random aLoRA. With
``--model`` (a registered name such as ``smollm2-135m``, a folder or a cached hub id) they are
those weights, loaded twice (our backend, and transformers alone for the floor), with the
aLoRA in ``--adapter`` (default: a random one of the model's shape); the conversations are
fitted with that model's own tokenizer and chat template.

Usage: python benchmarks/check_floor.py [--threads 1 2] [--lengths 1024 2048 4096] [--repeats 15]
       [--model smollm2-135m --adapter DIR] [--out FILE]
Writes benchmarks/results/check_floor.json (one block per thread count), or with --model
check_floor_<model folder name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import torch

from mellea_local.bench.check_floor import (
    TARGET,
    bare_peft_model,
    format_row,
    measure_check_floor,
    open_adapter_bench,
)
from mellea_local.bench.requirement_check import open_check_bench
from mellea_local.bench.subjects import SIZES, bare_pretrained, build_sized_model, real_model_folder
from mellea_local.embedded import build_tokenizer

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--size", choices=sorted(SIZES), default="bench-20m")
    ap.add_argument("--model", default=None,
                    help="real weights (registered name, folder or cached hub id) instead of "
                         "a random-init --size")
    ap.add_argument("--adapter", type=Path, default=None,
                    help="a trained aLoRA folder for --model (default: a random aLoRA)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    if args.adapter is not None and args.model is None:
        ap.error("--adapter needs --model (the random-init sizes get a random aLoRA)")
    if args.model is None:
        tokenizer = build_tokenizer()
        max_position = max(8192, max(args.lengths) + 512)

        def build() -> torch.nn.Module:
            return build_sized_model(tokenizer, args.size, max_position=max_position, seed=0)

        bench = open_check_bench(build(), tokenizer, model_id=args.size)
        label = args.size
        default_out = RESULTS / "check_floor.json"
    else:
        from mellea_local.launch import load_backend

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        folder = real_model_folder(args.model)

        def build() -> torch.nn.Module:  # the floor's model: transformers alone
            return bare_pretrained(folder)[0]

        backend = load_backend(args.model, dtype="float32")
        bench = (open_adapter_bench(backend, args.adapter) if args.adapter is not None
                 else open_check_bench(backend.model, backend.tokenizer, model_id=args.model))
        label = args.model
        default_out = RESULTS / f"check_floor_{Path(folder).name}.json"
    try:
        alora_dir = args.adapter if args.adapter is not None else bench.workdir / "alora"
        floor_model = bare_peft_model(build, alora_dir)
        result: dict[str, object] = {
            "benchmark": "check_floor", "model": label,
            "adapter": str(args.adapter) if args.adapter else "random aLoRA (seed 1)",
            "target": TARGET, "command": command, "by_threads": {}}
        for threads in args.threads:
            torch.set_num_threads(threads)
            print(f"torch threads: {threads}, load average {os.getloadavg()}", flush=True)
            block = measure_check_floor(bench, floor_model, lengths=args.lengths,
                                        repeats=args.repeats,
                                        on_row=lambda row: print(format_row(row), flush=True))
            result["by_threads"][str(threads)] = block  # type: ignore[index]
    finally:
        bench.close()
    result["met"] = all(b["met"] for b in result["by_threads"].values())  # type: ignore[union-attr]
    out = args.out or default_out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
