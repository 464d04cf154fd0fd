"""Generation overhead: ``generate_from_context`` against a bare ``model.generate``.

Same model, same prompt ids, same number of new tokens (``min_new_tokens`` pins it), greedy,
both run from a worker thread. The backend runs with its prefix cache off, so both sides
prefill the whole prompt and the difference is our overhead: rendering, the worker thread, the
stopping criteria, decoding and parsing. Runs alternate between the two so machine drift hits
both alike.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import torch

from mellea_local.bench.subjects import fit_conversation, param_count
from mellea_local.bench.timing import Tick, machine_info
from mellea_local.core.context import ChatContext
from mellea_local.errors import BenchmarkError
from mellea_local.messages import Message
from mellea_local.options import ModelOption


def device_label(model: Any) -> str:
    """``cpu``, ``cuda``, ``cuda:1``: the device as a user would type it."""
    device = torch.device(model.device)
    return device.type if not device.index else f"{device.type}:{device.index}"


def dtype_label(model: Any) -> str:
    """``float32``, ``bfloat16``: the model's dtype without the ``torch.`` prefix."""
    return str(model.dtype).removeprefix("torch.")


@torch.no_grad()
def measure_generation(
    model: Any, tokenizer: Any, *, new_tokens: int = 256, repeats: int = 7,
    tick: Tick | None = None, context_tokens: int | None = None,
) -> dict[str, Any]:
    """Median seconds of ours and bare for ``new_tokens`` tokens; the JSON of ``generate.py``.

    ``tick`` is called after each of the ``repeats`` rounds. ``context_tokens``: the question
    follows a conversation fitted to that many prompt tokens (rendered by the tokenizer's own
    chat template), instead of coming alone (``None`` or 0).
    """
    from mellea_local.backends.hf import LocalHFBackend
    from mellea_local.threads import load_average

    backend = LocalHFBackend.from_loaded(model, tokenizer, model_id="bench", kv_cache_tokens=0)
    action = Message("user", "Tell me about the city of paris and its river.")
    n = new_tokens
    opts: dict[str, Any] = {ModelOption.MAX_NEW_TOKENS: n, "min_new_tokens": n}
    if not context_tokens:
        ctx = ChatContext().add(Message("system", "Answer briefly."))
    else:
        ctx, _ = fit_conversation(
            lambda c: len(backend.render(action, c, model_options=opts)[0]), context_tokens,
            seed=7)
    ids, _, _ = backend.render(action, ctx, model_options=opts)
    prompt = torch.tensor([ids], device=model.device)
    loop = asyncio.new_event_loop()

    def ours() -> int:
        async def go() -> int:
            mot, _ = await backend.generate_from_context(action, ctx, model_options=opts)
            await mot.avalue()
            return int(mot.usage["completion_tokens"])
        return loop.run_until_complete(go())

    def bare_generate() -> int:
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                             max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
        return int(out.shape[1] - prompt.shape[1])

    def bare() -> int:
        # In a worker thread, like ours: torch's intra-op threading behaves differently on the
        # main thread (much slower when the cores are shared), which is not our overhead.
        return loop.run_until_complete(asyncio.to_thread(bare_generate))

    load_start = load_average()
    try:
        ours(), bare()  # warm-up
        times: dict[str, list[float]] = {"ours": [], "bare": []}
        cpu: dict[str, list[float]] = {"ours": [], "bare": []}
        pairs = (("ours", ours), ("bare", bare))
        for k in range(repeats):
            # ABBA order: neither side always runs right after the other.
            for name, fn in pairs if k % 2 == 0 else pairs[::-1]:
                t0, c0 = time.perf_counter(), time.process_time()
                produced = fn()
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
                if produced != n:
                    raise BenchmarkError(
                        f"The {name} generation produced {produced} tokens instead of {n}; "
                        "the comparison needs both sides to generate the same number.")
            if tick:
                tick()
    finally:
        loop.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    pair = statistics.median(o / b for o, b in zip(times["ours"], times["bare"], strict=True))
    info = machine_info()
    return {
        "benchmark": "generate",
        "params": param_count(model),
        "prompt_tokens": len(ids),
        "context_tokens_requested": context_tokens,
        "new_tokens": n,
        "device": device_label(model),
        "dtype": dtype_label(model),
        "repeats": repeats,
        "torch_threads": info["torch_threads"],
        "machine": info["machine"],
        "load_average": {"start": load_start, "end": info["load_average"]},
        "median_s": med,
        "tokens_per_s": {k: n / v for k, v in med.items()},
        "overhead_pct": 100 * (med["ours"] / med["bare"] - 1),
        # Cross-checks that a shared machine disturbs less: the median of the per-pair
        # ratios, and process CPU time (our worker plus the idle event loop) per side.
        "pair_overhead_pct": 100 * (pair - 1),
        "median_cpu_s": cpu_med,
        "cpu_overhead_pct": 100 * (cpu_med["ours"] / cpu_med["bare"] - 1),
    }


def format_generation(result: dict[str, Any]) -> str:
    """The one line ``generate.py`` prints."""
    n, med = result["new_tokens"], result["median_s"]
    return (f"prompt {result['prompt_tokens']} tokens, {n} new; median ours {med['ours']:.3f}s "
            f"({n / med['ours']:.1f} tok/s), bare {med['bare']:.3f}s ({n / med['bare']:.1f} "
            f"tok/s), overhead {result['overhead_pct']:+.1f}% (median pair "
            f"{result['pair_overhead_pct']:+.1f}%, CPU time {result['cpu_overhead_pct']:+.1f}%)")
