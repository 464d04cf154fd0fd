"""Batched requirement checks: k checks in one call against k calls of one check.

Validation checks several requirements on the same output. With an aLoRA and a warm base
cache, one batched call runs all k check suffixes in a single forward over the shared
conversation, so k checks should cost far less than k times one; this measures how much less,
at one context length, for several k.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mellea_local.bench.requirement_check import CheckBench
from mellea_local.bench.subjects import REQUIREMENTS, conversation
from mellea_local.bench.timing import Tick, interleaved_medians

BATCH_SIZES = (1, 2, 4, 8)


def requirements_for(k: int) -> list[str]:
    """``k`` requirements, the eight distinct ones cycled when more are asked for."""
    return [REQUIREMENTS[i % len(REQUIREMENTS)] for i in range(k)]


@torch.no_grad()
def measure_batched(
    bench: CheckBench, *, length: int, batch_sizes: tuple[int, ...] | list[int] = BATCH_SIZES,
    repeats: int = 7, tick: Tick | None = None,
) -> dict[str, Any]:
    """Median ms of a batch of k checks and of k single checks, per k, interleaved.

    ``tick`` is called once per round of the interleaved modes (``repeats`` in all).
    """
    from mellea_local.intrinsics.requirement_check import build_check_prompts

    backend, alora = bench.backend, bench.alora
    ctx = conversation(backend.tokenizer, length)
    [prompt] = build_check_prompts(backend, ctx, requirements_for(1), alora)
    backend.prefix_cache.clear()
    bench.check(ctx, alora, requirements_for(1))  # warm: the base cache holds the conversation

    def batched(k: int) -> Callable[[], Any]:
        return lambda: bench.check(ctx, alora, requirements_for(k))

    def sequential(k: int) -> Callable[[], Any]:
        return lambda: [bench.check(ctx, alora, [r]) for r in requirements_for(k)]

    modes: dict[str, Callable[[], Any]] = {}
    for k in batch_sizes:
        modes[f"batch{k}"] = batched(k)
        if k > 1:
            modes[f"seq{k}"] = sequential(k)
    med = interleaved_medians(modes, repeats, tick=tick)
    one = med.get("batch1")
    rows = []
    for k in batch_sizes:
        b = med[f"batch{k}"]
        s = med.get(f"seq{k}", b)
        row: dict[str, Any] = {"checks": k, "batched_ms": b, "sequential_ms": s,
                               "ms_per_check": b / k, "sequential_over_batched": s / b}
        if one:
            row["batched_over_one"] = b / one
        rows.append(row)
    return {"context_tokens": prompt.shared, "repeats": repeats, "rows": rows}


def format_batched(result: dict[str, Any]) -> list[str]:
    """Table lines: k, batched ms, sequential ms, ms per check and the ratios."""
    lines = [f"batched checks at {result['context_tokens']} context tokens (ms, medians):",
             f"{'k':>3} | {'batched':>9} {'k x one':>9} {'per chk':>8} | {'b/one':>6} "
             f"{'seq/b':>6}"]
    for r in result["rows"]:
        ratio = f"{r['batched_over_one']:6.2f}" if "batched_over_one" in r else "     -"
        lines.append(f"{r['checks']:3d} | {r['batched_ms']:9.1f} {r['sequential_ms']:9.1f} "
                     f"{r['ms_per_check']:8.1f} | {ratio} {r['sequential_over_batched']:6.2f}")
    return lines
