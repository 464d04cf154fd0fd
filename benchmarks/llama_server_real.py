"""SmolLM2-135M-Instruct on llama-server vs LocalHFBackend: scores, prefill reuse, greedy text.

Two forms of the same model, each served with the requirement-check aLoRA exported to GGUF:

- **f32**: ``export-gguf smollm2-135m`` (the converted safetensors folder written as f32);
- **q4_1**: ``export-gguf smollm2-135m --base-gguf <the shipped Q4_1 file>``.

The converted folder *is* the Q4_1 file dequantized, so both forms hold the same weight values;
what differs is the arithmetic: with a quantized weight llama.cpp first rounds the activations
to 8 bits (Q8_1 blocks of 32) and multiplies in integers. For each form, against LocalHFBackend
(PEFT, f32, same folder and adapter):

1. **scores**: the requirement check on the first ``--rows`` lines of ``--data`` and on a few
   long conversations (eval conversations stacked to ~``--long-tokens`` tokens): max and median
   |score difference|, verdict (> 0.5) agreement, accuracy against the labels;
2. **suffix-only prefill**: a check right after a generation on the same conversation: the
   tokens the server reports it evaluated (``timings.prompt_n``, our ``last_call`` counts) vs
   the check's suffix length;
3. **widened reads**: the f32 form again with ``n_probs=1``, so no check is decided by the
   first reply and each asks for a wider top (4,096, then all 49,152 probabilities if that
   does not decide either: the path long conversations take, ``probabilities.read_sizes``);
4. **greedy text**: ``--gen-tokens`` new tokens for a handful of prompts: the first token where
   the two differ, and there LocalHFBackend's logit gap between its own pick and the server's
   (a near-tie explains a divergence; a wide gap would be a bug).

One server at a time (``--threads`` each; torch uses the same count). Usage:

    python benchmarks/llama_server_real.py --adapter DIR [--data /tmp/checks/eval.jsonl]
        [--rows 30] [--long 3] [--threads 1] [--out benchmarks/results/llama_server_smollm2.json]

``DIR`` is a requirement-check aLoRA folder for SmolLM2-135M-Instruct (adapter_config.json,
adapter_model.safetensors, io.yaml), e.g. adapters/requirement-check/SmolLM2-135M-Instruct/alora.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
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
from mellea_local.models import MODELS, model_path
from mellea_local.models.registry import gguf_path
from mellea_local.options import ModelOption

MODEL = "smollm2-135m"
RESULTS = Path(__file__).parent / "results"
PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "Explain photosynthesis in two sentences.", "List three uses of copper.",
           "Tell me a short story about a robot who learns to paint."]


def library(adapter: Path, root: Path) -> Path:
    """A one-adapter library (``<root>/requirement-check/<base>/alora``) holding a copy of
    ``adapter``: the layout export-gguf and ``add_adapter(roots=...)`` read."""
    target = root / "requirement-check" / MODELS[MODEL].base_name / "alora"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(adapter, target, dirs_exist_ok=True)
    return root


def export_forms(lib: Path, out: Path) -> dict[str, Path]:
    """The two export-gguf folders (f32 written from the converted folder; the shipped Q4_1)."""
    forms = {"f32": out / "f32", "q4_1": out / "q4_1"}
    export_gguf(MODEL, forms["f32"], roots=[lib])
    export_gguf(MODEL, forms["q4_1"], roots=[lib], base_gguf=gguf_path(MODELS[MODEL]))
    return forms


def context_of(messages: list[dict[str, str]]) -> ChatContext:
    ctx = ChatContext()
    for m in messages:
        ctx = ctx.add(Message(m["role"], m["content"]))
    return ctx


def read_rows(data: Path, n: int) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line]
    return rows[:n]


def long_rows(hf: LocalHFBackend, data: Path, count: int, tokens: int,
              skip: int) -> list[dict[str, Any]]:
    """``count`` conversations of about ``tokens`` tokens: eval conversations (after the first
    ``skip`` lines) stacked until long enough, checked with the last one's requirement."""
    pool = read_rows(data, 10_000)[skip:]
    out, i = [], 0
    while len(out) < count and i < len(pool):
        messages: list[dict[str, str]] = []
        while i < len(pool):
            messages += pool[i]["messages"]
            last = pool[i]
            i += 1
            if len(hf.render(None, context_of(messages), add_generation_prompt=False)[0]) >= tokens:
                break
        out.append({"messages": messages, "requirement": last["requirement"],
                    "label": last["label"], "family": "long"})
    return out


async def hf_scores(hf: LocalHFBackend, rows: list[dict[str, Any]]) -> list[float]:
    return [await arequirement_check(context_of(r["messages"]), hf, r["requirement"])
            for r in rows]


async def llama_scores(llama: LlamaServerBackend, rows: list[dict[str, Any]]) -> list[float]:
    return [await arequirement_check(context_of(r["messages"]), llama, r["requirement"])
            for r in rows]


def compare_scores(mine: list[float], ref: list[float], rows: list[dict[str, Any]],
                   n_long: int) -> dict[str, Any]:
    diffs = [abs(a - b) for a, b in zip(mine, ref, strict=True)]
    agree = sum((a > 0.5) == (b > 0.5) for a, b in zip(mine, ref, strict=True))
    right = sum((a > 0.5) == bool(r["label"]) for a, r in zip(mine, rows, strict=True))
    return {"checks": len(rows), "long_checks": n_long, "max_abs_diff": max(diffs),
            "median_abs_diff": statistics.median(diffs),
            "max_abs_diff_long": max(diffs[-n_long:]) if n_long else None,
            "verdict_agreement": agree / len(rows), "accuracy": right / len(rows),
            "worst": sorted(({"row": i, "llama": mine[i], "hf": ref[i], "diff": d}
                             for i, d in enumerate(diffs)), key=lambda x: -x["diff"])[:3]}


async def suffix_prefill(llama: LlamaServerBackend) -> dict[str, Any]:
    """A check right after a generation on the same conversation prefills only its suffix."""
    ctx = ChatContext()
    mot, ctx = await llama.generate_from_context(
        Message("user", "Tell me about the river Seine in three sentences."), ctx,
        model_options={ModelOption.MAX_NEW_TOKENS: 48})
    await mot.avalue()
    conversation = len(llama.render(None, ctx, add_generation_prompt=False)[0])
    requirement = "The answer mentions Paris."
    await arequirement_check(ctx, llama, requirement)
    counts = llama.last_call
    total = counts.prefilled_tokens + counts.reused_tokens
    # what the slot holds: the prompt and every generated token but the last (sampled, never
    # fed back); the conversation's end-of-turn tokens after it are new to the server too
    held = mot.usage["prompt_tokens"] + mot.usage["completion_tokens"] - 1
    return {"conversation_tokens": conversation, "check_row_tokens": total,
            "check_suffix_tokens": total - conversation, "slot_held_tokens": held,
            "server_prompt_tokens_evaluated": counts.prefilled_tokens,
            "server_tokens_reused": counts.reused_tokens,
            "only_the_unheld_suffix_evaluated": counts.reused_tokens == held
            and counts.prefilled_tokens == total - held}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def gap_at(hf: LocalHFBackend, prompt: list[int], prefix: list[int], mine: int,
           ref: int) -> float:
    """LocalHFBackend's logit of its own pick minus that of the server's pick, after
    ``prompt + prefix``: how near a tie the divergence was."""
    with torch.no_grad():
        logits = hf.model(torch.tensor([prompt + prefix])).logits[0, -1].float()
    return float(logits[ref] - logits[mine])


async def greedy(hf: LocalHFBackend, llama: LlamaServerBackend,
                 n_tokens: int) -> list[dict[str, Any]]:
    out = []
    opts = {ModelOption.MAX_NEW_TOKENS: n_tokens}
    for prompt in PROMPTS:
        texts, ids = {}, {}
        for name, backend in (("hf", hf), ("llama", llama)):
            mot, _ = await backend.generate_from_context(Message("user", prompt), ChatContext(),
                                                         model_options=opts)
            texts[name] = await mot.avalue()
            ids[name] = hf.tokenizer(mot.meta["raw_text"], add_special_tokens=False)["input_ids"]
        at = first_divergence(ids["hf"], ids["llama"])
        row: dict[str, Any] = {"prompt": prompt, "tokens": len(ids["hf"]),
                               "identical": texts["hf"] == texts["llama"],
                               "first_divergent_token": at}
        if at is not None and at < min(len(ids["hf"]), len(ids["llama"])):
            base = hf.render(Message("user", prompt), ChatContext())[0]
            row["hf_logit_gap_at_divergence"] = gap_at(
                hf, base, ids["hf"][:at], ids["llama"][at], ids["hf"][at])
            row["hf_text"], row["llama_text"] = texts["hf"], texts["llama"]
        out.append(row)
    return out


async def measure(args: argparse.Namespace, forms: dict[str, Path], lib: Path) -> dict[str, Any]:
    hf = LocalHFBackend(MODEL, device="cpu", dtype=torch.float32)
    hf.add_adapter("requirement-check", roots=[lib])
    rows = read_rows(args.data, args.rows)
    longs = long_rows(hf, args.data, args.long, args.long_tokens, args.rows)
    every = rows + longs
    t = time.perf_counter()
    ref = await hf_scores(hf, every)
    out: dict[str, Any] = {"hf": {"scoring_s": time.perf_counter() - t,
                                  "accuracy": sum((s > 0.5) == bool(r["label"])
                                                  for s, r in zip(ref, every, strict=True))
                                  / len(every)},
                           "long_conversation_tokens": [
                               len(hf.render(None, context_of(r["messages"]),
                                             add_generation_prompt=False)[0]) for r in longs]}
    for form, folder in forms.items():
        with LlamaServerBackend.launch(folder, threads=args.threads, slots=2,
                                       ctx=4096) as llama:
            t = time.perf_counter()
            mine = await llama_scores(llama, every)
            took = time.perf_counter() - t
            out[form] = {"scores": compare_scores(mine, ref, every, len(longs)),
                         "scoring_s": took, "full_vocabulary_reads": llama.full_reads,
                         "suffix_prefill": await suffix_prefill(llama),
                         "greedy": await greedy(hf, llama, args.gen_tokens)}
        print(json.dumps({form: out[form]["scores"]}, indent=1), file=sys.stderr)
    # a widened read (``probabilities.read_sizes``), forced: top-1 never decides a check
    with LlamaServerBackend.launch(forms["f32"], threads=args.threads, slots=2, ctx=4096,
                                   n_probs=1) as llama:
        t = time.perf_counter()
        mine = await llama_scores(llama, every[:3])
        out["widened_read"] = {
            "form": "f32", "n_probs": 1, "checks": 3, "full_reads": llama.full_reads,
            "max_abs_diff": max(abs(a - b) for a, b in zip(mine, ref, strict=False)),
            "seconds_per_check": (time.perf_counter() - t) / 3}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=MODEL, choices=[MODEL])
    ap.add_argument("--adapter", type=Path, required=True,
                    help="a requirement-check aLoRA folder for SmolLM2-135M-Instruct")
    ap.add_argument("--data", type=Path, default=Path("/tmp/checks/eval.jsonl"))
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("--long", type=int, default=3)
    ap.add_argument("--long-tokens", type=int, default=1000)
    ap.add_argument("--gen-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "llama_server_smollm2.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model_path(MODEL)  # a typed error naming `mellea-local models get` when absent
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        lib = library(args.adapter, Path(tmp) / "lib")
        forms = export_forms(lib, Path(tmp))
        result = asyncio.run(measure(args, forms, lib))
    result["setup"] = {
        "command": " ".join(["python", *sys.argv]), "adapter": str(args.adapter),
        "data": str(args.data), "rows": args.rows, "long": args.long,
        "server_threads": args.threads, "torch_threads": torch.get_num_threads(),
        "load_average_before": load, "load_average_after": os.getloadavg(),
        "machine": machine_info()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "setup"}, indent=1))


if __name__ == "__main__":
    main()
