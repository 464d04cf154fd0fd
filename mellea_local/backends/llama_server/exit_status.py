"""A llama-server that died while starting, said in words: the signal's name and what to do.

``Popen.returncode`` is ``-N`` for a process killed by signal N; "status -4" and a page of
log is what a user saw when a llama.cpp build used CPU instructions the host does not grant
(SIGILL). The signal decides the fix, so it leads the message and the log tail is kept short.
"""

from __future__ import annotations

import signal

_ADVICE = {
    signal.SIGILL: (
        "illegal instruction: this llama-server was built for CPU features this host does "
        "not grant (e.g. AVX-512 or AMX); rebuild it with scripts/install_llamacpp.sh, which "
        "builds a portable x86-64-v3 binary, or point MELLEA_LLAMA_SERVER at a build for this "
        "CPU"),
    signal.SIGKILL: (
        "killed: most often the kernel's out-of-memory killer (see `dmesg`); free memory, "
        "use fewer servers or slots, or a smaller context"),
    signal.SIGSEGV: (
        "segmentation fault: a llama.cpp bug or a damaged GGUF; re-export the model "
        "(`mellea-local export-gguf`) and, if it persists, rebuild llama-server with "
        "scripts/install_llamacpp.sh"),
    signal.SIGBUS: (
        "bus error: the GGUF file was truncated or changed while it was mapped; re-export "
        "or re-download it"),
    signal.SIGABRT: (
        "aborted: llama.cpp stopped at a failed check; the log lines below say which, "
        "usually a GGUF or adapter this build cannot read"),
}


def describe_exit(returncode: int | None) -> tuple[str, int]:
    """``(what happened, log lines worth showing)`` for a server's exit code."""
    if returncode is None or returncode >= 0:
        return f"exited with status {returncode}", 15
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"was killed by signal {-returncode}", 15
    advice = _ADVICE.get(sig)
    if advice is None:
        return f"was killed by {sig.name}", 15
    return f"was killed by {sig.name} ({advice})", 5
