"""``mellea-local train``: a requirement-check aLoRA (or LoRA) from a labelled JSONL.

Says before the first step where the adapter will go (the user's library by default, never
the shipped one unless named), what it starts from (the shipped adapter of the model when
there is one) and what general data it replays; draws a progress bar with the running loss
and ETA; ends with the validation report on stdout (balanced accuracy with its 95 % interval
and yes/no F1, the user's lines and the replayed lines apart, a warning when the split is too
small to mean much), where the adapter is and the command that uses it. Interrupted (Ctrl-C
or killed), the same command resumes from the last checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mellea_local.cli.options import DebugOpt, DeviceOpt, DtypeOpt, ThreadsOpt, run_guarded
from mellea_local.core.backend import REQUIREMENT_CHECK

TRAIN_EPILOG = (
    "DATA: the `check` format with labels, one JSON object a line, e.g.\n\n"
    "\b\n"
    '{"messages": [{"role": "user", "content": "Capital of France?"},\n'
    '              {"role": "assistant", "content": "Paris."}],\n'
    ' "requirements": ["Answer in one word.", "Mention Berlin."], "label": \\[true, false]}\n\n'
    "Or the peer's rows, {\"item\": \"...\", \"label\": \"T\"} with two labels: they train a "
    "custom intrinsic (--intrinsic NAME) whose io.yaml is written beside the adapter.\n\n"
    "Every line is checked before the model loads; all bad lines are listed at once.\n\n"
    "Output: OUT/requirement-check/<base>/<alora|lora>/ (adapter, io.yaml, training.json); "
    "OUT defaults to $MELLEA_LOCAL_HOME/adapters or ~/.cache/mellea-local/adapters. "
    "Use it with --adapter that folder, or `backend.add_adapter('requirement-check', "
    "roots=\\[OUT])`. Rerunning the same command after an interruption resumes.\n\n"
    "When the model has a shipped adapter of this kind, training continues it (its rank, "
    "alpha and modules) and replays as many lines of the general data it learned as you "
    "give (--replay-ratio), so your family is added without erasing the others; "
    "--from-scratch starts a fresh adapter."
)


def train_command(
    data: Annotated[Path, typer.Argument(metavar="DATA", help="Labelled JSONL (check format).")],
    model: Annotated[str, typer.Option(
        "--model", "-m", help="Base model: a folder, a .gguf, a registered name "
        "(smollm2-135m) or 'embedded'.")] = "embedded",
    kind: Annotated[str, typer.Option(help="alora (reuses the base KV cache) or lora.")
                    ] = "alora",
    out: Annotated[str | None, typer.Option(
        "--out", "-o", help="Adapter library root to write into (default: "
        "$MELLEA_LOCAL_HOME/adapters, else ~/.cache/mellea-local/adapters; the shipped "
        "library only when named here).")] = None,
    intrinsic: Annotated[str | None, typer.Option(
        help="For the peer's item/label rows: the custom intrinsic's name (default "
        "custom-check).")] = None,
    epochs: Annotated[int, typer.Option(min=1)] = 3,
    max_steps: Annotated[int | None, typer.Option(
        "--max-steps", min=1, help="Stop after this many optimizer steps.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 8,
    lr: Annotated[float, typer.Option(
        help="Peak learning rate (linear warm-up, then decay to a tenth).")] = 1e-3,
    rank: Annotated[int | None, typer.Option(
        min=1, help="LoRA rank (default: the adapter started from, else 32).")] = None,
    alpha: Annotated[int | None, typer.Option(
        min=1, help="LoRA alpha (default: the adapter started from, else 32).")] = None,
    target_modules: Annotated[str | None, typer.Option(
        "--target-modules", help="Comma-separated module names (default: the adapter "
        "started from, else q_proj,k_proj,v_proj).")] = None,
    validation: Annotated[float, typer.Option(
        help="Share of lines held out for validation accuracy.")] = 0.2,
    seed: Annotated[int, typer.Option(help="Seeds the split, batches and init.")] = 0,
    max_length: Annotated[int, typer.Option(
        "--max-length", min=8, help="Longest example in tokens; longer ones are refused.")
    ] = 1024,
    gradient_checkpointing: Annotated[bool, typer.Option(
        "--gradient-checkpointing", help="Trade compute for memory.")] = False,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", min=1)] = 25,
    init_from: Annotated[Path | None, typer.Option(
        "--init-from", help="Start from this trained adapter folder's weights (its rank, "
        "alpha and modules unless given): more epochs or more data without starting over.")
    ] = None,
    from_scratch: Annotated[bool, typer.Option(
        "--from-scratch", "--no-init", help="Train a fresh adapter instead of continuing the "
        "shipped one.")] = False,
    replay_ratio: Annotated[float | None, typer.Option(
        "--replay-ratio", min=0.0, max=10.0, help="Lines of the model's general training "
        "data mixed in per line of yours (default 1 when continuing the shipped adapter, "
        "else 0).")] = None,
    threads: ThreadsOpt = None,
    restart: Annotated[bool, typer.Option(
        "--restart", help="Discard a checkpoint of an earlier run instead of resuming.")
    ] = False,
    task: Annotated[str, typer.Option(
        "--task", help="requirement-check (default), or agent: fine-tune on ReACT traces "
        "(scripts/make_agent_traces.py) into an agent build (training/agent.py).")
    ] = REQUIREMENT_CHECK,
    export_checkpoint: Annotated[bool, typer.Option(
        "--export-checkpoint", help="--task agent: write the build from the run's last "
        "checkpoint and stop (lands a long run's progress; give the run's own options).")
    ] = False,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Train a requirement-check aLoRA (default) or LoRA for a local base model."""

    def work() -> None:
        import os

        if task == "agent":  # the agent build has its own loop (training/agent.py)
            from mellea_local.training.agent import (
                AgentTrainConfig,
                run_agent_cli,
            )
            from mellea_local.training.agent import (
                export_checkpoint as export_agent,
            )
            from mellea_local.training.output import check_out_root

            # --rank/--alpha default to the adapter a requirement-check run starts from; an
            # agent build starts fresh, so its own defaults stand unless given.
            sizes: dict[str, Any] = {k: v for k, v in (("rank", rank), ("alpha", alpha))
                                     if v is not None}
            if target_modules is not None:
                sizes["target_modules"] = tuple(
                    m.strip() for m in target_modules.split(",") if m.strip())
            if kind not in ("alora", "lora"):
                raise typer.BadParameter(f"--kind takes alora or lora, got {kind!r}.")
            agent_cfg = AgentTrainConfig(alora=kind == "alora",
                data=str(data), out=str(check_out_root(out, named=out is not None)),
                model=model, epochs=epochs, max_steps=max_steps, batch_size=batch_size, lr=lr,
                seed=seed, max_length=max_length, checkpoint_every=checkpoint_every,
                device=device, dtype=dtype, **sizes)
            if export_checkpoint:
                from mellea_local.threads import apply_threads

                apply_threads(threads)
                print(export_agent(agent_cfg))
                return
            run_agent_cli(agent_cfg, threads=threads)
            return
        if export_checkpoint:
            raise typer.BadParameter("--export-checkpoint is for --task agent; a "
                                     "requirement-check run writes its adapter when it ends.")
        if task != REQUIREMENT_CHECK:
            raise typer.BadParameter(f"--task takes {REQUIREMENT_CHECK} or agent, got {task!r}.")
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from mellea_local.training import TrainConfig, train_adapter

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        modules = None
        if target_modules is not None:
            modules = tuple(m.strip() for m in target_modules.split(",") if m.strip())
            if not modules:
                raise typer.BadParameter("pass module names, e.g. q_proj,k_proj,v_proj",
                                         param_hint="--target-modules")
        cfg = TrainConfig(
            data=str(data), model=model, kind=kind, out_root=out, intrinsic=intrinsic,
            epochs=epochs,
            max_steps=max_steps, batch_size=batch_size, lr=lr, rank=rank, alpha=alpha,
            target_modules=modules, validation=validation, seed=seed, max_length=max_length,
            gradient_checkpointing=gradient_checkpointing, checkpoint_every=checkpoint_every,
            init_from=str(init_from) if init_from else None, from_scratch=from_scratch,
            replay_ratio=replay_ratio, device=device, dtype=dtype, threads=threads)
        console = Console(stderr=True, soft_wrap=True)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("loss {task.fields[loss]:.4f}"), TimeElapsedColumn(),
                   TextColumn("eta"), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            result = train_adapter(cfg, restart=restart, progress=progress,
                                   say=lambda line: console.print(line, markup=False,
                                                                  highlight=False))
        report = result.report
        for entry in report["validation_accuracy"]:
            acc, bal = entry["accuracy"], entry.get("balanced_accuracy")
            console.print(f"epoch {entry['epoch']} (step {entry['step']}): validation accuracy "
                          + ("n/a (no validation lines)" if acc is None else f"{acc:.3f}")
                          + ("" if bal is None else f", balanced {bal:.3f}"))
        console.print(f"torch threads: {report['torch_threads']}, device: {report['device']}")
        for line in validation_lines(report):
            typer.echo(line)
        typer.echo(f"adapter written to {result.path}")
        if report["intrinsic"] == REQUIREMENT_CHECK:
            console.print(f"use it: mellea-local check DATA -o OUT --model {model} --adapter "
                          f"{result.path}")
        else:
            console.print(
                f"use it: backend.add_adapter({str(result.path)!r}); mellea_local.intrinsic("
                f"backend, {report['intrinsic']!r}, ChatContext().add(Message('user', item)))"
                f" -> {{'label': P({report['labels'][0]!r})}}")
        typer.echo(str(result.path))

    run_guarded(debug, work)


GROUPS = (("user", "your data"), ("replay", "replayed general data"))


def validation_lines(report: dict[str, Any]) -> list[str]:
    """The report's validation figures as a user reads them: balanced accuracy with its 95 %
    interval and yes/no F1 for the user's lines and the replayed ones apart, and a warning
    when a split is too small for the figure to mean much."""
    validation = report.get("validation") or {}
    lines = []
    for group, title in GROUPS:
        scores = validation.get(group)
        if scores is None:
            continue
        lines.append(f"validation, {title}: {scores['describe']}; yes-F1 "
                     f"{scores['yes_f1']:.3f}, no-F1 {scores['no_f1']:.3f}")
        if scores["too_small"]:
            lines.append(f"warning: the validation split of {title} is too small to tell "
                         "how the adapter does on new lines; measure it on held-out data "
                         "(mellea-local check with labels) before trusting it")
    if not lines:
        lines.append("validation: none (--validation 0 or too few lines); nothing measured "
                     "how the adapter does on new lines")
    return lines
