"""Accuracy of a trained requirement-check adapter on held-out lines, per family, beside the
same base model asked as a judge (the prompt a user would otherwise write).

    python scripts/eval_check_adapter.py data/checks/eval.jsonl [more.jsonl ...] \\
        --model smollm2-135m --adapter adapters/requirement-check/SmolLM2-135M-Instruct/alora \\
        [other/alora ...] --judge --out benchmarks/results/smollm2-check-accuracy.json

Each split reports balanced accuracy with its 95 % stratified bootstrap interval, yes-F1 and
no-F1 (``mellea_local.requirements.metrics``), overall and per family, and every line's score.

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
    parser.add_argument("data", type=Path, nargs="+", help="one or more labelled JSONL splits")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", type=Path, nargs="+", required=True,
                        help="adapter folders, scored side by side (one model load)")
    parser.add_argument("--judge", action="store_true", help="also score the base as judge")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    from mellea_local.backends.huggingface import LocalHFBackend
    from mellea_local.intrinsics.requirement_check import requirement_checks
    from mellea_local.messages import chat_context as context_of
    from mellea_local.requirements.metrics import binary_scores

    torch.set_num_threads(args.threads)
    backend = LocalHFBackend(args.model, device="cpu")
    names = {}
    for i, folder in enumerate(args.adapter):
        names[str(folder)] = backend.add_adapter(str(folder), name=f"trained{i}").name
    result: dict[str, Any] = {"model": args.model, "adapters": [str(a) for a in args.adapter],
                              "torch_threads": torch.get_num_threads(), "splits": {}}
    for data in args.data:
        rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()
                if line.strip()][: args.limit]
        verdicts: dict[str, list[bool]] = defaultdict(list)
        scores: dict[str, list[float]] = defaultdict(list)
        start = time.perf_counter()
        for row in rows:
            ctx = context_of(tuple((m["role"], m["content"]) for m in row["messages"]))
            for folder, name in names.items():
                score = requirement_checks(ctx, backend, [row["requirement"]], adapter=name)[0]
                scores[folder].append(round(float(score), 4))
                verdicts[folder].append(score > 0.5)
            if args.judge:
                verdicts["judge"].append(judge_verdict(backend, row))
        labels = [bool(r["label"]) for r in rows]
        split: dict[str, Any] = {"lines": len(rows), "seconds": round(time.perf_counter() - start,
                                                                      1), "who": {}}
        for who, got in verdicts.items():
            families: dict[str, Any] = {}
            for fam in sorted({r["family"] for r in rows}):
                idx = [i for i, r in enumerate(rows) if r["family"] == fam]
                families[fam] = binary_scores([labels[i] for i in idx],
                                              [got[i] for i in idx]).as_dict()
            overall = binary_scores(labels, got)
            split["who"][who] = {"overall": overall.as_dict(), "per_family": families,
                                 "scores": scores.get(who)}
            print(f"{data.name} {who}: {overall.describe()}", flush=True)
        result["splits"][str(data)] = split
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.out:
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
