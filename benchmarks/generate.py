"""Generation overhead: ``generate_from_context`` against a bare ``model.generate``.

Same model, same prompt ids, same number of new tokens (``min_new_tokens`` pins it), greedy,
both run from a worker thread.
The backend runs with its prefix cache off, so both sides prefill the whole prompt and the
difference is our overhead: rendering, the worker thread, the stopping criteria, decoding and
parsing. Runs alternate between the two so machine drift hits both alike.

Usage: python benchmarks/generate.py [--new-tokens 256] [--repeats 7] [--device cpu]
Writes benchmarks/results/generate.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model, build_tokenizer
from mellea_local.messages import Message
from mellea_local.options import ModelOption

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
                    help="torch threads (default: torch's choice; 1 is steadier on a busy machine)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=args.hidden, num_layers=args.layers,
                        num_heads=8, num_kv_heads=4)
    model.to(device=args.device, dtype=getattr(torch, args.dtype))
    backend = LocalHFBackend.from_loaded(model, tokenizer, model_id="bench", kv_cache_tokens=0)
    ctx = ChatContext().add(Message("system", "Answer briefly."))
    action = Message("user", "Tell me about the city of paris and its river.")
    n = args.new_tokens
    opts: dict[str, Any] = {ModelOption.MAX_NEW_TOKENS: n, "min_new_tokens": n}
    ids, _, _ = backend.render(action, ctx, model_options=opts)
    prompt = torch.tensor([ids], device=model.device)
    loop = asyncio.new_event_loop()

    def ours() -> int:
        async def go() -> int:
            mot, _ = await backend.generate_from_context(action, ctx, model_options=opts)
            await mot.avalue()
            return mot.usage["completion_tokens"]
        return loop.run_until_complete(go())

    def bare_generate() -> int:
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                             max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
        return out.shape[1] - prompt.shape[1]

    def bare() -> int:
        # In a worker thread, like ours: torch's intra-op threading behaves differently on the
        # main thread (much slower when the cores are shared), which is not our overhead.
        return loop.run_until_complete(asyncio.to_thread(bare_generate))

    ours(), bare()  # warm-up
    times: dict[str, list[float]] = {"ours": [], "bare": []}
    for _ in range(args.repeats):
        for name, fn in (("ours", ours), ("bare", bare)):
            t0 = time.perf_counter()
            produced = fn()
            times[name].append(time.perf_counter() - t0)
            assert produced == n, (name, produced)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "benchmark": "generate",
        "params": sum(p.numel() for p in model.parameters()),
        "prompt_tokens": len(ids),
        "new_tokens": n,
        "device": args.device,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.platform(),
        "median_s": med,
        "tokens_per_s": {k: n / v for k, v in med.items()},
        "overhead_pct": 100 * (med["ours"] / med["bare"] - 1),
    }
    print(f"prompt {len(ids)} tokens, {n} new; median ours {med['ours']:.3f}s "
          f"({n / med['ours']:.1f} tok/s), bare {med['bare']:.3f}s ({n / med['bare']:.1f} tok/s),"
          f" overhead {result['overhead_pct']:+.1f}%")
    out = args.out or RESULTS / ("generate.json" if args.device == "cpu"
                                 else f"generate-{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
