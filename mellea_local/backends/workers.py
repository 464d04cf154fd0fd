"""Generation worker threads, and stopping them before the interpreter exits.

Why: a worker is a daemon thread (a generation nobody awaits must not keep a program alive),
but a daemon thread still inside a torch op when Python finalizes is killed the moment it
asks for the GIL back, from inside torch's C++ frames: the process dies with ``terminate
called without an active exception`` (exit 134), after the program's own output was printed.
So every worker is registered here, and an ``atexit`` hook (which runs before finalization,
while daemon threads still run normally) cancels the ones still going and waits for all of
them to leave their frames. Finished workers wait for the next call (see ``_Worker``).
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
_live: dict[threading.Thread, tuple[threading.Event, threading.Event]] = {}  # cancel, done
_idle: list[_Worker] = []

MAX_IDLE = 2
"""Finished workers kept waiting for the next call; more than this exit."""


class _Worker:
    """A daemon thread that runs one target after another.

    Why reuse threads: a generation on a fresh thread ran 8 % slower than the same one on a
    reused thread (CPU time too, 256 tokens on the 21 M bench model: the new thread's
    allocator arena and torch's per-thread state start cold), which was most of the
    difference between ``generate_from_context`` and a bare ``model.generate``. An idle worker
    waits in Python (a lock), never inside torch, so it is harmless at interpreter exit.
    """

    def __init__(self) -> None:
        self._ready = threading.Semaphore(0)
        self._task: tuple[Callable[[], None], threading.Event] | None = None
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def give(self, target: Callable[[], None], done: threading.Event) -> None:
        self._task = (target, done)
        self._ready.release()

    def _loop(self) -> None:
        while True:
            self._ready.acquire()
            assert self._task is not None
            target, done = self._task
            self._task = None
            try:
                target()
            except BaseException:  # the target reports its own errors; never kill the pool
                logger.exception("a generation worker's target raised")
            finally:
                with _lock:
                    _live.pop(self.thread, None)
                    keep = len(_idle) < MAX_IDLE
                    if keep:
                        _idle.append(self)
                done.set()
                # An idle worker must not keep the last call's backend and thunk alive.
                del target, done
            if not keep:
                return


def start_worker(target: Callable[[], None], cancel: threading.Event, *, name: str) -> None:
    """Run ``target`` on a registered daemon worker; ``cancel`` is set if the process exits."""
    done = threading.Event()
    with _lock:
        worker = _idle.pop() if _idle else _Worker()
        worker.thread.name = name
        _live[worker.thread] = (cancel, done)
    if not worker.thread.is_alive():
        worker.thread.start()
    worker.give(target, done)


def live_workers() -> list[threading.Thread]:
    """The workers running a target right now."""
    with _lock:
        return list(_live)


def join_workers(timeout: float | None = None, *, cancel: bool = False) -> bool:
    """Wait for every running target to finish (``cancel=True`` stops their generations first).

    Returns True when none is left running. A worker counts as finished once its target has
    returned and it is back to waiting for work, outside torch.
    """
    with _lock:
        workers = list(_live.values())
    if cancel:
        for event, _ in workers:
            event.set()
    deadline = None if timeout is None else time.monotonic() + timeout
    for _, done in workers:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done.wait(left)
    return all(done.is_set() for _, done in workers)


def _at_exit() -> None:
    if not join_workers(EXIT_JOIN_SECONDS, cancel=True):
        logger.warning(
            "a generation thread was still running %.0f s after the exit began; the process "
            "may abort while it is inside torch", EXIT_JOIN_SECONDS,
        )


atexit.register(_at_exit)
