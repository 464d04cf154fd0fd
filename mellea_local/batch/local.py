"""The in-process engine of ``mellea-local check`` (``--engine local``), and the per-line code
both engines share: requirement checks over a JSONL dataset, resumable, line by line.

Input, one JSON object per line::

    {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}],
     "requirements": ["...", ...] | "requirement": "...",
     "label": true | [true, false, ...],          # optional
     "id": ...}                                   # optional, copied to the output

Output, one JSON object per checked line: ``line`` (1-based input line number), ``id``,
``requirements``, ``scores``, ``verdicts`` (score > 0.5), ``decided_by`` (per requirement:
``"adapter"``, or the program that decided it exactly, e.g. ``"ifeval
length_constraints:number_words(...)"`` / ``"rule ends_with_question()"``; routing is on unless
``--no-route``), with labels ``labels`` and ``correct``, and ``input_hash`` (of the line's
messages, requirements, labels and id). Each record is flushed as soon as it is written, so an
interrupted run loses at most the line in
flight, and a rerun skips every line already in the output.

A line number alone cannot be trusted to resume: after the input was edited, or with an ``-o``
written for another dataset, the record at line N judged other text, and counting it would
put stale verdicts into the accuracy. So a rerun compares every record's ``input_hash`` (for a
record written before the hash, its requirements) with the input's line and refuses the output
on any mismatch (``check_resume``), before any model loads.

The per-line pieces (``parse_line``, ``check_item``, ``record``, ``encode_record``,
``read_done``, ``tally``, the progress bar) are shared with ``--engine ray``
(``mellea_local.batch``), whose actors run ``check_item`` on their own backends: the two
engines' outputs compare line for line.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
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

from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.core.context import ChatContext
from mellea_local.errors import CheckFileError, LineError
from mellea_local.inputs import jsonl_lines, loads_json
from mellea_local.launch import add_cli_adapter, load_backend, read_utf8
from mellea_local.messages import chat_context
from mellea_local.requirements.dataset import CheckItem, parse_line, parse_object
from mellea_local.requirements.result import passes

__all__ = ["CheckItem", "CheckSummary", "LineError", "parse_line", "parse_object", "read_done",
           "run_check"]


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


def guard_paths(input_path: Path, output: Path) -> None:
    """Refuse an output that is the input (appending results would corrupt the dataset) or
    that is not a regular file: reading a FIFO to resume from it blocks until some other
    process writes, and a directory or device cannot hold records."""
    if output.exists() and not output.is_file():
        kind = "a directory" if output.is_dir() else "not a regular file (a FIFO, socket or device)"
        raise CheckFileError(
            f"The output {str(output)!r} is {kind}; -o must name a regular file (new, or the "
            "output of an earlier check run). Pass e.g. -o results.jsonl.")
    same = (output.exists() and input_path.exists() and os.path.samefile(input_path, output)) \
        or output.resolve() == input_path.resolve()
    if same:
        raise CheckFileError(
            f"The output {str(output)!r} is the input dataset itself; results would be appended "
            "into the dataset. Pass -o a new file (or an earlier check output).")


def read_done(output: Path) -> set[int]:
    """Input line numbers already in ``output``; a torn last record (crash mid-write) is cut.

    Only complete records count, so a rerun redoes the torn line instead of trusting half of it.
    A complete last record that merely lacks its newline (an editor, ``head -c``) is kept and
    terminated. Anything else in the file is not ours to truncate or append to: a line that is
    not a check record raises ``CheckFileError`` naming it, so ``-o`` pointed at a dataset or
    another file never loses a byte.
    """
    if not output.exists():
        return set()
    raw = output.read_bytes()
    body, tail = raw, b""
    if raw and not raw.endswith(b"\n"):
        cut = raw.rfind(b"\n") + 1
        body, tail = raw[:cut], raw[cut:]
    done: set[int] = set()
    for number, row in enumerate(jsonl_lines(body.decode("utf-8", errors="replace")),
                                  start=1):
        if not row.strip():
            continue
        rec = _check_record(row)
        if rec is None:
            raise CheckFileError(
                f"The output {str(output)!r} line {number} is not a check record; -o must name "
                "a new file or the output of an earlier check run. Pass another -o.")
        done.add(rec["line"])
    if tail:
        rec = _check_record(tail.decode("utf-8", errors="replace"))
        if rec is not None:
            with output.open("ab") as fh:  # complete, just unterminated: keep it
                fh.write(b"\n")
            done.add(rec["line"])
        elif tail.lstrip().startswith(b'{"line": '):
            with output.open("r+b") as fh:  # our own record, torn by a crash mid-write
                fh.truncate(len(body))
        else:
            raise CheckFileError(
                f"The output {str(output)!r} ends with a line that is not a check record; -o "
                "must name a new file or the output of an earlier check run. Pass another -o.")
    return done


def _check_record(row: str) -> dict[str, Any] | None:
    """``row`` parsed when it is one complete check output record, else None."""
    try:
        rec = loads_json(row, "the record")
    except json.JSONDecodeError:
        return None
    line = rec.get("line") if isinstance(rec, dict) else None
    # A bool is an int to Python: {"line": true} would mark line 1 as done.
    if (isinstance(line, int) and not isinstance(line, bool) and line >= 1
            and isinstance(rec.get("scores"), list)):
        return rec
    return None


def _records(text: str) -> Iterator[dict[str, Any]]:
    for row in jsonl_lines(text):
        rec = _check_record(row)
        if rec is not None:
            yield rec


def tally(output: Path, summary: CheckSummary) -> None:
    """Count labelled verdicts and matches over the whole output (earlier runs included)."""
    if not output.exists():
        return
    for rec in _records(output.read_bytes().decode("utf-8", errors="replace")):
        correct = rec.get("correct")
        if isinstance(correct, list):
            summary.labelled += len(correct)
            summary.correct += sum(bool(c) for c in correct)


def record(item: CheckItem, scores: list[float],
           decided_by: list[str] | None = None) -> dict[str, Any]:
    verdicts = [passes(s) for s in scores]
    rec: dict[str, Any] = {"line": item.line, "id": item.id, "requirements": item.requirements,
                           "scores": scores, "verdicts": verdicts,
                           "decided_by": decided_by or ["adapter"] * len(scores)}
    if item.labels is not None:
        rec["labels"] = item.labels
        rec["correct"] = [v == lab for v, lab in zip(verdicts, item.labels, strict=True)]
    rec["input_hash"] = input_hash(item)
    return rec


def input_hash(item: CheckItem) -> str:
    """What a record judged, as 16 hex digits: the line's messages, requirements, labels and
    id (parsed, so JSONL and Parquet rows of the same content hash alike)."""
    content = [item.messages, item.requirements, item.labels, item.id]
    text = json.dumps(content, ensure_ascii=False, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def items_by_line(numbered: Iterator[tuple[int, str]] | list[tuple[int, str]]
                  ) -> dict[int, CheckItem]:
    """The valid lines of an input by number (a malformed line has no entry)."""
    items = {}
    for number, text in numbered:
        if text.strip():
            try:
                items[number] = parse_line(number, text)
            except LineError:
                continue
    return items


def check_resume(output: Path, items: dict[int, CheckItem], input_name: str) -> None:
    """Refuse to resume from ``output`` when any record judged something other than the input's
    line of its number (see the module docstring); a fresh output passes."""
    if not output.exists():
        return
    stale: list[tuple[int, str]] = []
    for rec in _records(output.read_text("utf-8", errors="replace")):
        number = rec["line"]
        item = items.get(number)
        if item is None:
            stale.append((number, "no valid line of that number in the input"))
        elif "input_hash" in rec:
            if rec["input_hash"] != input_hash(item):
                stale.append((number, "the line's messages, requirements or label changed"))
        elif rec.get("requirements") != item.requirements:  # a record from before the hash
            stale.append((number, "the line's requirements changed"))
    if stale:
        number, why = stale[0]
        raise CheckFileError(
            f"The output {str(output)!r} holds {len(stale)} record(s) that do not match the input "
            f"{input_name!r} (first: line {number}, {why}): it was written for another dataset "
            "or an earlier version of this one, and resuming would count stale verdicts. Pass "
            "-o a new file, or delete the old output to check everything again.")


def dataset_lines(input_path: Path) -> list[str]:
    """The input's lines, numbered from 1 by position: both engines split the file this way,
    so a line number means the same line whichever engine wrote the record.

    A file that cannot be a dataset at all (missing, not UTF-8, or with no line that is
    JSON, e.g. a CSV or a pretty-printed document) is one ``CheckFileError`` before any model
    time, instead of a report of every line.
    """
    if input_path.exists() and not input_path.is_file():
        raise CheckFileError(
            f"The input dataset {str(input_path)!r} is "
            f"{'a folder' if input_path.is_dir() else 'not a regular file'}; pass a JSONL file.")
    if not input_path.is_file():
        raise CheckFileError(
            f"The input dataset {str(input_path)!r} does not exist; pass a JSONL file.")
    if _looks_parquet(input_path):
        raise CheckFileError(
            f"The input dataset {str(input_path)!r} is a Parquet file; the local engine reads "
            "JSONL. Add --engine ray (it reads Parquet; needs pip install "
            "'mellea-local[ray]'), or convert the file to JSONL (one JSON object per line).")
    lines = jsonl_lines(read_utf8(input_path, "The input dataset", CheckFileError))
    filled = [t for t in lines if t.strip()]
    # One bad line is that line's error (reported by number, like any other); only a file of
    # several lines none of which is JSON is the wrong kind of file.
    if len(filled) > 1 and not any(_is_json(t) for t in filled):
        raise CheckFileError(
            f"The input dataset {str(input_path)!r} is not JSONL: no line of it is a JSON "
            "value. Pass one JSON object per line (see `mellea-local check --help`).")
    return lines


def _looks_parquet(path: Path) -> bool:
    """By suffix or by the ``PAR1`` magic every Parquet file starts with."""
    if path.suffix.lower() in (".parquet", ".pq"):
        return True
    try:
        with path.open("rb") as fh:
            return fh.read(4) == b"PAR1"
    except OSError:
        return False


def _is_json(text: str) -> bool:
    try:
        loads_json(text, "the line")
    except json.JSONDecodeError:
        return False
    return True


def conversation(item: CheckItem) -> ChatContext:
    """The line's messages as the context its requirements judge."""
    return chat_context(item.messages)


async def check_item(backend: Any, item: CheckItem, adapter: str | None, *,
                     route: bool = True) -> dict[str, Any]:
    """The output record of one valid line: all its checks in one batched call.

    The one code path both engines run per line (``--engine local`` here, each Ray actor in
    ``mellea_local.batch``), so their records agree field for field. With ``route`` (the
    default) a requirement a program decides exactly (``requirements.verify.route``) gets
    that program's 1.0 or 0.0 and costs no forward; the rest go to the adapter together.
    """
    from mellea_local.intrinsics.requirement_check import arequirement_checks

    scores: list[float | None] = [None] * len(item.requirements)
    decided = ["adapter"] * len(item.requirements)
    if route:
        from mellea_local.requirements.verify import route as route_of
        from mellea_local.requirements.verify import verify

        answer = _last_assistant_text(item)
        prompt = next((content for role, content, _ in reversed(item.messages)
                       if role == "user" and isinstance(content, str)), None)
        for i, req in enumerate(item.requirements):
            mapping = route_of(req, prompt) if answer is not None else None
            if mapping is not None:
                scores[i] = 1.0 if verify(mapping, answer) else 0.0
                decided[i] = mapping.decider()
    rest = [i for i, s in enumerate(scores) if s is None]
    if rest:
        # All adapter checks of one line share the conversation: one batched forward pass.
        got = await arequirement_checks(conversation(item), backend,
                                        [item.requirements[i] for i in rest], adapter=adapter)
        for i, s in zip(rest, got, strict=True):
            scores[i] = float(s)
    return record(item, [float(s) for s in scores if s is not None], decided)


def _last_assistant_text(item: CheckItem) -> str | None:
    """The text of the assistant turn the requirements judge (the line's last message), or
    None when it carries no plain text (then nothing is routed)."""
    if not item.messages:
        return None
    role, content, _ = item.messages[-1]
    return content if role == "assistant" and isinstance(content, str) else None


def failure_reason(exc: BaseException) -> str:
    """A failed line's reason, on one line (what the report and the warning print)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def encode_record(rec: dict[str, Any]) -> str:
    """One output line (without its newline), byte for byte what either engine writes."""
    return json.dumps(rec)


def load_check_backend(
    model: str, *, device: str | None = None, dtype: str | None = None,
    adapter: str | None = None,
) -> tuple[Any, str | None]:
    """(backend, adapter name) as ``check`` runs them: ``--adapter`` when given, else the
    model's own requirement-check adapter, else one from the libraries.

    Ray actors call this too, each building its own backend from the same flags.
    """
    backend = load_backend(model, device=device, dtype=dtype, adapter=adapter)
    name = add_cli_adapter(backend, adapter) if adapter else None
    if name is None and not backend.supports_intrinsic(REQUIREMENT_CHECK):
        name = add_cli_adapter(backend, REQUIREMENT_CHECK)
    return backend, name


class RateColumn(ProgressColumn):
    """Lines per second (rich ships a rate column for bytes only)."""

    def render(self, task: Task) -> Text:
        speed = task.speed
        return Text(f"{speed:.1f} lines/s" if speed else "-- lines/s", style="progress.data.speed")


def make_progress(console: Console) -> Progress:
    """The bar both engines show on stderr: lines done of total, lines/s, elapsed, ETA."""
    return Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        MofNCompleteColumn(), RateColumn(), TimeElapsedColumn(), TextColumn("eta"),
        TimeRemainingColumn(), console=console, transient=False,
    )


def warn_skipped(err: Console, number: int, reason: str) -> None:
    err.print(f"line {number}: skipped: {reason}", style="yellow", markup=False,
              highlight=False)


async def _check_all(
    lines: list[str], output: Path, backend: Any, adapter: str | None, done: set[int],
    summary: CheckSummary, err: Console, progress: Progress, route: bool = True,
) -> None:
    task = progress.add_task("checking", total=len(lines), completed=0)
    with output.open("a", encoding="utf-8") as out:
        for number, text in enumerate(lines, start=1):
            if number in done or not text.strip():
                summary.skipped += number in done
                progress.advance(task)
                continue
            try:
                rec = await check_item(backend, parse_line(number, text), adapter,
                                       route=route)
            except Exception as exc:
                reason = failure_reason(exc)
                summary.errors.append((number, reason))
                warn_skipped(err, number, reason)
                progress.advance(task)
                continue
            out.write(encode_record(rec) + "\n")
            out.flush()
            summary.checked += 1
            progress.advance(task)


def run_check(
    input_path: Path, output: Path, backend: Any, *, adapter: str | None = None,
    console: Console | None = None, route: bool = True,
) -> CheckSummary:
    """Check every line of ``input_path`` not yet in ``output``, appending results
    (``route``: what a program decides exactly is decided by it, ``check_item``)."""
    err = console or Console(stderr=True, soft_wrap=True)
    guard_paths(input_path, output)
    lines = dataset_lines(input_path)
    done = read_done(output)
    check_resume(output, items_by_line(list(enumerate(lines, start=1))), str(input_path))
    summary = CheckSummary(total=len(lines))
    progress = make_progress(err)
    with progress:
        asyncio.run(_check_all(lines, output, backend, adapter, done, summary, err, progress,
                               route))
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
