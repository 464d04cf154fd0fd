"""ReACT turn latency against history length, with and without KV prefix reuse.

The same model runs the same agent loop twice: once behind a backend with its prefix cache on,
once with ``kv_cache_tokens=0``. Every turn does the same work: the model is forced (a real
``generate`` constraint) to write the same tool call, whose tool returns the same paragraph, so
only the history grows. Without reuse each turn prefills the whole history, so latency grows
with it; with reuse a turn prefills only its new tokens and stays flat. Each turn also reports
its time to first token (the prefill alone, free of decode noise).
Runs alternate between the two backends so machine drift hits both alike; the cache is
cleared before each run so turn 1 starts cold. The ratio uses each turn's fastest run: on a
shared machine contention only ever adds time (medians are reported too).

The floor: the bare model doing one turn's unavoidable work, a forward over the tokens the turn
prefilled on a cache of the tokens it reused, then one forward per further new token. Its own
growth over the turns is the model's (attention over a longer cache), not the loop's; what a
turn costs above it is ours (rendering, parsing, ``generate``'s machinery).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import torch

from mellea_local.backends.cache_compat import cache_kwarg_name, new_cache
from mellea_local.bench.generation import device_label, dtype_label
from mellea_local.bench.subjects import param_count
from mellea_local.bench.timing import Tick, machine_info, sync_device
from mellea_local.core.backend import Backend
from mellea_local.errors import BenchmarkError

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

    def __init__(self, inner: Any) -> None:
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
            "model_seconds": mot.meta.get("model_seconds"),
            "model_cpu_seconds": mot.meta.get("model_cpu_seconds"),
            "prompt_tokens": mot.usage["prompt_tokens"],
            "new_tokens": mot.usage["completion_tokens"],
            "prefilled_tokens": last.prefilled_tokens,
            "reused_tokens": last.reused_tokens,
        })
        return mot, new_ctx


def run_once(backend: Any, turns: int, loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    """One cold agent run of ``turns`` forced tool calls; per-turn timings and token counts."""
    from mellea_local.core.context import ChatContext
    from mellea_local.options import ModelOption
    from mellea_local.react import react
    from mellea_local.tools import MelleaTool

    backend.prefix_cache.clear()
    timed = Timed(backend)
    forcer = Forcer(backend.tokenizer, [CALL] * turns + [FINAL])
    opts = {"prefix_allowed_tokens_fn": forcer, ModelOption.MAX_NEW_TOKENS: 64}
    out, _ = loop.run_until_complete(react(
        "Read the paris page of the guide again and again.", ChatContext(), timed,
        tools=[MelleaTool.from_callable(fetch)], model_options=opts, loop_budget=turns + 1))
    if out.value != "done":
        raise BenchmarkError(
            f"The forced ReACT run ended with {out.value!r} instead of 'done'; the model's "
            "chat template must render tool calls the way the embedded family does.")
    for turn, first in zip(timed.turns, forcer.first_token_at, strict=True):
        turn["ttft_seconds"] = first - turn.pop("started")
    return timed.turns[:turns]  # the final_answer turn is not part of the series


@torch.no_grad()
def floor_seconds(model: Any, reused: int, prefilled: int, new_tokens: int) -> float:
    """One turn's work on the bare model (see the module docstring), timed once.

    ``generate`` makes ``new_tokens`` tokens with one forward over the prompt's uncached
    tokens and ``new_tokens - 1`` one-token forwards; the floor makes the same forwards. Token
    values do not change the cost of a dense forward, so the ids are drawn, not replayed.
    """
    total = reused + prefilled + new_tokens
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, model.config.vocab_size - 4, (1, total), generator=g)
    ids = ids.to(model.device)
    kw = cache_kwarg_name(model)
    cache = new_cache(model)
    if reused:
        model(input_ids=ids[:, :reused], use_cache=True, logits_to_keep=1, **{kw: cache})
    sync_device()
    t0 = time.perf_counter()
    model(input_ids=ids[:, reused: reused + prefilled], use_cache=True, logits_to_keep=1,
          **{kw: cache})
    for at in range(reused + prefilled, reused + prefilled + new_tokens - 1):
        model(input_ids=ids[:, at: at + 1], use_cache=True, **{kw: cache})
    sync_device()
    return time.perf_counter() - t0


@torch.no_grad()
def measure_react(
    model: Any, tokenizer: Any, *, turns: int = 10, repeats: int = 3, tick: Tick | None = None,
) -> dict[str, Any]:
    """Per-turn latency with and without reuse; the JSON of ``react.py``.

    ``tick`` is called after each of the ``repeats`` rounds (both backends run once a round).
    """
    from mellea_local.backends.hf import LocalHFBackend

    backends = {
        "reuse": LocalHFBackend.from_loaded(model, tokenizer, model_id="bench-reuse"),
        "no_reuse": LocalHFBackend.from_loaded(model, tokenizer, model_id="bench-plain",
                                               kv_cache_tokens=0),
    }
    loop = asyncio.new_event_loop()
    try:
        for b in backends.values():  # warm-up
            run_once(b, min(2, turns), loop)
        runs: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in backends}
        floors: list[list[float]] = []  # [round][turn]: in the same rounds, so drift hits all
        for _ in range(repeats):
            for name, b in backends.items():
                runs[name].append(run_once(b, turns, loop))
            floors.append([floor_seconds(model, t["reused_tokens"], t["prefilled_tokens"],
                                         t["new_tokens"]) for t in runs["reuse"][0]])
            if tick:
                tick()
    finally:
        loop.close()
    info = machine_info()
    result: dict[str, Any] = {
        "benchmark": "react",
        "params": param_count(model),
        "turns": turns,
        "repeats": repeats,
        "device": device_label(model),
        "dtype": dtype_label(model),
        "machine": info["machine"],
        "torch_threads": info["torch_threads"],
    }
    for name, series in runs.items():
        per_turn = []
        for k in range(turns):
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
        if name == "reuse":
            for k, turn in enumerate(per_turn):
                turn["floor_min_ms"] = 1000 * min(f[k] for f in floors)
                turn["over_floor"] = turn["min_ms"] / turn["floor_min_ms"]
            result["floor"] = {f"turn{turns}_over_turn1":
                               per_turn[-1]["floor_min_ms"] / per_turn[0]["floor_min_ms"]}
        ratio = per_turn[-1]["min_ms"] / per_turn[0]["min_ms"]
        median_ratio = per_turn[-1]["median_ms"] / per_turn[0]["median_ms"]
        ttft_ratio = per_turn[-1]["ttft_min_ms"] / per_turn[0]["ttft_min_ms"]
        result[name] = {"per_turn": per_turn, f"turn{turns}_over_turn1": ratio,
                        f"turn{turns}_over_turn1_median": median_ratio,
                        f"ttft_turn{turns}_over_turn1": ttft_ratio}
    return result


def format_react(result: dict[str, Any]) -> list[str]:
    """The lines ``react.py`` prints, one per backend."""
    turns = result["turns"]
    lines = []
    for name in ("reuse", "no_reuse"):
        per_turn = result[name]["per_turn"]
        ratio = result[name][f"turn{turns}_over_turn1"]
        ttft_ratio = result[name][f"ttft_turn{turns}_over_turn1"]
        lines.append(
            f"{name:>9}: turn ms " + " ".join(f"{t['min_ms']:.0f}" for t in per_turn)
            + f" ({ratio:.2f}x); time to first token ms "
            + " ".join(f"{t['ttft_min_ms']:.0f}" for t in per_turn) + f" ({ttft_ratio:.2f}x)"
            + "; prefilled " + " ".join(str(t["prefilled_tokens"]) for t in per_turn))
    floor = result.get("floor")
    if floor:
        per_turn = result["reuse"]["per_turn"]
        lines.append(
            "    floor: turn ms " + " ".join(f"{t['floor_min_ms']:.0f}" for t in per_turn)
            + f" ({floor[f'turn{turns}_over_turn1']:.2f}x): the bare model doing each reuse "
            "turn's forwards; reuse/floor "
            + " ".join(f"{t['over_floor']:.2f}" for t in per_turn))
    return lines
