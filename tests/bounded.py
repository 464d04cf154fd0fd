"""Run a call with a time bound, so a hang fails one test instead of stalling the suite."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def run_bounded(fn: Callable[[], Any], seconds: float = 60) -> tuple[Any, BaseException | None]:
    """``(result, None)`` or ``(None, exception)``; an assertion error after ``seconds``.

    The call runs in a daemon thread: a call that hangs is left behind, not killed.
    """
    box: list[tuple[Any, BaseException | None]] = []

    def work() -> None:
        try:
            box.append((fn(), None))
        except BaseException as exc:  # handed back to the test
            box.append((None, exc))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"still running after {seconds} s (a hang)"
    return box[0]
