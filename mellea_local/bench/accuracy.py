"""Requirement-check accuracy per family per adapter, on a labelled dataset.

Speed says nothing about whether a check is right, so the suite also scores every
requirement-check adapter a backend holds (the aLoRA and the LoRA, side by side) against
labels. The dataset is the ``check`` command's JSONL (``messages``, ``requirement(s)``,
``label``) with an optional ``family`` per line; without one, lines are grouped by requirement
text. Without a dataset, the embedded model's held-out set is drawn from
``mellea_local.embedded.checks`` with a seed its training never uses.

A verdict is ``score > 0.5``, exactly as ``check`` and ``requirement_check_to_bool`` decide.
Every cell (a family, or overall) carries the field's figures from
``mellea_local.requirements.metrics.binary_scores``: balanced accuracy with its 95 % bootstrap
interval, yes-F1, no-F1, and whether the cell is too small to mean much; plain accuracy stays
beside them. The always-yes and always-no floors are scored the same way (``floor_rows``).

Routing (``route=True``; ``bench --only accuracy`` passes it unless ``--no-route``, since
``validate`` and ``check`` route by default): beside each adapter's own row comes
``<adapter>+route``, the same verdicts except where a program decides the requirement exactly
(``requirements.verify.route``), which is what a
user of ``validate``/``check`` gets by default. Its row says how many checks were routed and how
right the programs were on them (``routed``), so the routed verdicts can be judged on their own.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mellea_local.batch.local import jsonl_lines
from mellea_local.bench.timing import Tick
from mellea_local.core.context import ChatContext
from mellea_local.errors import AdapterNotFoundError, DatasetError, LineError
from mellea_local.intrinsics.score import REQUIREMENT_CHECK
from mellea_local.launch import read_utf8
from mellea_local.messages import chat_context
from mellea_local.requirements.dataset import parse_line
from mellea_local.requirements.metrics import binary_scores

INTRINSIC = REQUIREMENT_CHECK
HELD_OUT_SEED = 9_000
"""The synthetic set's default seed: the embedded model's training draws seeds below 2000."""


@dataclass
class LabelledItem:
    """One conversation and the labelled checks on its last assistant turn."""

    messages: list[dict[str, Any]]
    requirements: list[str]
    labels: list[bool]
    families: list[str]


def read_dataset(path: str | Path) -> list[LabelledItem]:
    """Parse a labelled JSONL dataset; the first bad line raises ``DatasetError``.

    Accuracy needs every line labelled, so unlike ``check`` (which skips bad lines and goes on)
    a bad or unlabelled line stops the run before any model time is spent.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(
            f"--dataset: the labelled dataset {str(path)!r} does not exist; pass a JSONL file "
            "(one {messages, requirement(s), label, family?} object per line).")
    items = []
    body = read_utf8(path, "--dataset: the labelled dataset", DatasetError)
    for number, text in enumerate(jsonl_lines(body), start=1):
        if not text.strip():
            continue
        try:
            item = parse_line(number, text)
        except LineError as exc:
            raise DatasetError(f"{path} line {number}: {exc}") from None
        if item.labels is None:
            raise DatasetError(
                f"{path} line {number}: no \"label\"; accuracy needs a true/false label per "
                "requirement on every line.")
        families = _families(json.loads(text).get("family"), item.requirements)
        if families is None:
            raise DatasetError(
                f"{path} line {number}: \"family\" must be a string or a list of "
                f"{len(item.requirements)} strings, one per requirement.")
        messages = [{"role": role, "content": content}
                    | ({"reasoning_content": thinking} if thinking is not None else {})
                    for role, content, thinking in item.messages]
        items.append(LabelledItem(messages, item.requirements, item.labels, families))
    if not items:
        raise DatasetError(f"The labelled dataset {str(path)!r} holds no lines.")
    return items


def _families(raw: Any, requirements: list[str]) -> list[str] | None:
    if raw is None:
        return list(requirements)
    if isinstance(raw, str) and raw.strip():
        return [raw] * len(requirements)
    if (isinstance(raw, list) and len(raw) == len(requirements)
            and all(isinstance(f, str) and f.strip() for f in raw)):
        return list(raw)
    return None


def synthetic_items(seed: int = HELD_OUT_SEED, n_per_family: int = 40) -> list[LabelledItem]:
    """The embedded model's held-out checks: ``n_per_family`` balanced examples per family."""
    from mellea_local.embedded import checks

    examples = checks.check_examples(random.Random(seed), n_per_family)
    return [LabelledItem(ex.messages, [ex.requirement], [ex.label], [ex.family])
            for ex in examples]


def family_order(items: list[LabelledItem]) -> list[str]:
    """Families in a stable order: the synthetic families' own order, then first seen."""
    from mellea_local.embedded.checks import FAMILIES

    seen = list(dict.fromkeys(f for item in items for f in item.families))
    return [f for f in FAMILIES if f in seen] + [f for f in seen if f not in FAMILIES]


def context_of(messages: list[dict[str, Any]]) -> ChatContext:
    """The conversation as a ``ChatContext`` (assistant thinking kept where given)."""
    return chat_context(messages)


def check_adapters(backend: Any) -> list[Any]:
    """Every requirement-check adapter on ``backend``: in the order the kinds serve an
    intrinsic (aLoRAs first), then by name."""
    serving = [a for a in backend.adapters.values() if a.intrinsic == INTRINSIC]
    return sorted(serving, key=lambda a: (a.strategy.preference, a.name))


def score_cell(labels: list[bool], verdicts: list[bool]) -> dict[str, Any]:
    """One cell of a result: ``n``, ``correct``, ``accuracy`` and ``binary_scores``'s figures
    (``positives``, ``balanced_accuracy``, ``interval``, ``yes_f1``, ``no_f1``,
    ``too_small``), plus ``said_yes`` (the share of yes verdicts: 1.0 is a checker that
    always says yes, whatever it reads)."""
    if not labels:
        return {"n": 0, "correct": 0, "accuracy": None, "positives": 0,
                "balanced_accuracy": None, "interval": None, "yes_f1": None, "no_f1": None,
                "too_small": True, "said_yes": None}
    scores = binary_scores(labels, verdicts).as_dict()
    return {"n": scores["n"], "correct": sum(y == p for y, p in zip(labels, verdicts, strict=True)),
            "accuracy": scores["accuracy"], "positives": scores["positives"],
            "balanced_accuracy": scores["balanced_accuracy"], "interval": scores["interval"],
            "yes_f1": scores["yes_f1"], "no_f1": scores["no_f1"],
            "too_small": scores["too_small"], "said_yes": sum(verdicts) / len(verdicts)}


def accuracy_frame(items: list[LabelledItem]) -> dict[str, Any]:
    """The result's skeleton: example count, how many labels are true, families, the
    always-yes and always-no floors (``floors``); ``adapters`` filled per adapter."""
    families = family_order(items)
    return {"examples": sum(len(item.requirements) for item in items),
            "labels_true": sum(sum(item.labels) for item in items),
            "families": families, "adapters": {}, "floors": floor_rows(items, families)}


def floor_rows(items: list[LabelledItem], families: list[str]) -> dict[str, dict[str, Any]]:
    """What answering always yes, or always no, scores: balanced accuracy 0.5 by definition,
    plain accuracy the share of that label, and one F1 of 0. The floors every row is read
    against."""
    return {f"always {word}": adapter_accuracy(
        items, families, "floor", [[answer] * len(item.labels) for item in items], 0.0)
        for word, answer in (("yes", True), ("no", False))}


def adapter_accuracy(
    items: list[LabelledItem], families: list[str], kind: str, verdicts: list[list[bool]],
    seconds: float,
) -> dict[str, Any]:
    """One adapter's entry from its verdicts (one list per item, one bool per requirement)
    and the seconds its checks took; the local and the Ray engine both tally here."""
    labels: dict[str, list[bool]] = {f: [] for f in families}
    said: dict[str, list[bool]] = {f: [] for f in families}
    for item, got in zip(items, verdicts, strict=True):
        for verdict, label, family in zip(got, item.labels, item.families, strict=True):
            labels[family].append(label)
            said[family].append(bool(verdict))
    per_family = {f: score_cell(labels[f], said[f]) for f in families}
    overall = score_cell([y for f in families for y in labels[f]],
                         [p for f in families for p in said[f]])
    n = overall["n"]
    accuracies = [c["accuracy"] for c in per_family.values() if c["accuracy"] is not None]
    return {
        "kind": kind,
        "families": per_family,
        "overall": overall,
        "mean_family_accuracy": sum(accuracies) / len(accuracies) if accuracies else None,
        "ms_per_check": 1000 * seconds / n if n else None,
    }


def routed_verdicts(items: list[LabelledItem]) -> tuple[list[list[bool | None]], list[str]]:
    """Per item, per requirement: the program's verdict where one decides it exactly, else None;
    and the deciders' names (``Mapping.decider``) of the routed checks, in order."""
    from mellea_local.requirements.verify import route, verify

    out: list[list[bool | None]] = []
    names: list[str] = []
    for item in items:
        answer = next((m.get("content") for m in reversed(item.messages)
                       if m.get("role") == "assistant"), None)
        prompt = next((m.get("content") for m in reversed(item.messages)
                       if m.get("role") == "user"), None)
        row: list[bool | None] = []
        for req in item.requirements:
            mapping = route(req, prompt) if isinstance(answer, str) else None
            row.append(None if mapping is None else verify(mapping, answer))
            if mapping is not None:
                names.append(mapping.decider())
        out.append(row)
    return out, names


def route_row(items: list[LabelledItem], families: list[str], row: dict[str, Any],
              verdicts: list[list[bool]], routed: list[list[bool | None]]) -> dict[str, Any]:
    """``row``'s adapter with routing: its verdicts where no program decides, the program's
    where one does; ``routed`` holds how many checks a program decided and its accuracy."""
    merged = [[a if r is None else r for a, r in zip(got, progs, strict=True)]
              for got, progs in zip(verdicts, routed, strict=True)]
    out = adapter_accuracy(items, families, f"{row['kind']}+route", merged, 0.0)
    pairs = [(r, label) for progs, item in zip(routed, items, strict=True)
             for r, label in zip(progs, item.labels, strict=True) if r is not None]
    n = sum(len(item.labels) for item in items)
    out["routed"] = {"checks": len(pairs), "of": n,
                     "accuracy": sum(r == y for r, y in pairs) / len(pairs) if pairs else None}
    out["ms_per_check"] = None if row["ms_per_check"] is None or not n else (
        row["ms_per_check"] * (n - len(pairs)) / n)
    return out


async def aevaluate_accuracy(
    backend: Any, items: list[LabelledItem], *, adapters: list[Any] | None = None,
    tick: Tick | None = None, route: bool = False,
) -> dict[str, Any]:
    """Accuracy per family per adapter (async form of ``evaluate_accuracy``)."""
    from mellea_local.intrinsics.requirement_check import check_outputs
    from mellea_local.requirements.requirement import requirement_check_to_bool

    chosen = check_adapters(backend) if adapters is None else list(adapters)
    if not chosen:
        raise AdapterNotFoundError(
            "The backend holds no requirement-check adapter to score; load one with "
            "backend.add_adapter('requirement-check') or pass --adapter.")
    out = accuracy_frame(items)
    contexts = [context_of(item.messages) for item in items]
    routed = routed_verdicts(items)[0] if route else None
    for adapter in chosen:
        verdicts = []
        t0 = time.perf_counter()
        for item, ctx in zip(items, contexts, strict=True):
            # All checks of one conversation go in one batched call, as `check` runs them.
            raws = await check_outputs(backend, ctx, item.requirements, adapter=adapter)
            verdicts.append([requirement_check_to_bool(raw) for raw in raws])
            if tick:
                tick()
        out["adapters"][adapter.name] = adapter_accuracy(
            items, out["families"], adapter.kind.value, verdicts,
            time.perf_counter() - t0)
        if routed is not None:
            out["adapters"][f"{adapter.name}+route"] = route_row(
                items, out["families"], out["adapters"][adapter.name], verdicts, routed)
    return out


def evaluate_accuracy(
    backend: Any, items: list[LabelledItem], *, adapters: list[Any] | None = None,
    tick: Tick | None = None, route: bool = False,
) -> dict[str, Any]:
    """Accuracy per family per adapter: ``{"examples", "families", "adapters": {name: ...}}``.

    Each adapter entry holds ``kind``, ``families`` (``{family: cell}``, a cell as
    ``score_cell`` makes it), ``overall``, ``mean_family_accuracy`` and ``ms_per_check``;
    ``floors`` holds the always-yes and always-no rows. ``adapters`` defaults to every
    requirement-check adapter on the backend; ``tick`` is called once per item per adapter.
    ``route`` adds each adapter's ``<name>+route`` row (module docstring).
    """
    return asyncio.run(aevaluate_accuracy(backend, items, adapters=adapters, tick=tick,
                                          route=route))
