"""The whole benchmark suite in one run: what ``mellea-local bench`` does.

Order matters: generation and ReACT need the bare model, so they run before the random
adapters are loaded (PEFT patches the model in place); the speed model is then released before
the accuracy model loads, so a GPU holds one of them at a time. Each section's numbers have the
same JSON shape as its standalone script in ``benchmarks/``.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mellea_local.bench.accuracy import HELD_OUT_SEED, LabelledItem, read_dataset
from mellea_local.bench.splits import SYNTHETIC, WHAT, Split, accuracy_splits
from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.errors import BenchConfigError
from mellea_local.launch import EMBEDDED

SECTIONS = ("generation", "react", "requirement_check", "batched", "conversations", "accuracy")


@dataclass(frozen=True)
class Grid:
    """How much to measure: the full grid, or the ``--quick`` smoke-test one."""

    lengths: tuple[int, ...]
    repeats: int
    new_tokens: int
    react_turns: int
    react_repeats: int
    batch_sizes: tuple[int, ...]
    examples_per_family: int
    size: str
    conversations: tuple[int, int, int, int] = (8, 500, 4, 10)
    """(conversations, history tokens, concurrent ReACT agents, turns per agent)."""


FULL = Grid(lengths=(256, 1024, 2048, 4096), repeats=7, new_tokens=256, react_turns=10,
            react_repeats=3, batch_sizes=(1, 2, 4, 8), examples_per_family=40, size="bench-20m")
QUICK = Grid(lengths=(128, 512), repeats=3, new_tokens=32, react_turns=2, react_repeats=2,
             batch_sizes=(1, 4, 8), examples_per_family=2, size="tiny",
             conversations=(3, 200, 3, 3))


@dataclass
class SuiteConfig:
    """Everything a run depends on; ``None`` fields take the grid's (quick or full) value."""

    out_dir: Path | None = None
    """Where the files go; None: ``default_out_dir`` (outside the source tree, named after
    the model and the date)."""
    name: str | None = None
    quick: bool = False
    size: str | None = None
    model: str | None = None
    adapter: str | None = None
    dataset: Path | None = None
    device: str | None = None
    dtype: str | None = None
    threads: int | None = None
    lengths: list[int] | None = None
    repeats: int | None = None
    examples: int | None = None
    seed: int = HELD_OUT_SEED
    command: str = "mellea-local bench"
    skip: tuple[str, ...] = field(default_factory=tuple)
    only: tuple[str, ...] = field(default_factory=tuple)
    """Run just these sections (``--only accuracy``: no speed section, no speed model)."""
    limit: int | None = None
    """Score only the first ``limit`` lines of each split (a quick accuracy look)."""
    splits: tuple[str, ...] = ()
    """The shipped evaluation splits to score (``bench.splits``); empty: every one present."""
    judge: bool = True
    """Score the base model asked as a judge beside the adapters (``bench.judge``)."""
    route: bool = True
    """Add each adapter's ``+route`` row: what ``validate``/``check`` decide by default, a
    program's exact verdict where one maps (``bench.accuracy``); ``--no-route`` leaves it out."""
    engine: str = "local"  # "ray": the accuracy section runs on a Ray Data actor pool
    backend: str = "hf"
    """The engine the accuracy section scores on (``--backend``, ``backends.registry``); the
    speed sections time PEFT forwards in this process, so they need ``hf``."""
    server_urls: tuple[str, ...] = ()
    """``--server-url``: running servers of that engine (empty: it starts its own)."""
    api_key: str | None = None
    ray: Any = None  # mellea_local.batch.RayOptions for engine "ray" (None: its defaults)

    @property
    def grid(self) -> Grid:
        return QUICK if self.quick else FULL

    @property
    def skipped(self) -> tuple[str, ...]:
        """The sections left out: ``skip``, plus every section ``only`` does not name."""
        if not self.only:
            return self.skip
        return tuple(dict.fromkeys([*self.skip, *(s for s in SECTIONS if s not in self.only)]))


@dataclass
class SuiteRun:
    """What a run produced: the results (as written to JSON) and the paths it wrote."""

    results: dict[str, Any]
    paths: dict[str, Path]


def model_slug(model: str | None) -> str:
    """A file-name stem for a model: ``smollm2-135m``, a folder's or hub id's last part;
    ``bench`` for the random-init speed model."""
    if model is None:
        return "bench"
    stem = Path(model.rstrip("/\\")).name or "model"
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).lstrip(".") or "model"


def default_name(quick: bool, device: torch.device, model: str | None = None) -> str:
    """``<model>``, ``<model>-quick``, ``<model>-cuda`` (``bench...`` without ``--model``):
    files named after what was measured; quick runs never overwrite full ones."""
    name = model_slug(model) + ("-quick" if quick else "")
    return name if device.type == "cpu" else f"{name}-{device.type}"


def default_out_dir(name: str, today: dt.date | None = None) -> Path:
    """``./mellea-local-bench/<name>-<date>/``: a run writes outside the source tree (and
    never over the shipped ``benchmarks/results``) unless ``--out`` says otherwise."""
    return Path("mellea-local-bench") / f"{name}-{(today or dt.date.today()).isoformat()}"


def _check_config(cfg: SuiteConfig) -> None:
    from mellea_local.bench.subjects import SIZES, size_names

    if cfg.size is not None and cfg.size not in SIZES:
        raise BenchConfigError(f"--size {cfg.size!r}: no such shape; use one of "
                                f"{', '.join(size_names())}.")
    if cfg.size is not None and cfg.model is not None:
        raise BenchConfigError(
            "Pass --size (a random-init shape) or --model (real weights), not both."
        )
    if cfg.name is not None and (not cfg.name or any(c in cfg.name for c in "/\\")
                                 or cfg.name.startswith(".")):
        raise BenchConfigError(
            f"--name {cfg.name!r} must be a plain file name stem, like 'bench-gpu'."
        )
    if cfg.lengths is not None and (not cfg.lengths or min(cfg.lengths) < 64):
        raise BenchConfigError(
            "--lengths must list context lengths of at least 64 tokens (about the shortest "
            "conversation a check judges); each is measured within 2 % or 8 tokens.")
    for flag, value in (("--repeats", cfg.repeats), ("--examples", cfg.examples),
                        ("--threads", cfg.threads), ("--limit", cfg.limit)):
        if value is not None and value < 1:
            raise BenchConfigError(f"{flag} must be at least 1, got {value}.")
    for flag, names in (("--skip", cfg.skip), ("--only", cfg.only)):
        unknown = set(names) - set(SECTIONS)
        if unknown:
            raise BenchConfigError(f"{flag} {', '.join(sorted(unknown))}: no such section; use "
                                    f"one of {', '.join(SECTIONS)}.")
    if cfg.backend != "hf":
        local = [s for s in SECTIONS if s != "accuracy" and s not in cfg.skipped]
        if local:
            raise BenchConfigError(
                f"--backend {cfg.backend}: the section(s) {', '.join(local)} time a model in "
                "this process (PEFT forwards, its KV cache), which this engine does not "
                "have; add --only accuracy (or --skip them), or use --backend hf.")
        if cfg.engine == "ray":
            raise BenchConfigError(
                f"--pool ray runs one hf backend per actor; use --pool local with --backend "
                f"{cfg.backend}.")
    if (cfg.limit is not None and cfg.dataset is None and not cfg.splits
            and cfg.model in (None, EMBEDDED)):
        raise BenchConfigError(
            "--limit takes the first lines of a --dataset or --split; pass one too (the "
            "synthetic set's size is --examples per family).")


def _embedded_weights() -> Path:
    from mellea_local.embedded import trained_weights_dir

    return trained_weights_dir()


def _speed_subject(
    cfg: SuiteConfig, size: str, device: torch.device, dtype: torch.dtype, max_position: int
) -> tuple[Any, Any, str]:
    """(model, tokenizer, label): a random-init preset, or the weights ``--model`` names."""
    if cfg.model is None:
        from mellea_local.bench.subjects import build_sized_model
        from mellea_local.embedded import build_tokenizer

        tokenizer = build_tokenizer()
        model = build_sized_model(tokenizer, size, device=device, dtype=dtype,
                                  max_position=max_position)
        return model, tokenizer, size
    from mellea_local.launch import load_backend

    # The bare weights, no adapters: the speed sections load random ones of their own.
    source = str(_embedded_weights()) if cfg.model == EMBEDDED else cfg.model
    if cfg.model == EMBEDDED and not (_embedded_weights() / "model.safetensors").is_file():
        from mellea_local.errors import ModelLoadError

        raise ModelLoadError(
            f"The embedded model is missing from {_embedded_weights()}; rebuild it with "
            "`python scripts/train_embedded.py`, or leave out --model to benchmark a "
            "random-init model.")
    backend = load_backend(source, device=str(device), dtype=str(dtype).removeprefix("torch."))
    return backend.model, backend.tokenizer, cfg.model


def accuracy_unavailable(model: str | None) -> str | None:
    """Why the accuracy section cannot run without loading anything, or None."""
    if model is None and not (_embedded_weights() / "model.safetensors").is_file():
        return (
            "the embedded model's trained weights are not in this build "
            f"({_embedded_weights()}), and random adapters would only score chance. Train "
            "them with `python scripts/train_embedded.py`, or pass `--model` (and "
            "`--adapter`) with trained ones.")
    return None


def accuracy_backend(
    model: str | None, adapter: str | None, *, device: str | None, dtype: str | None = None,
    backend_name: str = "hf", server_urls: tuple[str, ...] = (), api_key: str | None = None,
) -> tuple[Any, list[Any], str]:
    """(backend, adapters to score, model label), or (None, [], why not) to skip the section.

    Accuracy needs trained adapters: random ones would score chance. Without ``--model`` the
    embedded model and its trained aLoRA and LoRA are used when this build has them. The
    local section and each ``--pool ray`` actor build their backend here, on the engine
    ``backend_name`` (``--backend``; ``server_urls``/``api_key``: ``--server-url``).
    """
    from mellea_local.bench.accuracy import check_adapters
    from mellea_local.errors import AdapterError
    from mellea_local.launch import add_cli_adapter, load_backend

    why = accuracy_unavailable(model)
    if why is not None:
        return None, [], why
    label = EMBEDDED if model is None else model
    # The embedded model runs in float32 only; --dtype is for the --model weights.
    backend = load_backend(label, device=device, dtype=None if model is None else dtype,
                           backend=backend_name,
                           server_urls=server_urls, api_key=api_key)
    adapters = check_adapters(backend)
    if adapter:
        name = add_cli_adapter(backend, adapter)
        adapters = [*adapters, backend.adapters[name]]
    if not adapters:
        try:
            adapters = library_adapters(backend)
        except AdapterError as exc:
            return None, [], (f"no trained requirement-check adapter for {label} ({exc}); "
                              "pass `--adapter` with one.")
        if not adapters:
            return None, [], (f"no trained requirement-check adapter for {label} in the "
                              "adapter libraries; pass `--adapter` with one.")
    return backend, adapters, label


def library_adapters(backend: Any, roots: list[Path] | None = None) -> list[Any]:
    """Load every requirement-check adapter the libraries (``roots``, default: the bundled
    ones) hold for the backend's base: the aLoRA and the LoRA, as they ship side by side, so
    both are scored against the judge."""
    from mellea_local.adapters import find_in_library

    loaded = []
    for kind in ("alora", "lora"):
        found = find_in_library(REQUIREMENT_CHECK, backend.base_model_name, roots=roots,
                                kinds=(kind,))
        if found is not None:
            loaded.append(backend.add_adapter(found.path, name=f"{REQUIREMENT_CHECK}_{kind}"))
    return loaded


def _collect() -> None:
    """Free a section's model once nothing refers to it (PEFT and caches hold cycles)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class _Bars:
    """One progress bar per section on stderr, the section tables printed above them."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("{task.description:<22}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                 transient=False)

    def task(self, description: str, total: int) -> Callable[[], None]:
        task_id = self.progress.add_task(description, total=total)
        return lambda: self.progress.advance(task_id)

    def print(self, line: str) -> None:
        self.progress.console.print(line, markup=False, highlight=False)


def run_suite(cfg: SuiteConfig, *, console: Console | None = None) -> SuiteRun:
    """Run every section, write ``<name>.json``, ``<name>.md`` and the PNGs; return both.

    Bad options and a missing dataset fail before any model is built.
    """
    from mellea_local.backends.loading import resolve_device, resolve_dtype
    from mellea_local.bench.timing import machine_info
    from mellea_local.threads import apply_threads

    _check_config(cfg)
    items: dict[str, list[LabelledItem]] = {}
    splits: list[Split] = []
    missing: dict[str, str] = {}
    if "accuracy" not in cfg.skipped:
        splits, missing = accuracy_splits(cfg.model, cfg.dataset, cfg.splits)
        items = {split.name: read_dataset(split.path)[:cfg.limit] for split in splits}
    threads = apply_threads(cfg.threads)  # --threads, else the default for this load
    grid = cfg.grid
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    size = cfg.size or grid.size
    lengths = list(cfg.lengths or grid.lengths)
    repeats = cfg.repeats or grid.repeats
    name = cfg.name or default_name(cfg.quick, device, cfg.model)
    out_dir = cfg.out_dir or default_out_dir(name)
    err = console or Console(stderr=True, soft_wrap=True)
    t0 = time.perf_counter()
    synthetic = "accuracy" not in cfg.skipped and not splits and not missing
    results: dict[str, Any] = {
        "benchmark": "suite",
        "name": name,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": {
            "command": cfg.command, "quick": cfg.quick,
            "speed_model": cfg.model or f"random-init {size}",
            "backend": cfg.backend,
            "device": str(device), "dtype": str(dtype).removeprefix("torch."),
            "lengths": lengths, "repeats": repeats, "new_tokens": grid.new_tokens,
            "react_turns": grid.react_turns, "react_repeats": grid.react_repeats,
            "batch_sizes": list(grid.batch_sizes),
            "splits": {split.name: str(split.path) for split in splits},
            "split_lines": {n: len(lines) for n, lines in items.items()},
            "limit": cfg.limit,
            "judge": cfg.judge,
            "route": cfg.route,
            "examples_per_family": (cfg.examples or grid.examples_per_family) if synthetic
            else None,
            "seed": cfg.seed if synthetic else None,
            "skipped_sections": list(cfg.skipped),
        },
    }
    bars = _Bars(err)
    with bars.progress, warnings.catch_warnings():
        # transformers deprecation noise from inside generate(); nothing a user can act on.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*",
                                category=FutureWarning)
        _speed_sections(cfg, results, bars, size=size, device=device, dtype=dtype,
                        lengths=lengths, repeats=repeats)
        _collect()  # the speed model goes before the accuracy model loads
        # The thread choice as made at the start: the load average now counts this run too.
        results["environment"] = {**machine_info(), **threads.as_dict()}
        if "accuracy" in cfg.skipped:
            results["accuracy"] = {"skipped": "left out with --skip accuracy (or --only)."}
        else:
            results["accuracy"] = _accuracy_section(cfg, splits, items, missing, bars, device)
            _collect()
    results["seconds"] = time.perf_counter() - t0
    return SuiteRun(results, write_outputs(results, out_dir, name, err))


def _speed_sections(
    cfg: SuiteConfig, results: dict[str, Any], bars: _Bars, *, size: str, device: torch.device,
    dtype: torch.dtype, lengths: list[int], repeats: int,
) -> None:
    from mellea_local.bench.batched import format_batched, measure_batched
    from mellea_local.bench.conversations import measure_conversations
    from mellea_local.bench.generation import format_generation, measure_generation
    from mellea_local.bench.react_turns import format_react, measure_react
    from mellea_local.bench.requirement_check import (
        HEADER,
        format_row,
        measure_requirement_checks,
        open_check_bench,
    )
    from mellea_local.bench.subjects import param_count

    grid = cfg.grid
    wanted = [s for s in SECTIONS[:5] if s not in cfg.skipped]
    if not wanted:
        results["config"]["params"] = 0
        return
    max_position = max(8192, max(lengths) + 512)
    model, tokenizer, label = _speed_subject(cfg, size, device, dtype, max_position)
    results["config"]["params"] = param_count(model)
    if "generation" in wanted:
        tick = bars.task("generation overhead", repeats)
        results["generation"] = measure_generation(
            model, tokenizer, new_tokens=grid.new_tokens, repeats=repeats, tick=tick)
        bars.print(format_generation(results["generation"]))
    if "react" in wanted:
        tick = bars.task("react turns", grid.react_repeats)
        results["react"] = measure_react(model, tokenizer, turns=grid.react_turns,
                                         repeats=grid.react_repeats, tick=tick)
        for line in format_react(results["react"]):
            bars.print(line)
    if {"requirement_check", "batched", "conversations"} & set(wanted):
        bench = open_check_bench(model, tokenizer, model_id=label)
        try:
            if "requirement_check" in wanted:
                tick = bars.task("requirement checks", repeats * len(lengths))
                bars.print(HEADER)
                results["requirement_check"] = measure_requirement_checks(
                    bench, lengths=lengths, repeats=repeats, model_label=label,
                    on_row=lambda row: bars.print(format_row(row)), tick=tick)
            if "batched" in wanted:
                tick = bars.task("batched checks", repeats)
                results["batched"] = measure_batched(
                    bench, length=max(lengths), batch_sizes=grid.batch_sizes,
                    repeats=repeats, tick=tick)
                for line in format_batched(results["batched"]):
                    bars.print(line)
            if "conversations" in wanted:
                n, history, agents, turns = grid.conversations
                bars.task("many conversations", 1)
                results["conversations"] = measure_conversations(
                    bench, n=n, history=history, new_tokens=min(grid.new_tokens, 32),
                    agents=agents, turns=turns, repeats=repeats, on_line=bars.print,
                    rounds=1 if cfg.quick else 3, agent_repeats=1 if cfg.quick else 3)
        finally:
            bench.close()


def _accuracy_section(
    cfg: SuiteConfig, splits: list[Split], items: dict[str, list[LabelledItem]],
    missing: dict[str, str], bars: _Bars, device: torch.device,
) -> dict[str, Any]:
    """Every split's accuracy (adapters, the judge beside them, the floors), on one backend.

    ``{"model", "adapters": {name: {kind, path}}, "splits": {split: result}, "missing":
    {split: why}}``; a missing adapter is said before missing data (the adapter is what there
    is to score), and no split at all skips the section with the reasons.
    """
    from mellea_local.bench.accuracy import evaluate_accuracy, synthetic_items

    sources = {s.name: _source(cfg, s) for s in splits}
    if not splits and not missing:  # the embedded model's synthetic set
        n = cfg.examples or cfg.grid.examples_per_family
        items = {SYNTHETIC: synthetic_items(cfg.seed, n)}
        sources = {SYNTHETIC: f"the synthetic held-out set (seed {cfg.seed}, {n} per family)"}
    no_data = None if items else "no evaluation split: " + " ".join(
        f"{name}: {why}" for name, why in missing.items()) + (
        " Pass --dataset with a labelled JSONL (the check format with 'family').")
    for name, why in missing.items():
        bars.print(f"accuracy split {name}: {why}")
    label = cfg.model or EMBEDDED
    section: dict[str, Any] = {"model": label, "adapters": {}, "splits": {},
                               "missing": missing}
    if cfg.engine == "ray":
        from mellea_local.bench.ray_accuracy import evaluate_accuracy_ray

        why = accuracy_unavailable(cfg.model) or no_data
        if why is not None:
            bars.print(f"accuracy skipped: {why}")
            return {"skipped": why, "missing": missing}
        for name, lines in items.items():
            tick = bars.task(f"{name} (ray)", len(lines))
            section["splits"][name] = evaluate_accuracy_ray(
                lines, model=cfg.model, adapter=cfg.adapter, device=cfg.device,
                dtype=cfg.dtype, options=cfg.ray, tick=tick, build=accuracy_backend)
        if cfg.judge:
            section["judge_note"] = ("the judge baseline runs on the local engine only; rerun "
                                     "without --engine ray for it.")
    else:
        hf = cfg.backend == "hf"  # another engine has no torch device (its loader refuses one)
        backend, adapters, label = accuracy_backend(
            cfg.model, cfg.adapter, device=str(device) if hf else cfg.device, dtype=cfg.dtype,
            backend_name=cfg.backend, server_urls=cfg.server_urls, api_key=cfg.api_key)
        why = label if backend is None else no_data
        if why is not None:
            bars.print(f"accuracy skipped: {why}")
            return {"skipped": why, "missing": missing}
        section["model"] = label
        section["adapters"] = {a.name: {"kind": a.kind.value, "path": str(a.path)}
                               for a in adapters}
        for name, lines in items.items():
            tick = bars.task(f"{name}: adapters", len(lines) * len(adapters))
            acc = evaluate_accuracy(backend, lines, adapters=adapters, tick=tick,
                                    route=cfg.route)
            if cfg.judge:
                from mellea_local.bench.judge import add_judge

                add_judge(backend, lines, acc, tick=bars.task(f"{name}: base model as judge",
                                                              len(lines)))
            section["splits"][name] = acc
    for name, acc in section["splits"].items():
        acc["source"] = sources[name]
        acc["what"] = WHAT.get(name, "your labelled data")
        for line in split_lines(name, acc):
            bars.print(line)
    return section


def _source(cfg: SuiteConfig, split: Split) -> str:
    first = f"the first {cfg.limit} lines of " if cfg.limit is not None else ""
    return f"{first}`{split.path}`"


def _figures(cell: dict[str, Any]) -> str:
    """``balanced 0.742 [0.701, 0.780], yes-F1 0.73, no-F1 0.75`` (or why not)."""
    if cell["balanced_accuracy"] is None:
        return f"accuracy {_fmt(cell['accuracy'])} (balanced undefined: one label only)"
    low, high = cell["interval"]
    return (f"balanced {cell['balanced_accuracy']:.3f} [{low:.3f}, {high:.3f}], "
            f"yes-F1 {cell['yes_f1']:.2f}, no-F1 {cell['no_f1']:.2f}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def split_lines(name: str, acc: dict[str, Any]) -> list[str]:
    """What the terminal shows for one split: its size, then each row's overall figures."""
    n, true = acc["examples"], acc["labels_true"]
    out = [f"accuracy on {name} ({n} checks, {true} met; always-yes/always-no score "
           "balanced 0.500):"]
    for row_name, row in acc["adapters"].items():
        title = row_name if row["kind"] == "judge" else f"{row_name} ({row['kind']})"
        out.append(f"  {title}: {_figures(row['overall'])}")
    any_row = next(iter(acc["adapters"].values()), None)
    if any_row is not None and any_row["overall"]["too_small"]:
        out.append("  (too few checks to mean much: fewer than 50, or fewer than 10 of one "
                   "label)")
    return out


def write_outputs(
    results: dict[str, Any], out_dir: Path, name: str, console: Console
) -> dict[str, Path]:
    """Write the PNGs (when matplotlib is there), the markdown report and the JSON.

    One accuracy figure per split, whatever its size: a family with few checks is drawn
    hatched and labelled with its count (its interval shows how little it says), never
    left out and never shown as a plain win.
    """
    from mellea_local.bench.plots import PLOTS_HINT, have_matplotlib, plot_accuracy, plot_latency
    from mellea_local.bench.report import markdown, targets

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {"json": out_dir / f"{name}.json", "markdown": out_dir / f"{name}.md"}
    section = results.get("accuracy") or {}
    if results["config"]["quick"]:
        results["plots_note"] = (
            "No figures from a --quick run: two short contexts and a few examples per family "
            "support no curve and no accuracy bar (run `mellea-local bench`).")
    elif have_matplotlib():
        if results.get("requirement_check"):
            paths["latency_png"] = plot_latency(results["requirement_check"],
                                                out_dir / f"{name}_latency.png",
                                                react=results.get("react"))
        for split, acc in section.get("splits", {}).items():
            if acc["adapters"]:
                paths[f"accuracy_png:{split}"] = plot_accuracy(
                    acc, out_dir / f"{name}_accuracy_{split}.png", split=split,
                    model=section.get("model", ""), adapters=section.get("adapters", {}))
    else:
        results["plots_note"] = (f"PNG figures not drawn: matplotlib is not installed "
                                 f"(`{PLOTS_HINT}`).")
        console.print(f"note: no PNG figures without matplotlib; {PLOTS_HINT}", markup=False,
                      highlight=False, style="yellow")
    results["targets"] = targets(results)
    results["files"] = {k: p.name for k, p in paths.items()}
    paths["markdown"].write_text(markdown(results, results["files"]), "utf-8")
    paths["json"].write_text(json.dumps(results, indent=2) + "\n", "utf-8")
    return paths
