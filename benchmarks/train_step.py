"""Training step cost of the embedded recipe: float32 (``--set bf16=0``) against bfloat16 matmuls.

The model of ``scripts/train_embedded.py`` (random init: a step's cost does not depend on the
weights) runs real blocks of the script's own stages, each mode on its own copy. A block is
``--block`` consecutive steps inside one ``train_precision`` region, as a stage runs them
(single steps, each followed by one of the other mode, measured the base at 0.59x where two
160-step runs of the script showed 0.77x and 0.86x). Blocks of the two modes alternate so
drift on a shared machine hits both alike; medians per mode, and the ratio bf16 / fp32 per
stage:

- ``base``: base-stage steps, every 4th a copy batch and a look-up drill batch, as trained;
- ``alora``: aLoRA steps (the conversation through the base without gradients, the rest
  through the adapter);
- ``lora``: LoRA steps (the whole check prompt through the adapter).

Usage: python benchmarks/train_step.py [--repeats 5] [--block 8] [--threads 2]
Writes benchmarks/results/train_step.json (milliseconds per step).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import platform
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from mellea_local.bench.timing import interleaved_medians

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "train_step.json"


def _script() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("train_embedded")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def base_modes(T: Any, cfg: Any, tok: Any, model: Any, block: int) -> dict[str, Any]:
    """``block`` base-stage steps per call, each mode on its own copy of ``model``."""
    data = T.base_data(cfg, tok)
    modes = {}
    for bf16 in (False, True):
        m = copy.deepcopy(model).train()
        opt = T.base_optimizer(m, cfg)
        probe = T.new_probe(cfg, 3)
        opt.add_param_group({"params": list(probe.head.parameters())})
        seeds = iter(range(10**9))

        def run(m=m, opt=opt, probe=probe, seeds=seeds, bf16=bf16) -> None:
            with T.train_precision(m, bf16):
                T.base_steps(m, opt, probe, cfg, tok, data, steps=block, lr=cfg.base_lr,
                             seed=next(seeds), label=f"{'bf16' if bf16 else 'fp32'} block")

        modes["bf16" if bf16 else "fp32"] = run
    return modes


def adapter_modes(T: Any, cfg: Any, tok: Any, model: Any, block: int, *,
                  alora: bool) -> dict[str, Any]:
    """``block`` adapter steps per call, on the rows the script trains that adapter on."""
    from peft import get_peft_model

    backend = T.LocalHFBackend.from_loaded(model, tok, model_id=T.BASE_NAME)
    examples = T.S.check_examples(random.Random(cfg.adapter_data_seed), 40)
    rows = T.check_rows(backend, T.adapter_record(tok, "alora" if alora else "lora"), examples)
    random.Random(0).shuffle(rows)
    answers = T.answer_pair(tok)
    modes = {}
    for bf16 in (False, True):
        m = get_peft_model(copy.deepcopy(model), T.lora_config(cfg, model)).train()
        params = [p for p in m.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=cfg.adapter_lr, weight_decay=0.0)
        counter = iter(range(10**9))

        def run(m=m, opt=opt, params=params, counter=counter, bf16=bf16) -> None:
            with T.train_precision(m, bf16):
                for _ in range(block):
                    start = next(counter) * cfg.adapter_batch % (len(rows) - cfg.adapter_batch)
                    T.adapter_step(m, opt, params, rows[start:start + cfg.adapter_batch],
                                   tok.pad_token_id, answers)

        modes["bf16" if bf16 else "fp32"] = run
    return modes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block", type=int, default=8, help="consecutive steps per measurement")
    ap.add_argument("--threads", type=int, default=2, help="the training script's default")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    T = _script()
    T.set_determinism(args.threads)
    # a tenth of the base data: the same length mix, built in seconds
    cfg = replace(T.Config(), chat_examples=2000, react_examples=250, self_check_examples=2000,
                  echo_examples=500, self_check_every=0)
    tok = T.build_tokenizer()
    model = T.new_base_model(cfg, tok)
    stages = {"base": base_modes(T, cfg, tok, model, args.block),
              "alora": adapter_modes(T, cfg, tok, model, args.block, alora=True),
              "lora": adapter_modes(T, cfg, tok, model, args.block, alora=False)}
    result: dict[str, Any] = {"threads": args.threads, "repeats": args.repeats,
                              "block": args.block,
                              "machine": platform.processor() or platform.machine(),
                              "torch": torch.__version__, "stages": {}}
    for name, modes in stages.items():
        for fn in modes.values():  # warm-up: first-call allocations
            fn()
        ms = {m: v / args.block for m, v in interleaved_medians(modes, args.repeats).items()}
        ratio = ms["bf16"] / ms["fp32"]
        result["stages"][name] = {"fp32_ms": round(ms["fp32"], 1), "bf16_ms": round(ms["bf16"], 1),
                                  "bf16_over_fp32": round(ratio, 3)}
        print(f"{name:>6}: fp32 {ms['fp32']:7.1f} ms  bf16 {ms['bf16']:7.1f} ms  "
              f"bf16/fp32 {ratio:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
