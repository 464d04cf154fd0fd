"""A requirement check after an agent run: reused vs recomputed tokens, time, and the score
against the same check from scratch.

The agent's steps are decoded with the agent aLoRA (invoked at the assistant header), so the
shared KV cache holds the base model's K/V of the conversation up to the last step's header.
A requirement check on the returned context (the final answer appended as the assistant's
turn) reuses that prefix and recomputes only the last step, its result, the answer and the
check's own turn. The scratch path is the same check on a backend without a cache
(``kv_cache_tokens=0``); both backends hold the same adapters.

Usage (1 thread, niced, on a shared machine):
    nice -n 10 python benchmarks/check_after_agent.py --model smollm2-135m --threads 1 \\
        --agent-adapter PATH --out benchmarks/results/check_after_agent_smollm2.json
(without --agent-adapter: the shipped adapters/agent/<model>/alora).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from mellea_local.core.backend import AGENT, REQUIREMENT_CHECK
from mellea_local.core.context import ChatContext
from mellea_local.errors import ReactLoopError
from mellea_local.intrinsics.requirement_check import arequirement_check
from mellea_local.messages import Message
from mellea_local.options import ModelOption
from mellea_local.react import react
from mellea_local.threads import apply_threads

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))
from react_real import GOALS, tools_for  # noqa: E402

REQUIREMENTS = ("The answer gives the value the tools returned.",
                "The answer is one short sentence.")


def _backend(model: str, agent_adapter: Path | None, **kwargs: Any) -> Any:
    from mellea_local.backends.huggingface import LocalHFBackend

    backend = LocalHFBackend(model, device="cpu", **kwargs)
    if agent_adapter is not None:
        backend.add_adapter(agent_adapter, intrinsic=AGENT)
    backend.add_adapter(REQUIREMENT_CHECK)
    return backend


async def _timed_check(backend: Any, ctx: Any, requirement: str) -> tuple[float, float, Any]:
    started = time.perf_counter()
    score = await arequirement_check(ctx, backend, requirement)
    return score, time.perf_counter() - started, backend.stats.last


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--agent-adapter", type=Path, default=None)
    ap.add_argument("--goals", type=int, default=4)
    ap.add_argument("--budget", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "results" / "check_after_agent_smollm2.json")
    args = ap.parse_args(argv)
    apply_threads(args.threads or None)
    agent = _backend(args.model, args.agent_adapter)
    adapter = agent.agent_adapter()
    if adapter is None:
        sys.exit(f"no agent adapter for {args.model}; pass --agent-adapter")
    scratch = _backend(args.model, args.agent_adapter, kv_cache_tokens=0)
    goals = [json.loads(line) for line in GOALS.read_text().splitlines() if line.strip()]
    rows = []
    for goal in goals[: args.goals]:
        opts = {ModelOption.MAX_NEW_TOKENS: args.max_new_tokens}
        try:
            out, ctx = asyncio.run(react(goal["goal"], ChatContext(), agent,
                                         tools=tools_for(goal), model_options=opts,
                                         loop_budget=args.budget))
            answer = str(out.value)
        except ReactLoopError as exc:
            print(f"goal {goal['id']}: {type(exc).__name__}, skipped", flush=True)
            continue
        ctx = ctx.add(Message("assistant", answer))
        for requirement in REQUIREMENTS:
            reused_score, reused_s, counts = asyncio.run(_timed_check(agent, ctx, requirement))
            scratch_score, scratch_s, scratch_counts = asyncio.run(
                _timed_check(scratch, ctx, requirement))
            row = {"goal": goal["id"], "requirement": requirement,
                   "score_reused": reused_score, "score_scratch": scratch_score,
                   "abs_diff": abs(reused_score - scratch_score),
                   "reused_tokens": counts.reused_tokens,
                   "recomputed_tokens": counts.prefilled_tokens,
                   "scratch_prefilled_tokens": scratch_counts.prefilled_tokens,
                   "seconds_after_agent": round(reused_s, 4),
                   "seconds_scratch": round(scratch_s, 4)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    n = max(len(rows), 1)
    summary = {
        "checks": len(rows),
        "max_abs_score_diff": max((r["abs_diff"] for r in rows), default=None),
        "mean_reused_tokens": round(sum(r["reused_tokens"] for r in rows) / n, 1),
        "mean_recomputed_tokens": round(sum(r["recomputed_tokens"] for r in rows) / n, 1),
        "mean_seconds_after_agent": round(sum(r["seconds_after_agent"] for r in rows) / n, 4),
        "mean_seconds_scratch": round(sum(r["seconds_scratch"] for r in rows) / n, 4),
    }
    report = {"command": " ".join(["python", *sys.argv]), "model": args.model,
              "agent_adapter": str(adapter.path), "threads": args.threads,
              "summary": summary, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
