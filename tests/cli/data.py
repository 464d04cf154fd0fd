"""Dataset lines for the CLI tests."""

from __future__ import annotations

import json
from pathlib import Path


def row(i: int, *, label: object = None, **extra: object) -> str:
    """One dataset line: a two-turn conversation and two requirements."""
    obj: dict[str, object] = {
        "id": f"ex{i}",
        "messages": [{"role": "user", "content": f"Name a city ({i})."},
                     {"role": "assistant", "content": "paris" if i % 2 else "a b c"}],
        "requirements": ["Answer briefly.", "Mention paris."],
    }
    if label is not None:
        obj["label"] = label
    obj.update(extra)
    return json.dumps(obj)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]
