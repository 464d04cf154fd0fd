"""Labelled check data from the embedded family's synthetic generator, as a user's JSONL."""

from __future__ import annotations

import json
import random

import pytest


@pytest.fixture(scope="session")
def check_jsonl(tmp_path_factory):
    from mellea_local.embedded import synthetic as S

    path = tmp_path_factory.mktemp("train-data") / "checks.jsonl"
    examples = S.check_examples(random.Random(1), 5)
    with open(path, "w", encoding="utf-8") as f:
        for e in examples:
            f.write(json.dumps({"messages": e.messages, "requirement": e.requirement,
                                "label": e.label}) + "\n")
    return path
