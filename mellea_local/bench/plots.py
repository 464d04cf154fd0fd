"""PNG figures of a suite run, drawn with matplotlib when it is installed (``[plots]`` extra).

matplotlib is optional: a benchmark's numbers live in its JSON, and a server or CI image should
not need a plotting stack to produce them. Figures are drawn on matplotlib's object API with
the Agg canvas, never ``pyplot``: no GUI backend is touched and no global state of a host
program is changed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

PLOTS_HINT = "pip install 'mellea-local[plots]'"
"""What to install to get the PNG figures."""

MODE_LABELS = {
    "ours": "ours (aLoRA + KV reuse)",
    "floor": "floor (bare adapter forward)",
    "alora_scratch": "aLoRA from scratch",
    "lora": "plain LoRA",
    "llm_judge": "LLM-as-judge",
    "batch8": "8 checks in one call (whole call)",
}


def short(label: str, width: int = 28) -> str:
    """A tick label that fits: families named by their requirement text can be long."""
    return label if len(label) <= width else label[: width - 3] + "..."


def have_matplotlib() -> bool:
    """Whether the figures can be drawn (matplotlib importable), without importing it."""
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float) -> Any:
    from mellea_local.extras import require_extra

    require_extra("Drawing the benchmark's PNG figures", "plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _log_y(ax: Any) -> None:
    """Log-scale y with plain numbers (1, 2, 5 per decade): latencies span decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_latency(
    checks: dict[str, Any], path: str | Path, *, react: dict[str, Any] | None = None
) -> Path:
    """Median ms per call vs context tokens, one line per check mode, log-scale axes; a band
    per mode spans the fastest to the slowest round (the spread a median hides). Every mode is
    one check per call except ``batch8``, one call of eight checks, labelled as such.

    With a ``react`` result a second panel shows per-turn latency against history length with
    and without KV reuse: the same question (does cost grow with context?) for an agent loop.
    """
    path = Path(path)
    fig = latency_figure(checks, react=react)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def latency_figure(checks: dict[str, Any], *, react: dict[str, Any] | None = None) -> Any:
    """The figure ``plot_latency`` saves (a matplotlib ``Figure``), for a caller or a test
    that reads its axes."""
    rows = checks["rows"]
    fig = _figure(12 if react else 7, 4.8)
    axes = fig.subplots(1, 2 if react else 1, squeeze=False)[0]
    ax = axes[0]
    xs = [r["context_tokens"] for r in rows]
    modes = [m for m in MODE_LABELS if all(m in r["median_ms"] for r in rows)]
    for mode in modes:
        line = ax.plot(xs, [r["median_ms"][mode] for r in rows], marker="o",
                       label=MODE_LABELS[mode], linestyle="--" if mode == "floor" else "-")[0]
        if all(mode in r.get("spread_ms", {}) for r in rows):
            ax.fill_between(xs, [r["spread_ms"][mode][0] for r in rows],
                            [r["spread_ms"][mode][1] for r in rows], color=line.get_color(),
                            alpha=0.15, linewidth=0)
    ax.set_xscale("log", base=2)
    _log_y(ax)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    ax.set_xlabel("context tokens")
    ax.set_ylabel("ms per call, median; band: fastest-slowest (log)")
    ax.set_title(f"Requirement check: {checks.get('model', '')} {checks.get('device', '')} "
                 f"{checks.get('dtype', '')}".strip())
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    if react:
        ax = axes[1]
        for name, label, color in (("reuse", "KV reuse", "C0"), ("no_reuse", "no reuse", "C3")):
            per_turn = react[name]["per_turn"]
            xs = [t["prompt_tokens"] for t in per_turn]
            ax.plot(xs, [t["min_ms"] for t in per_turn], marker="o", color=color,
                    label=f"whole turn, {label}")
            ax.plot(xs, [t["ttft_min_ms"] for t in per_turn], marker=".", linestyle=":",
                    color=color, label=f"first token, {label}")
        _log_y(ax)
        ax.set_xlabel("history tokens at the turn")
        ax.set_ylabel("ms per ReACT turn (fastest run, log)")
        ax.set_title(f"ReACT turns vs history ({react['turns']} turns)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small")
    return fig


SMALL_NOTE = "hatched: too few checks to mean much (< 50, or < 10 of one label)"


def _adapter_note(adapters: dict[str, dict[str, Any]]) -> str:
    """``name = SmolLM2-135M-Instruct/alora``, one line per adapter: which weights the bars
    are."""
    parts = []
    for name, info in adapters.items():
        path = Path(info.get("path", ""))
        parts.append(f"{name} = {path.parent.name}/{path.name}" if path.name else name)
    return "\n".join(parts)


def plot_accuracy(accuracy: dict[str, Any], path: str | Path, *, split: str = "",
                  model: str = "", adapters: dict[str, dict[str, Any]] | None = None) -> Path:
    """Balanced accuracy per family (and overall) with its 95 % interval, one bar per checker
    (adapters, then the base model as judge); the always-yes/no floor (0.5) dashed. A cell
    too small to mean much is hatched and its count is on the family's label."""
    path = Path(path)
    fig = accuracy_figure(accuracy, split=split, model=model, adapters=adapters or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def accuracy_figure(accuracy: dict[str, Any], *, split: str = "", model: str = "",
                    adapters: dict[str, dict[str, Any]] | None = None) -> Any:
    """The figure ``plot_accuracy`` saves (a matplotlib ``Figure``), for a test to read."""
    from matplotlib.patches import Patch

    rows = list(accuracy["adapters"].items())
    groups = ["overall", *accuracy["families"]]
    per_bar = 0.2
    height = len(groups) * (per_bar * max(len(rows), 1) + 0.3) + 2.2
    fig = _figure(10.0, max(4.5, height))
    ax = fig.subplots()
    bar = 0.8 / max(len(rows), 1)
    handles = []
    for i, (name, row) in enumerate(rows):
        color = f"C{i}"
        title = name if row["kind"] == "judge" else f"{name} ({row['kind']})"
        handles.append(Patch(facecolor=color, label=title))
        for g, group in enumerate(groups):
            cell = row["overall"] if group == "overall" else row["families"][group]
            y = g + (i - (len(rows) - 1) / 2) * bar
            value = cell.get("balanced_accuracy")
            if value is None:
                ax.text(0.01, y, "one label only: balanced undefined", va="center",
                        fontsize="x-small", color="grey")
                continue
            low, high = cell["interval"] or (value, value)
            small = cell["too_small"]
            ax.barh(y, value, bar * 0.9, color=color, alpha=0.45 if small else 0.9,
                    hatch="///" if small else None, edgecolor=color if small else None,
                    xerr=[[value - low], [high - value]], ecolor="black",
                    error_kw={"elinewidth": 0.8, "capsize": 2})
            ax.text(high + 0.01, y, f"{value:.2f} [{low:.2f}, {high:.2f}]", va="center",
                    fontsize="x-small")
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    labels = []
    for group in groups:
        any_row = rows[0][1] if rows else None
        cell = (any_row["overall"] if group == "overall" else any_row["families"][group]) \
            if any_row else {"n": 0, "positives": 0, "too_small": True}
        flag = ", too few" if cell["too_small"] else ""
        labels.append(f"{'OVERALL' if group == 'overall' else short(group)}\n"
                      f"n={cell['n']} ({cell['positives']} met){flag}")
    ax.set_yticks(range(len(groups)), labels, fontsize="small")
    ax.set_ylim(len(groups) - 0.5, -0.5)  # top to bottom, overall first
    ax.set_xlim(0, 1.24)  # room right of 1.0 for the figures' labels
    ax.axvline(1.0, color="black", linewidth=0.6)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_xlabel("balanced accuracy (mean recall of met and unmet checks); whisker: 95 % "
                  "bootstrap interval")
    ax.grid(True, axis="x", alpha=0.3)
    head = f"{split}: " if split else ""
    title = (f"{head}requirement-check balanced accuracy per family, model {model or '?'} "
             f"({accuracy['examples']} checks, {accuracy.get('labels_true', '?')} met)")
    note = _adapter_note(adapters or {})
    ax.set_title(title + (f"\nadapters: {note}" if note else ""), fontsize="medium", wrap=True)
    handles += [Patch(facecolor="white", edgecolor="black", hatch="///", label=SMALL_NOTE),
                ax.plot([], [], color="grey", linestyle="--",
                        label="always yes / always no (0.5)")[0]]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize="small")
    return fig
