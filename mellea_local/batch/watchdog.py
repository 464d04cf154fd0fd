"""A private Ray cluster dies with the driver that started it, even a SIGKILLed one.

``ray.init()`` without an address starts a GCS server, a raylet and their agents as children of
the driver. ``ray.shutdown()`` stops them on a clean exit, but a driver killed with SIGKILL (an
OOM kill, ``kill -9``, a CI timeout) runs no cleanup: the raylet and GCS go, while Ray's
DashboardAgent and RuntimeEnvAgent kept running, holding memory and ports, until the machine
rebooted. Nothing in the driver can run after SIGKILL, so a separate small process watches it:
``python watchdog.py DRIVER_PID START ROOT_PID START...`` follows the processes Ray
started (the roots and, polled every ``POLL_S``, their descendants, remembered even after they
are re-parented) and, once the driver is gone, sends them SIGTERM, then SIGKILL to any left
after ``GRACE_S``. Linux only (``/proc``); elsewhere nothing is watched.

Processes are identified by (pid, start time), so a pid reused after a process ended is never
signalled.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POLL_S = 0.5
GRACE_S = 3.0
READY_TIMEOUT_S = 10.0  # how long the driver waits for the watchdog's first scan

Proc = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of ``pid``, or None when it no longer exists."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the name may hold spaces and parentheses
    return int(fields[1]), int(fields[19])


def _alive(proc: Proc) -> bool:
    stat = _stat(proc[0])
    return stat is not None and stat[1] == proc[1]


def children_now(parent: int) -> set[int]:
    """The current children of ``parent`` (a scan of /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] == parent:
                found.add(int(entry.name))
    return found


def _descendants(tracked: set[Proc]) -> set[Proc]:
    """``tracked`` (those still alive) plus every live descendant of them."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                parents.setdefault(stat[0], []).append(int(entry.name))
    out = {p for p in tracked if _alive(p)}
    todo = [p for p, _ in out]
    while todo:
        for child in parents.get(todo.pop(), ()):
            stat = _stat(child)
            if stat is not None and (child, stat[1]) not in out:
                out.add((child, stat[1]))
                todo.append(child)
    return out


def _signal(procs: set[Proc], sig: int) -> None:
    for proc in procs:
        if _alive(proc):
            with contextlib.suppress(OSError):  # ended meanwhile
                os.kill(proc[0], sig)


def watch(driver: Proc, roots: set[Proc], ready: Any = None) -> None:
    """Follow ``roots`` and their descendants until ``driver`` ends; then end them.
    ``ready`` (a binary stream) gets one byte once the first scan is done."""
    tracked = _descendants(set(roots)) | set(roots)
    if ready is not None:
        ready.write(b"1")
        ready.flush()
    while _alive(driver):
        tracked |= _descendants(tracked)
        time.sleep(POLL_S)
    tracked |= _descendants(tracked)
    _signal(tracked, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in tracked):
        time.sleep(0.1)
    _signal(tracked, signal.SIGKILL)


def start(roots: set[int]) -> subprocess.Popen[bytes] | None:
    """Start a watchdog for this process and ``roots`` (the children Ray started); None
    where /proc is missing. The watchdog is in its own session, so a signal to the driver's
    process group does not end it before it has done its work."""
    me = _stat(os.getpid())
    if me is None or not roots:
        return None
    # Ray's agents are the raylet's children: name them now, while the chain is intact.
    procs = _descendants({(pid, stat[1]) for pid in roots if (stat := _stat(pid)) is not None})
    args = [str(os.getpid()), str(me[1])]
    for pid, started in sorted(procs):
        args += [str(pid), str(started)]
    # Run as a file, not ``-m``: it imports only the standard library, so it is watching
    # within a fraction of a second, not after the package's imports.
    process = subprocess.Popen(
        [sys.executable, "-S", os.path.abspath(__file__), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )
    assert process.stdout is not None
    ready = select.select([process.stdout], [], [], READY_TIMEOUT_S)[0]
    if ready:
        process.stdout.read(1)
    return process


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """End a watchdog whose driver shut Ray down itself."""
    if process is None:
        return
    process.kill()
    process.wait()


def main(argv: list[str]) -> None:
    numbers = [int(a) for a in argv]
    driver = (numbers[0], numbers[1])
    roots = {(numbers[i], numbers[i + 1]) for i in range(2, len(numbers) - 1, 2)}
    watch(driver, roots, sys.stdout.buffer)


if __name__ == "__main__":
    main(sys.argv[1:])
