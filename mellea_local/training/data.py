"""Training data: the ``check`` dataset format, read whole and refused line by line.

Every line is validated before any model loads (``requirements.dataset.parse_object``, the
parser ``mellea-local check`` uses, plus a label per requirement, which training needs); all
problems come back in one ``TrainingDataError`` so a user fixes the file in one pass. Lines are
split by ``inputs.jsonl_lines`` (the one JSONL reader: U+2028 or U+0085 inside a string is
not a line break) and parsed by ``inputs.loads_json`` (nesting bounded, a key given twice
refused). A FIFO or a device is refused before it is opened (it would block or never end).

What training would silently learn wrong is refused or repaired, with a line saying so:
the same check (conversation and requirement) twice with one label is kept once
(``TrainingData.duplicates`` counts the rest; a duplicate on both sides of the split made
validation accuracy a training accuracy), with two labels it is refused naming both lines,
``"label"`` and ``"labels"`` disagreeing on one line is refused, and a split whose training side
holds one class is refused. The split into training and validation rows is seeded and by line,
so the checks of one conversation never sit on both sides, and no check is on both sides.

The peer's ``m alora train`` rows, ``{"item": ..., "label": "T"}``, are read too: the item
becomes the user turn, and the result is a custom intrinsic with its own io.yaml
(``peer_io.py``) answering one of the file's two labels.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mellea_local.errors import LineError, TrainingDataError
from mellea_local.inputs import jsonl_lines, loads_json, regular_file_problem
from mellea_local.requirements.dataset import parse_object

MAX_LISTED = 20
USER, REPLAY = "user", "replay"


@dataclass(frozen=True)
class Example:
    """One call to learn: a conversation, the instruction's variables, the category to answer
    (``yes``/``no`` for a requirement check, the file's own label for the peer's rows)."""

    line: int
    messages: tuple[tuple[str, str], ...]  # role, content
    variables: tuple[tuple[str, str], ...]  # the io.yaml instruction's {variables}
    label: str
    origin: str = USER  # "user" (the given file) or "replay" (the shipped general data)
    family: str | None = None  # the shipped data's "family" field, when a line has one

    @property
    def requirement(self) -> str:
        return dict(self.variables).get("requirement", "")

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes two examples the same check: the conversation and the variables."""
        return (self.messages, self.variables)


@dataclass(frozen=True)
class TrainingData:
    train: list[Example]
    validation: list[Example]
    sha256: str
    lines: int
    labels: tuple[str, ...] = ("yes", "no")  # the peer format: its two labels, sorted
    peer_format: bool = False
    duplicates: int = 0  # checks dropped because an identical one (same label) came earlier
    replay: ReplayData | None = None


@dataclass(frozen=True)
class ReplayData:
    """The shipped general data mixed in so a user's family does not erase the rest."""

    path: str
    sha256: str
    ratio: float
    train: int
    validation: int
    dropped: int  # general checks left out because the user's data holds the same check


def _peer_example(number: int, obj: object) -> Example | str:
    """The peer's ``{"item": ..., "label": ...}`` row: the item is the user turn judged."""
    if not isinstance(obj, dict) or set(obj) - {"item", "label", "id"}:
        return 'a peer-format row holds only "item" and "label" (and an optional "id")'
    item, label = obj.get("item"), obj.get("label")
    if not isinstance(item, str) or not item.strip():
        return '"item" must be a non-empty string'
    if not isinstance(label, str) or not label.strip() or '"' in label or "\\" in label:
        return '"label" must be a non-empty string without quotes or backslashes'
    return Example(number, (("user", item),), (), label.strip())


def _label_list(value: Any, count: int) -> Any:
    return [value] * count if isinstance(value, bool) else value


def _labels_disagree(obj: dict[str, Any], count: int) -> str | None:
    if "label" in obj and "labels" in obj and \
            _label_list(obj["label"], count) != _label_list(obj["labels"], count):
        return (f'"label" {obj["label"]!r} and "labels" {obj["labels"]!r} disagree; keep one '
                "of the two keys")
    return None


def read_text(path: str | Path, what: str = "Training data") -> tuple[str, bytes]:
    """The file's text and bytes; a FIFO, device or folder is refused before it is opened."""
    problem = regular_file_problem(path)
    if problem is not None:
        raise TrainingDataError(f"{what} {str(path)!r} {problem}.")
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TrainingDataError(
            f"{what} {str(path)!r} cannot be read: {exc.strerror or exc}.") from None
    try:
        return raw.decode("utf-8"), raw
    except UnicodeDecodeError as exc:
        raise TrainingDataError(
            f"{what} {str(path)!r} is not UTF-8 (byte {raw[exc.start]:#04x} at offset "
            f"{exc.start}); save it as UTF-8.") from None


def _json_problem(exc: json.JSONDecodeError) -> str:
    if exc.msg.startswith("the line "):  # loads_json's own refusals (depth, a key twice)
        return exc.msg.removeprefix("the line ")
    return f"not valid JSON ({exc.msg} at column {exc.colno})"


def read_examples(path: str | Path, what: str = "Training data") -> tuple[
        list[Example], str, int]:
    """Every check of a labelled JSONL file, its sha256 and its line count."""
    text, raw = read_text(path, what)
    problems: list[str] = []
    examples: list[Example] = []
    lines = jsonl_lines(text)
    peer: bool | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = loads_json(line, "the line", unique_keys=True)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: {_json_problem(exc)}")
            continue
        this_peer = isinstance(obj, dict) and "item" in obj
        if peer is None:
            peer = this_peer
        if this_peer != peer:
            problems.append(f"line {number}: mixes the peer's item/label rows with check rows; "
                            "one file holds one format")
            continue
        if peer:
            got = _peer_example(number, obj)
            if isinstance(got, str):
                problems.append(f"line {number}: {got}")
            else:
                examples.append(got)
            continue
        try:
            item = parse_object(number, obj)
        except LineError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        if item.labels is None:
            problems.append(f'line {number}: no "label"; training needs true/false per '
                            "requirement")
            continue
        disagree = _labels_disagree(obj, len(item.requirements))
        if disagree:
            problems.append(f"line {number}: {disagree}")
            continue
        family = obj.get("family") if isinstance(obj.get("family"), str) else None
        turns = tuple((role, content) for role, content, _thinking in item.messages)
        examples.extend(Example(number, turns, (("requirement", req),),
                                "yes" if label else "no", family=family)
                        for req, label in zip(item.requirements, item.labels, strict=True))
    if problems:
        _refuse(path, problems)
    if not examples:
        raise TrainingDataError(f"{str(path)!r} holds no examples; give one JSON object a line.")
    labels = {e.label for e in examples}
    if len(labels) != 2:
        raise TrainingDataError(
            f"{str(path)!r}: the labels are {sorted(labels)}; training needs exactly two "
            "(true and false, or the two labels of a peer-format file), each seen at least "
            "once.")
    return examples, hashlib.sha256(raw).hexdigest(), len(lines)


def _refuse(path: str | Path, problems: list[str]) -> None:
    shown = "\n".join(problems[:MAX_LISTED])
    more = f"\n... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    raise TrainingDataError(
        f"{str(path)!r}: {len(problems)} bad line(s), nothing was trained; fix them (the "
        f"format is `mellea-local check --help`'s, with labels):\n{shown}{more}")


def deduplicate(path: str | Path, examples: list[Example]) -> tuple[list[Example], int]:
    """Each check once (the first line that holds it) and how many repeats were dropped; the
    same check with two labels is refused, naming both lines."""
    first: dict[tuple[Any, ...], Example] = {}
    kept: list[Example] = []
    conflicts: list[str] = []
    for ex in examples:
        seen = first.get(ex.key)
        if seen is None:
            first[ex.key] = ex
            kept.append(ex)
        elif seen.label != ex.label:
            conflicts.append(
                f"line {ex.line}: the check of line {seen.line} ({ex.requirement or 'item'!r}"
                f" on the same conversation) labelled {ex.label!r} there {seen.label!r}; "
                "decide which is right and keep one")
    if conflicts:
        _refuse(path, conflicts)
    return kept, len(examples) - len(kept)


def split(examples: list[Example], *, validation: float, seed: int) -> tuple[
        list[Example], list[Example]]:
    """Seeded split by source line (all checks of a line go to the same side), stratified by
    the line's labels so validation holds both classes where the data allows (balanced
    accuracy is undefined on one); no check is on both sides (deduplicate first: a check is
    then one example on one line)."""
    if not 0.0 <= validation < 1.0:
        raise TrainingDataError(f"validation={validation!r}: pass a fraction in [0, 1).")
    strata: dict[tuple[str, ...], set[int]] = {}
    labels_of: dict[int, set[str]] = {}
    for e in examples:
        labels_of.setdefault(e.line, set()).add(e.label)
    for line, labels in labels_of.items():
        strata.setdefault(tuple(sorted(labels)), set()).add(line)
    rng = random.Random(seed)
    held: set[int] = set()
    for stratum in sorted(strata):
        lines = sorted(strata[stratum])
        rng.shuffle(lines)
        held.update(lines[: round(len(lines) * validation)])
    train = [e for e in examples if e.line not in held]
    if not train:
        raise TrainingDataError(
            f"validation={validation} leaves no training line out of {len(labels_of)}; lower "
            "it.")
    val = [e for e in examples if e.line in held]
    shared = {e.key for e in train} & {e.key for e in val}
    if shared:  # deduplicate() makes this impossible; a guard, not a path
        raise TrainingDataError(
            f"{len(shared)} check(s) sit on both sides of the split; deduplicate the data.")
    return train, val


def _one_class(path: str | Path, train: list[Example], validation: float) -> None:
    labels = {e.label for e in train}
    if len(labels) < 2:
        raise TrainingDataError(
            f"{str(path)!r}: the training side of the split holds only {sorted(labels)} labels "
            f"({len(train)} checks), so the adapter could only learn to always answer that. Add "
            f"lines of the other label, lower --validation ({validation}) or change --seed.")


def load_training_data(path: str | Path, *, validation: float = 0.2,
                       seed: int = 0) -> TrainingData:
    examples, digest, lines = read_examples(path)
    examples, duplicates = deduplicate(path, examples)
    train, held = split(examples, validation=validation, seed=seed)
    _one_class(path, train, validation)
    peer = not examples[0].variables
    labels = tuple(sorted({e.label for e in examples})) if peer else ("yes", "no")
    return TrainingData(train, held, digest, lines, labels, peer, duplicates)


def add_replay(data: TrainingData, path: str | Path, *, ratio: float, validation: float,
               seed: int) -> TrainingData:
    """``data`` with ``ratio`` x its checks drawn (seeded) from the general file at ``path``,
    split like the user's lines; a general check the user's data also holds is left out, so
    a replayed line can never carry a user's validation check into training."""
    general, digest, _ = read_examples(path, "The replay data")
    general, _ = deduplicate(path, general)
    user_keys = {e.key for e in [*data.train, *data.validation]}
    usable = [e for e in general if e.key not in user_keys]
    dropped = len(general) - len(usable)
    wanted = round((len(data.train) + len(data.validation)) * ratio)
    by_line: dict[int, list[Example]] = {}
    for e in usable:
        by_line.setdefault(e.line, []).append(e)
    order = sorted(by_line)
    random.Random(seed + 7919).shuffle(order)
    chosen: list[Example] = []
    for line in order:
        if len(chosen) >= wanted:
            break
        chosen.extend(replace(e, origin=REPLAY) for e in by_line[line])
    train, held = split(chosen, validation=validation, seed=seed) if chosen else ([], [])
    info = ReplayData(str(path), digest, ratio, len(train), len(held), dropped)
    return replace(data, train=[*data.train, *train], validation=[*data.validation, *held],
                   replay=info)
