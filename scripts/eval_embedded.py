"""Evaluate the shipped embedded model and its requirement-check adapters on held-out data.

    python scripts/eval_embedded.py                 # writes benchmarks/results/embedded.json
    python scripts/eval_embedded.py --n 40 --react 20 --no-write   # a quick look

Everything runs through the product path a user gets: ``LocalHFBackend.embedded()``, the
requirement-check intrinsic (``check_outputs``: fast path, KV reuse for the aLoRA) and
``mellea_local.react.react`` with the built-in calculator and lookup tools. Held-out data comes
from the training distribution with seeds the training script never uses:

- checks, per adapter and family, on responses built only from training words, on
  responses holding words never seen in training (``synthetic.UNSEEN_WORDS``), and on chat
  answers like the ones the base writes (``synthetic.chat_check_examples``);
- ReACT: the first turn's tool call (right tool, exact arguments) and whole tasks solved (the
  final answer equals the tool-derived truth), for calculator and lookup tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from embedded_lab import synthetic as S  # noqa: E402

from mellea_local.backends.hf import LocalHFBackend  # noqa: E402
from mellea_local.bench.accuracy import context_of  # noqa: E402
from mellea_local.core.context import ChatContext  # noqa: E402
from mellea_local.core.thunk import ModelOutputThunk  # noqa: E402
from mellea_local.intrinsics.requirement_check import check_outputs  # noqa: E402
from mellea_local.options import ModelOption  # noqa: E402
from mellea_local.requirements.requirement import requirement_check_score  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "embedded.json"
VOCABULARIES = ("train", "unseen", "chat")
"""Responses of training words, with unseen words, and chat answers of the kind the base
writes (``synthetic.chat_check_examples``: sentences, sums, JSON, not bags of words)."""
KINDS = ("alora", "lora")
CHECK_SEED = 9_000  # training uses seeds < 100
REACT_SEED = 9_500


async def check_accuracy(backend: LocalHFBackend, n: int,
                         kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    """``{adapter: {vocab: {family: accuracy}}}`` on ``n`` balanced examples per cell."""
    out: dict[str, Any] = {}
    for name, adapter in sorted(backend.adapters.items()):
        kind = "alora" if adapter.is_alora else "lora"
        if kind not in kinds:
            continue
        out[kind] = {}
        for v, vocab in enumerate(VOCABULARIES):
            rng = random.Random(CHECK_SEED + 10 * v)
            examples = (S.chat_check_examples(rng, n) if vocab == "chat"
                        else S.check_examples(rng, n, vocab=vocab))  # type: ignore[arg-type]
            right: dict[str, list[bool]] = {f: [] for f in S.FAMILIES}
            t0 = time.perf_counter()
            for ex in examples:
                [raw] = await check_outputs(backend, context_of(ex.messages), [ex.requirement],
                                            adapter=adapter)
                right[ex.family].append((requirement_check_score(raw) > 0.5) == ex.label)
            cell = {f: round(sum(r) / len(r), 4) for f, r in right.items()}
            cell["mean"] = round(sum(cell.values()) / len(S.FAMILIES), 4)
            cell["ms_per_check"] = round(1000 * (time.perf_counter() - t0) / len(examples), 1)
            out[kind][vocab] = cell
            print(f"  {name} {vocab}: " + ", ".join(f"{k} {v}" for k, v in cell.items()),
                  flush=True)
    return out


def _first_turn(ctx: ChatContext) -> ModelOutputThunk[Any] | None:
    return next((e for e in ctx.as_list() if isinstance(e, ModelOutputThunk)), None)


async def react_accuracy(backend: LocalHFBackend, n: int, *, thinking: bool) -> dict[str, Any]:
    """Per task kind: first-turn tool calls right, and tasks solved end to end."""
    from mellea_local.react import react

    rng = random.Random(REACT_SEED + int(thinking))
    opts = {ModelOption.MAX_NEW_TOKENS: 96, ModelOption.THINKING: thinking}
    out: dict[str, Any] = {}
    for kind, vocab in (("calculator", "train"), ("lookup", "train"), ("lookup", "unseen")):
        first_ok = solved = 0
        failures: list[dict[str, Any]] = []
        t0 = time.perf_counter()
        for _ in range(n):
            task = S.react_task(rng, kind=kind, vocab=vocab)  # type: ignore[arg-type]
            argument = "expression" if kind == "calculator" else "key"
            try:
                result, ctx = await react(task.goal, ChatContext(), backend,
                                          tools=S.react_tools(task), loop_budget=4,
                                          model_options=opts)
                answer: str | None = result.value
            except RuntimeError:
                ctx, answer = None, None
            first = _first_turn(ctx) if ctx is not None else None
            calls = list(first.tool_calls or []) if first is not None else []
            if (len(calls) == 1 and calls[0].name == task.tool
                    and calls[0].args == {argument: task.argument}):
                first_ok += 1
            if answer is not None and answer.strip() == task.answer:
                solved += 1
            elif len(failures) < 3:
                failures.append({"goal": task.goal, "truth": task.answer, "answer": answer})
        label = kind if vocab == "train" else f"{kind}_unseen_keys"
        out[label] = {"tasks": n, "first_call_accuracy": round(first_ok / n, 4),
                      "solved": round(solved / n, 4),
                      "seconds_per_task": round((time.perf_counter() - t0) / n, 2),
                      "examples_of_failures": failures}
        print(f"  react {label} thinking={thinking}: first call {first_ok}/{n}, "
              f"solved {solved}/{n}", flush=True)
    return out


def load_time(weights: Path | None, adapters: Path | None,
              kinds: tuple[str, ...] = KINDS) -> tuple[LocalHFBackend, float]:
    """The backend and the seconds its loading took (library imports excluded: paid once)."""
    import peft  # noqa: F401

    t0 = time.perf_counter()
    if weights is None:
        backend = LocalHFBackend.embedded()
    else:
        backend = LocalHFBackend(weights, device="cpu", dtype="float32")
        root = adapters or weights.parent / "adapters"
        folder = root / "requirement-check" / weights.name
        for kind in kinds:
            backend.add_adapter(folder / kind)
    return backend, time.perf_counter() - t0


def folder_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 2)


def markdown(results: dict[str, Any]) -> str:
    checks = results["requirement_check"]
    lines = ["| adapter | vocabulary | " + " | ".join(S.FAMILIES) + " | mean |",
             "|---|---|" + "---|" * (len(S.FAMILIES) + 1)]
    for kind in ("alora", "lora"):
        for vocab in VOCABULARIES:
            cell = checks.get(kind, {}).get(vocab)
            if cell:
                lines.append(f"| {kind} | {vocab} | "
                             + " | ".join(f"{100 * cell[f]:.1f}" for f in S.FAMILIES)
                             + f" | {100 * cell['mean']:.1f} |")
    if not results.get("react"):
        return "\n".join(lines)  # --react 0: no ReACT table to show
    lines += ["", "| ReACT tasks | thinking | first call right | solved |", "|---|---|---|---|"]
    for mode, block in results["react"].items():
        for label, cell in block.items():
            lines.append(f"| {label} | {mode} | {100 * cell['first_call_accuracy']:.1f} | "
                         f"{100 * cell['solved']:.1f} |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    kinds = tuple(args.kinds)
    backend, seconds = load_time(args.weights, args.adapters, kinds)
    weights = args.weights or Path(backend.model_id)
    print(f"loaded {backend.model_id} with {sorted(backend.adapters)} in {seconds:.2f}s",
          flush=True)
    training_file = weights / "training.json"
    results: dict[str, Any] = {
        "model": weights.name,
        "parameters": backend.base_parameter_count,
        "size_mb": {"base": folder_mb(weights),
                    **{a.name: folder_mb(a.path) for a in backend.adapters.values()}},
        "embedded_load_seconds": round(seconds, 3),
        "training": json.loads(training_file.read_text()) if training_file.exists() else None,
        "machine": {"platform": platform.platform(), "threads": args.threads,
                    "torch": torch.__version__},
        "held_out": {"checks_per_family_and_vocabulary": args.n, "react_tasks_per_kind": args.react,
                     "check_seed": CHECK_SEED, "react_seed": REACT_SEED},
    }
    print("requirement checks:", flush=True)
    results["requirement_check"] = await check_accuracy(backend, args.n, kinds)
    results["react"] = {}
    if args.react:
        for thinking in (False, True) if args.thinking else (False,):
            results["react"]["on" if thinking else "off"] = await react_accuracy(
                backend, args.react, thinking=thinking)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200,
                        help="checks per family and vocabulary (half pass, half fail)")
    parser.add_argument("--react", type=int, default=100, help="ReACT tasks per kind")
    parser.add_argument("--thinking", action="store_true", help="also run ReACT with thinking")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", type=Path, default=None,
                        help="experiments: a base folder instead of the shipped one")
    parser.add_argument("--adapters", type=Path, default=None,
                        help="experiments: the adapter library root for --weights")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                        help="adapters to evaluate (an experiment may train only one)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    results = asyncio.run(main_async(args))
    table = markdown(results)
    results["table_markdown"] = table
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {RESULTS}")
    print(table)


if __name__ == "__main__":
    main()
