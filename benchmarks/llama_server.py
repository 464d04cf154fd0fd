"""LlamaServerBackend against LocalHFBackend on the embedded model, and 1 vs 2 servers.

Three measurements, each as medians over interleaved rounds in one run (so drift on a shared
machine hits both sides), reported as ratios:

- **check latency**: one requirement check right after the conversation's last generation
  (both backends reuse the conversation's K/V and prefill only the check suffix);
- **generation throughput**: greedy new tokens per second for the same prompts;
- **fleet**: eight concurrent conversations (generate, check, generate, check) on one server vs
  two servers (one thread each), wall time;
- **long conversations** (issue 34): one conversation of 60-word turns checked every two turns
  up to ~1,900 tokens on one reused server: the largest score difference from LocalHFBackend,
  how many checks needed the whole vocabulary (``full_reads``), and the check latency ratio.

Also asserts what makes the comparison fair: the same scores (within 2e-3) and the same texts.

Usage: python benchmarks/llama_server.py [--rounds 7] [--threads 1] [--gguf-dir DIR]
Writes benchmarks/results/llama_server.json. Needs the llamacpp extra (llama-server binary).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.backends.llama_server import LlamaServerBackend
from mellea_local.backends.llama_server.gguf_export import export_gguf
from mellea_local.bench.timing import machine_info
from mellea_local.core.context import ChatContext
from mellea_local.intrinsics import arequirement_check
from mellea_local.messages import Message
from mellea_local.options import ModelOption

RESULTS = Path(__file__).parent / "results"
HISTORY = [("What is the capital of France?", "The capital of France is Paris."),
           ("Tell me about the river.", "The river is long and wide. It runs to the sea."),
           ("What is 17 * 23?", "17 * 23 = 391."),
           ("Name a colour.", "Blue."),
           ("Say hello.", "Hello! How can I help you today?")] * 3
REQUIREMENT = "The answer mentions Paris."
PROMPTS = ["What is the capital of France?", "Tell me about the river.", "Name an animal.",
           "What is 2 + 3?", "Describe the sea.", "What is the capital of Italy?",
           "Say hello.", "Name a colour."]
GEN = {ModelOption.MAX_NEW_TOKENS: 64}


def history() -> ChatContext:
    ctx = ChatContext()
    for q, a in HISTORY:
        ctx = ctx.add(Message("user", q)).add(Message("assistant", a))
    return ctx


async def timed_check(backend: Any, ctx: ChatContext) -> tuple[float, float]:
    t = time.perf_counter()
    score = await arequirement_check(ctx, backend, REQUIREMENT)
    return time.perf_counter() - t, score


async def timed_generation(backend: Any, prompt: str) -> tuple[float, int, str]:
    t = time.perf_counter()
    mot, _ = await backend.generate_from_context(Message("user", prompt), history(),
                                                 model_options=GEN)
    text = await mot.avalue()
    return time.perf_counter() - t, mot.usage["completion_tokens"], text


async def conversation(backend: Any, prompt: str) -> None:
    ctx = ChatContext()
    for turn in (prompt, "And why?"):
        mot, ctx = await backend.generate_from_context(Message("user", turn), ctx,
                                                       model_options=GEN)
        await mot.avalue()
        await arequirement_check(ctx, backend, REQUIREMENT)


async def fleet_wall(backend: Any) -> float:
    t = time.perf_counter()
    await asyncio.gather(*(conversation(backend, p) for p in PROMPTS))
    return time.perf_counter() - t


TEXT = ("the river runs long and wide through green hills to the sea where boats carry fish "
        "and grain from town to town while people watch the water and talk about weather "
        "markets travel family stories music bread stone bridges old roads")
WORDS = TEXT.split(" ")


async def long_conversation(hf: Any, llama: Any, max_tokens: int = 1900) -> dict[str, Any]:
    rng = random.Random(1)
    ctx, worst, checks, t_hf, t_llama = ChatContext(), 0.0, 0, 0.0, 0.0
    reads = llama.full_reads
    while True:
        for _ in range(2):
            for role in ("user", "assistant"):
                ctx = ctx.add(Message(role, " ".join(rng.choice(WORDS) for _ in range(60))))
        n = len(hf.render(None, ctx, add_generation_prompt=False)[0])
        if n > max_tokens:
            break
        dt_l, mine = await timed_check(llama, ctx)
        dt_h, ref = await timed_check(hf, ctx)
        worst, checks = max(worst, abs(mine - ref)), checks + 1
        t_hf, t_llama = t_hf + dt_h, t_llama + dt_l
    assert worst <= 2e-3, worst
    return {"checks": checks, "max_tokens": max_tokens, "max_abs_score_diff": worst,
            "full_vocabulary_reads": llama.full_reads - reads,
            "check_latency_ratio_llama_over_hf": t_llama / t_hf}


async def run(args: argparse.Namespace, gguf_dir: Path) -> dict[str, Any]:
    hf = LocalHFBackend.embedded()
    out: dict[str, Any] = {}
    with LlamaServerBackend.launch(gguf_dir, servers=1, threads=args.threads, slots=8) as one, \
            LlamaServerBackend.launch(gguf_dir, servers=2, threads=args.threads,
                                      slots=8) as two:
        # warm both (first-call costs: template compilation, server graph allocation)
        ctx = history()
        for b in (hf, one, two):
            await timed_generation(b, PROMPTS[0])
            await timed_check(b, ctx)
        # --- check latency after the conversation's last generation (K/V warm) ---
        lat: dict[str, list[float]] = {"hf": [], "llama": []}
        scores: dict[str, list[float]] = {"hf": [], "llama": []}
        for _ in range(args.rounds):
            for name, b in (("hf", hf), ("llama", one)):
                dt, s = await timed_check(b, ctx)
                lat[name].append(dt)
                scores[name].append(s)
        assert abs(statistics.median(scores["hf"]) - statistics.median(scores["llama"])) < 2e-3
        out["check_latency_s"] = {k: statistics.median(v) for k, v in lat.items()}
        out["check_latency_ratio_llama_over_hf"] = (
            out["check_latency_s"]["llama"] / out["check_latency_s"]["hf"])
        out["check_prefilled_tokens"] = {"hf": hf.stats.last.prefilled_tokens,
                                         "llama": one.stats.last.prefilled_tokens}
        # --- generation throughput ---
        tps: dict[str, list[float]] = {"hf": [], "llama": []}
        texts: dict[str, list[str]] = {"hf": [], "llama": []}
        for r in range(args.rounds):
            prompt = PROMPTS[r % len(PROMPTS)]
            for name, b in (("hf", hf), ("llama", one)):
                dt, n, text = await timed_generation(b, prompt)
                tps[name].append(n / dt)
                texts[name].append(text)
        assert texts["hf"] == texts["llama"], "greedy outputs differ"
        out["generation_tokens_per_s"] = {k: statistics.median(v) for k, v in tps.items()}
        out["generation_throughput_ratio_llama_over_hf"] = (
            out["generation_tokens_per_s"]["llama"] / out["generation_tokens_per_s"]["hf"])
        # --- 1 vs 2 servers, 8 concurrent conversations ---
        walls: dict[str, list[float]] = {"1": [], "2": []}
        for _ in range(max(3, args.rounds // 2)):
            walls["1"].append(await fleet_wall(one))
            walls["2"].append(await fleet_wall(two))
        out["fleet_8_conversations_wall_s"] = {k: statistics.median(v) for k, v in walls.items()}
        out["fleet_speedup_2_over_1"] = (out["fleet_8_conversations_wall_s"]["1"]
                                         / out["fleet_8_conversations_wall_s"]["2"])
    with LlamaServerBackend.launch(gguf_dir, servers=1, threads=args.threads, slots=2,
                                   ctx=2048) as long:
        out["long_conversation"] = await long_conversation(hf, long)
    out["setup"] = {"rounds": args.rounds, "server_threads": args.threads,
                    "torch_threads": torch.get_num_threads(), "history_turns": len(HISTORY),
                    "context_tokens": len(hf.render(None, history(),
                                                    add_generation_prompt=False)[0]),
                    "machine": machine_info(), "load_average": os.getloadavg()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per llama-server and for torch")
    ap.add_argument("--gguf-dir", type=Path, default=None,
                    help="an export-gguf folder (default: export the embedded model to a temp dir)")
    ap.add_argument("--out", type=Path, default=RESULTS / "llama_server.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        gguf_dir = args.gguf_dir or Path(tmp)
        if args.gguf_dir is None:
            export_gguf("embedded", gguf_dir)
        result = asyncio.run(run(args, gguf_dir))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "setup"}, indent=2))


if __name__ == "__main__":
    main()
