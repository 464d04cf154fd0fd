"""Five intrinsics on one RAG answer: base-KV reuse against running each from scratch.

On one random-init model with five random aLoRA adapters (requirement-check, uncertainty,
guardian-core, policy-guardrails, factuality-detection, with the io.yaml files of
``tests/intrinsics/io_yaml``), a RAG conversation of about ``--tokens`` tokens (documents
attached to the user turn, written inline by the embedded chat template) is judged by the five
intrinsics in turn:

- ``ours``: ``reuse=True``, the cache emptied first: the first intrinsic prefills the
  conversation once, each later one reads it from the base-KV cache and prefills only its own
  suffix (an aLoRA does not change the conversation's K/V);
- ``scratch``: ``reuse=False``, every intrinsic prefills the whole conversation (what a
  library without base-KV reuse pays, the peer's cost);
- ``turn``: the five in one ``aintrinsics_on_turn`` call, the cache emptied first: the
  fast-path ones (one likelihood rule) share one forward with PEFT's mixed-adapter batching
  over the base cache, the others generate one at a time on that cache.

Both run alternately in one process, on the same model and adapters; results are checked
equal (within 1e-4). Reported: median seconds per five-intrinsic round, the ratio, and the
tokens each mode prefilled (``backend.stats``). Intrinsics that mark sentences (citations,
hallucination detection, context attribution) read the documents with markers, a different
prefix from the plain conversation: they reuse among themselves only when they mark alike, so
they are not in this round.

Usage: python benchmarks/intrinsics.py [--quick] [--threads 1]
Writes benchmarks/results/intrinsics.json.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.bench.subjects import SIZES, build_sized_model
from mellea_local.core.context import ChatContext
from mellea_local.embedded import build_tokenizer
from mellea_local.intrinsics.call import aintrinsic_batch, aintrinsics_on_turn
from mellea_local.messages import Message

RESULTS = Path(__file__).parent / "results"
IO_YAML = Path(__file__).parents[1] / "tests" / "intrinsics" / "io_yaml"
INTRINSICS = {  # name -> (aLoRA invocation, call variables)
    "requirement-check": ("<requirements>", {"requirement": "Cite the documents."}),
    "uncertainty": ("<certainty>", {}),
    "guardian-core": ("<guardian>", {"criteria": "The answer is rude.",
                                     "scoring_schema": "Score the last assistant answer."}),
    "policy-guardrails": ("<policy>", {"policy_text": "Never give medical advice."}),
    "factuality-detection": ("<factuality>", {}),
}
SENTENCE = ("Owls are nocturnal birds of prey that hunt small mammals, insects and other "
            "birds, and a few species specialise in hunting fish. ")


def save_alora(tokenizer, base, out: Path, name: str, invocation: str, seed: int) -> None:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj",
                                                            "o_proj"],
                        task_type="CAUSAL_LM", init_lora_weights=False,
                        alora_invocation_tokens=tokenizer.encode(invocation,
                                                                 add_special_tokens=False))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        get_peft_model(copy.deepcopy(base), config).save_pretrained(out)
    import yaml

    data = yaml.safe_load((IO_YAML / f"{name}.yaml").read_text())
    schema = json.loads(data["response_format"])
    schema["additionalProperties"] = False  # a random adapter would add keys forever
    data["response_format"] = json.dumps(schema)
    (out / "io.yaml").write_text(yaml.safe_dump(data))


def conversation(tokenizer, tokens: int, nonce: int) -> ChatContext:
    per = len(tokenizer.encode(SENTENCE, add_special_tokens=False))
    docs = [f"Document {nonce}.{i}: " + SENTENCE * max(1, tokens // per // 4) for i in range(4)]
    return ChatContext().add(Message("user", "What do owls hunt?", documents=docs)).add(
        Message("assistant", "Owls hunt small mammals, insects, birds and fish."))


async def one_round(backend, ctx, reuse: bool) -> tuple[float, int, list]:
    start, prefilled, results = time.perf_counter(), 0, []
    for name, (_, variables) in INTRINSICS.items():
        [result] = await aintrinsic_batch(backend, name, ctx, [variables], reuse=reuse)
        prefilled += backend.stats.last.prefilled_tokens
        results.append(result)
    return time.perf_counter() - start, prefilled, results


async def one_turn(backend, ctx) -> tuple[float, int, list]:
    before = backend.stats.prefilled_tokens
    start = time.perf_counter()
    results = await aintrinsics_on_turn(backend, ctx, [(n, v) for n, (_, v) in INTRINSICS.items()])
    return time.perf_counter() - start, backend.stats.prefilled_tokens - before, results


def close(a, b, tol=1e-4) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
    if isinstance(a, float):
        return abs(a - b) <= tol
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny model, 512 tokens, 3 repeats")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", choices=sorted(SIZES), default="bench-20m")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "intrinsics.json")
    args = ap.parse_args()
    if args.quick:
        args.size, args.tokens, args.repeats = "tiny", 512, 3
    torch.set_num_threads(args.threads)
    tokenizer = build_tokenizer()
    model = build_sized_model(tokenizer, args.size, max_position=args.tokens + 1024)
    library = Path(__import__("tempfile").mkdtemp(prefix="intrinsics-bench-"))
    for seed, (name, (invocation, _)) in enumerate(INTRINSICS.items()):
        save_alora(tokenizer, model, library / name / args.size / "alora", name, invocation,
                   50 + seed)
    backend = LocalHFBackend.from_loaded(model, tokenizer, model_id=args.size)
    for name in INTRINSICS:
        backend.add_adapter(name, roots=[library])

    ours, scratch, turn, rows = [], [], [], []
    for repeat in range(args.repeats + 1):  # the first round warms up, not counted
        ctx = conversation(tokenizer, args.tokens, repeat)
        backend.prefix_cache.clear()
        t_ours, p_ours, r_ours = asyncio.run(one_round(backend, ctx, True))
        backend.prefix_cache.clear()
        t_scratch, p_scratch, r_scratch = asyncio.run(one_round(backend, ctx, False))
        backend.prefix_cache.clear()
        t_turn, p_turn, r_turn = asyncio.run(one_turn(backend, ctx))
        for other in (r_scratch, r_turn):
            if not all(close(a, b) for a, b in zip(r_ours, other, strict=True)):
                raise SystemExit(f"results differ: {r_ours} vs {other}")
        if repeat:
            ours.append(t_ours)
            scratch.append(t_scratch)
            turn.append(t_turn)
            rows.append({"ours_s": t_ours, "scratch_s": t_scratch, "turn_s": t_turn,
                         "ours_prefilled": p_ours, "scratch_prefilled": p_scratch,
                         "turn_prefilled": p_turn})
    view = ctx.view_for_generation()
    from mellea_local.rendering import render_prompt_ids, to_chat_messages, to_template_input

    turns, kwargs = to_template_input(to_chat_messages(view), tokenizer.chat_template)
    length = len(render_prompt_ids(tokenizer, turns, None, kwargs))
    report = {
        "benchmark": "five intrinsics on one RAG answer, base-KV reuse vs from scratch",
        "model": args.size, "conversation_tokens": length, "threads": args.threads,
        "intrinsics": list(INTRINSICS), "repeats": args.repeats,
        "median_ours_s": statistics.median(ours), "median_scratch_s": statistics.median(scratch),
        "ratio_scratch_over_ours": statistics.median(scratch) / statistics.median(ours),
        "median_turn_s": statistics.median(turn),
        "ratio_scratch_over_turn": statistics.median(scratch) / statistics.median(turn),
        "rounds": rows, "results_equal_within": 1e-4, "python": platform.python_version(),
        "torch": torch.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.size}, {length} tokens, {args.threads} thread(s): ours "
          f"{report['median_ours_s']:.3f} s, scratch {report['median_scratch_s']:.3f} s, "
          f"ratio {report['ratio_scratch_over_ours']:.2f}x; one turn "
          f"{report['median_turn_s']:.3f} s, ratio {report['ratio_scratch_over_turn']:.2f}x; "
          f"prefilled {rows[-1]['ours_prefilled']} (turn {rows[-1]['turn_prefilled']}) vs "
          f"{rows[-1]['scratch_prefilled']} tokens")


if __name__ == "__main__":
    main()
