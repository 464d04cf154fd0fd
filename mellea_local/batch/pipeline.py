"""``run``: the ``check`` command on Ray Data, an actor pool of backends.

Dataflow::

    driver: read + validate every line (batch.io)  ->  rows {line, text}, not yet in -o
    ray.data.from_items(rows) -> map_batches(CheckActor, ActorPoolStrategy(size=actors),
                                             num_gpus=gpus_per_actor, batch_size=B)
    driver: iter_batches() -> append each record to -o (flushed), keyed by line number

Why the driver writes the output, not ``write_json``: exactly-once. Ray restarts an actor
whose process dies (``max_restarts``) and reruns its tasks (``max_task_retries``), so a killed
actor's rows are redone; the driver appends each line's record once, skipping a line number it
has already written, so a retried block can never duplicate a record, and at the end every
pending line is accounted for (a record, or an error naming it). Records are flushed as they
arrive, so an interrupted driver loses nothing either: a rerun over the same ``-o`` skips the
finished lines with ``check``'s own ``read_done`` (torn last line included). The output is one
JSONL file, record for record what ``--engine local`` writes, in input order
(``preserve_order``), so the two compare line for line. An ``-o`` ending in ``.parquet``
gets the same records as Parquet, converted at the end from a JSONL journal beside it
(``OUT.parquet.jsonl``, which is what resumes: Parquet cannot be appended to). A
driver-written file costs nothing at this scale: the driver writes ~100-byte records while the
actors spend milliseconds of model time per line.

Why one row per conversation with all its requirements: the actor prefills the conversation
once and runs its k checks as one batched call (the same ``check_item`` the local engine
runs), so no cache has to be shared across actors.

Ray's core worker logs one line per pool, "constructor arguments in the object store and
max_restarts > 0": the arguments are Ray Data's own (its context and transform refs), held for
the pool's life, so a restart finds them (the SIGKILL tests prove it). Ray's servers listen
on every interface; Ray 2.60 guards them with its token authentication (on by default).

Ray is imported inside the functions: ``mellea_local.batch`` imports without the extra, and a
missing Ray is one ``RayNotInstalledError`` naming the install line.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import stat
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

import mellea_local.batch.watchdog as watchdog
from mellea_local.batch.actor import BackendSpec, CheckActor
from mellea_local.batch.io import (
    Pending,
    is_parquet_output,
    journal_for,
    read_pending,
    require_ray,
    write_parquet,
)
from mellea_local.batch.local import (
    CheckSummary,
    guard_paths,
    make_progress,
    read_done,
    tally,
    warn_skipped,
)
from mellea_local.errors import BatchOptionError, BatchRunError

MAX_BLOCKS = 20_000
"""Most input blocks: beyond ~20k objects the object store's bookkeeping costs more than the
finer progress and retry granularity buys, so larger inputs get bigger blocks."""


@dataclass(frozen=True)
class RayOptions:
    """How the pipeline runs; every field is checked by ``validate`` before Ray starts.

    ``address``: an existing cluster (``ray://host:10001`` or ``auto``); None starts a
    private single-node Ray for the run (or reuses one this process already started).
    ``max_restarts`` / ``max_task_retries``: how often a dying actor is restarted and its
    tasks rerun; bounded, so an actor that dies every time (out of memory) ends the run with an
    error instead of looping forever.
    """

    actors: int = 1
    batch_size: int = 8
    gpus_per_actor: float = 0.0
    cpus_per_actor: float = 1.0
    address: str | None = None
    threads: int | None = 1
    max_restarts: int = 8
    max_task_retries: int = 8

    def __post_init__(self) -> None:
        self.validate()  # at construction: RayOptions(actors=True) fails here, naming it

    def validate(self) -> None:
        """Types and ranges of every field; ``BatchOptionError`` naming the flag and the fix."""
        def whole(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def real(v: Any) -> bool:
            return (isinstance(v, int | float) and not isinstance(v, bool)
                    and math.isfinite(v))

        checks = [
            (whole(self.actors) and self.actors >= 1,
             f"--actors {self.actors!r}: pass a whole number of actors, at least 1."),
            (whole(self.batch_size) and self.batch_size >= 1,
             f"--batch-size {self.batch_size!r}: pass a whole number of lines per batch, at "
             "least 1."),
            (real(self.gpus_per_actor) and self.gpus_per_actor >= 0,
             f"--gpus-per-actor {self.gpus_per_actor!r}: pass 0 (CPU actors), a fraction such "
             "as 0.5 (two actors per GPU) or a whole number of GPUs."),
            (real(self.cpus_per_actor) and self.cpus_per_actor > 0,
             f"cpus_per_actor {self.cpus_per_actor!r}: pass a finite number of CPUs > 0, "
             "such as 1."),
            (self.threads is None or (whole(self.threads) and self.threads >= 1),
             f"threads {self.threads!r}: pass a whole number of torch threads per actor, at "
             "least 1 (or None for torch's default)."),
            (whole(self.max_restarts) and whole(self.max_task_retries)
             and self.max_restarts >= 0 and self.max_task_retries >= 0,
             f"max_restarts {self.max_restarts!r} / max_task_retries "
             f"{self.max_task_retries!r}: pass whole numbers >= 0."),
            (self.address is None or (isinstance(self.address, str)
                                      and bool(self.address.strip())),
             f"--ray-address {self.address!r}: pass host:port, ray://host:10001 or auto, or "
             "leave it out to start a local Ray."),
        ]
        for ok, message in checks:
            if not ok:
                raise BatchOptionError(message)


@dataclass
class BatchEvent:
    """One batch of results as the driver wrote it (for observers: progress, tests)."""

    keys: list[int]
    pids: set[int]  # every actor process that has returned rows so far
    done: int
    total: int
    duplicates: int = 0  # rows Ray delivered again (retried blocks), dropped by the driver


@dataclass
class StreamStats:
    duplicates: int = 0  # rows Ray delivered twice (a retried block); written once
    pids: set[int] = field(default_factory=set)  # every actor process that returned rows


@contextmanager
def ray_session(options: RayOptions) -> Iterator[Any]:
    """Ray for one run: connect to ``address``, reuse a running one, or start a local one.

    Only a Ray this function started is shut down afterwards.
    """
    ray = require_ray()
    started = False
    dog = None
    if options.address:  # refused even when this process already runs a Ray
        probe_address(options.address)
    if not ray.is_initialized():
        # Ray's own INFO/WARNING lines (start-up, its token-auth notice) would interleave with
        # the progress bar; errors still show. Actor logs stay in Ray's session folder.
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        if options.address:
            kwargs["address"] = options.address
            _init(ray, kwargs, options.address)
        else:
            kwargs.update(num_cpus=os.cpu_count() or 1, include_dashboard=False)
            refuse_open_cluster()
            secure_token_file()
            before = watchdog.children_now(os.getpid())
            _init(ray, kwargs, None)
            dog = watchdog.start(watchdog.children_now(os.getpid()) - before)
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
            watchdog.stop(dog)


CONNECT_TIMEOUT_S = 5.0
"""How long ``--ray-address`` may take to accept a TCP connection: Ray's own client retries
an unreachable address forever (``127.0.0.1:1`` waited without end)."""


def probe_address(address: str) -> None:
    """Refuse a ``--ray-address`` nothing answers at within ``CONNECT_TIMEOUT_S``, before Ray's
    client starts its endless retries. ``auto`` (found from the local session file) and other
    addresses without a port are left to Ray, which fails fast for them."""
    target = address.strip().removeprefix("ray://")
    host, sep, port_text = target.rpartition(":")
    if not sep:
        return
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BatchOptionError(
            f"--ray-address {address!r}: the port {port_text!r} is not a number in 1..65535; "
            "pass host:port (e.g. 127.0.0.1:6379), ray://host:10001 or auto.")
    try:
        with socket.create_connection((host, int(port_text)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise BatchOptionError(
            f"--ray-address {address!r}: nothing accepts connections there within "
            f"{CONNECT_TIMEOUT_S:g} s ({exc.strerror or exc}). Start the cluster "
            "(`ray start --head`), fix the address, or leave --ray-address out to start a "
            "private Ray for the run.") from None


JOIN_TIMEOUT_S = 60.0
"""How long connecting to ``--ray-address`` may take once the port answers: a port that
accepts connections but is no Ray cluster (another server) kept ``ray.init`` waiting forever."""


def _init(ray: Any, kwargs: dict[str, Any], address: str | None) -> None:
    if address is None:  # a private cluster: started here, in the main thread
        _init_now(ray, kwargs, None)
        return
    # Ray's client has no deadline of its own: connect in a daemon thread and stop waiting
    # after JOIN_TIMEOUT_S (the thread is abandoned; it cannot keep the process alive).
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            _init_now(ray, kwargs, address)
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)

    thread = threading.Thread(target=connect, name="ray-connect", daemon=True)
    thread.start()
    thread.join(JOIN_TIMEOUT_S)
    if not outcome:
        raise BatchOptionError(
            f"--ray-address {address!r}: the port accepts connections but no Ray cluster "
            f"answered within {JOIN_TIMEOUT_S:g} s. Check that it is the cluster's GCS port "
            "(6379 by default, or ray://host:10001), or leave --ray-address out to start a "
            "private Ray for the run.")
    if outcome[0] is not None:
        raise outcome[0]


def _init_now(ray: Any, kwargs: dict[str, Any], address: str | None) -> None:
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
        where = f"--ray-address {address!r}" if address else "a private Ray"
        raise BatchRunError(
            f"Ray could not start or connect ({where}: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}). Check the address and that the cluster "
            "runs the same Ray version, or leave --ray-address out.") from exc


def refuse_open_cluster() -> None:
    """Refuse to start a private Ray with token authentication off.

    Ray 2.60 binds its GCS, raylet and worker gRPC servers to 0.0.0.0 (hard-coded; no setting
    narrows it to 127.0.0.1), so the token is what keeps other hosts out; without it any host
    that reaches this one could submit work to the cluster.
    """
    mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower()
    if mode == "disabled":
        raise BatchOptionError(
            "RAY_AUTH_MODE=disabled: a private Ray's servers listen on every interface (Ray "
            "2.60 cannot bind them to 127.0.0.1), so without its token anyone who reaches this "
            "host could run code in it. Unset RAY_AUTH_MODE, or start your own cluster behind "
            "a firewall and pass --ray-address.")


def secure_token_file() -> None:
    """Ray's token file readable by its owner only (0600), before a private Ray starts.

    Ray 2.60 writes ``~/.ray/auth_token`` with the default umask (0644), so any local user
    could read the token that guards the cluster's servers (which listen on every interface).
    A missing token is written here first, 0600 from creation; an existing file of ours is
    narrowed to 0600. Links are not followed. ``RAY_AUTH_TOKEN`` in the environment needs no
    file.
    """
    if os.environ.get("RAY_AUTH_TOKEN"):
        return
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        info = path.lstat()
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:  # another run wrote it first: narrow that one below
            info = path.lstat()
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
            return
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077:
        os.chmod(path, 0o600)


def check_resources(ray: Any, options: RayOptions) -> None:
    """Refuse a pool the cluster cannot place: Ray Data would wait for it forever."""
    have = ray.cluster_resources()
    cpus, gpus = have.get("CPU", 0.0), have.get("GPU", 0.0)
    need_cpu = options.actors * options.cpus_per_actor
    need_gpu = options.actors * options.gpus_per_actor
    if need_cpu > cpus:
        raise BatchOptionError(
            f"--actors {options.actors} needs {need_cpu:g} CPUs; the Ray cluster has "
            f"{cpus:g}. Pass --actors {max(1, int(cpus // options.cpus_per_actor))} or a "
            "bigger cluster (--ray-address).")
    if need_gpu > gpus:
        raise BatchOptionError(
            f"--actors {options.actors} x --gpus-per-actor {options.gpus_per_actor:g} needs "
            f"{need_gpu:g} GPUs; the Ray cluster has {gpus:g}. Pass fewer actors, a "
            "fraction per actor, or --gpus-per-actor 0 for CPU actors.")


def stream(
    ray: Any, rows: list[dict[str, Any]], actor: type, spec: Any, options: RayOptions,
    key: str, stats: StreamStats,
) -> Iterator[dict[str, Any]]:
    """Run ``actor`` over ``rows`` on the pool; yield each result row once, by ``key``.

    Rows come back in input order. A row Ray delivers again (a block retried after its actor
    died) is dropped here and counted in ``stats.duplicates``.
    """
    from ray.data import ActorPoolStrategy, DataContext

    ctx = DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars,
             ctx.print_on_execution_start)
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False  # ours is on the terminal; Ray's would interleave
    ctx.print_on_execution_start = False
    level = logging.getLogger("ray.data").level
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # "progress bars disabled", plans
    per_block = max(options.batch_size, math.ceil(len(rows) / MAX_BLOCKS))
    blocks = max(1, math.ceil(len(rows) / per_block))
    try:
        with warnings.catch_warnings():
            # Ray 2.60 takes the restart budget only as a deprecated **ray_remote_args (no
            # named parameter yet; removal announced for 2.64, hence the extra's <2.64).
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            ds = ray.data.from_items(rows, override_num_blocks=blocks).map_batches(
                actor, fn_constructor_kwargs={"spec": spec}, batch_size=options.batch_size,
                compute=ActorPoolStrategy(size=options.actors),
                num_cpus=options.cpus_per_actor, num_gpus=options.gpus_per_actor or None,
                batch_format="numpy", max_restarts=options.max_restarts,
                max_task_retries=options.max_task_retries)
        seen: set[int] = set()
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            columns = list(batch)
            for i, k in enumerate(batch[key].tolist()):
                if k in seen:
                    stats.duplicates += 1
                    continue
                seen.add(k)
                stats.pids.add(int(batch["pid"][i]))
                yield {c: batch[c][i] for c in columns}
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars, \
            ctx.print_on_execution_start = saved
        logging.getLogger("ray.data").setLevel(level)


def actor_device(device: str | None, options: RayOptions) -> str | None:
    """The device each actor loads on: Ray hands an actor its GPU(s) as ``cuda:0``, and an
    actor with no GPU in ``num_gpus`` sees none, so ``--device cuda`` alone cannot work."""
    if options.gpus_per_actor > 0:
        if device is not None and not device.startswith("cuda"):
            raise BatchOptionError(
                f"--device {device} with --gpus-per-actor {options.gpus_per_actor:g}: GPU "
                "actors load on cuda; leave out --device, or pass --gpus-per-actor 0.")
        return "cuda"
    if device is not None and device.startswith("cuda"):
        raise BatchOptionError(
            f"--device {device} with --engine ray needs --gpus-per-actor (e.g. 1): Ray gives "
            "an actor a GPU only when it asks for one.")
    return device


def run(
    input_path: str | Path, output: str | Path, *, model: str = "embedded",
    adapter: str | None = None, device: str | None = None, dtype: str | None = None,
    options: RayOptions | None = None, console: Console | None = None,
    observer: Callable[[BatchEvent], None] | None = None, route: bool = True,
) -> CheckSummary:
    """Check every line of ``input_path`` (JSONL or Parquet) not yet in ``output`` on Ray.

    The arguments are ``check``'s (``model``, ``adapter``, ``device``, ``dtype``, ``route``)
    plus the pool's ``options``.
    Returns the same ``CheckSummary`` as the local engine (accuracy over
    the whole output when it holds labels). Everything is validated before Ray starts: the
    options, the model flags, the output file and every input line. A pool that dies past
    its restart budget raises ``BatchRunError`` after writing what it finished.
    """
    from mellea_local.launch import check_model_args

    if options is not None and not isinstance(options, RayOptions):
        raise BatchOptionError(
            f"options must be a RayOptions, got {type(options).__name__}; pass e.g. "
            "options=RayOptions(actors=2).")
    for argument, value in (("input_path", input_path), ("output", output)):
        if not isinstance(value, str | os.PathLike):
            raise BatchOptionError(
                f"{argument} must be a path (str or Path), got {type(value).__name__} "
                f"({value!r:.60}); pass e.g. {argument}='data.jsonl'.")
    options = options or RayOptions()
    options.validate()
    require_ray()
    input_path, output = Path(input_path), Path(output)
    if not input_path.is_file():
        read_pending(input_path, set())  # the missing-input error, worded for both formats
    guard_paths(input_path, output)
    parquet_out = is_parquet_output(output)
    records = journal_for(output) if parquet_out else output
    guard_paths(input_path, records)
    done = read_done(records)
    check_model_args(model, dtype=dtype, adapter=adapter)
    device = actor_device(device, options)
    err = console or Console(stderr=True, soft_wrap=True)
    pending = read_pending(input_path, done)
    summary = CheckSummary(total=pending.total, skipped=pending.skipped)
    for number, reason in pending.errors:
        summary.errors.append((number, reason))
        warn_skipped(err, number, reason)
    output.parent.mkdir(parents=True, exist_ok=True)
    if pending.rows:
        spec = BackendSpec(model=model, device=device, dtype=dtype, adapter=adapter,
                           threads=options.threads, route=route)
        _run_pool(pending, records, spec, options, summary, err, observer)
    if parquet_out:
        records.touch()
        write_parquet(records, output)
    tally(records, summary)
    return summary


def _run_pool(
    pending: Pending, output: Path, spec: BackendSpec, options: RayOptions,
    summary: CheckSummary, err: Console, observer: Callable[[BatchEvent], None] | None,
) -> None:
    total = len(pending.rows)
    written: set[int] = set()
    stats = StreamStats()
    progress = make_progress(err)
    with ray_session(options) as ray, progress, output.open("a", encoding="utf-8") as out:
        check_resources(ray, options)
        plural = "s" if options.actors != 1 else ""
        task = progress.add_task(f"checking ({options.actors} actor{plural})", total=total)
        keys: list[int] = []
        try:
            for row in stream(ray, pending.rows, CheckActor, spec, options, "line", stats):
                line = int(row["line"])
                if row["error"]:
                    summary.errors.append((line, str(row["error"])))
                    warn_skipped(err, line, str(row["error"]))
                else:
                    out.write(str(row["record"]) + "\n")
                    out.flush()
                    summary.checked += 1
                written.add(line)
                keys.append(line)
                progress.advance(task)
                if observer is not None and len(keys) >= options.batch_size:
                    observer(BatchEvent(keys, set(stats.pids), len(written), total,
                                        stats.duplicates))
                    keys = []
            if observer is not None and keys:
                observer(BatchEvent(keys, set(stats.pids), len(written), total,
                                    stats.duplicates))
        except BatchOptionError:
            raise
        except Exception as exc:
            left = total - len(written)
            raise BatchRunError(
                f"The Ray pipeline stopped with {left} of {total} lines unchecked "
                f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); the "
                f"{summary.checked} records written are kept in {str(output)!r}. Rerun the "
                "same command to resume.") from exc
    missing = sorted(r["line"] for r in pending.rows if r["line"] not in written)
    for line in missing:  # never silently: every pending line has a record or an error
        summary.errors.append((line, "no result came back from the Ray pool; rerun to "
                                     "resume"))
