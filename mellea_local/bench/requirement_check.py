"""Requirement-check latency by mode and context length, as ratios measured in one run.

Modes, all on the same model and the same conversation:

- ``ours``: aLoRA + base KV reuse + the one-forward fast path (what the library does);
- ``floor``: a bare adapter forward over the same suffix tokens with the same cached prefix
  (what ``ours`` cannot beat; the gap is our Python overhead);
- ``alora_scratch``: the same aLoRA check, prefilling the whole conversation;
- ``lora``: a plain LoRA check (must prefill everything: LoRA changes every token's K/V);
- ``llm_judge``: the base model asked the requirement as a question, generating its answer
  from scratch (the peer's fallback path);
- ``batch8`` (per length): eight checks in one call, against one check.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mellea_local.bench.generation import device_label, dtype_label
from mellea_local.bench.subjects import (
    REQUIREMENTS,
    fit_conversation,
    fit_tolerance,
    param_count,
)
from mellea_local.bench.timing import Tick, interleaved_samples, machine_info
from mellea_local.core.context import ChatContext
from mellea_local.errors import BenchmarkError
from mellea_local.messages import Message

MODES = ("ours", "floor", "alora_scratch", "lora", "llm_judge", "batch8")
"""Every mode, in table order (``llm_judge`` is left out with ``skip_slow``)."""

HEADER = (f"{'ctx':>6} {'sfx':>4} | {'ours':>8} {'floor':>8} {'scratch':>9} {'lora':>8} "
          f"{'judge':>9} {'batch8':>8} | {'o/fl':>5} {'sc/o':>6} {'b8/1':>5}   (ms, medians)")
"""The table header ``requirement_check.py`` prints above its rows."""


@dataclass
class CheckBench:
    """A backend with a random aLoRA and a random LoRA loaded, and a loop to drive them.

    Random adapters cost exactly what trained ones do, so they are the honest subject of a
    speed figure on any model shape. ``close()`` removes the adapters' temporary folder.
    """

    backend: Any
    alora: Any
    lora: Any
    params: int
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    workdir: Path | None = None

    def check(self, ctx: ChatContext, adapter: Any, reqs: list[str], **kw: Any) -> list[str]:
        """The intrinsic's JSON outputs for ``reqs`` (``reuse=False`` for the scratch mode)."""
        from mellea_local.intrinsics.requirement_check import check_outputs

        return self.loop.run_until_complete(
            check_outputs(self.backend, ctx, reqs, adapter=adapter, **kw))

    def close(self) -> None:
        self.loop.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def open_check_bench(model: Any, tokenizer: Any, *, model_id: str = "bench") -> CheckBench:
    """Load a random aLoRA (seed 1) and LoRA (seed 2) for ``model`` onto a fresh backend.

    PEFT patches the model in place, so run benchmarks that need the bare model first.
    """
    from mellea_local.backends.hf import LocalHFBackend
    from mellea_local.embedded.random_adapter import save_random_adapter

    params = param_count(model)
    tmp = Path(tempfile.mkdtemp(prefix="mellea-bench-"))
    try:
        alora_dir = save_random_adapter(model, tokenizer, tmp / "alora", alora=True, seed=1)
        lora_dir = save_random_adapter(model, tokenizer, tmp / "lora", alora=False, seed=2)
        backend = LocalHFBackend.from_loaded(model, tokenizer, model_id=model_id)
        # Not plain "lora": PEFT warns that a name inside its "lora_" prefix may reinitialise
        # the adapter's weights on load.
        alora = backend.add_adapter(alora_dir, name="bench_alora")
        lora = backend.add_adapter(lora_dir, name="bench_plain")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return CheckBench(backend, alora, lora, params, workdir=tmp)


@torch.no_grad()
def measure_requirement_checks(
    bench: CheckBench, *, lengths: list[int], repeats: int = 7, skip_slow: bool = False,
    model_label: str = "bench", on_row: Callable[[dict[str, Any]], None] | None = None,
    tick: Tick | None = None,
) -> dict[str, Any]:
    """One row of median milliseconds per mode per context length; the JSON of the script.

    ``on_row`` sees each row as soon as it is measured; ``tick`` is called once per round of
    the interleaved modes (``repeats`` per length).
    """
    backend = bench.backend
    model, tokenizer = backend.model, backend.tokenizer
    holder = backend.engine.holder  # the floor measures the bare forward the library wraps
    req = REQUIREMENTS[1]

    def judge(ctx: ChatContext) -> None:
        opts = {"max_new_tokens": 8, "min_new_tokens": 8}
        question = Message("user", f"Does your last answer satisfy this requirement: {req} "
                                   "Reply yes or no.")
        ids, _, _ = backend.render(question, ctx, model_options=opts)
        tensor = torch.tensor([ids], device=model.device)
        model.generate(input_ids=tensor, attention_mask=torch.ones_like(tensor),
                       do_sample=False, pad_token_id=tokenizer.pad_token_id, **opts)

    def measure(length: int) -> dict[str, Any]:
        from mellea_local.backends.cache_compat import cache_kwarg_name, crop_to
        from mellea_local.intrinsics.requirement_check import build_check_prompts

        alora, lora = bench.alora, bench.lora

        def shared(ctx: ChatContext) -> int:
            return build_check_prompts(backend, ctx, [req], alora)[0].shared

        ctx, _ = fit_conversation(shared, length)
        [prompt] = build_check_prompts(backend, ctx, [req], alora)
        if abs(prompt.shared - length) > fit_tolerance(length):
            raise BenchmarkError(
                f"--lengths {length}: the closest conversation has {prompt.shared} context "
                f"tokens, outside the {fit_tolerance(length)}-token tolerance; pass a length "
                "of at least 64.")
        forced = tokenizer.encode('{"score": "', add_special_tokens=False)
        suffix = prompt.ids[prompt.shared:] + forced
        backend.prefix_cache.clear()
        bench.check(ctx, alora, [req])  # warm: the base cache now holds the conversation
        [entry] = backend.prefix_cache.entries()
        suffix_t = torch.tensor([suffix], device=model.device)
        kw = cache_kwarg_name(model)

        def floor() -> None:
            with holder.using(alora.name) as peft:
                peft(input_ids=suffix_t, use_cache=True, **{kw: entry.cache})
            crop_to(entry.cache, prompt.shared)

        modes: dict[str, Callable[[], Any]] = {
            "ours": lambda: bench.check(ctx, alora, [req]),
            "floor": floor,
            "alora_scratch": lambda: bench.check(ctx, alora, [req], reuse=False),
            "lora": lambda: bench.check(ctx, lora, [req]),
            "llm_judge": lambda: judge(ctx),
            "batch8": lambda: bench.check(ctx, alora, REQUIREMENTS[:8]),
        }
        if skip_slow:
            modes.pop("llm_judge")
        samples = interleaved_samples(modes, repeats, tick=tick)
        med = {m: statistics.median(v) for m, v in samples.items()}
        row = {
            "requested_tokens": length,  # context_tokens is within fit_tolerance of it
            "context_tokens": prompt.shared,
            "suffix_tokens": len(suffix),
            "median_ms": med,  # per call: batch8 is one call of 8 checks
            "spread_ms": {m: [min(v), max(v)] for m, v in samples.items()},  # fastest, slowest
            "ours_over_floor": med["ours"] / med["floor"],
            "scratch_over_ours": med["alora_scratch"] / med["ours"],
            "lora_over_ours": med["lora"] / med["ours"],
            "batch8_over_one": med["batch8"] / med["ours"],
        }
        if "llm_judge" in med:
            row["judge_over_ours"] = med["llm_judge"] / med["ours"]
        if on_row:
            on_row(row)
        return row

    rows = [measure(length) for length in lengths]
    info = machine_info()
    return {
        "benchmark": "requirement_check",
        "model": model_label,
        "params": bench.params,
        "device": device_label(model),
        "dtype": dtype_label(model),
        "repeats": repeats,
        "torch_threads": info["torch_threads"],
        "machine": info["machine"],
        "python": info["python"],
        "rows": rows,
    }


def format_row(row: dict[str, Any]) -> str:
    """One table line: lengths, median ms per mode, then the three headline ratios."""
    m = row["median_ms"]
    judge = f"{m['llm_judge']:9.1f}" if "llm_judge" in m else "        -"
    return (f"{row['context_tokens']:6d} {row['suffix_tokens']:4d} | {m['ours']:8.1f} "
            f"{m['floor']:8.1f} {m['alora_scratch']:9.1f} {m['lora']:8.1f} {judge} "
            f"{m['batch8']:8.1f} | {row['ours_over_floor']:5.2f} {row['scratch_over_ours']:6.1f}"
            f" {row['batch8_over_one']:5.2f}")
