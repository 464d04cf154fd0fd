"""Accuracy of a trained requirement-check adapter on held-out lines, per family, beside the
same base model asked as a judge (the prompt a user would otherwise write).

    python scripts/eval_check_adapter.py data/checks/eval.jsonl --model smollm2-135m \\
        --adapter adapters/requirement-check/SmolLM2-135M-Instruct/alora \\
        --judge --out benchmarks/results/smollm2-check-accuracy.json

The adapter is scored through the product path (``requirement_checks``: the intrinsic's fast
path, KV reuse for an aLoRA); a verdict is score > 0.5. The judge reads the base model's
next-token probabilities of "yes" and "no" after a plain question about the requirement
(greedy, no adapter), so it is never worse than sampling its answer. Lines need ``family``
(``scripts/make_check_dataset.py`` writes it).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

JUDGE_PROMPT = ("Here is a conversation.\n\nUser: {user}\n\nAssistant: {answer}\n\n"
                "Does the assistant's answer satisfy this requirement: \"{requirement}\"? "
                "Answer with yes or no.")


def judge_verdict(backend: Any, row: dict[str, Any]) -> bool:
    import torch

    tok = backend.tokenizer
    text = JUDGE_PROMPT.format(user=row["messages"][0]["content"],
                               answer=row["messages"][-1]["content"],
                               requirement=row["requirement"])
    ids = tok.apply_chat_template([{"role": "user", "content": text}],
                                  add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)["input_ids"].to(backend.device)
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits[0, -1].float()
    probs = logits.softmax(-1)

    def mass(words: tuple[str, ...]) -> float:
        found = {i for w in words for i in tok.encode(w, add_special_tokens=False)[:1]}
        return float(sum(probs[i] for i in found))

    return mass(("yes", "Yes", " yes", " Yes")) > mass(("no", "No", " no", " No"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", type=Path, required=True)
    parser.add_argument("--judge", action="store_true", help="also score the base as judge")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.intrinsics.requirement_check import requirement_checks
    from mellea_local.messages import chat_context as context_of

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines()
            if line.strip()][: args.limit]
    backend = LocalHFBackend(args.model, device="cpu")
    adapter = backend.add_adapter(str(args.adapter), name="trained")
    right: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    start = time.perf_counter()
    for row in rows:
        ctx = context_of(tuple((m["role"], m["content"]) for m in row["messages"]))
        score = requirement_checks(ctx, backend, [row["requirement"]], adapter=adapter.name)[0]
        right["adapter"][row["family"]].append((score > 0.5) == row["label"])
        if args.judge:
            right["judge"][row["family"]].append(judge_verdict(backend, row) == row["label"])
    seconds = time.perf_counter() - start
    result: dict[str, Any] = {"data": str(args.data), "model": args.model,
                              "adapter": str(args.adapter), "lines": len(rows),
                              "torch_threads": torch.get_num_threads(),
                              "seconds": round(seconds, 1)}
    for who, families in right.items():
        flat = [v for vs in families.values() for v in vs]
        result[who] = {"overall": round(sum(flat) / len(flat), 4),
                       "per_family": {f: round(sum(v) / len(v), 4)
                                      for f, v in sorted(families.items())}}
        print(f"{who}: {result[who]['overall']:.3f} overall; " + ", ".join(
            f"{f} {a:.2f}" for f, a in result[who]["per_family"].items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
