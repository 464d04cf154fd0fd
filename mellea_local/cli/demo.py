"""The demo ``make demo`` runs: one conversation, then requirement checks on its answer.

Until the trained embedded model ships, the demo runs on a freshly built random tiny model with
random adapters: the answers are gibberish, but every mechanism is real (chat template,
generation, aLoRA activation, KV reuse, batched checks), and the counters prove the reuse.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mellea_local import __version__
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_model, build_tokenizer
from mellea_local.embedded.corpus import REQUIREMENT_PHRASINGS
from mellea_local.embedded.random_adapter import save_random_adapter
from mellea_local.intrinsics import arequirement_check, arequirement_checks
from mellea_local.messages import Message
from mellea_local.options import ModelOption

REQUIREMENTS = [p.format(word="paris", n=8) for p in REQUIREMENT_PHRASINGS]


async def _demo(console: Console) -> None:
    with console.status("Building a tiny random model and adapters (offline)..."):
        t0 = time.perf_counter()
        tokenizer = build_tokenizer()
        model = build_model(tokenizer, hidden_size=128, num_layers=4, num_heads=4,
                            num_kv_heads=2)
        root = Path(tempfile.mkdtemp(prefix="mellea-demo-"))
        lib = root / "requirement-check" / "demo-tiny"
        save_random_adapter(model, tokenizer, lib / "alora", alora=True, seed=1)
        backend = LocalHFBackend.from_loaded(model, tokenizer, model_id="demo-tiny")
        backend.add_adapter("requirement-check", roots=[root])
    console.print(f"[bold]mellea_local {__version__}[/]  model ready in "
                  f"{time.perf_counter() - t0:.1f}s (random weights: answers are gibberish)")

    ctx = ChatContext().add(Message("system", "Answer briefly."))
    question = Message("user", "What is the capital of France?")
    console.print(f"\n[bold cyan]user[/] {question.content}")
    mot, ctx = await backend.generate_from_context(
        question, ctx, model_options={ModelOption.MAX_NEW_TOKENS: 24, ModelOption.STREAM: True,
                                      ModelOption.THINKING: True})
    console.print("[bold magenta]assistant[/] ", end="")
    async for delta in mot:
        console.print(delta, end="", style="dim", markup=False, highlight=False)
    console.print()
    console.print(f"  usage {mot.usage}, finish_reason={mot.finish_reason}")

    table = Table(title="Requirement checks (aLoRA, base KV cache reused)")
    for col in ("requirement", "score", "verdict", "ms", "prefilled", "reused"):
        table.add_column(col, justify="left" if col == "requirement" else "right")
    for req in REQUIREMENTS:
        t0 = time.perf_counter()
        score = await arequirement_check(ctx, backend, req)
        ms = (time.perf_counter() - t0) * 1000
        last = backend.stats.last
        table.add_row(req, f"{score:.3f}", "pass" if score > 0.5 else "fail", f"{ms:.0f}",
                      str(last.prefilled_tokens), str(last.reused_tokens))
    console.print(table)

    t0 = time.perf_counter()
    scores = await arequirement_checks(ctx, backend, REQUIREMENTS)
    ms = (time.perf_counter() - t0) * 1000
    console.print(f"Batch of {len(scores)} checks in one forward pass: {ms:.0f} ms; scores "
                  + ", ".join(f"{s:.3f}" for s in scores))


def run_demo() -> None:
    console = Console()
    asyncio.run(_demo(console))
