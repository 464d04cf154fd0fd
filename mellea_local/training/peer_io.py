"""The io.yaml of a custom intrinsic trained from the peer's ``{"item", "label"}`` rows.

The item is the user turn; the instruction turn after it starts with the intrinsic's own tag
(``<my-check>``), which invokes the aLoRA, and asks for one of the two labels as JSON; a
likelihood rule turns the answer into the probability of the first label (sorted order), so
the fast path scores it in one forward, exactly as requirement-check is scored. Called as
``mellea_local.intrinsic(backend, NAME, ChatContext().add(Message("user", item)))`` ->
``{"label": P(first label)}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml


def peer_io_yaml(intrinsic: str, labels: tuple[str, str]) -> str:
    first, second = labels
    response = {"type": "object",
                "properties": {"label": {"type": "string", "enum": [first, second]}},
                "required": ["label"], "additionalProperties": False}
    answer = " or ".join(json.dumps({"label": c}).replace("{", "{{").replace("}", "}}")
                         for c in labels)
    config = {
        "model": None,
        "response_format": json.dumps(response),
        "transformations": [{"type": "likelihood",
                             "categories_to_values": {first: 1.0, second: 0.0},
                             "input_path": ["label"]}],
        "instruction": f"<{intrinsic}>: Label the user's message above. Reply with {answer}.",
        "parameters": {"max_completion_tokens": 16, "temperature": 0.0},
    }
    header = (f"# A custom intrinsic trained by `mellea-local train` from item/label rows.\n"
              f"# Result: {{\"label\": P({first!r})}}; {first!r} passes when it is > 0.5.\n")
    return header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def write_peer_io_yaml(path: Path, intrinsic: str, labels: tuple[str, str]) -> Path:
    path.write_text(peer_io_yaml(intrinsic, labels), encoding="utf-8")
    return path
