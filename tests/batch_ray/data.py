"""A dataset with every kind of line the engines must agree on."""

from __future__ import annotations

import json
from pathlib import Path


def conversation(i: int) -> list[dict[str, str]]:
    answer = "paris" if i % 2 else "the answer is a b c"
    return [{"role": "user", "content": f"Name a city ({i})."},
            {"role": "assistant", "content": answer}]


def good(i: int, **extra: object) -> dict[str, object]:
    obj: dict[str, object] = {"id": f"ex{i}", "messages": conversation(i),
                              "requirements": ["Answer briefly.", "Mention paris."]}
    obj.update(extra)
    return obj


def mixed_lines(n_good: int = 12) -> tuple[list[str], dict[int, str]]:
    """(lines, {line number: words its error must hold}): labelled (one bool, a list),
    unlabelled, one- and three-requirement, thinking, blank and malformed lines."""
    lines: list[str] = []
    bad: dict[int, str] = {}
    for i in range(1, n_good + 1):
        kind = i % 4
        if kind == 0:
            obj = good(i, label=True)
        elif kind == 1:
            obj = good(i, label=[True, False])
        elif kind == 2:
            obj = good(i)  # unlabelled
            obj.pop("requirements")
            obj["requirement"] = "Mention paris."
        else:
            obj = good(i, requirements=["Answer briefly.", "Mention paris.",
                                        "The response mentions london."])
            obj["messages"][-1]["reasoning_content"] = "think"  # type: ignore[index]
        lines.append(json.dumps(obj))
        if i == 3:
            lines.append("{not json")
            bad[len(lines)] = "not valid JSON"
        if i == 5:
            lines.append("")  # blank: ignored, not an error
        if i == 7:
            lines.append(json.dumps({"messages": [{"role": "bot", "content": "x"}],
                                     "requirement": "a"}))
            bad[len(lines)] = "role 'bot'"
            lines.append(json.dumps(good(99, label=[True])))
            bad[len(lines)] = "label"
    return lines, bad


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def assert_same_records(got: list[dict], want: list[dict], tol: float = 1e-6) -> None:
    """Record for record: every field equal, scores within ``tol``, verdicts identical."""
    assert [r["line"] for r in got] == [r["line"] for r in want]
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w), (g, w)
        for key in w:
            if key == "scores":
                assert len(g[key]) == len(w[key])
                assert max(abs(a - b) for a, b in zip(g[key], w[key], strict=True)) <= tol, \
                    (g, w)
            else:
                assert g[key] == w[key], (key, g, w)
