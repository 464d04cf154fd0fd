"""The demo ``make demo`` runs: the whole product on the shipped embedded model, offline.

Five short acts, each a real code path a user gets: an answer with its thinking, the six
requirement checks on it as ``validate`` decides them by default (a program where one decides
the requirement exactly, no forward; else the aLoRA, base KV cache reused: see the
prefilled/reused columns), the aLoRA alone on the same checks as one batch, a ReACT agent run
with the built-in tools, and instruct with rejection sampling. Everything runs on
``LocalHFBackend.embedded()`` (a few-M-parameter model
trained by ``scripts/train_embedded.py``), so it takes seconds on a laptop CPU; ``--backend
llama-server`` runs the same acts on a llama-server (started on the model's GGUF export, or
the ``--server-url`` ones).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mellea_local import __version__
from mellea_local.backends.huggingface import LocalHFBackend
from mellea_local.cli.react_cmd import StepPrinter, build_tools, template_renders_tools
from mellea_local.core.context import ChatContext
from mellea_local.embedded.corpus import REQUIREMENT_PHRASINGS
from mellea_local.embedded.synthetic import FAMILIES, PREDICATES
from mellea_local.errors import AdapterNotFoundError
from mellea_local.intrinsics import arequirement_check, arequirement_checks
from mellea_local.messages import Message
from mellea_local.options import ModelOption
from mellea_local.react import react
from mellea_local.requirements import Requirement, avalidate
from mellea_local.requirements.result import passes
from mellea_local.requirements.verify import route, verify
from mellea_local.sampling import RejectionSamplingStrategy, ainstruct

QUESTION = "What is the capital of France?"
SLOTS = {"word": "Paris", "n": 8}
REQUIREMENTS = [p.format(**SLOTS) for p in REQUIREMENT_PHRASINGS]
AGENT_GOALS = [("What is 17 * 23?", None),
               ('Look up "paris_code".', {"paris_code": "7501", "rome_code": "0011"})]
INSTRUCTION = "Tell me about the river."
INSTRUCT_REQUIREMENT = "The response is written in all capital letters."
# Sampling is seeded, so the attempts are the same on every run: with this seed the first sample
# misses the requirement and a later one meets it (a test holds the shipped model to that).
# The base reads a length requirement in the instruction as a self-check question and answers
# "No.", which meets it at once; capitals it writes only some of the time.
INSTRUCT_OPTIONS = {ModelOption.TEMPERATURE: 0.7, ModelOption.SEED: 6,
                    ModelOption.MAX_NEW_TOKENS: 32}


def _verdict(score: float) -> str:
    return "[green]pass[/]" if passes(score) else "[red]fail[/]"


async def _answer(console: Console, backend: LocalHFBackend) -> tuple[ChatContext, str]:
    console.rule("[bold]1. An answer, with its thinking")
    console.print(f"[bold cyan]user[/] {QUESTION}")
    ctx = ChatContext()
    mot, ctx = await backend.generate_from_context(
        Message("user", QUESTION), ctx,
        model_options={ModelOption.MAX_NEW_TOKENS: 64, ModelOption.THINKING: True})
    answer = await mot.avalue()
    if mot.thinking:
        console.print(f"[dim]  thinking: {escape(mot.thinking.strip())}[/]", highlight=False)
    console.print(f"[bold magenta]assistant[/] {escape(answer)}", highlight=False)
    console.print(f"[dim]  {mot.usage.get('completion_tokens', '?')} tokens, "
                  f"finish_reason={mot.finish_reason}[/]")
    return ctx, answer


async def _checks(
    console: Console, backend: LocalHFBackend, ctx: ChatContext, answer: str
) -> None:
    console.rule("[bold]2. Requirement checks on that answer (a program where one decides "
                 "exactly, else the aLoRA with the base KV cache reused)")
    table = Table(show_edge=False)
    for col in ("requirement", "decided by", "score", "verdict", "truth", "ms", "prefilled",
                "reused"):
        table.add_column(col, justify="left" if col in ("requirement", "decided by")
                         else "right")
    for family, req in zip(FAMILIES, REQUIREMENTS, strict=True):
        t0 = time.perf_counter()
        mapping = route(req, QUESTION)
        if mapping is not None:  # what validate does by default: no forward at all
            score = 1.0 if verify(mapping, answer) else 0.0
            by = mapping.decider().split("(")[0].replace("length_constraints:", "")
            by, prefilled, reused = by.replace("detectable_format:", ""), "0", "0"
        else:
            score = await arequirement_check(ctx, backend, req)
            last = backend.stats.last
            by, prefilled, reused = ("aLoRA", str(last.prefilled_tokens),
                                     str(last.reused_tokens))
        ms = (time.perf_counter() - t0) * 1000
        truth = "[dim]pass[/]" if PREDICATES[family](answer, SLOTS) else "[dim]fail[/]"
        table.add_row(escape(req), escape(by), f"{score:.3f}", _verdict(score), truth,
                      f"{ms:.1f}", prefilled, reused)
    console.print(table)
    console.print("[dim]  decided by = the program validate() routes a requirement to when one "
                  "decides it exactly (an IFEval registry verifier, or our rule), else the "
                  "aLoRA; truth = the Python rule the training labels come from (the tiny model "
                  "is wrong where they differ); prefilled = tokens run through the model for "
                  "the check; reused = conversation tokens served from the base model's KV "
                  "cache.[/]")

    console.rule("[bold]3. The same six checks as one batch (the aLoRA alone, route=False)")
    t0 = time.perf_counter()
    scores = await arequirement_checks(ctx, backend, REQUIREMENTS)
    ms = (time.perf_counter() - t0) * 1000
    last = backend.stats.last
    console.print(f"  {len(scores)} checks in one forward pass: {ms:.1f} ms "
                  f"({last.prefilled_tokens} tokens prefilled, {last.reused_tokens} reused)")
    console.print("  " + "  ".join(f"{s:.2f} {_verdict(s)}" for s in scores))


JUDGE_OPTIONS = {ModelOption.MAX_NEW_TOKENS: 4}


async def _judge_checks(
    console: Console, backend: LocalHFBackend, ctx: ChatContext, answer: str
) -> None:
    """Acts 2 and 3 for a model with no requirement-check adapter: the base model asked yes/no
    per requirement (the library's path for a Requirement without an adapter), labelled so."""
    console.rule("[bold]2. Requirement checks on that answer (JUDGE: the base model asked "
                 "yes/no, no adapter)")
    table = Table(show_edge=False)
    for col in ("requirement", "judge says", "verdict", "truth", "ms"):
        table.add_column(col, justify="left" if col == "requirement" else "right")
    for family, req in zip(FAMILIES, REQUIREMENTS, strict=True):
        t0 = time.perf_counter()
        [result] = await avalidate([Requirement(req)], ctx, backend,
                                   model_options=JUDGE_OPTIONS)
        ms = (time.perf_counter() - t0) * 1000
        truth = "[dim]pass[/]" if PREDICATES[family](answer, SLOTS) else "[dim]fail[/]"
        reason = (result.reason or "").strip()
        said = escape(reason[reason.index("verified by"):].split(")")[0] + ")"
                      if "verified by" in reason else repr(reason[:20]))
        table.add_row(escape(req), said, _verdict(1.0 if result else 0.0), truth, f"{ms:.0f}")
    console.print(table)
    console.print("[dim]  judge = the model's own yes/no answer to a checking prompt (no "
                  "adapter, no KV cache reuse, slower and far less accurate than a trained "
                  "aLoRA); truth = the Python rule the embedded model's training labels come "
                  "from.[/]")
    console.rule("[bold]3. Batched checks: skipped (they need a requirement-check adapter)")


async def _agent(console: Console, backend: LocalHFBackend) -> None:
    console.rule("[bold]4. A ReACT agent with the built-in tools")
    if not template_renders_tools(backend.tokenizer):
        console.print("[yellow]  skipped: this model's chat template has no tool-call format "
                      "(the tools would be dropped from its prompt), so the agent cannot run "
                      "on it.[/]")
        return
    for goal, table in AGENT_GOALS:
        console.print(f"[bold cyan]goal[/] {goal}")
        printer = StepPrinter(backend, console)
        try:
            result, _ = await react(goal, ChatContext(), printer, tools=build_tools(table),
                                    loop_budget=4,
                                    model_options={ModelOption.MAX_NEW_TOKENS: 64})
        except RuntimeError as err:
            console.print(f"[red]  no final answer: {escape(str(err))}[/]")
            continue
        console.print(f"[bold green]  final answer[/] {escape(str(result.value))}\n",
                      highlight=False)


async def _instruct(console: Console, backend: LocalHFBackend, *, judge: bool = False) -> None:
    console.rule("[bold]5. Instruct / validate / repair (rejection sampling"
                 + (", checked by the yes/no JUDGE)" if judge else ")"))
    console.print(f"[bold cyan]instruction[/] {INSTRUCTION}  [dim]requirement:[/] "
                  f"{INSTRUCT_REQUIREMENT}")
    result = await ainstruct(
        INSTRUCTION, ChatContext(), backend, requirements=[INSTRUCT_REQUIREMENT],
        strategy=RejectionSamplingStrategy(loop_budget=4),
        model_options=INSTRUCT_OPTIONS)
    for attempt in result.attempts:
        [validation] = attempt.validations
        score = validation.score if validation.score is not None else float(bool(validation))
        console.print(f"  attempt {attempt.index + 1}: {escape(repr(attempt.sample.value))}  "
                      f"score {score:.2f} {_verdict(score)}", highlight=False)
    outcome = "[green]success[/]" if result.success else "[red]no passing sample[/]"
    console.print(f"  {outcome}: {escape(repr(result.result.value))}", highlight=False)


async def _demo(console: Console, model: str = "embedded", serving: Any = None,
                threads: int | None = None) -> None:
    t0 = time.perf_counter()
    judge = False
    with console.status(f"Loading {model} and its adapters..."):
        import peft  # noqa: F401  (timed apart: importing the libraries is not loading a model)
        import transformers  # noqa: F401

        t1 = time.perf_counter()
        if model == "embedded" and (serving is None or serving.backend == "hf"):
            backend = LocalHFBackend.embedded()
        else:
            from mellea_local.launch import add_check_adapter, load_backend

            # Every generation bounded, the judge's too (the sampling strategy asks it with no
            # options of its own): a real model's default would be 200 tokens and a warning.
            options = {ModelOption.MAX_NEW_TOKENS: 64}
            backend = (load_backend(model, model_options=options) if serving is None
                       else serving.load(model, model_options=options, threads=threads))
            try:
                add_check_adapter(backend, model)
            except AdapterNotFoundError as exc:
                judge = True
                missing = str(exc)
    console.print(
        f"[bold]mellea_local {__version__}[/]: {backend.model_id.rsplit('/', 1)[-1]} "
        f"({where_it_runs(backend)}) with adapters "
        f"{', '.join(sorted(backend.adapters)) or 'none'}, loaded in "
        f"{time.perf_counter() - t1:.2f} s [dim](libraries imported in {t1 - t0:.1f} s)[/]")
    if judge:
        console.print(f"[yellow]{escape(missing)} Until then the checks below use the base "
                      "model as a yes/no JUDGE.[/]")
    ctx, answer = await _answer(console, backend)
    if judge:
        await _judge_checks(console, backend, ctx, answer)
    else:
        await _checks(console, backend, ctx, answer)
    await _agent(console, backend)
    await _instruct(console, backend, judge=judge)
    console.rule(f"[bold]done in {time.perf_counter() - t0:.1f} s, offline")


def where_it_runs(backend: Any) -> str:
    """Its size and where it runs. An engine whose model is not in this process (llama-server)
    has no parameter count or torch device here: it says n/a and names the engine instead."""
    params = getattr(backend, "base_parameter_count", None)
    size = f"{params / 1e6:.1f} M parameters" if params is not None else "parameters n/a"
    device = getattr(backend, "device", None)
    if device is None:
        return f"{size}, {backend.provider} server(s) {', '.join(backend.urls)}"
    return f"{size}, {device}, {torch_threads()} torch thread(s)"


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def run_demo(model: str = "embedded", serving: Any = None, threads: int | None = None) -> None:
    """The demo on the embedded model, or on ``model`` (a registered name, folder or GGUF): a
    model without a requirement-check adapter gets its checks from a labelled yes/no judge.
    ``serving`` (``cli.options.BackendChoice``) picks the engine (None: hf); ``threads`` go to a
    server it starts."""
    asyncio.run(_demo(Console(highlight=False), model, serving, threads))
