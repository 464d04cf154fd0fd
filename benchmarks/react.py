"""ReACT turn latency against history length, with and without KV prefix reuse.

The same random bench-size model runs the same agent loop twice: once behind a backend with
its prefix cache on, once with ``kv_cache_tokens=0``. Every turn does the same work: the model
is forced (a real ``generate`` constraint) to write the same tool call, whose tool returns the
same paragraph, so only the history grows. Without reuse each turn prefills the whole history,
so latency grows with it; with reuse a turn prefills only its new tokens and stays flat. Each
turn also reports its time to first token (the prefill alone, free of decode noise).
Runs alternate between the two backends so machine drift hits both alike; the cache is
cleared before each run so turn 1 starts cold. The ratio uses each turn's fastest run: on a
shared machine contention only ever adds time (medians are reported too).

Usage: python benchmarks/react.py [--turns 10] [--repeats 3] [--device cpu] [--threads 1]
Writes benchmarks/results/react.json.
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
from mellea_local.core.backend import Backend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model, build_tokenizer
from mellea_local.options import ModelOption
from mellea_local.react import react
from mellea_local.tools import MelleaTool

RESULTS = Path(__file__).parent / "results"

PARAGRAPH = (
    "The city of Paris lies on the river Seine in the north of France. It has been the "
    "capital for centuries and is known for its museums, its bridges and its small cafes. "
    "Millions of people visit every year, and the metro carries most of them from one "
    "district to the next. "
)
CALL = '<tool_call>{"name": "fetch", "arguments": {"page": "paris"}}</tool_call>'
FINAL = '<tool_call>{"name": "final_answer", "arguments": {"answer": "done"}}</tool_call>'


def fetch(page: str) -> str:
    """Fetch a page of the travel guide.

    Args:
        page: The page name.
    """
    return PARAGRAPH * 2


class Forcer:
    """``prefix_allowed_tokens_fn``: generation k writes ``texts[k]`` then EOS."""

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        self.scripts = [[*tokenizer.encode(t, add_special_tokens=False), tokenizer.eos_token_id]
                        for t in texts]
        self.turn = -1
        self.prompt_len = 0
        self.first_token_at: list[float] = []  # when each generation's prefill was done
        self._last = -1

    def __call__(self, batch_id: int, ids: torch.Tensor) -> list[int]:
        n = ids.shape[-1]
        if n != self._last + 1:
            self.first_token_at.append(time.perf_counter())
            self.turn, self.prompt_len = self.turn + 1, n
        self._last = n
        forced = self.scripts[self.turn]
        return [forced[min(n - self.prompt_len, len(forced) - 1)]]


class Timed(Backend):
    """Times each generation to its last token and keeps the backend's counters for it."""

    def __init__(self, inner: LocalHFBackend) -> None:
        self.inner = inner
        self.turns: list[dict[str, Any]] = []

    async def generate_from_context(self, action, ctx, **kw):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        mot, new_ctx = await self.inner.generate_from_context(action, ctx, **kw)
        await mot.avalue()
        last = self.inner.stats.last
        self.turns.append({
            "started": t0,
            "seconds": time.perf_counter() - t0,
            "prompt_tokens": mot.usage["prompt_tokens"],
            "new_tokens": mot.usage["completion_tokens"],
            "prefilled_tokens": last.prefilled_tokens,
            "reused_tokens": last.reused_tokens,
        })
        return mot, new_ctx


def run_once(backend: LocalHFBackend, turns: int, loop: asyncio.AbstractEventLoop) -> list[dict]:
    backend.prefix_cache.clear()
    timed = Timed(backend)
    forcer = Forcer(backend.tokenizer, [CALL] * turns + [FINAL])
    opts = {"prefix_allowed_tokens_fn": forcer, ModelOption.MAX_NEW_TOKENS: 64}
    out, _ = loop.run_until_complete(react(
        "Read the paris page of the guide again and again.", ChatContext(), timed,
        tools=[MelleaTool.from_callable(fetch)], model_options=opts, loop_budget=turns + 1))
    assert out.value == "done", out.value
    for turn, first in zip(timed.turns, forcer.first_token_at, strict=True):
        turn["ttft_seconds"] = first - turn.pop("started")
    return timed.turns[:turns]  # the final_answer turn is not part of the series


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
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=args.hidden, num_layers=args.layers,
                        num_heads=8, num_kv_heads=4)
    model.to(device=args.device, dtype=getattr(torch, args.dtype))
    backends = {
        "reuse": LocalHFBackend.from_loaded(model, tokenizer, model_id="bench-reuse"),
        "no_reuse": LocalHFBackend.from_loaded(model, tokenizer, model_id="bench-plain",
                                               kv_cache_tokens=0),
    }
    loop = asyncio.new_event_loop()
    for b in backends.values():  # warm-up
        run_once(b, 2, loop)
    runs: dict[str, list[list[dict]]] = {name: [] for name in backends}
    for _ in range(args.repeats):
        for name, b in backends.items():
            runs[name].append(run_once(b, args.turns, loop))

    result: dict[str, Any] = {
        "benchmark": "react",
        "params": sum(p.numel() for p in model.parameters()),
        "turns": args.turns,
        "repeats": args.repeats,
        "device": args.device,
        "dtype": args.dtype,
        "machine": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }
    for name, series in runs.items():
        per_turn = []
        for k in range(args.turns):
            first = series[0][k]
            seconds = [s[k]["seconds"] for s in series]
            ttft = [s[k]["ttft_seconds"] for s in series]
            per_turn.append({
                "turn": k + 1,
                "min_ms": 1000 * min(seconds),
                "median_ms": 1000 * statistics.median(seconds),
                "ttft_min_ms": 1000 * min(ttft),
                "ttft_median_ms": 1000 * statistics.median(ttft),
                "prompt_tokens": first["prompt_tokens"],
                "prefilled_tokens": first["prefilled_tokens"],
                "reused_tokens": first["reused_tokens"],
                "new_tokens": first["new_tokens"],
            })
        ratio = per_turn[-1]["min_ms"] / per_turn[0]["min_ms"]
        median_ratio = per_turn[-1]["median_ms"] / per_turn[0]["median_ms"]
        ttft_ratio = per_turn[-1]["ttft_min_ms"] / per_turn[0]["ttft_min_ms"]
        result[name] = {"per_turn": per_turn, f"turn{args.turns}_over_turn1": ratio,
                        f"turn{args.turns}_over_turn1_median": median_ratio,
                        f"ttft_turn{args.turns}_over_turn1": ttft_ratio}
        print(f"{name:>9}: turn ms " + " ".join(f"{t['min_ms']:.0f}" for t in per_turn)
              + f" ({ratio:.2f}x); time to first token ms "
              + " ".join(f"{t['ttft_min_ms']:.0f}" for t in per_turn) + f" ({ttft_ratio:.2f}x)"
              + "; prefilled " + " ".join(str(t["prefilled_tokens"]) for t in per_turn))
    out = args.out or RESULTS / ("react.json" if args.device == "cpu"
                                 else f"react-{args.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
