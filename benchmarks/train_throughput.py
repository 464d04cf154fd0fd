"""`mellea-local train`'s step against a bare PEFT training loop on the same batches.

Both sides train the same requirement-check adapter (PEFT aLoRA, or LoRA with ``--kind lora``)
on a real base model, one optimiser step per batch, batches built once by the trainer's row
code (the check's own prompt) outside the timed regions:

- ``ours``: ``mellea_local.training.loop.train_step``, the function ``train_adapter`` calls
  (for an aLoRA the conversation runs through the base without autograd, the suffix from the
  invocation through the adapter; logits only where the answer is);
- ``bare``: what a user writes with transformers + PEFT alone: ``model(input_ids,
  attention_mask, position_ids, labels)`` with the prompt masked to -100 (PEFT finds the
  invocation itself), ``loss.backward()``, clipping, ``AdamW.step()``. Nothing of this package
  runs in its timed region.

Each side trains its own copy; steps of the two alternate so drift on a shared machine hits
both alike. Reported: median seconds per step, tokens/s (non-pad tokens of the batch) and the
ratio ours / bare (target <= 1.15).

Usage: python benchmarks/train_throughput.py --model smollm2-135m --data DATA.jsonl
           [--kind alora] [--batch-size 8] [--repeats 5] [--threads 1]
Writes benchmarks/results/train_throughput[_<kind>].json.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).parent / "results"
TARGET = 1.15


def bare_step(model: Any, optimizer: Any, params: list[Any], batch: dict[str, Any]) -> float:
    """The textbook step: the whole sequence through PEFT, HF's own shifted cross-entropy."""
    loss = model(**batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    return loss.item()


def bare_batch(rows: list[Any], pad: int) -> dict[str, Any]:
    width = max(len(r.ids) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r.ids)) + r.ids for r in rows])
    mask = torch.tensor([[0] * (width - len(r.ids)) + [1] * len(r.ids) for r in rows])
    labels = torch.full_like(ids, -100)
    for i, r in enumerate(rows):
        labels[i, width - r.answer:] = ids[i, width - r.answer:]
    return {"input_ids": ids, "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0), "labels": labels}


def main() -> None:
    from peft import LoraConfig, get_peft_model

    from mellea_local.bench.timing import machine_info
    from mellea_local.intrinsics.scoring import category_tokens
    from mellea_local.threads import apply_threads
    from mellea_local.training.data import load_training_data
    from mellea_local.training.loop import TrainConfig, _load_base, train_step
    from mellea_local.training.rows import adapter_record, build_rows

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", required=True, help="check-format JSONL with labels")
    ap.add_argument("--kind", choices=("alora", "lora"), default="alora")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per side")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    apply_threads(args.threads)

    cfg = TrainConfig(data=args.data, model=args.model, kind=args.kind)
    model, tokenizer, base = _load_base(cfg)
    adapter = adapter_record(tokenizer, args.kind)
    data = load_training_data(args.data, validation=0.0)
    need = args.batch_size * (args.repeats + 1)
    rows = build_rows(tokenizer, adapter, data.train[:need], max_length=cfg.max_length)
    batches = [rows[i:i + args.batch_size] for i in range(0, need, args.batch_size)]
    table = category_tokens(tokenizer, adapter.fast_path)
    invocation = adapter.strategy.engine_invocation(adapter.invocation_tokens)
    alora = invocation is not None
    pad = tokenizer.pad_token_id

    def peft_copy() -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        m = get_peft_model(copy.deepcopy(model), LoraConfig(
            r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.0,
            target_modules=list(cfg.target_modules), task_type="CAUSAL_LM",
            alora_invocation_tokens=invocation)).train()
        params = [p for p in m.parameters() if p.requires_grad]
        return m, torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0), params

    ours_model, ours_opt, ours_params = peft_copy()
    bare_model, bare_opt, bare_params = peft_copy()
    bare_batches = [bare_batch(b, pad) for b in batches]
    seconds: dict[str, list[float]] = {"ours": [], "bare": []}
    for i, (batch, plain) in enumerate(zip(batches, bare_batches, strict=True)):
        t0 = time.perf_counter()
        train_step(ours_model, ours_opt, ours_params, batch, pad, table, alora=alora)
        t1 = time.perf_counter()
        bare_step(bare_model, bare_opt, bare_params, plain)
        t2 = time.perf_counter()
        if i:  # the first pair warms allocations up
            seconds["ours"].append(t1 - t0)
            seconds["bare"].append(t2 - t1)
        print(f"step {i}: ours {t1 - t0:.2f} s, bare {t2 - t1:.2f} s", flush=True)
    tokens = statistics.median(sum(len(r.ids) for r in b) for b in batches[1:])
    med = {k: statistics.median(v) for k, v in seconds.items()}
    ratio = med["ours"] / med["bare"]
    result = {
        "model": base, "kind": args.kind, "batch_size": args.batch_size,
        "median_tokens_per_batch": tokens,
        "mean_suffix_tokens": statistics.mean(len(r.ids) - r.shared for r in rows),
        "seconds_per_step": {k: round(v, 3) for k, v in med.items()},
        "tokens_per_second": {k: round(tokens / v, 1) for k, v in med.items()},
        "ours_over_bare": round(ratio, 3), "target": TARGET, "met": ratio <= TARGET,
        "samples": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        **machine_info(),
        "command": f"python benchmarks/train_throughput.py --model {args.model} --data "
                   f"{args.data} --kind {args.kind} --batch-size {args.batch_size} "
                   f"--repeats {args.repeats} --threads {args.threads}",
    }
    out = args.out or RESULTS / f"train_throughput_{args.kind}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"ours {med['ours']:.2f} s/step ({tokens / med['ours']:.0f} tok/s), bare "
          f"{med['bare']:.2f} s/step ({tokens / med['bare']:.0f} tok/s): ours/bare {ratio:.2f} "
          f"(target <= {TARGET}); wrote {out}")


if __name__ == "__main__":
    main()
