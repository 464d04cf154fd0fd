"""``mellea-local bench``: option parsing and the closing summary (the suite is
``mellea_local.bench.suite``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from mellea_local.bench.report import informational
from mellea_local.bench.suite import SuiteRun
from mellea_local.errors import InvalidInputError

DEFAULTS: dict[str, Any] = {"seed": 9000, "engine": "local", "judge": True, "route": True,
                            "backend": "hf"}
"""Options whose default values are left out of the recorded command line."""


def parse_lengths(text: str | None) -> list[int] | None:
    """``"128,512"`` -> ``[128, 512]``; a clear error for anything else."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise InvalidInputError(
            f"--lengths {text!r} is not a comma-separated list of token counts, e.g. 128,512."
        ) from None


def command_line(options: dict[str, Any]) -> str:
    """The command a run is reproduced with: every option that differs from its default.

    Recorded in the JSON and the report, so a figure always says how it was made.
    """
    parts = ["mellea-local bench"]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or DEFAULTS.get(key) == value:
            continue
        if value is False and key in DEFAULTS:  # a default-on switch turned off
            parts.append(f"--no-{key.replace('_', '-')}")
        elif value is False:
            continue
        elif value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [f"{flag} {v}" for v in value]
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def print_summary(run: SuiteRun, console: Console) -> None:
    """Ratios against their targets (and the informational ones), then the files written."""
    for row in run.results["targets"] + informational(run.results):
        value = "-" if row["value"] is None else f"{row['value']:.2f}"
        verdict = {True: "met", False: "MISSED", None: ""}[row["met"]]
        console.print(f"{row['ratio']:>36}  {row['where']:<28} {value:>8}  {row['target']:<8} "
                      f"{verdict}".rstrip(), markup=False, highlight=False)
    if run.results["config"]["quick"]:
        console.print("(a --quick smoke run: no target judged, no figure drawn; run "
                      "`mellea-local bench` for those)", markup=False, highlight=False)
    skipped = run.results.get("accuracy", {}).get("skipped")
    if skipped:
        console.print(f"accuracy skipped: {skipped}", markup=False, highlight=False)
    folder = run.paths["json"].parent.resolve()
    console.print(f"results in {folder}/ (the report: {run.paths['markdown'].name})",
                  markup=False, highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in run.paths.values()), markup=False,
                  highlight=False)
