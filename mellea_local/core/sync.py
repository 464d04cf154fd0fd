"""The one bridge from synchronous code to a coroutine.

Why one: every synchronous twin of an async entry (``validate``, ``instruct``, the session's
methods, a tool's sync call, the compactor's summary) has to decide what happens when it is
called from inside a running event loop, and the decision was written six times. Two answers
are right, and a caller picks one by passing ``in_loop``:

- a public twin refuses (``SyncInEventLoopError`` naming the coroutine to await), since
  blocking the loop's thread on work that needs that loop would deadlock or stall it;
- an internal step that a sync API must complete (a tool, a summary) runs the coroutine to
  completion on a helper thread with its own loop, and re-raises its error here.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from mellea_local.errors import SyncInEventLoopError

T = TypeVar("T")
P = ParamSpec("P")

__all__ = ["run_sync", "sync_twin"]


def run_sync(coro: Coroutine[Any, Any, T], *, in_loop: str | None = None,
             thread_name: str = "mellea-local-sync") -> T:
    """Run ``coro`` to completion from synchronous code and return its result.

    With no running loop it runs here. Inside one: with ``in_loop`` (the message saying what
    to await instead) the coroutine is closed unrun and ``SyncInEventLoopError`` raised;
    without, it runs on a helper thread (named ``thread_name``) with a loop of its own.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    if in_loop is not None:
        coro.close()
        raise SyncInEventLoopError(in_loop)
    result: list[T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=work, name=thread_name, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def sync_twin(twin: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The synchronous form of the coroutine function ``twin`` (same signature, written once):
    it runs ``twin`` over ``run_sync`` and, inside a running event loop, refuses, naming
    ``twin`` to await. Lives here (not beside the intrinsics) so that ``validate`` and
    ``instruct`` get it without importing torch."""
    name = twin.__name__

    @functools.wraps(twin)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(twin(*args, **kwargs), in_loop=(
            f"This is the synchronous form; inside a running event loop, await {name} instead."))

    run.__name__ = run.__qualname__ = name.removeprefix("a")
    run.__doc__ = f"Synchronous ``{name}``."
    return run
