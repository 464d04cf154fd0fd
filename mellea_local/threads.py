"""How many torch threads CPU work uses: chosen on purpose, from the CPUs this process may use
and the work already running on them.

Why not torch's own default (one thread per core): OpenMP worker threads spin while they wait
for each other, so on a core another process is using they burn their time slice instead of
yielding it. Measured on a shared 2-core machine with other work running: a 200 x 576 multiply
took 5.1 ms with 2 torch threads against 0.2 ms with 1, elementwise ops ran 25x slower, and a
135 M model's 200-token prefill took 6.7 s against 0.5 s. One thread on a busy core only shares
it; several threads on too few cores fight. So the default is the CPUs this process may use
(``os.sched_getaffinity``: a container or ``taskset`` limit counts, the machine's core count
does not) less the runnable work already there (``os.getloadavg``, the 1-minute load average),
at least 1. On an idle machine that is every usable CPU, as torch would choose.

The choice is made once per process, when the first CPU backend is built (``LocalHFBackend``)
or a command starts with ``--threads``; a count the caller set (``torch.set_num_threads``, or
``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` in the environment) is kept. When more than one thread
runs while the load average plus the threads exceeds the usable CPUs (the case measured above),
one warning line says so and how to avoid it.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

from mellea_local.errors import InvalidInputError, ThreadCountError

log = logging.getLogger("mellea_local.threads")

ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


SLACK = 0.5
"""Load below half a CPU is noise (a shell, an idle daemon), in the default and the warning."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows: no affinity call
        return max(1, os.cpu_count() or 1)


def load_average() -> float | None:
    """The 1-minute load average (runnable work, in CPUs), or None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def default_threads(cpus: int | None = None, load: float | None = None) -> int:
    """Usable CPUs less the load already on them, at least 1 (see the module docstring).

    ``cpus`` and ``load`` default to this machine's; pass them to ask about another.
    """
    cpus = usable_cpus() if cpus is None else cpus
    if load is None:
        load = load_average() or 0.0
    if not math.isfinite(load) or load < 0:
        load = 0.0
    return max(1, min(cpus, math.floor(cpus - load + SLACK)))


def known_slow(threads: int, cpus: int, load: float | None) -> bool:
    """Whether ``threads`` are in the measured slow case: several threads, more runnable work
    than CPUs. One thread is never flagged: it shares a busy core without spinning on it."""
    return threads > 1 and load is not None and load + threads > cpus + SLACK


def slow_warning(threads: int, cpus: int, load: float) -> str:
    return (f"{threads} torch threads on {cpus} usable CPU(s) with load average {load:.1f}: "
            "threads will spin against other work (measured up to 25x slower); pass "
            f"--threads {default_threads(cpus, load)} (or torch.set_num_threads) for this load.")


@dataclass(frozen=True)
class ThreadChoice:
    """What was chosen and why, as a benchmark report states it."""

    threads: int
    source: str  # "flag" (asked for), "default" (chosen here), "caller" (set before us)
    usable_cpus: int
    load_average: float | None

    def as_dict(self) -> dict[str, object]:
        return {"torch_threads": self.threads, "threads_source": self.source,
                "usable_cpus": self.usable_cpus, "load_average": self.load_average}


_state: dict[str, object] = {"baseline": None, "applied": None, "warned": False}


def _torch() -> Any:
    import sys

    fresh = "torch" not in sys.modules
    import torch

    if _state["baseline"] is None:
        # Imported here for the first time: this is torch's own default. Imported earlier by
        # someone else: maybe not (caller_set_threads then compares with per-core counts).
        _state["baseline"] = torch.get_num_threads()
        _state["baseline_exact"] = fresh
    return torch


def check_threads(threads: object, what: str = "--threads", cpus: int | None = None) -> int:
    """``threads`` as an int from 1 to the usable CPUs, or a typed error naming ``what``.

    The one owner of this bound: every command's ``--threads`` and every ``threads=`` pass
    here before any thread exists. More threads than usable CPUs is never faster (see the
    module docstring), and ``--threads 10000`` once drove a 2-core machine's load average to
    2,415 (``train`` hung). ``cpus`` defaults to ``usable_cpus()``.
    """
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise InvalidInputError(f"{what} {threads!r}: pass a whole number of threads, 1 or "
                                "more.")
    if threads < 1:
        raise InvalidInputError(f"{what} {threads}: pass at least 1 thread.")
    cpus = usable_cpus() if cpus is None else cpus
    if threads > cpus:
        raise ThreadCountError(
            f"{what} {threads}: this process may use {cpus} CPU(s) (its affinity mask), and "
            "more threads than CPUs only fight over them (measured up to 25x slower); pass "
            f"--threads {cpus} or fewer (or leave it out for the default).")
    return threads


def caller_set_threads() -> bool:
    """Whether someone other than this module chose torch's count (environment or call)."""
    if any(os.environ.get(name) for name in ENV_VARS):
        return True
    torch = _torch()
    current = torch.get_num_threads()
    if current == _state["applied"]:
        return False
    if _state.get("baseline_exact"):
        return current != _state["baseline"]
    # torch was imported before we looked: its default is one thread per core (physical or
    # logical, by build); any other count was set on purpose.
    cpus = os.cpu_count() or 1
    return current not in {cpus, max(1, cpus // 2), usable_cpus()}


def apply_threads(threads: int | None = None, *, warn: bool = True) -> ThreadChoice:
    """Set torch's CPU thread count: ``threads`` when given, else the default unless the caller
    set one; returns the choice. Warns once per process in the known-slow case."""
    cpus, load = usable_cpus(), load_average()
    if threads is not None:  # checked before torch is touched: no thread exists yet
        check_threads(threads, cpus=cpus)
    torch = _torch()
    if threads is not None:
        count, source = threads, "flag"
    elif _state["applied"] is not None and torch.get_num_threads() == _state["applied"]:
        count, source = int(_state["applied"]), "default"  # chosen once per process
    elif caller_set_threads():
        count, source = torch.get_num_threads(), "caller"
    else:
        count, source = default_threads(cpus, load), "default"
    if source != "caller" and torch.get_num_threads() != count:
        torch.set_num_threads(count)
    if source != "caller":
        _state["applied"] = count
    if warn and not _state["warned"] and known_slow(count, cpus, load):
        _state["warned"] = True
        log.warning(slow_warning(count, cpus, load or 0.0))
    return ThreadChoice(count, source, cpus, load)


def apply_default_threads(device: object) -> None:
    """The backend's hook: on a CPU device, the default count unless the caller set one."""
    if str(device).split(":")[0] == "cpu":
        apply_threads()


def current_choice() -> ThreadChoice:
    """The count torch uses now, with where it came from, for a benchmark report."""
    torch = _torch()
    count = torch.get_num_threads()
    if count == _state["applied"]:
        source = "default"
    elif caller_set_threads():
        source = "caller"
    else:
        source = "torch"
    return ThreadChoice(count, source, usable_cpus(), load_average())
