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
from mellea_local.core.backend import REQUIREMENT_CHECK
from mellea_local.datasets import data_root
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

    out_dir: Path = Path("benchmarks/results")
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
    """Score only the dataset's first ``limit`` lines (a quick accuracy look)."""
    judge: bool = True
    """Score the base model asked as a judge beside the adapters (``bench.judge``)."""
    engine: str = "local"  # "ray": the accuracy section runs on a Ray Data actor pool
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


def default_name(quick: bool, device: torch.device) -> str:
    """``bench``, ``bench-quick``, ``bench-cuda``: quick runs never overwrite full ones."""
    name = "bench-quick" if quick else "bench"
    return name if device.type == "cpu" else f"{name}-{device.type}"


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
    if cfg.limit is not None and cfg.dataset is None and cfg.model in (None, EMBEDDED):
        raise BenchConfigError(
            "--limit takes the first lines of a --dataset; pass --dataset too (the synthetic "
            "set's size is --examples per family).")


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


HELD_OUT_DIR = data_root() / REQUIREMENT_CHECK
"""Where each base model's labelled held-out checks are, as ``<base model name>.jsonl`` (the
check format with ``family``): ``bench --model X``'s default; installed, the bundled copy."""


def default_dataset(model: str) -> Path:
    """The held-out set ``bench --model model`` scores without ``--dataset`` (may not exist)."""
    from mellea_local.adapters.library import base_model_name
    from mellea_local.models import MODELS

    base = MODELS[model].base_name if model in MODELS else base_model_name(model)
    return HELD_OUT_DIR / f"{base}.jsonl"


def accuracy_dataset(model: str | None, dataset: Path | None) -> tuple[Path | None, str | None]:
    """(the labelled file accuracy reads or None for the synthetic set, why there is none).

    The synthetic set holds the embedded model's own families, so it only says something
    about the embedded model's adapters; a real ``--model`` is scored on its held-out file,
    ``--dataset`` or ``default_dataset``, and without either the section says what to pass.
    """
    if dataset is not None or model is None or model == EMBEDDED:
        return dataset, None
    path = default_dataset(model)
    if path.is_file():
        return path, None
    return None, (f"no held-out dataset for --model {model}: pass --dataset with a labelled "
                  f"JSONL (the check format with 'family'), or put one at {path}.")


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
    model: str | None, adapter: str | None, *, device: str, dtype: str | None = None,
) -> tuple[Any, list[Any], str]:
    """(backend, adapters to score, model label), or (None, [], why not) to skip the section.

    Accuracy needs trained adapters: random ones would score chance. Without ``--model`` the
    embedded model and its trained aLoRA and LoRA are used when this build has them. The
    local section and each ``--engine ray`` actor build their backend here.
    """
    from mellea_local.bench.accuracy import check_adapters
    from mellea_local.errors import AdapterError
    from mellea_local.launch import add_cli_adapter, load_backend

    why = accuracy_unavailable(model)
    if why is not None:
        return None, [], why
    if model is None:
        backend = load_backend(EMBEDDED, device=device)
        label = EMBEDDED
    else:
        backend = load_backend(model, device=device, dtype=dtype)
        label = model
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
    items: list[LabelledItem] | None = None
    dataset, no_dataset = accuracy_dataset(cfg.model, cfg.dataset)
    if dataset is not None and "accuracy" not in cfg.skipped:
        items = read_dataset(dataset)[:cfg.limit]
    threads = apply_threads(cfg.threads)  # --threads, else the default for this load
    grid = cfg.grid
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    size = cfg.size or grid.size
    lengths = list(cfg.lengths or grid.lengths)
    repeats = cfg.repeats or grid.repeats
    name = cfg.name or default_name(cfg.quick, device)
    err = console or Console(stderr=True, soft_wrap=True)
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "benchmark": "suite",
        "name": name,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": {
            "command": cfg.command, "quick": cfg.quick,
            "speed_model": cfg.model or f"random-init {size}",
            "device": str(device), "dtype": str(dtype).removeprefix("torch."),
            "lengths": lengths, "repeats": repeats, "new_tokens": grid.new_tokens,
            "react_turns": grid.react_turns, "react_repeats": grid.react_repeats,
            "batch_sizes": list(grid.batch_sizes),
            "dataset": str(dataset) if dataset else None,
            "dataset_lines": len(items) if items is not None else None,
            "limit": cfg.limit,
            "judge": cfg.judge,
            "examples_per_family": None if dataset else (cfg.examples
                                                         or grid.examples_per_family),
            "seed": None if dataset else cfg.seed,
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
            results["accuracy"] = _accuracy_section(cfg, items, dataset, no_dataset, bars,
                                                    device)
            _collect()
    results["seconds"] = time.perf_counter() - t0
    return SuiteRun(results, write_outputs(results, cfg.out_dir, name, err))


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
    cfg: SuiteConfig, items: list[LabelledItem] | None, dataset: Path | None,
    no_dataset: str | None, bars: _Bars, device: torch.device,
) -> dict[str, Any]:
    """Adapter accuracy, and the judge beside it; a missing adapter is said before a missing
    held-out dataset (the adapter is what there is to score)."""
    from mellea_local.bench.accuracy import evaluate_accuracy, synthetic_items

    if items is None:
        n = cfg.examples or cfg.grid.examples_per_family
        items = synthetic_items(cfg.seed, n)
        source = f"the synthetic held-out set (seed {cfg.seed}, {n} per family)"
    else:
        first = f"the first {len(items)} lines of " if cfg.limit is not None else ""
        source = f"{first}`{dataset}`"
    if cfg.engine == "ray":
        from mellea_local.bench.ray_accuracy import evaluate_accuracy_ray

        label = cfg.model or EMBEDDED
        why = accuracy_unavailable(cfg.model) or no_dataset
        if why is not None:
            bars.print(f"accuracy skipped: {why}")
            return {"skipped": why}
        tick = bars.task("adapter accuracy (ray)", len(items))
        acc = evaluate_accuracy_ray(items, model=cfg.model, adapter=cfg.adapter,
                                    device=cfg.device, dtype=cfg.dtype, options=cfg.ray,
                                    tick=tick, build=accuracy_backend)
    else:
        backend, adapters, label = accuracy_backend(cfg.model, cfg.adapter,
                                                    device=str(device), dtype=cfg.dtype)
        why = label if backend is None else no_dataset
        if why is not None:
            bars.print(f"accuracy skipped: {why}")
            return {"skipped": why}
        tick = bars.task("adapter accuracy", len(items) * len(adapters))
        acc = evaluate_accuracy(backend, items, adapters=adapters, tick=tick)
        if cfg.judge:
            from mellea_local.bench.judge import add_judge

            add_judge(backend, items, acc, tick=bars.task("base model as judge", len(items)))
    if cfg.judge and cfg.engine == "ray":
        acc["judge_note"] = ("the judge baseline runs on the local engine only; rerun without "
                             "--engine ray for it.")
    acc["source"] = source
    acc["model"] = label
    for name, cell in acc["adapters"].items():
        title = name if cell["kind"] == "judge" else f"{name} ({cell['kind']})"
        bars.print(f"accuracy {title}: {cell['overall']['accuracy']:.3f} "
                   f"over {cell['overall']['n']} checks")
    for name, variants in acc.get("vs_judge", {}).items():
        bars.print(f"{name} vs judge: " + ", ".join(
            f"{'-' if v['overall'] is None else format(v['overall'], '+.1f')} points over "
            f"{variant}" for variant, v in variants.items()))
    return acc


MIN_CHECKS_PER_BAR = 20
"""An accuracy bar over fewer labelled checks than this is one or two coin flips, not a figure."""


def _fewest_checks_per_cell(acc: dict[str, Any]) -> int | None:
    """The smallest family-by-adapter sample in an accuracy result; None without one."""
    cells = [cell["n"] for adapter in acc.get("adapters", {}).values()
             for cell in adapter["families"].values()]
    return min(cells) if cells else None


def write_outputs(
    results: dict[str, Any], out_dir: Path, name: str, console: Console
) -> dict[str, Path]:
    """Write the PNGs (when matplotlib is there), the markdown report and the JSON."""
    from mellea_local.bench.plots import PLOTS_HINT, have_matplotlib, plot_accuracy, plot_latency
    from mellea_local.bench.report import markdown, targets

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {"json": out_dir / f"{name}.json", "markdown": out_dir / f"{name}.md"}
    notes = []
    if results["config"]["quick"]:
        notes.append("No figures from a --quick run: two short contexts and a few examples per "
                     "family support no curve and no accuracy bar (run `mellea-local bench`).")
    elif have_matplotlib():
        if results.get("requirement_check"):
            paths["latency_png"] = plot_latency(results["requirement_check"],
                                                out_dir / f"{name}_latency.png",
                                                react=results.get("react"))
        fewest = _fewest_checks_per_cell(results.get("accuracy", {}))
        if fewest is not None and fewest >= MIN_CHECKS_PER_BAR:
            paths["accuracy_png"] = plot_accuracy(results["accuracy"],
                                                  out_dir / f"{name}_accuracy.png")
        elif fewest is not None:
            notes.append(f"No accuracy figure: a family has {fewest} labelled checks, fewer "
                         f"than the {MIN_CHECKS_PER_BAR} a bar needs (see the table).")
    else:
        results["plots_note"] = (f"PNG figures not drawn: matplotlib is not installed "
                                 f"(`{PLOTS_HINT}`).")
        console.print(f"note: no PNG figures without matplotlib; {PLOTS_HINT}", markup=False,
                      highlight=False, style="yellow")
    if notes:
        results["plots_note"] = " ".join(notes)
    results["targets"] = targets(results)
    results["files"] = {k: p.name for k, p in paths.items()}
    paths["markdown"].write_text(markdown(results, results["files"]), "utf-8")
    paths["json"].write_text(json.dumps(results, indent=2) + "\n", "utf-8")
    return paths
