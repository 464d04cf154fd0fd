"""The JSONL dataset format of requirement checks, one conversation and its checks a line.

``mellea-local check`` reads it (skipping bad lines) and the accuracy benchmark reads labelled
files in it (stopping at the first bad line); each problem is a ``LineError`` naming the field::

    {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}],
     "requirements": ["...", ...] | "requirement": "...",
     "label": true | [true, false, ...],          # optional
     "id": ...}                                   # optional
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mellea_local.errors import LineError
from mellea_local.inputs import loads_json

_ROLES = ("system", "user", "assistant")


@dataclass
class CheckItem:
    """One valid input line, ready to check."""

    line: int
    messages: list[tuple[str, str, str | None]]  # role, content, reasoning_content
    requirements: list[str]
    labels: list[bool] | None = None
    id: Any = None


def parse_line(line: int, text: str) -> CheckItem:
    """Validate one dataset line; every problem raises ``LineError`` naming the field."""
    try:
        obj = loads_json(text, "the line")
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise LineError(f"not UTF-8 text ({exc.reason}); save the dataset as UTF-8") from None
    return parse_object(line, obj)


def parse_object(line: int, obj: Any) -> CheckItem:
    """Validate one decoded dataset row (a JSONL line, or a Parquet row as a dict)."""
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
        for field in ("content", "reasoning_content"):
            if isinstance(m.get(field), str) and not _is_unicode(m[field]):
                raise LineError(f"messages[{i}].{field} holds a lone surrogate (half of a "
                                "UTF-16 pair), which no model can read; fix the text")
        turns.append((m["role"], m["content"], thinking))
    if turns[-1][0] != "assistant":
        raise LineError("the last message must be the assistant turn the requirements judge")
    reqs = obj["requirements"] if "requirements" in obj else obj.get("requirement")
    if isinstance(reqs, str):
        reqs = [reqs]
    if (not isinstance(reqs, list) or not reqs
            or not all(isinstance(r, str) and r.strip() for r in reqs)):
        raise LineError('give "requirements" (a list of non-empty strings) or "requirement"')
    for j, r in enumerate(reqs):
        if not _is_unicode(r):
            raise LineError(f"requirements[{j}] holds a lone surrogate (half of a UTF-16 pair); "
                            "fix the text")
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
    return CheckItem(line, turns, list(reqs), labels, _check_id(obj.get("id")))


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_id(value: Any) -> Any:
    """The id, if the output record can carry it as JSON: NaN or Infinity (which Python's
    parser accepts) would be written bare, and no JSON reader could read the record back."""
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError) as exc:
        raise LineError(
            f'"id" {_short(value)} cannot be written back as JSON ({exc}); give a string, a '
            "finite number or null") from None
    except RecursionError:
        raise LineError('"id" nests too deeply to be written back; give a string') from None
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["CheckItem", "LineError", "parse_line"]
