"""Training data: the ``check`` dataset format, read whole and refused line by line.

Every line is validated before any model loads (``requirements.dataset.parse_object``, the
parser ``mellea-local check`` uses, plus a label per requirement, which training needs); all
problems come back in one ``TrainingDataError`` so a user fixes the file in one pass. The
split into training and validation rows is seeded and by line, so the checks of one
conversation never sit on both sides.

The peer's ``m alora train`` rows, ``{"item": ..., "label": "T"}``, are read too: the item
becomes the user turn, and the result is a custom intrinsic with its own io.yaml
(``peer_io.py``) answering one of the file's two labels.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from mellea_local.errors import LineError, TrainingDataError
from mellea_local.requirements.dataset import parse_object

MAX_LISTED = 20


@dataclass(frozen=True)
class Example:
    """One call to learn: a conversation, the instruction's variables, the category to answer
    (``yes``/``no`` for a requirement check, the file's own label for the peer's rows)."""

    line: int
    messages: tuple[tuple[str, str], ...]  # role, content
    variables: tuple[tuple[str, str], ...]  # the io.yaml instruction's {variables}
    label: str

    @property
    def requirement(self) -> str:
        return dict(self.variables).get("requirement", "")


@dataclass(frozen=True)
class TrainingData:
    train: list[Example]
    validation: list[Example]
    sha256: str
    lines: int
    labels: tuple[str, ...] = ("yes", "no")  # the peer format: its two labels, sorted
    peer_format: bool = False


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


def read_examples(path: str | Path) -> tuple[list[Example], str, int]:
    """Every check of a labelled JSONL file, its sha256 and its line count."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TrainingDataError(
            f"Training data {str(path)!r} cannot be read: {exc.strerror or exc}.") from None
    problems: list[str] = []
    examples: list[Example] = []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrainingDataError(
            f"Training data {str(path)!r} is not UTF-8 (byte {raw[exc.start]:#04x} at offset "
            f"{exc.start}); save it as UTF-8.") from None
    lines = text.splitlines()
    peer: bool | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})")
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
        turns = tuple((role, content) for role, content, _thinking in item.messages)
        examples.extend(Example(number, turns, (("requirement", req),), "yes" if label else "no")
                        for req, label in zip(item.requirements, item.labels, strict=True))
    if problems:
        shown = "\n".join(problems[:MAX_LISTED])
        more = f"\n... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise TrainingDataError(
            f"{str(path)!r}: {len(problems)} bad line(s), nothing was trained; fix them (the "
            f"format is `mellea-local check --help`'s, with labels):\n{shown}{more}")
    if not examples:
        raise TrainingDataError(f"{str(path)!r} holds no examples; give one JSON object a line.")
    labels = {e.label for e in examples}
    if len(labels) != 2:
        raise TrainingDataError(
            f"{str(path)!r}: the labels are {sorted(labels)}; training needs exactly two "
            "(true and false, or the two labels of a peer-format file), each seen at least "
            "once.")
    return examples, hashlib.sha256(raw).hexdigest(), len(lines)


def split(examples: list[Example], *, validation: float, seed: int) -> tuple[
        list[Example], list[Example]]:
    """Seeded split by source line (all checks of a line go to the same side)."""
    if not 0.0 <= validation < 1.0:
        raise TrainingDataError(f"validation={validation!r}: pass a fraction in [0, 1).")
    lines = sorted({e.line for e in examples})
    random.Random(seed).shuffle(lines)
    held = set(lines[: round(len(lines) * validation)])
    train = [e for e in examples if e.line not in held]
    if not train:
        raise TrainingDataError(
            f"validation={validation} leaves no training line out of {len(lines)}; lower it.")
    return train, [e for e in examples if e.line in held]


def load_training_data(path: str | Path, *, validation: float = 0.2,
                       seed: int = 0) -> TrainingData:
    examples, digest, lines = read_examples(path)
    train, held = split(examples, validation=validation, seed=seed)
    peer = not examples[0].variables
    labels = tuple(sorted({e.label for e in examples})) if peer else ("yes", "no")
    return TrainingData(train, held, digest, lines, labels, peer)
