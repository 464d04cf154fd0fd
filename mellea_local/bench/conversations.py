"""Many conversations on one backend: does every one keep its KV prefix, and its check speed?

Each of ``n`` conversations (``history`` tokens each, different words, the same system prompt
and role headers) gets one generation then ``checks`` requirement checks. Three schedules of
the same calls, the cache cleared before each:

- ``serial``: one conversation at a time (generate, check, check, check, then the next);
- ``interleaved``: round-robin (every generation, then every first check, ...): each call
  follows a call of *another* conversation, which the old single-entry cache lost to;
- ``concurrent``: all conversations at once (``asyncio.gather``), the backend serialising
  the model calls as they arrive.

Reported per schedule: tokens reused and prefilled (totals over all calls), hits, the cache's
entries/evictions, and the median check latency. A check's wall latency under ``concurrent``
includes waiting for the model behind other conversations, so that schedule also reports its
total time against ``serial``'s. The floor is a bare PEFT aLoRA forward over one check's
suffix on that conversation's cached base K/V, called outside our code (PEFT's own
``set_adapter``; the cache cropped back after each run): ``ours_over_floor`` compares one warm
check through the library with it, interleaved in the same rounds.

ReACT: ``agents`` forced agents (the ``react_turns`` script: same tool call every turn, only
the history grows) run concurrently, against one agent alone; the figure of merit is each
agent's turn-``turns`` / turn-1 latency ratio, which stays flat only when every agent keeps its
own history cached while the others run. A turn's latency is the time its generation held the
model (``mot.meta["model_seconds"]``): with four agents sharing one model, a turn's wall time
also holds its wait behind the other agents' turns, which depends on the order they arrive in
(an agent whose first turn came first waits for none, later for three), not on the cache. The
wall-clock ratios are reported beside it (``wall_*``).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import torch

from mellea_local.bench.generation import device_label, dtype_label
from mellea_local.bench.requirement_check import CheckBench
from mellea_local.bench.subjects import REQUIREMENTS, conversation
from mellea_local.bench.timing import machine_info
from mellea_local.core.context import ChatContext
from mellea_local.errors import BenchmarkError
from mellea_local.messages import Message
from mellea_local.options import ModelOption

SCHEDULES = ("serial", "interleaved", "concurrent")


def _counts(backend: Any) -> dict[str, int]:
    t = backend.stats.total
    return {"reused_tokens": t.reused_tokens, "prefilled_tokens": t.prefilled_tokens,
            "reusable_tokens": t.reusable_tokens, "hits": t.cache_hits,
            "misses": t.cache_misses, "cache_entries": backend.stats.cache_entries,
            "cache_tokens": backend.stats.cache_tokens,
            "cache_evictions": backend.stats.cache_evictions,
            "cache_copies": backend.stats.cache_copies}


def _minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    state = ("cache_entries", "cache_tokens")
    return {k: v if k in state else v - before[k] for k, v in after.items()}


class _Workload:
    """The conversations and the two calls each makes, timed per check."""

    def __init__(self, bench: CheckBench, n: int, history: int, new_tokens: int,
                 checks: int) -> None:
        self.bench = bench
        tokenizer = bench.backend.tokenizer
        self.contexts = [conversation(tokenizer, history, seed=100 + i) for i in range(n)]
        self.requirements = [REQUIREMENTS[k % len(REQUIREMENTS)] for k in range(checks)]
        self.opts = {ModelOption.MAX_NEW_TOKENS: new_tokens, "min_new_tokens": new_tokens,
                     "bad_words_ids": [[i] for i in tokenizer.all_special_ids]}
        self.latencies: list[float] = []

    async def generate(self, i: int) -> ChatContext:
        question = Message("user", f"Question {i}: what do you know about it?")
        mot, ctx = await self.bench.backend.generate_from_context(
            question, self.contexts[i], model_options=self.opts)
        await mot.avalue()
        return ctx

    async def check(self, ctx: ChatContext, k: int) -> None:
        from mellea_local.intrinsics.requirement_check import check_outputs

        t0 = time.perf_counter()
        await check_outputs(self.bench.backend, ctx, [self.requirements[k]],
                            adapter=self.bench.alora)
        self.latencies.append(time.perf_counter() - t0)

    async def serial(self) -> None:
        for i in range(len(self.contexts)):
            ctx = await self.generate(i)
            for k in range(len(self.requirements)):
                await self.check(ctx, k)

    async def interleaved(self) -> None:
        ctxs = [await self.generate(i) for i in range(len(self.contexts))]
        for k in range(len(self.requirements)):
            for ctx in ctxs:
                await self.check(ctx, k)

    async def concurrent(self) -> None:
        async def one(i: int) -> None:
            ctx = await self.generate(i)
            for k in range(len(self.requirements)):
                await self.check(ctx, k)

        await asyncio.gather(*(one(i) for i in range(len(self.contexts))))


def run_together(backend: Any, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` on threads that all wait for the busy model, so its ``CheckBatcher``
    serves them as one batch; each result, or the exception its call raised."""
    out: list[Any] = [None] * len(calls)

    def go(k: int) -> None:
        try:
            out[k] = calls[k]()
        except BaseException as exc:
            out[k] = exc

    with backend.engine.holder.lock:
        threads = [threading.Thread(target=go, args=(k,)) for k in range(len(calls))]
        for t in threads:
            t.start()
        deadline = time.perf_counter() + 30
        while backend.engine.batcher.pending < len(calls) and time.perf_counter() < deadline:
            time.sleep(0.001)
    for t in threads:
        t.join()
    return out


def _run(loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[Any]]) -> Any:
    return loop.run_until_complete(make())


@torch.no_grad()
def measure_schedules(bench: CheckBench, *, n: int = 8, history: int = 500,
                      new_tokens: int = 32, checks: int = 3, rounds: int = 1) -> dict[str, Any]:
    """Tokens and check latency per schedule (see the module docstring); times are medians
    over ``rounds`` rounds of the three schedules."""
    backend = bench.backend
    results: dict[str, Any] = {}
    seconds: dict[str, list[float]] = {name: [] for name in SCHEDULES}
    latencies: dict[str, list[float]] = {name: [] for name in SCHEDULES}
    for _ in range(rounds):  # the schedules round-robin, so drift hits them alike
        for name in SCHEDULES:
            work = _Workload(bench, n, history, new_tokens, checks)
            backend.prefix_cache.clear()
            before = _counts(backend)
            t0 = time.perf_counter()
            _run(bench.loop, getattr(work, name))
            seconds[name].append(time.perf_counter() - t0)
            latencies[name] += work.latencies
            results.setdefault(name, _minus(_counts(backend), before))  # the same each round
    for name, row in results.items():
        row["seconds"] = statistics.median(seconds[name])
        row["check_median_ms"] = 1000 * statistics.median(latencies[name])
    serial = results["serial"]
    for name in SCHEDULES[1:]:
        row = results[name]
        row["reused_vs_serial"] = row["reused_tokens"] / max(serial["reused_tokens"], 1)
        row["prefilled_vs_serial"] = row["prefilled_tokens"] / max(serial["prefilled_tokens"], 1)
        row["seconds_vs_serial"] = row["seconds"] / serial["seconds"]
    return results


@torch.no_grad()
def measure_floor(bench: CheckBench, *, history: int = 500, repeats: int = 7) -> dict[str, Any]:
    """One warm check through the library against the bare PEFT forward (interleaved rounds)."""
    from mellea_local.backends.cache_compat import cache_kwarg_name, crop_to
    from mellea_local.intrinsics.requirement_check import build_check_prompts, check_outputs

    backend, alora = bench.backend, bench.alora
    tokenizer, model = backend.tokenizer, backend.model
    ctx = conversation(tokenizer, history, seed=100)
    req = REQUIREMENTS[0]
    [prompt] = build_check_prompts(backend, ctx, [req], alora)
    suffix = prompt.ids[prompt.shared:] + tokenizer.encode('{"score": "',
                                                           add_special_tokens=False)
    backend.prefix_cache.clear()
    bench.check(ctx, alora, [req])  # the conversation's base K/V is now cached
    [entry] = backend.prefix_cache.entries()
    suffix_t = torch.tensor([suffix], device=model.device)
    peft, kw = backend.engine.holder.peft, cache_kwarg_name(model)
    ours: list[float] = []
    floor: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        bench.loop.run_until_complete(check_outputs(backend, ctx, [req], adapter=alora))
        ours.append(time.perf_counter() - t0)
        with backend.engine.holder.lock:  # PEFT's own switches, outside the timed forward
            peft.base_model.enable_adapter_layers()
            peft.set_adapter(alora.name)
            try:
                t0 = time.perf_counter()
                peft(input_ids=suffix_t, use_cache=True, logits_to_keep=1, **{kw: entry.cache})
                floor.append(time.perf_counter() - t0)
                crop_to(entry.cache, prompt.shared)  # untimed: back to the base prefix
            finally:
                peft.base_model.disable_adapter_layers()
    med_ours, med_floor = statistics.median(ours), statistics.median(floor)
    return {"context_tokens": prompt.shared, "suffix_tokens": len(suffix),
            "ours_ms": 1000 * med_ours, "floor_ms": 1000 * med_floor,
            "ours_over_floor": med_ours / med_floor}


def measure_agents(backend: Any, *, agents: int = 4, turns: int = 10,
                   repeats: int = 3) -> dict[str, Any]:
    """Per-turn latency of ``agents`` concurrent forced ReACT agents against one alone.

    ``repeats`` rounds, each running one agent alone then ``agents`` at once (fresh agent
    texts every round, so nothing of an earlier round is reused). Each setting starts from a
    cache holding only the shared system/tool prompt (a one-turn warm-up agent): otherwise the
    first concurrent agent would prefill that prompt at turn 1 and the others copy it, and the
    turn-1 latencies the ratios divide by would differ for a reason that is not the cache's
    hold on each history.
    """
    from mellea_local.bench.react_turns import CALL, FINAL, Forcer, Timed, fetch
    from mellea_local.react import react
    from mellea_local.tools import MelleaTool

    async def agent(name: str, n_turns: int) -> list[dict[str, Any]]:
        timed = Timed(backend)
        forcer = Forcer(backend.tokenizer, [CALL] * n_turns + [FINAL])
        opts = {"prefix_allowed_tokens_fn": forcer, ModelOption.MAX_NEW_TOKENS: 64}
        out, _ = await react(
            f"Agent {name}: read the paris page of the guide again and again.", ChatContext(),
            timed, tools=[MelleaTool.from_callable(fetch)], model_options=opts,
            loop_budget=n_turns + 1)
        if out.value != "done":
            raise BenchmarkError(f"A forced ReACT agent ended with {out.value!r}, not 'done'.")
        return timed.turns[:n_turns]

    async def run(round_: int, count: int) -> list[list[dict[str, Any]]]:
        backend.prefix_cache.clear()
        await agent(f"warm-{round_}-{count}", 1)
        return list(await asyncio.gather(*(agent(f"{round_}.{k}", turns)
                                           for k in range(count))))

    samples: dict[str, list[list[dict[str, Any]]]] = {"alone": [], "concurrent": []}
    loop = asyncio.new_event_loop()
    try:
        for r in range(repeats):
            samples["alone"] += loop.run_until_complete(run(r, 1))
            samples["concurrent"] += loop.run_until_complete(run(r, agents))
    finally:
        loop.close()
    result: dict[str, Any] = {"agents": agents, "turns": turns, "repeats": repeats}
    for label, runs in samples.items():
        ratios = [t[-1]["model_seconds"] / t[0]["model_seconds"] for t in runs]
        cpu = [t[-1]["model_cpu_seconds"] / t[0]["model_cpu_seconds"] for t in runs]
        wall = [t[-1]["seconds"] / t[0]["seconds"] for t in runs]
        result[label] = {
            "turn1_ms": [1000 * t[0]["model_seconds"] for t in runs],
            "last_turn_ms": [1000 * t[-1]["model_seconds"] for t in runs],
            "last_over_first": ratios,
            "median_last_over_first": statistics.median(ratios),
            "cpu_last_over_first": cpu,
            "median_cpu_last_over_first": statistics.median(cpu),
            "wall_last_over_first": wall,
            "median_wall_last_over_first": statistics.median(wall),
            "turn1_prefilled": [t[0]["prefilled_tokens"] for t in runs],
            "last_turn_prefilled": [t[-1]["prefilled_tokens"] for t in runs],
            "last_turn_reused": [t[-1]["reused_tokens"] for t in runs],
        }
    alone, together = result["alone"], result["concurrent"]
    result["concurrent_ratio_vs_alone"] = (together["median_last_over_first"]
                                           / alone["median_last_over_first"])
    result["cpu_concurrent_ratio_vs_alone"] = (together["median_cpu_last_over_first"]
                                               / alone["median_cpu_last_over_first"])
    return result


def measure_conversations(bench: CheckBench, *, n: int = 8, history: int = 500,
                          new_tokens: int = 32, checks: int = 3, agents: int = 4,
                          turns: int = 10, repeats: int = 7, agent_repeats: int = 3,
                          rounds: int = 3,
                          on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Everything above, in one run; the JSON of ``benchmarks/conversations.py``."""
    say = on_line or (lambda _line: None)
    model = bench.backend.model
    info = machine_info()
    result: dict[str, Any] = {
        "benchmark": "conversations", "params": bench.params, "device": device_label(model),
        "dtype": dtype_label(model), "torch_threads": info["torch_threads"],
        "machine": info["machine"], "conversations": n, "history_tokens": history,
        "new_tokens": new_tokens, "checks_per_conversation": checks,
    }
    result["floor"] = measure_floor(bench, history=history, repeats=repeats)
    say(format_floor(result["floor"]))
    result["schedules"] = measure_schedules(bench, n=n, history=history,
                                            new_tokens=new_tokens, checks=checks,
                                            rounds=rounds)
    for line in format_schedules(result["schedules"], result["floor"]["floor_ms"]):
        say(line)
    if agents and turns:
        result["react"] = measure_agents(bench.backend, agents=agents, turns=turns,
                                         repeats=agent_repeats)
        say(format_agents(result["react"]))
    return result


def format_floor(floor: dict[str, Any]) -> str:
    return (f"one warm check, {floor['context_tokens']} cached + {floor['suffix_tokens']} "
            f"suffix tokens: ours {floor['ours_ms']:.1f} ms, bare PEFT forward "
            f"{floor['floor_ms']:.1f} ms -> {floor['ours_over_floor']:.2f}x")


def format_schedules(rows: dict[str, Any], floor_ms: float) -> list[str]:
    lines = [f"{'schedule':>12} | {'reused':>7} {'prefill':>7} {'hits':>5} {'entries':>7} "
             f"{'evict':>5} | {'check ms':>8} {'/floor':>6} | {'total s':>7} "
             f"{'reuse/s':>7} {'pref/s':>6}"]
    for name, r in rows.items():
        lines.append(
            f"{name:>12} | {r['reused_tokens']:7d} {r['prefilled_tokens']:7d} "
            f"{r['hits']:2d}/{r['hits'] + r['misses']:<2d} {r['cache_entries']:7d} "
            f"{r['cache_evictions']:5d} | {r['check_median_ms']:8.1f} "
            f"{r['check_median_ms'] / floor_ms:6.2f} | {r['seconds']:7.1f} "
            f"{r.get('reused_vs_serial', 1.0):7.3f} {r.get('prefilled_vs_serial', 1.0):6.3f}")
    return lines


def format_agents(r: dict[str, Any]) -> str:
    a, c = r["alone"], r["concurrent"]
    return (f"ReACT, {r['turns']} turns, median of {r['repeats']} rounds: turn {r['turns']}/"
            f"turn 1 alone {a['median_last_over_first']:.2f}, {r['agents']} concurrent agents "
            f"{c['median_last_over_first']:.2f} -> {r['concurrent_ratio_vs_alone']:.2f}x "
            f"(CPU time {r['cpu_concurrent_ratio_vs_alone']:.2f}x; wall with the queueing "
            f"{a['median_wall_last_over_first']:.2f} vs {c['median_wall_last_over_first']:.2f})"
            f"; turn {r['turns']} prefilled {max(c['last_turn_prefilled'])} tokens at most "
            f"(alone {max(a['last_turn_prefilled'])})")
