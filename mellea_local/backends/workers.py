"""Generation worker threads, and stopping them before the interpreter exits.

Why: a worker is a daemon thread (a generation nobody awaits must not keep a program alive),
but a daemon thread still inside a torch op when Python finalizes is killed the moment it
asks for the GIL back, from inside torch's C++ frames: the process dies with ``terminate
called without an active exception`` (exit 134), after the program's own output was printed.
So every worker is registered here, and an ``atexit`` hook (which runs before finalization,
while daemon threads still run normally) cancels the ones still going and waits for all of
them to leave their frames.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

#: How long the exit hook waits for workers after cancelling them. A cancelled generation
#: stops at its next token; only a single forward pass longer than this outlives the wait.
EXIT_JOIN_SECONDS = 60.0

_lock = threading.Lock()
_live: dict[threading.Thread, threading.Event] = {}


def start_worker(target: Callable[[], None], cancel: threading.Event, *, name: str) -> None:
    """Run ``target`` on a registered daemon thread; ``cancel`` is set if the process exits."""

    def run() -> None:
        try:
            target()
        finally:
            with _lock:
                _live.pop(threading.current_thread(), None)

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _lock:
        _live[thread] = cancel
    thread.start()


def live_workers() -> list[threading.Thread]:
    """The workers that have not finished yet."""
    with _lock:
        return list(_live)


def join_workers(timeout: float | None = None, *, cancel: bool = False) -> bool:
    """Wait for every worker to finish (``cancel=True`` stops their generations first).

    Returns True when none is left. Waits on the threads themselves, not only on their
    results: a worker that has delivered its output still has frames to unwind.
    """
    with _lock:
        workers = list(_live.items())
    if cancel:
        for _, event in workers:
            event.set()
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread, _ in workers:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        thread.join(left)
    return not any(thread.is_alive() for thread, _ in workers)


def _at_exit() -> None:
    if not join_workers(EXIT_JOIN_SECONDS, cancel=True):
        logger.warning(
            "a generation thread was still running %.0f s after the exit began; the process "
            "may abort while it is inside torch", EXIT_JOIN_SECONDS,
        )


atexit.register(_at_exit)
