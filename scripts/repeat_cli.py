"""Run one ``mellea-local`` command line N times and count how each run ended.

Why: a crash at interpreter exit (``terminate called without an active exception``, exit 134)
showed up in 3 of 33 ``mellea-local react`` runs; only many consecutive runs show whether it is
gone. Each run is a fresh process, as a user would start it; the tally counts exit codes and
aborts (SIGABRT, or "terminate called" on stderr), and the stderr of every failed run is kept.

    python scripts/repeat_cli.py -n 100                       # react "What is 12 * 7?"
    python scripts/repeat_cli.py -n 20 -- react "What is 2 + 2?" --budget 4
    python scripts/repeat_cli.py -n 50 --cores /tmp/cores    # keep core dumps of aborted runs

Exit status: 0 when every run exited 0, else 1. ``--json`` writes the tally for a report.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_ARGS = ["react", "What is 12 * 7?"]
ABORT_TEXT = "terminate called"


def _command() -> list[str]:
    """The ``mellea-local`` beside this interpreter (the venv's), else ``python -m``."""
    exe = Path(sys.executable).with_name("mellea-local")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "mellea_local"]


def _allow_cores() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def run_once(args: list[str], *, timeout: float, cwd: Path | None) -> tuple[int, str]:
    """``(exit code, stderr)`` of one run; a run past ``timeout`` counts as exit code -9."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    try:
        done = subprocess.run(
            [*_command(), *args], capture_output=True, text=True, timeout=timeout, env=env,
            cwd=cwd, preexec_fn=_allow_cores if cwd else None,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return -signal.SIGKILL, err + f"\n(timed out after {timeout:.0f} s)"
    return done.returncode, done.stderr


def is_abort(code: int, stderr: str) -> bool:
    return code in (134, -signal.SIGABRT) or ABORT_TEXT in stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100, help="number of runs (default 100)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run")
    parser.add_argument("--cores", type=Path, help="run in this folder with core dumps on")
    parser.add_argument("--json", type=Path, help="write the tally here")
    parser.add_argument("args", nargs="*", help="the mellea-local arguments (after --)")
    opts = parser.parse_args(argv)
    args = opts.args or DEFAULT_ARGS
    if opts.cores:
        opts.cores.mkdir(parents=True, exist_ok=True)
    codes: collections.Counter[int] = collections.Counter()
    aborts: list[int] = []
    failures: dict[int, str] = {}
    start = time.monotonic()
    for i in range(1, opts.n + 1):
        code, stderr = run_once(args, timeout=opts.timeout, cwd=opts.cores)
        codes[code] += 1
        if is_abort(code, stderr):
            aborts.append(i)
        if code != 0:
            failures[i] = stderr[-2000:]
        print(f"run {i}/{opts.n}: exit {code}{'  ABORT' if i in aborts else ''}", flush=True)
    seconds = time.monotonic() - start
    tally = {"command": ["mellea-local", *args], "runs": opts.n, "exit_codes": dict(codes),
             "aborts": len(aborts), "abort_runs": aborts, "seconds": round(seconds, 1),
             "failures": failures}
    print(f"{opts.n} runs of mellea-local {' '.join(args)!s} in {seconds:.0f} s: exit codes "
          f"{dict(sorted(codes.items()))}, aborts {len(aborts)}")
    for i, text in failures.items():
        print(f"--- run {i} stderr (tail) ---\n{text.strip()[-600:]}")
    if opts.json:
        opts.json.write_text(json.dumps(tally, indent=2) + "\n")
    return 0 if set(codes) == {0} else 1


if __name__ == "__main__":
    sys.exit(main())
