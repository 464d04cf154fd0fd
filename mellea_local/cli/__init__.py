"""The ``mellea-local`` command line (typer): ``demo``, ``check``, ``chat``, ``react``, ``bench``,
``export-gguf``.

Heavy imports (torch, transformers) happen inside the commands so ``--help`` stays instant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mellea_local.cli.models import models_app
from mellea_local.cli.options import (
    EMBEDDED,
    AdapterOpt,
    ApiKeyFileOpt,
    BackendChoice,
    BackendOpt,
    DebugOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    OldEngineOpt,
    PoolOpt,
    ServerUrlOpt,
    ThreadsOpt,
    apply_cli_threads,
    check_model_args,
    pool_choice,
    run_guarded,
)
from mellea_local.cli.train import TRAIN_EPILOG, train_command
from mellea_local.cli.usage import CliGroup
from mellea_local.errors import BackendArgumentError, CheckFileError, InvalidInputError

if TYPE_CHECKING:
    from mellea_local.batch import RayOptions

app = typer.Typer(
    cls=CliGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Local-model inference with Activated LoRA adapters.",
)


def _show_version(value: bool) -> None:
    if value:
        from mellea_local import __version__

        typer.echo(f"mellea-local {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Local-model inference with Activated LoRA adapters."""


def _check_budget(value: int) -> int:
    if value == 0 or value < -1:
        raise typer.BadParameter(f"{value} turns; pass at least 1 (or -1 for no limit).")
    return value


JudgeModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="The model that judges: a registered name (e.g. smollm2-135m), a .gguf file, a "
        "model folder or hub id (offline cache only), or 'embedded' for the shipped demo "
        "model. Default: smollm2-135m when it is in the model cache (mellea-local models get "
        "smollm2-135m), else the embedded demo model, with one line saying so.",
    ),
]


def judge_model(model: str | None) -> str:
    """``--model`` as given; without it the default judge (``session.default_model``), and one
    yellow line on stderr when that is the embedded demo model."""
    if model is not None:
        return model
    from mellea_local.session import default_model, embedded_note

    chosen, fallback = default_model()
    if fallback:
        from rich.console import Console

        Console(stderr=True, soft_wrap=True).print(
            embedded_note("pass --model"), style="yellow", markup=False, highlight=False)
    return chosen


MaxNewTokensOpt = Annotated[int, typer.Option(min=1, help="Answer length limit (tokens).")]


@app.command()
def demo(model: ModelOpt = EMBEDDED, threads: ThreadsOpt = None,
         debug: DebugOpt = False, backend_name: BackendOpt = "hf",
         server_url: ServerUrlOpt = None, api_key_file: ApiKeyFileOpt = None) -> None:
    """Show the product working offline: generate, then check requirements at the floor."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def work() -> None:
        from mellea_local.cli.demo import run_demo

        serving = BackendChoice.from_options(backend_name, server_url, api_key_file)
        if model != EMBEDDED and serving.backend == "hf":
            check_model_args(model)  # a bad --model: one line before anything loads
        apply_cli_threads(threads)
        run_demo(model, serving, threads)

    run_guarded(debug, work)


CHECK_EPILOG = (
    "Input: one JSON object per line (blank lines are ignored), e.g.\n\n"
    "\b\n"
    '{"id": 7, "messages": [{"role": "user", "content": "Capital of France?"},\n'
    '                      {"role": "assistant", "content": "Paris."}],\n'
    ' "requirements": ["Answer in one word.", "Mention paris."], "label": true}\n\n'
    '"requirement": "..." may stand for a one-item list; "label" (optional) is one true/false '
    "for every requirement or a list with one per requirement; \"id\" (optional) is copied "
    "to the output. The last message must be the assistant turn the requirements judge.\n\n"
    "Output: one JSON object per checked line: line, id, requirements, scores, verdicts "
    "(score > 0.5), decided_by (\"adapter\" or the program that decided exactly; see "
    "--no-route), with labels labels and correct, and input_hash. A rerun skips lines "
    "already there; an output whose records do not match the input's lines (an edited input, "
    "another dataset's -o) is refused, never counted.\n\n"
    "Exit status: 0 every line checked (or already done); 1 error, see the message; 3 the run "
    "finished but some lines were malformed or failed (each listed with its line number); "
    "--allow-bad-lines turns 3 into 0."
)


NoRouteOpt = Annotated[bool, typer.Option(
    "--no-route", help="Send every requirement to the adapter. By default a requirement a "
    "program can decide exactly (\"Keep it under 50 words.\", \"Reply in JSON.\") is decided "
    "by it with no forward: an IFEval registry verifier (pip install 'mellea-local\\[verify]') "
    "or one of our rules; the record's decided_by says which.")]


# typer renders help as Rich markup, where "[ray]" is a style tag and vanishes: a literal
# bracket in help text is written "\\[" (tests/cli/test_help_text.py checks every command).
ActorsOpt = Annotated[int | None, typer.Option(
    "--actors", help="--pool ray: actors in the pool, one backend each (default 1).")]
RayAddressOpt = Annotated[str | None, typer.Option(
    "--ray-address", help="--pool ray: an existing cluster (auto, host:port, "
    "ray://host:10001); default: start a local Ray for the run.")]
BatchSizeOpt = Annotated[int | None, typer.Option(
    "--batch-size", help="--pool ray: lines per actor call (default 8).")]
GpusPerActorOpt = Annotated[float | None, typer.Option(
    "--gpus-per-actor", help="--pool ray: GPUs per actor, e.g. 1 or 0.5 (default 0: CPU).")]


def ray_options(engine: str, actors: int | None, ray_address: str | None,
                batch_size: int | None, gpus_per_actor: float | None,
                threads: int | None = None) -> RayOptions | None:
    """The pool settings for ``--pool ray`` (validated), None for local; a Ray flag with
    ``--pool local`` is refused rather than ignored."""
    given = {"--actors": actors, "--ray-address": ray_address, "--batch-size": batch_size,
             "--gpus-per-actor": gpus_per_actor}
    if engine != "ray":
        stray = [flag for flag, value in given.items() if value is not None]
        if stray:
            raise typer.BadParameter(f"{', '.join(stray)} only apply with --pool ray; add "
                                     "--pool ray or leave them out.")
        return None
    from mellea_local.batch import RayOptions

    options = RayOptions(actors=1 if actors is None else actors,
                         batch_size=8 if batch_size is None else batch_size,
                         gpus_per_actor=gpus_per_actor or 0.0, address=ray_address,
                         threads=1 if threads is None else threads)
    options.validate()
    return options


@app.command(epilog=CHECK_EPILOG)
def check(
    input_path: Annotated[Path, typer.Argument(
        metavar="INPUT", help="JSONL dataset: messages, requirement(s), optional label "
        "(--pool ray also reads Parquet with those columns).")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="JSONL of scores and verdicts; appended to, resumed from. "
        "Must not be the input.")],
    model: JudgeModelOpt = None,
    adapter: AdapterOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
    allow_bad_lines: Annotated[bool, typer.Option(
        "--allow-bad-lines", help="Exit 0 even when lines were malformed or failed (they are "
        "still reported); without it such a run exits 3.")] = False,
    pool: PoolOpt = None,
    engine: OldEngineOpt = None,
    actors: ActorsOpt = None,
    ray_address: RayAddressOpt = None,
    batch_size: BatchSizeOpt = None,
    gpus_per_actor: GpusPerActorOpt = None,
    threads: ThreadsOpt = None,
    backend_name: BackendOpt = "hf",
    server_url: ServerUrlOpt = None,
    api_key_file: ApiKeyFileOpt = None,
    no_route: NoRouteOpt = False,
) -> None:
    """Run requirement checks over a JSONL dataset (resumable; bad lines are reported, skipped)."""
    from rich.console import Console

    def work() -> int:
        nonlocal model
        model = judge_model(model)
        from mellea_local.batch.local import (
            check_resume,
            dataset_lines,
            guard_paths,
            items_by_line,
            load_check_backend,
            read_done,
            report,
            run_check,
        )
        from mellea_local.cli.options import add_cli_adapter, load_backend
        from mellea_local.launch import add_check_adapter, require_check_adapter

        serving = BackendChoice.from_options(backend_name, server_url, api_key_file)
        options = ray_options(pool_choice(pool, engine), actors, ray_address, batch_size,
                              gpus_per_actor, threads)
        if options is not None and serving.backend != "hf":
            raise BackendArgumentError(
                f"--pool ray runs one hf backend per actor; use --pool local with --backend "
                f"{serving.backend} (a llama-server batches conversations itself).")
        if options is not None:
            from mellea_local.batch import run
            from mellea_local.batch.io import is_parquet_output, journal_for, read_pending

            records = journal_for(output) if is_parquet_output(output) else output
            if records.is_file() and input_path.is_file():  # resuming: records must match
                rows = read_pending(input_path, set()).rows
                check_resume(records, items_by_line([(r["line"], r["text"]) for r in rows]),
                             str(input_path))
            if adapter is None:
                require_check_adapter(model)  # one line, before any actor loads a model
            summary = run(input_path, output, model=model, adapter=adapter, device=device,
                          dtype=dtype, options=options, route=not no_route)
        else:
            lines = dataset_lines(input_path)  # a missing or unreadable input: before the model
            if output.suffix.lower() in (".parquet", ".pq"):
                raise CheckFileError(
                    f"-o {str(output)!r}: Parquet output is written by --pool ray (pyarrow "
                    "comes with its extra); add --pool ray, or pass a .jsonl output.")
            guard_paths(input_path, output)
            read_done(output)  # an unusable output fails here, before the model loads
            check_resume(output, items_by_line(list(enumerate(lines, start=1))),
                         str(input_path))
            apply_cli_threads(threads)
            if serving.backend != "hf":  # the served export says which adapters exist
                backend = serving.load(model, device=device, dtype=dtype, threads=threads)
                name = (add_cli_adapter(backend, adapter) if adapter is not None
                        else add_check_adapter(backend, model))
            elif adapter is None:  # no adapter anywhere: one line, before the model loads
                require_check_adapter(model)
                backend = load_backend(model, device=device, dtype=dtype)
                name = add_check_adapter(backend, model)
            else:
                backend, name = load_check_backend(model, device=device, dtype=dtype,
                                                   adapter=adapter)
            output.parent.mkdir(parents=True, exist_ok=True)
            summary = run_check(input_path, output, backend, adapter=name,
                                route=not no_route)
        console = Console(soft_wrap=True)
        report(summary, output, console)
        console.print(f"results: {output.resolve()}", markup=False, highlight=False)
        return 3 if summary.errors and not allow_bad_lines else 0

    code = run_guarded(debug, work)
    if code:
        raise typer.Exit(code)


@app.command()
def chat(
    model: ModelOpt = EMBEDDED,
    adapter: AdapterOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    thinking: Annotated[bool, typer.Option(help="Let the model think first.")] = True,
    max_new_tokens: MaxNewTokensOpt = 256,
    threads: ThreadsOpt = None,
    backend_name: BackendOpt = "hf",
    server_url: ServerUrlOpt = None,
    api_key_file: ApiKeyFileOpt = None,
) -> None:
    """Chat with the model; thinking shown dimmed, /help lists the commands, /quit leaves."""
    from rich.console import Console

    def work() -> None:
        from mellea_local.cli.chat import run_chat
        from mellea_local.cli.options import add_cli_adapter, check_text

        if system is not None:
            check_text(system, "--system")
        serving = BackendChoice.from_options(backend_name, server_url, api_key_file)
        apply_cli_threads(threads)
        backend = serving.load(model, device=device, dtype=dtype, adapter=adapter,
                               threads=threads)
        if adapter:
            add_cli_adapter(backend, adapter)
        run_chat(backend, console=Console(), system=system, thinking=thinking,
                 max_new_tokens=max_new_tokens)

    run_guarded(debug, work)


@app.command("react")
def react_command(
    goal: Annotated[str, typer.Argument(metavar="GOAL", help="What the agent should achieve.")],
    model: ModelOpt = EMBEDDED,
    adapter: AdapterOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
    lookup: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE for the lookup tool (repeatable); without any, only the calculator.")
    ] = None,
    budget: Annotated[int, typer.Option(
        callback=_check_budget, help="Most model turns before giving up (-1: no limit).")] = 6,
    thinking: Annotated[bool, typer.Option(help="Let the model think first.")] = True,
    constrain: Annotated[bool | None, typer.Option(
        "--constrain/--no-constrain",
        help="Decode each step under a grammar of the offered tools (default: on for a chat "
        "template without a tool slot, such as SmolLM2's).")] = None,
    agent_adapter: Annotated[bool | None, typer.Option(
        "--agent-adapter/--no-agent-adapter",
        help="Decode each step with the model's agent aLoRA (default: the shipped "
        "adapters/agent/<model>/alora when there is one; --no-agent-adapter: the base "
        "model).")] = None,
    max_new_tokens: MaxNewTokensOpt = 256,
    threads: ThreadsOpt = None,
    backend_name: BackendOpt = "hf",
    server_url: ServerUrlOpt = None,
    api_key_file: ApiKeyFileOpt = None,
) -> None:
    """Run the ReACT agent on GOAL with the calculator (and a lookup table), step by step."""
    from rich.console import Console

    def work() -> None:
        from mellea_local.cli.options import add_cli_adapter, check_text
        from mellea_local.cli.react_cmd import (
            build_tools,
            parse_lookup,
            run_react,
        )

        if not check_text(goal, "GOAL").strip():
            raise InvalidInputError("GOAL is empty; say what the agent should achieve, e.g. "
                                    "'What is 12 * 7?'.")
        tools = build_tools(parse_lookup(lookup or []))
        serving = BackendChoice.from_options(backend_name, server_url, api_key_file)
        apply_cli_threads(threads)
        backend = serving.load(model, device=device, dtype=dtype, adapter=adapter,
                               threads=threads)
        if adapter:
            add_cli_adapter(backend, adapter)
        run_react(backend, goal, console=Console(), tools=tools, loop_budget=budget,
                  max_new_tokens=max_new_tokens, thinking=thinking, constrain=constrain,
                  agent=agent_adapter)

    run_guarded(debug, work)


BenchModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Benchmark these weights (folder, cached hub id, or 'embedded') instead of a "
        "random-init --size model; accuracy then scores its requirement-check adapters.",
    ),
]


@app.command()
def bench(
    quick: Annotated[bool, typer.Option(
        "--quick", help="Smoke-test grid: tiny model, lengths 128/512, few repeats (seconds).")
    ] = False,
    name: Annotated[str | None, typer.Option(
        help="Output file stem (default: the model's name, e.g. smollm2-135m, or bench "
        "without --model; -quick and -cuda added).")] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", "--out-dir", help="Folder for <name>.json, <name>.md and the PNGs (default: "
        "./mellea-local-bench/<name>-<date>/).")] = None,
    dataset: Annotated[Path | None, typer.Option(
        help="Labelled JSONL (the check format, optional 'family') for adapter accuracy, "
        "instead of the shipped splits; default: the splits of --model, or the embedded "
        "model's synthetic held-out set.")] = None,
    split: Annotated[list[str] | None, typer.Option(
        help="Shipped accuracy split to score (repeatable): held-out, held-out-families, "
        "user-style (default: every one present for --model).")] = None,
    size: Annotated[str | None, typer.Option(
        help="Random-init model shape: tiny, bench-20m, granite-3b-shape (default: tiny with "
        "--quick, else bench-20m).")] = None,
    model: BenchModelOpt = None,
    adapter: AdapterOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    debug: DebugOpt = False,
    threads: ThreadsOpt = None,
    lengths: Annotated[str | None, typer.Option(
        help="Comma-separated context lengths for the check modes, e.g. 1024,4096,16384 "
        "(at least 64; each conversation is fitted to within 2 % or 8 tokens and the report "
        "states the length measured).")
    ] = None,
    repeats: Annotated[int | None, typer.Option(
        help="Interleaved rounds per measurement (default: 3 quick, 7 full).")] = None,
    examples: Annotated[int | None, typer.Option(
        help="Synthetic accuracy examples per family (default: 2 quick, 40 full).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic held-out set.")] = 9000,
    skip: Annotated[list[str] | None, typer.Option(
        help="Leave out a section (repeatable): generation, react, requirement_check, "
        "batched, conversations, accuracy.")] = None,
    only: Annotated[list[str] | None, typer.Option(
        help="Run only this section (repeatable); `--only accuracy` scores the adapters and "
        "the judge without loading the speed model.")] = None,
    limit: Annotated[int | None, typer.Option(
        help="Score only the first N lines of each accuracy split.")] = None,
    judge: Annotated[bool, typer.Option(
        "--judge/--no-judge", help="Also score the base model asked as a judge (no adapter) "
        "beside each adapter.")] = True,
    route: Annotated[bool, typer.Option(
        "--route/--no-route", help="Beside each adapter, score it with routing as validate and "
        "check run by default (a program decides what it can verify exactly: row "
        "<adapter>+route).")] = True,
    pool: PoolOpt = None,
    engine: OldEngineOpt = None,
    actors: ActorsOpt = None,
    ray_address: RayAddressOpt = None,
    batch_size: BatchSizeOpt = None,
    gpus_per_actor: GpusPerActorOpt = None,
    backend_name: BackendOpt = "hf",
    server_url: ServerUrlOpt = None,
    api_key_file: ApiKeyFileOpt = None,
) -> None:
    """Run the benchmark suite; write <name>.json, a markdown report and PNG figures.

    Speed sections (generation overhead, check modes vs context length, batched checks, ReACT
    turns) time random adapters on a random-init model; accuracy scores trained adapters.
    """
    from rich.console import Console

    options = dict(quick=quick, name=name, out_dir=out_dir, dataset=dataset, split=split,
                   size=size,
                   model=model, adapter=adapter, device=device, dtype=dtype, threads=threads,
                   lengths=lengths, repeats=repeats, examples=examples, seed=seed, skip=skip,
                   only=only, limit=limit, judge=judge, route=route, pool=pool, actors=actors,
                   ray_address=ray_address, batch_size=batch_size, gpus_per_actor=gpus_per_actor,
                   backend=backend_name, server_url=server_url,
                   api_key_file=api_key_file)  # the key's file is recorded, never the key

    def work() -> None:
        from mellea_local.bench.suite import SuiteConfig, run_suite
        from mellea_local.cli.bench_cmd import command_line, parse_lengths, print_summary

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        serving = BackendChoice.from_options(backend_name, server_url, api_key_file)
        chosen = pool_choice(pool, engine)
        ray = ray_options(chosen, actors, ray_address, batch_size, gpus_per_actor, threads)
        if ray is not None:
            from mellea_local.batch import require_ray

            require_ray()  # before any section runs
        cfg = SuiteConfig(
            out_dir=out_dir, name=name, quick=quick, size=size, model=model, adapter=adapter,
            dataset=dataset, device=device, dtype=dtype, threads=threads,
            lengths=parse_lengths(lengths), repeats=repeats, examples=examples, seed=seed,
            skip=tuple(skip or ()), only=tuple(only or ()), limit=limit, judge=judge,
            route=route, command=command_line(options), engine=chosen, ray=ray,
            splits=tuple(split or ()), backend=serving.backend,
            server_urls=serving.server_urls, api_key=serving.api_key(),
        )
        run = run_suite(cfg, console=Console(stderr=True, soft_wrap=True))
        print_summary(run, Console(soft_wrap=True))

    run_guarded(debug, work)


@app.command("export-gguf")
def export_gguf_command(
    model: Annotated[str, typer.Argument(
        help="A local Hugging Face Llama folder (safetensors), a registered model name "
             "(smollm2-135m), or 'embedded'.")],
    out_dir: Annotated[Path, typer.Argument(help="Folder to write the GGUF files into.")],
    base_gguf: Annotated[Path | None, typer.Option(
        "--base-gguf", help="Serve this GGUF of MODEL (e.g. the quantized file it was "
        "converted from) as the base instead of writing an f32 one.")] = None,
    debug: DebugOpt = False,
) -> None:
    """Write MODEL and its library adapters as GGUF for llama-server (LlamaServerBackend).

    OUT_DIR gets the f32 base (or a copy of --base-gguf), one LoRA GGUF per adapter in the
    libraries for that base (aLoRAs with adapter.alora.invocation_tokens), the tokenizer and
    manifest.json; then LlamaServerBackend.launch(OUT_DIR) serves it.
    """

    def work() -> None:
        from mellea_local.extras import require_extra

        require_extra("export-gguf", "llamacpp")
        from mellea_local.backends.llama_server.gguf_export import export_gguf

        manifest = export_gguf(model, out_dir, base_gguf=base_gguf)
        typer.echo(f"wrote {out_dir / manifest['base']}")
        for entry in manifest["adapters"]:
            typer.echo(f"wrote {out_dir / entry['file']} ({entry['intrinsic']}, {entry['kind']})")
        typer.echo(f"wrote {out_dir / 'manifest.json'}")

    run_guarded(debug, work)


app.add_typer(models_app, name="models")
app.command("train", epilog=TRAIN_EPILOG)(train_command)


def main() -> None:
    app()
