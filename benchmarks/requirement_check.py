"""Requirement-check latency by mode and context length, as ratios measured in one run.

Modes, all on the same random-init model and the same conversation:

- ``ours``: aLoRA + base KV reuse + the one-forward fast path (what the library does);
- ``floor``: a bare adapter forward over the same suffix tokens with the same cached prefix
  (what ``ours`` cannot beat; the gap is our Python overhead);
- ``alora_scratch``: the same aLoRA check, prefilling the whole conversation;
- ``lora``: a plain LoRA check (must prefill everything: LoRA changes every token's K/V);
- ``llm_judge``: the base model asked the requirement as a question, generating its answer
  from scratch (the peer's fallback path);
- ``batch8`` (per length): eight checks in one call, against one check.

Usage: python benchmarks/requirement_check.py [--quick] [--device cpu] [--dtype float32]
Writes benchmarks/results/requirement_check.json and prints a table of medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from mellea_local.backends.cache_compat import cache_kwarg_name, crop_to
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model, build_tokenizer
from mellea_local.embedded.corpus import REQUIREMENT_PHRASINGS
from mellea_local.embedded.random_adapter import save_random_adapter
from mellea_local.intrinsics.requirement_check import build_check_prompts, check_outputs
from mellea_local.messages import Message

RESULTS = Path(__file__).parent / "results"
WORDS = ("the city of paris is large and old", "a number like 42 is small",
         "london has a river and many bridges", "we answer in short plain sentences",
         "tokyo is the capital of japan", "please reply with valid json")
REQUIREMENTS = [p.format(word="paris", n=8) for p in REQUIREMENT_PHRASINGS] + [
    "The response mentions london.", "The response is at most 3 words long."]

SIZES = {  # name -> build_model kwargs
    "bench-20m": {"hidden_size": 512, "num_layers": 8, "num_heads": 8, "num_kv_heads": 4},
    "granite-3b-shape": {"hidden_size": 2560, "num_layers": 40, "num_heads": 40,
                         "num_kv_heads": 8, "intermediate_size": 8192},
}


def conversation(tokenizer: Any, n_tokens: int, seed: int = 0) -> ChatContext:
    """A user/assistant conversation of about ``n_tokens`` tokens, ending with an answer."""
    rng = random.Random(seed)
    ctx = ChatContext().add(Message("system", "Answer briefly."))
    total = 0
    while True:
        question = " ".join(rng.choice(WORDS) for _ in range(6)) + "?"
        answer = " ".join(rng.choice(WORDS) for _ in range(10)) + "."
        ctx = ctx.add(Message("user", question)).add(Message("assistant", answer))
        total += len(tokenizer.encode(question + answer, add_special_tokens=False)) + 10
        if total >= n_tokens:
            return ctx


def median_ms(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_grad_enabled(False)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=0, max_position=max(args.lengths) + 512,
                        **SIZES[args.size])
    model.to(device=args.device, dtype=getattr(torch, args.dtype))
    params = sum(p.numel() for p in model.parameters())
    tmp = Path(tempfile.mkdtemp(prefix="mellea-bench-"))
    alora_dir = save_random_adapter(model, tokenizer, tmp / "alora", alora=True, seed=1)
    lora_dir = save_random_adapter(model, tokenizer, tmp / "lora", alora=False, seed=2)
    backend = LocalHFBackend.from_loaded(model, tokenizer, model_id=args.size)
    alora = backend.add_adapter(alora_dir, name="alora")
    lora = backend.add_adapter(lora_dir, name="lora")
    holder = backend._holder  # the floor measures the bare forward the library wraps
    req = REQUIREMENTS[1]
    loop = asyncio.new_event_loop()

    def check(ctx: ChatContext, adapter: Any, reqs: list[str], **kw: Any) -> list[str]:
        return loop.run_until_complete(check_outputs(backend, ctx, reqs, adapter=adapter, **kw))

    def judge(ctx: ChatContext) -> None:
        opts = {"max_new_tokens": 8, "min_new_tokens": 8}
        question = Message("user", f"Does your last answer satisfy this requirement: {req} "
                                   "Reply yes or no.")
        ids, _, _ = backend.render(question, ctx, model_options=opts)
        tensor = torch.tensor([ids], device=model.device)
        model.generate(input_ids=tensor, attention_mask=torch.ones_like(tensor),
                       do_sample=False, pad_token_id=tokenizer.pad_token_id, **opts)

    def measure(length: int) -> dict[str, Any]:
        ctx = conversation(tokenizer, length)
        [prompt] = build_check_prompts(backend, ctx, [req], alora)
        forced = tokenizer.encode('{"score": "', add_special_tokens=False)
        suffix = prompt.ids[prompt.shared:] + forced
        check(ctx, alora, [req])  # warm: the base cache now holds the conversation
        [entry] = backend.prefix_cache.entries()
        suffix_t = torch.tensor([suffix], device=model.device)
        kw = cache_kwarg_name(model)

        def floor() -> None:
            with holder.using(alora.name) as peft:
                peft(input_ids=suffix_t, use_cache=True, **{kw: entry.cache})
            crop_to(entry.cache, prompt.shared)

        modes = {
            "ours": lambda: check(ctx, alora, [req]),
            "floor": floor,
            "alora_scratch": lambda: check(ctx, alora, [req], reuse=False),
            "lora": lambda: check(ctx, lora, [req]),
            "llm_judge": lambda: judge(ctx),
            "batch8": lambda: check(ctx, alora, REQUIREMENTS[:8]),
        }
        if args.skip_slow:
            modes.pop("llm_judge")
        # Interleave the modes round-robin so drift on a noisy machine hits all of them alike.
        samples: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(args.repeats):
            for name, fn in modes.items():
                samples[name].append(median_ms(fn, 1))
        med = {m: statistics.median(v) for m, v in samples.items()}
        row = {
            "context_tokens": prompt.shared,
            "suffix_tokens": len(suffix),
            "median_ms": med,
            "ours_over_floor": med["ours"] / med["floor"],
            "scratch_over_ours": med["alora_scratch"] / med["ours"],
            "lora_over_ours": med["lora"] / med["ours"],
            "batch8_over_one": med["batch8"] / med["ours"],
        }
        if "llm_judge" in med:
            row["judge_over_ours"] = med["llm_judge"] / med["ours"]
        print(_format_row(row), flush=True)
        return row

    rows = [measure(length) for length in args.lengths]
    return {
        "benchmark": "requirement_check",
        "model": args.size,
        "params": params,
        "device": args.device,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "rows": rows,
    }


def _format_row(row: dict[str, Any]) -> str:
    m = row["median_ms"]
    judge = f"{m['llm_judge']:9.1f}" if "llm_judge" in m else "        -"
    return (f"{row['context_tokens']:6d} {row['suffix_tokens']:4d} | {m['ours']:8.1f} "
            f"{m['floor']:8.1f} {m['alora_scratch']:9.1f} {m['lora']:8.1f} {judge} "
            f"{m['batch8']:8.1f} | {row['ours_over_floor']:5.2f} {row['scratch_over_ours']:6.1f}"
            f" {row['batch8_over_one']:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="lengths 256/1024, 3 repeats")
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--size", choices=sorted(SIZES), default="bench-20m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's choice; 1 is steadier on a busy machine)")
    ap.add_argument("--skip-slow", action="store_true", help="leave out the LLM-as-judge mode")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.lengths, args.repeats = [256, 1024], 3
    print(f"{'ctx':>6} {'sfx':>4} | {'ours':>8} {'floor':>8} {'scratch':>9} {'lora':>8} "
          f"{'judge':>9} {'batch8':>8} | {'o/fl':>5} {'sc/o':>6} {'b8/1':>5}   (ms, medians)")
    result = run(args)
    suffix = "" if args.device == "cpu" else f"-{args.device}"
    out = args.out or RESULTS / f"requirement_check{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
