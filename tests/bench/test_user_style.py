"""The shipped user-style split: it parses with the benchmark's own reader, is big enough, holds
both labels in most families; and the accuracy section scores it end to end (real embedded
model and adapters) into a report and a figure a user can read."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from mellea_local.bench.accuracy import read_dataset
from mellea_local.bench.splits import SPLITS, accuracy_splits, split_path

USER_STYLE = split_path("user-style", "SmolLM2-135M-Instruct")


def test_the_user_style_set_parses_and_is_balanced_enough():
    assert USER_STYLE.name == "user-style.jsonl" and USER_STYLE.is_file()
    items = read_dataset(USER_STYLE)
    assert len(items) >= 100
    checks = [(fam, label) for item in items
              for fam, label in zip(item.families, item.labels, strict=True)]
    assert len(checks) >= 110
    met = sum(label for _, label in checks)
    assert 0.4 <= met / len(checks) <= 0.6  # roughly half met
    labels_per_family: dict[str, set[bool]] = {}
    for fam, label in checks:
        labels_per_family.setdefault(fam, set()).add(label)
    both = [f for f, seen in labels_per_family.items() if seen == {True, False}]
    assert len(labels_per_family) >= 15
    assert len(both) >= 0.8 * len(labels_per_family)
    # Every line is a conversation ending in the assistant turn the checks judge.
    assert all(item.messages[-1]["role"] == "assistant" for item in items)
    assert max(Counter(f for f, _ in checks).values()) <= 15  # no family dominates


def test_the_second_user_style_set_parses_and_mixes_labels_and_kinds():
    """user-style-2: the fresh hand-written set routing is measured on out of sample."""
    path = split_path("user-style-2", "SmolLM2-135M-Instruct")
    assert path.name == "user-style-2.jsonl" and path.is_file()
    items = read_dataset(path)
    labels = [y for item in items for y in item.labels]
    assert len(labels) >= 40 and 0.4 <= sum(labels) / len(labels) <= 0.6
    families = Counter(f for item in items for f in item.families)
    assert len(families) >= 12 and families["near-miss"] >= 5


def test_a_real_model_scores_every_shipped_split_that_exists():
    found, missing = accuracy_splits("smollm2-135m", None)
    names = [s.name for s in found] + list(missing)
    assert sorted(names) == sorted(SPLITS)
    assert "user-style" in [s.name for s in found]
    for why in missing.values():
        assert "skipped" in why and "\n" not in why  # one line each


@pytest.mark.parametrize("limit", [12, None])
def test_the_embedded_model_on_the_user_style_split(limit, tmp_path, monkeypatch):
    """A --limit run draws its figure too (small cells flagged), named after the model, in
    the default folder outside the source tree, and the report says what each row is."""
    pytest.importorskip("matplotlib")
    from mellea_local.bench import suite
    from mellea_local.bench.suite import SuiteConfig, run_suite

    if suite.accuracy_unavailable("embedded"):
        pytest.skip("the embedded model's trained weights are not in this build")
    monkeypatch.chdir(tmp_path)
    cfg = SuiteConfig(model="embedded", only=("accuracy",), splits=("user-style",),
                      limit=limit, judge=False, threads=1)
    run = run_suite(cfg, console=Console(file=io.StringIO()))
    folder = run.paths["json"].parent
    assert folder.parent == Path("mellea-local-bench")
    assert folder.name.startswith("embedded-") and run.paths["json"].name == "embedded.json"
    data = json.loads(run.paths["json"].read_text())
    acc = data["accuracy"]["splits"]["user-style"]
    n_lines = len(read_dataset(USER_STYLE))
    assert data["config"]["split_lines"] == {"user-style": limit or n_lines}
    assert set(acc["floors"]) == {"always yes", "always no"}
    # each adapter, and beside it the same adapter with routing (validate's default)
    assert {row["kind"] for row in acc["adapters"].values()} == {
        "alora", "lora", "alora+route", "lora+route"}
    for row in acc["adapters"].values():
        cell = row["overall"]
        assert cell["n"] == acc["examples"]
        assert set(cell) >= {"balanced_accuracy", "interval", "yes_f1", "no_f1", "too_small"}
        assert cell["too_small"] == (limit is not None)
    png = run.paths["accuracy_png:user-style"]
    assert png.name == "embedded_accuracy_user-style.png" and png.stat().st_size > 10_000
    md = run.paths["markdown"].read_text()
    assert "### `user-style`: hand-written realistic checks" in md
    assert "| always yes | 0.500 [0.50, 0.50]" in md
    assert f"![user-style: balanced accuracy per family]({png.name})" in md
