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


def plot_accuracy(accuracy: dict[str, Any], path: str | Path) -> Path:
    """Grouped bars: accuracy per family (and overall), one bar per adapter; chance dashed."""
    path = Path(path)
    families = list(accuracy["families"])
    groups = [*families, "overall"]
    adapters = list(accuracy["adapters"].items())
    fig = _figure(max(6.0, 1.1 * len(groups) + 2), 4.5)
    ax = fig.subplots()
    width = 0.8 / max(len(adapters), 1)
    for i, (name, cell) in enumerate(adapters):
        values = [cell["families"][f]["accuracy"] for f in families]
        values.append(cell["overall"]["accuracy"])
        xs = [g + (i - (len(adapters) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=f"{name} ({cell['kind']})")
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize="x-small", padding=1)
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
    ax.set_xticks(range(len(groups)), [short(g) for g in groups], rotation=20, ha="right")
    ax.set_ylim(0, 1.22)  # headroom for the legend above the bars
    ax.set_ylabel("accuracy")
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_title(f"Requirement-check accuracy per family ({accuracy['examples']} checks per "
                 "adapter)")
    ax.legend(fontsize="small", loc="upper center", ncol=len(adapters) + 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
