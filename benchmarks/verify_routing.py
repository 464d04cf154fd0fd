"""Measure routing (``avalidate(..., route=True)``) against the aLoRA alone, without the model.

    python benchmarks/verify_routing.py            # writes verify_routing_smollm2.{json,md}

For the held-out split (336 lines) and the held-out families split (182 lines) the shipped
SmolLM2 aLoRA's per-line scores are read from ``benchmarks/results/checker_smollm2_shipped.json``
(``splits[path]['who'][name]['scores']``, in file order). Routed = the IFEval registry verifier's
verdict where ``verify.route`` maps the requirement confidently, else the stored score > 0.5.
Both are scored with ``mellea_local.requirements.metrics.binary_scores`` (balanced accuracy, 95 %
stratified bootstrap interval). For ``user-style.jsonl`` there are no stored scores: the
mapper's coverage and its accuracy on the lines it routes are reported (labels decided by
reading, not by a verifier).

Caveat printed with the figures: the mapper's patterns were written after reading these files'
requirement texts, so coverage here is in-sample for the mapper (not for the verdicts, which are
the registry's own program).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mellea_local.requirements import verify  # noqa: E402
from mellea_local.requirements.metrics import binary_scores  # noqa: E402

DATA = "benchmarks/data/requirement-check"
SPLITS = {"held-out phrasings and words": f"{DATA}/SmolLM2-135M-Instruct.jsonl",
          "held-out families": f"{DATA}/SmolLM2-135M-Instruct.families.jsonl"}
USER = f"{DATA}/user-style.jsonl"
STORED = "benchmarks/results/checker_smollm2_shipped.json"


def _answer(messages: list[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "assistant")


def _lines(path: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]


def _checks(path: str) -> list[tuple[str, str, bool, str]]:
    """(requirement, answer, label, family) per check; a multi-requirement line gives several."""
    out = []
    for row in _lines(path):
        reqs = [row["requirement"]] if "requirement" in row else row["requirements"]
        labels = [row["label"]] if "requirement" in row else row["label"]
        fams = row["family"] if isinstance(row["family"], list) else [row["family"]] * len(reqs)
        for req, label, fam in zip(reqs, labels, fams, strict=True):
            out.append((req, _answer(row["messages"]), bool(label), fam))
    return out


def _scores(labels, preds) -> dict:
    return binary_scores(labels, preds).as_dict()


def split_report(path: str, stored: list[float]) -> dict:
    checks = _checks(path)
    assert len(checks) == len(stored), (path, len(checks), len(stored))
    labels = [c[2] for c in checks]
    alora = [s > 0.5 for s in stored]
    routed, via, per_verifier = [], [], {}
    for (req, answer, label, _), a in zip(checks, alora, strict=True):
        mapping = verify.route(req)
        if mapping is None:
            routed.append(a)
            via.append(None)
            continue
        verdict = verify.verify(mapping, answer)
        routed.append(verdict)
        via.append(str(mapping))
        cell = per_verifier.setdefault(mapping.verifier, {"n": 0, "right": 0, "alora_right": 0})
        cell["n"] += 1
        cell["right"] += verdict == label
        cell["alora_right"] += a == label
    idx = [i for i, m in enumerate(via) if m is not None]
    sub = {}
    if idx:
        sub = {"n": len(idx),
               "routed_accuracy": sum(routed[i] == labels[i] for i in idx) / len(idx),
               "alora_accuracy_on_these": sum(alora[i] == labels[i] for i in idx) / len(idx)}
    return {"path": path, "lines": len(checks), "coverage": len(idx) / len(checks),
            "alora": _scores(labels, alora), "routed": _scores(labels, routed),
            "routed_lines": sub, "per_verifier": per_verifier, "via": via}


def user_report(path: str) -> dict:
    checks = _checks(path)
    rows = []
    for req, answer, label, fam in checks:
        mapping = verify.route(req)
        if mapping is not None:
            rows.append({"requirement": req, "family": fam, "label": label,
                         "verifier": str(mapping), "verdict": verify.verify(mapping, answer)})
    right = sum(r["verdict"] == r["label"] for r in rows)
    return {"path": path, "checks": len(checks), "routed": len(rows),
            "coverage": len(rows) / len(checks),
            "routed_accuracy": right / len(rows) if rows else None, "lines": rows}


def _ba(s: dict) -> str:
    lo, hi = s["interval"]
    return f"{s['balanced_accuracy']:.3f} [{lo:.3f}, {hi:.3f}]"


def markdown(out: dict) -> str:
    md = ["# Routing verifiable requirements to the IFEval registry (SmolLM2-135M-Instruct)", "",
          f"Command: `{out['command']}` (no model run: the aLoRA's scores are the stored ones in "
          f"`{STORED}`, adapter `{out['adapter']}`).", "",
          "Routed = the registry verifier's verdict where `verify.route` maps the requirement's "
          "whole text confidently, else the stored aLoRA score > 0.5. Balanced accuracy with its "
          "95 % stratified bootstrap interval (`metrics.binary_scores`).", "",
          "| split | lines | coverage | aLoRA alone | routed | routed lines: verifier acc. "
          "| same lines: aLoRA acc. |", "|---|---|---|---|---|---|---|"]
    for name, s in out["splits"].items():
        sub = s["routed_lines"]
        md.append(f"| {name} | {s['lines']} | {s['coverage']:.1%} | {_ba(s['alora'])} | "
                  f"{_ba(s['routed'])} | {sub.get('routed_accuracy', 0):.3f} | "
                  f"{sub.get('alora_accuracy_on_these', 0):.3f} |")
    u = out["user_style"]
    acc = "n/a" if u["routed_accuracy"] is None else f"{u['routed_accuracy']:.3f}"
    md += ["", f"User-style set (`{u['path']}`, labels decided by reading, no stored scores): "
           f"{u['routed']} of {u['checks']} checks routed ({u['coverage']:.1%}); the verifier "
           f"agrees with the reader's label on {acc} of them.", "",
           "| requirement | label | verifier | verdict |", "|---|---|---|---|"]
    md += [f"| {r['requirement']} | {r['label']} | `{r['verifier']}` | {r['verdict']} |"
           for r in u["lines"]]
    md += ["", "Per verifier (held-out splits): lines routed, verifier right, aLoRA right.", "",
           "| split | verifier | n | verifier right | aLoRA right |", "|---|---|---|---|---|"]
    for name, s in out["splits"].items():
        for v, c in sorted(s["per_verifier"].items()):
            md.append(f"| {name} | {v} | {c['n']} | {c['right']} | {c['alora_right']} |")
    md += ["", "Caveats: the mapper's patterns were written after reading these files' "
           "requirement texts, so its coverage here is in-sample (a new phrasing is more often "
           "left to the aLoRA); the verdicts are the registry's own `check_following`, and the "
           "held-out labels were made by the same verifiers, so routed lines agree by "
           "construction. Punkt-only verifiers (`number_sentences`, `capital_word_frequency`) "
           f"are not routed here (punkt installed: {out['punkt']})."]
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/verify_routing_smollm2")
    args = ap.parse_args()
    if verify.registry() is None:
        raise SystemExit(f"the IFEval registry is needed: {verify.INSTALL}")
    stored = json.loads((ROOT / STORED).read_text())
    out: dict = {"command": "python benchmarks/verify_routing.py", "model": stored["model"],
                 "adapter": stored["adapters"][0], "punkt": verify._has_punkt(), "splits": {}}
    for name, path in SPLITS.items():
        [who] = stored["splits"][path]["who"].values()
        out["splits"][name] = split_report(path, who["scores"])
    out["user_style"] = user_report(USER)
    base = ROOT / args.out
    base.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    base.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))


if __name__ == "__main__":
    main()
