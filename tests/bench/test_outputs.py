"""Targets, the markdown report, the PNGs and the JSON, from a hand-made result (no model)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from mellea_local.bench import plots
from mellea_local.bench.accuracy import score_cell
from mellea_local.bench.report import informational, markdown, targets
from mellea_local.bench.suite import write_outputs
from mellea_local.bench.timing import interleaved_medians
from mellea_local.cli.bench_cmd import command_line, parse_lengths


def _req_row(ctx: int, ours: float, floor: float, scratch: float, batch8: float) -> dict:
    med = {"ours": ours, "floor": floor, "alora_scratch": scratch, "lora": scratch * 1.1,
           "llm_judge": scratch * 1.3, "batch8": batch8}
    return {"context_tokens": ctx, "suffix_tokens": 73, "median_ms": med,
            "ours_over_floor": ours / floor, "scratch_over_ours": scratch / ours,
            "lora_over_ours": scratch * 1.1 / ours, "batch8_over_one": batch8 / ours,
            "judge_over_ours": scratch * 1.3 / ours}


def _turns(ms: list[float], prefilled: list[int]) -> list[dict]:
    return [{"turn": i + 1, "min_ms": m, "median_ms": m, "ttft_min_ms": m / 3,
             "ttft_median_ms": m / 3, "prompt_tokens": 266 + 253 * i, "prefilled_tokens": p,
             "reused_tokens": 0, "new_tokens": 22} for i, (m, p) in enumerate(zip(ms, prefilled,
                                                                               strict=True))]


def _cell(n: int, met: int, right_met: int, right_unmet: int) -> dict:
    """A real cell: ``n`` checks, ``met`` of them met, the checker right on ``right_met`` met
    and ``right_unmet`` unmet ones."""
    labels = [True] * met + [False] * (n - met)
    verdicts = ([True] * right_met + [False] * (met - right_met)
                + [False] * right_unmet + [True] * (n - met - right_unmet))
    return score_cell(labels, verdicts)


def _row(kind: str, cells: dict, overall: dict) -> dict:
    return {"kind": kind, "families": cells, "overall": overall}


@pytest.fixture()
def accuracy() -> dict:
    """One split's result: 80 checks in two families of 40, 20 met in each."""
    family = "The response mentions a rather long word that needs shortening."
    cell = _cell(40, 20, 15, 15)
    overall = _cell(80, 40, 30, 30)
    return {"examples": 80, "labels_true": 40, "families": ["all_caps", family],
            "source": "unit data", "what": "unit",
            "adapters": {"rc_alora": _row("alora", {"all_caps": cell, family: cell}, overall),
                         "rc_lora": _row("lora", {"all_caps": cell, family: cell}, overall)},
            "floors": {}}


@pytest.fixture()
def results(accuracy) -> dict:
    return {
        "benchmark": "suite", "name": "unit", "seconds": 12.0,
        "config": {"command": "mellea-local bench", "quick": False,
                   "speed_model": "random-init tiny", "params": 336192, "device": "cpu",
                   "dtype": "float32"},
        "environment": {"machine": "test-box", "torch": "2.x", "torch_threads": 1},
        "generation": {"new_tokens": 32, "prompt_tokens": 33, "overhead_pct": 2.0,
                       "median_s": {"ours": 0.051, "bare": 0.05},
                       "tokens_per_s": {"ours": 627.0, "bare": 640.0}},
        "requirement_check": {"model": "tiny", "device": "cpu", "dtype": "float32", "rows": [
            _req_row(300, 10.0, 9.0, 20.0, 25.0),     # only ours/floor and batch8 apply
            _req_row(2100, 12.0, 8.0, 72.0, 30.0),    # scratch >= 5 met; ours/floor 1.5 missed
            _req_row(4300, 15.0, 14.0, 120.0, 50.0),  # scratch 8 < 10 missed; batch8 3.33
        ]},
        "batched": {"context_tokens": 4300, "repeats": 3, "rows": [
            {"checks": 1, "batched_ms": 10.0, "sequential_ms": 10.0, "ms_per_check": 10.0,
             "sequential_over_batched": 1.0, "batched_over_one": 1.0},
            {"checks": 8, "batched_ms": 24.0, "sequential_ms": 80.0, "ms_per_check": 3.0,
             "sequential_over_batched": 80 / 24, "batched_over_one": 2.4}]},
        "react": {"turns": 2, "repeats": 2,
                  "reuse": {"per_turn": _turns([50, 52], [266, 232]),
                            "turn2_over_turn1": 1.04, "ttft_turn2_over_turn1": 1.04},
                  "no_reuse": {"per_turn": _turns([50, 90], [266, 519]),
                               "turn2_over_turn1": 1.8, "ttft_turn2_over_turn1": 1.8}},
        "accuracy": {"model": "embedded", "missing": {},
                     "adapters": {"rc_alora": {"kind": "alora", "path": "/lib/tiny/alora"},
                                  "rc_lora": {"kind": "lora", "path": "/lib/tiny/lora"}},
                     "splits": {"user-style": accuracy}},
    }


def test_targets_apply_where_the_context_is_long_enough(results):
    got = {(t["ratio"], t["where"]): (round(t["value"], 2), t["target"], t["met"])
           for t in targets(results)}
    assert got == {
        ("ours/floor", "300 tokens"): (1.11, "<= 1.3", True),
        ("batch8/one", "300 tokens"): (2.5, "<= 3", True),
        ("ours/floor", "2100 tokens"): (1.5, "<= 1.3", False),
        ("scratch/ours", "2100 tokens"): (6.0, ">= 5", True),
        ("batch8/one", "2100 tokens"): (2.5, "<= 3", True),
        ("ours/floor", "4300 tokens"): (1.07, "<= 1.3", True),
        ("scratch/ours", "4300 tokens"): (8.0, ">= 10", False),
        ("batch8/one", "4300 tokens"): (3.33, "<= 3", False),
    }


def test_a_short_grid_says_the_scratch_target_was_not_measured(results):
    results["requirement_check"]["rows"] = results["requirement_check"]["rows"][:1]
    [scratch] = [t for t in targets(results) if t["ratio"] == "scratch/ours"]
    assert scratch["value"] is None and scratch["met"] is None
    assert "2048" in scratch["where"]


def test_informational_ratios_carry_no_target(results):
    info = informational(results)
    assert all(t["met"] is None for t in info)
    by_name = {t["ratio"]: t["value"] for t in info}
    assert by_name["generation overhead %"] == 2.0
    assert by_name["first-token turn 2/turn 1, no_reuse"] == 1.8
    assert by_name["8 single checks / one batch of 8"] == pytest.approx(80 / 24)


def test_markdown_has_every_section_and_links_only_drawn_figures(results):
    text = markdown(results, {"latency_png": "unit_latency.png"})
    for heading in ("# Benchmark `unit`", "## Ratios vs targets",
                    "## Requirement checks vs context length", "## Batched checks at 4300",
                    "## Generation overhead", "## ReACT turns", "## Adapter accuracy"):
        assert heading in text
    assert "![latency vs context length](unit_latency.png)" in text
    assert "accuracy_user-style.png" not in text
    low, high = results["accuracy"]["splits"]["user-style"]["adapters"]["rc_alora"]["overall"][
        "interval"]
    assert low < 0.75 < high
    overall = f"**0.750 [{low:.2f}, {high:.2f}]**"
    assert f"| **overall** | 80 (40) | {overall} | {overall} |" in text
    assert f"| rc_alora (alora) | 0.750 [{low:.2f}, {high:.2f}] | 0.750 (60/80) | 0.75 | 0.75 |" \
        in text
    # 40 checks a family: flagged as too few, the interval beside the figure.
    assert "| all_caps | 40 (20) | 0.750 [" in text and "]† |" in text
    assert "`/lib/tiny/alora`" in text  # the adapter scored is named
    assert "| ours/floor | 2100 tokens | 1.50 | <= 1.3 | **missed** |" in text
    results["accuracy"] = {"skipped": "no trained adapters here."}
    assert "Skipped: no trained adapters here." in markdown(results, {})


def test_write_outputs_draws_pngs_that_open(results, tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    err = io.StringIO()
    paths = write_outputs(results, tmp_path, "unit", Console(file=err))
    assert set(paths) == {"json", "markdown", "latency_png", "accuracy_png:user-style"}
    for key in ("latency_png", "accuracy_png:user-style"):
        assert paths[key].stat().st_size > 10_000
        with Image.open(paths[key]) as img:
            img.verify()
        with Image.open(paths[key]) as img:
            assert img.format == "PNG" and img.size[0] >= 600 and img.size[1] >= 400
    saved = json.loads(paths["json"].read_text())
    assert saved["files"] == {"json": "unit.json", "markdown": "unit.md",
                              "latency_png": "unit_latency.png",
                              "accuracy_png:user-style": "unit_accuracy_user-style.png"}
    assert len(saved["targets"]) == 8
    md = paths["markdown"].read_text()
    assert "(unit_latency.png)" in md and "(unit_accuracy_user-style.png)" in md
    assert err.getvalue() == ""


def test_without_matplotlib_json_and_markdown_still_come_and_say_how(results, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    err = io.StringIO()
    paths = write_outputs(results, tmp_path, "unit", Console(file=err, width=200))
    assert set(paths) == {"json", "markdown"}
    assert not list(tmp_path.glob("*.png"))
    assert err.getvalue().count(plots.PLOTS_HINT) == 1
    assert plots.PLOTS_HINT in paths["markdown"].read_text()
    assert plots.PLOTS_HINT in json.loads(paths["json"].read_text())["plots_note"]


def test_a_quick_run_judges_no_target_and_names_what_it_cannot_measure(results):
    results["config"]["quick"] = True
    rows = targets(results)
    assert len(rows) == 8 and all(t["met"] is None for t in rows)
    assert all(t["target"].endswith("not judged (--quick)") for t in rows)
    info = {t["ratio"]: t for t in informational(results)}
    assert info["generation overhead %"]["value"] is None
    assert "not measured by --quick" in info["generation overhead %"]["target"]
    assert info["ReACT turn 2/turn 1"]["value"] is None
    text = markdown(results, {})
    assert "**missed**" not in text and "| met |" not in text
    assert "overhead not judged on a --quick run." in text


def test_a_quick_run_draws_no_figure_and_says_why(results, tmp_path):
    results["config"]["quick"] = True
    paths = write_outputs(results, tmp_path, "unit", Console(file=io.StringIO()))
    assert set(paths) == {"json", "markdown"} and not list(tmp_path.glob("*.png"))
    note = json.loads(paths["json"].read_text())["plots_note"]
    assert note.startswith("No figures from a --quick run")
    assert note in paths["markdown"].read_text()


def test_small_cells_are_drawn_flagged_and_never_shown_as_a_win(results, accuracy, tmp_path):
    """A --limit run still draws its figure; a 2-check family is hatched and labelled with its
    count, and its lead over the judge reads "too few", not "+100.0"."""
    pytest.importorskip("matplotlib")
    from mellea_local.bench.judge import points_vs_judge

    tiny = score_cell([True, False], [True, False])
    assert tiny["balanced_accuracy"] == 1.0 and tiny["too_small"]
    wrong = score_cell([True, False], [False, True])
    accuracy["adapters"]["rc_alora"]["families"]["all_caps"] = tiny
    accuracy["adapters"]["judge (greedy)"] = _row(
        "judge", {f: wrong for f in accuracy["families"]}, _cell(80, 40, 20, 20))
    accuracy["adapters"]["judge (greedy)"].update(variant="greedy", said_yes=0.5,
                                                   max_new_tokens=16)
    accuracy["vs_judge"] = points_vs_judge(accuracy)
    assert accuracy["vs_judge"]["rc_alora"]["greedy"]["families"]["all_caps"] == 100.0
    paths = write_outputs(results, tmp_path, "unit", Console(file=io.StringIO()))
    assert "accuracy_png:user-style" in paths
    md = paths["markdown"].read_text()
    assert "+100.0" not in md and "too few (n=2)" in md
    assert "**+25.0**" in md  # overall: 0.75 against the judge's 0.50, 80 checks

    [ax] = plots.accuracy_figure(accuracy, split="user-style", model="tiny",
                                 adapters=results["accuracy"]["adapters"]).axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0].startswith("OVERALL\nn=80 (40 met)")
    assert labels[1] == "all_caps\nn=2 (1 met), too few"
    title = ax.get_title()
    assert "user-style" in title and "model tiny" in title and "tiny/alora" in title
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert hatched  # the small cells, drawn


def test_modes_are_interleaved_round_robin():
    calls: list[str] = []
    ticks: list[int] = []
    med = interleaved_medians({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                              3, tick=lambda: ticks.append(1))
    assert calls == ["a", "b"] * 3
    assert len(ticks) == 3 and set(med) == {"a", "b"} and all(v >= 0 for v in med.values())


def test_cli_helpers():
    assert parse_lengths("128, 512,") == [128, 512]
    assert parse_lengths(None) is None
    with pytest.raises(ValueError, match="comma-separated"):
        parse_lengths("128;512")

    line = command_line({"quick": True, "name": None, "out_dir": None,
                         "seed": 9000, "device": "cuda", "skip": ["react", "batched"],
                         "debug": False})
    assert line == "mellea-local bench --quick --device cuda --skip react --skip batched"
