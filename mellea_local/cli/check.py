"""``mellea-local check``: requirement checks over a JSONL dataset, resumable, line by line.

Input, one JSON object per line::

    {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}],
     "requirements": ["...", ...] | "requirement": "...",
     "label": true | [true, false, ...],          # optional
     "id": ...}                                   # optional, copied to the output

Output, one JSON object per checked line: ``line`` (1-based input line number, the resume key),
``id``, ``requirements``, ``scores``, ``verdicts`` (score > 0.5) and, with labels, ``labels``
and ``correct``. Each record is flushed as soon as it is written, so an interrupted run loses at
most the line in flight, and a rerun skips every line already in the output.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mellea_local.core.context import ChatContext
from mellea_local.messages import Message

THRESHOLD = 0.5
_ROLES = ("system", "user", "assistant")


class LineError(ValueError):
    """One input line cannot be checked; the run reports it and moves on."""


@dataclass
class CheckItem:
    """One valid input line, ready to check."""

    line: int
    messages: list[tuple[str, str, str | None]]  # role, content, reasoning_content
    requirements: list[str]
    labels: list[bool] | None = None
    id: Any = None


@dataclass
class CheckSummary:
    """What one run did; ``accuracy`` covers every labelled record in the output file."""

    total: int = 0
    checked: int = 0
    skipped: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    labelled: int = 0
    correct: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.labelled if self.labelled else None


def parse_line(line: int, text: str) -> CheckItem:
    """Validate one dataset line; every problem raises ``LineError`` naming the field."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise LineError(f"expected a JSON object, got {type(obj).__name__}")
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise LineError('"messages" must be a non-empty list of {"role", "content"} objects')
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            raise LineError(f'messages[{i}] must be an object with a string "content"')
        if m.get("role") not in _ROLES:
            raise LineError(
                f"messages[{i}] has role {m.get('role')!r}; use one of {', '.join(_ROLES)}"
            )
        thinking = m.get("reasoning_content")
        if thinking is not None and not isinstance(thinking, str):
            raise LineError(f'messages[{i}] has a non-string "reasoning_content"; use a string')
        turns.append((m["role"], m["content"], thinking))
    if turns[-1][0] != "assistant":
        raise LineError("the last message must be the assistant turn the requirements judge")
    reqs = obj["requirements"] if "requirements" in obj else obj.get("requirement")
    if isinstance(reqs, str):
        reqs = [reqs]
    if (not isinstance(reqs, list) or not reqs
            or not all(isinstance(r, str) and r.strip() for r in reqs)):
        raise LineError('give "requirements" (a list of non-empty strings) or "requirement"')
    labels = obj.get("label", obj.get("labels"))
    if labels is not None:
        if isinstance(labels, bool):
            labels = [labels] * len(reqs)
        if (not isinstance(labels, list) or len(labels) != len(reqs)
                or not all(isinstance(v, bool) for v in labels)):
            raise LineError(
                f'"label" must be true/false or a list of {len(reqs)} true/false values, one '
                "per requirement"
            )
    return CheckItem(line, turns, list(reqs), labels, obj.get("id"))


def read_done(output: Path) -> set[int]:
    """Input line numbers already in ``output``; a torn last record (crash mid-write) is cut.

    Only complete records count, so a rerun redoes the torn line instead of trusting half of it.
    """
    if not output.exists():
        return set()
    raw = output.read_bytes()
    if raw and not raw.endswith(b"\n"):
        raw = raw[: raw.rfind(b"\n") + 1]
        output.write_bytes(raw)
    done: set[int] = set()
    for rec in _records(raw.decode("utf-8")):
        if isinstance(rec.get("line"), int):
            done.add(rec["line"])
    return done


def _records(text: str) -> Iterator[dict[str, Any]]:
    for row in text.splitlines():
        try:
            rec = json.loads(row)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            yield rec


def tally(output: Path, summary: CheckSummary) -> None:
    """Count labelled verdicts and matches over the whole output (earlier runs included)."""
    if not output.exists():
        return
    for rec in _records(output.read_text("utf-8")):
        correct = rec.get("correct")
        if isinstance(correct, list):
            summary.labelled += len(correct)
            summary.correct += sum(bool(c) for c in correct)


def record(item: CheckItem, scores: list[float]) -> dict[str, Any]:
    verdicts = [s > THRESHOLD for s in scores]
    rec: dict[str, Any] = {"line": item.line, "id": item.id, "requirements": item.requirements,
                           "scores": scores, "verdicts": verdicts}
    if item.labels is not None:
        rec["labels"] = item.labels
        rec["correct"] = [v == lab for v, lab in zip(verdicts, item.labels, strict=True)]
    return rec


class RateColumn(ProgressColumn):
    """Lines per second (rich ships a rate column for bytes only)."""

    def render(self, task: Task) -> Text:
        speed = task.speed
        return Text(f"{speed:.1f} lines/s" if speed else "-- lines/s", style="progress.data.speed")


async def _check_all(
    lines: list[str], output: Path, backend: Any, adapter: str | None, done: set[int],
    summary: CheckSummary, err: Console, progress: Progress,
) -> None:
    from mellea_local.intrinsics.requirement_check import arequirement_checks

    task = progress.add_task("checking", total=len(lines), completed=0)
    with output.open("a", encoding="utf-8") as out:
        for number, text in enumerate(lines, start=1):
            if number in done or not text.strip():
                summary.skipped += number in done
                progress.advance(task)
                continue
            try:
                item = parse_line(number, text)
                ctx = ChatContext()
                for role, content, thinking in item.messages:
                    ctx = ctx.add(Message(role, content, thinking=thinking))  # type: ignore[arg-type]
                # All checks of one line share the conversation: one batched forward pass.
                scores = await arequirement_checks(ctx, backend, item.requirements,
                                                   adapter=adapter)
            except Exception as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                summary.errors.append((number, reason))
                err.print(f"line {number}: skipped: {reason}", style="yellow", markup=False,
                          highlight=False)
                progress.advance(task)
                continue
            out.write(json.dumps(record(item, [float(s) for s in scores])) + "\n")
            out.flush()
            summary.checked += 1
            progress.advance(task)


def run_check(
    input_path: Path, output: Path, backend: Any, *, adapter: str | None = None,
    console: Console | None = None,
) -> CheckSummary:
    """Check every line of ``input_path`` not yet in ``output``, appending results."""
    err = console or Console(stderr=True, soft_wrap=True)
    lines = input_path.read_text("utf-8").splitlines()
    done = read_done(output)
    summary = CheckSummary(total=len(lines))
    progress = Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        MofNCompleteColumn(), RateColumn(), TimeElapsedColumn(), TextColumn("eta"),
        TimeRemainingColumn(), console=err, transient=False,
    )
    with progress:
        asyncio.run(_check_all(lines, output, backend, adapter, done, summary, err, progress))
    tally(output, summary)
    return summary


def report(summary: CheckSummary, output: Path, console: Console) -> None:
    """The closing lines: what ran, what was skipped, and accuracy when labels exist."""
    console.print(
        f"checked {summary.checked} lines, {summary.skipped} already done, "
        f"{len(summary.errors)} malformed/failed -> {output}", markup=False, highlight=False)
    for number, reason in summary.errors:
        console.print(f"  line {number}: {reason}", markup=False, highlight=False)
    if summary.accuracy is not None:
        console.print(f"accuracy: {summary.accuracy:.4f} ({summary.correct}/{summary.labelled} "
                      "labelled checks)", markup=False, highlight=False)
