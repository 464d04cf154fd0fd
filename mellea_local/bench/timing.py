"""The clock: interleaved runs, medians, and a note of the machine a figure came from.

These machines are noisy (shared cores, a neighbour's training job), so no benchmark times one
mode and then the next: every repeat runs each mode once, round-robin, so drift hits all modes
alike, and the figure kept is the median. Targets are ratios measured within one run.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

Tick = Callable[[], None]
"""Called once per finished unit of work (a progress bar's advance)."""


def _noop() -> None:
    return None


def sync_device() -> None:
    # A GPU runs kernels asynchronously: without waiting, a mode that never reads its result
    # back (the floor) would be timed at its launch cost, and the next mode would pay for it.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` (GPU work included), in milliseconds."""
    times = []
    for _ in range(repeats):
        sync_device()
        t0 = time.perf_counter()
        fn()
        sync_device()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def interleaved_medians(
    modes: Mapping[str, Callable[[], Any]], repeats: int, *, tick: Tick | None = None
) -> dict[str, float]:
    """Median milliseconds per mode, the modes run round-robin ``repeats`` times.

    ``tick`` is called after each round (one unit of progress).
    """
    samples = interleaved_samples(modes, repeats, tick=tick)
    return {m: statistics.median(v) for m, v in samples.items()}


def interleaved_samples(
    modes: Mapping[str, Callable[[], Any]], repeats: int, *, tick: Tick | None = None
) -> dict[str, list[float]]:
    """Every round's milliseconds per mode (the modes run round-robin ``repeats`` times), for
    a figure that shows the spread as well as the median."""
    samples: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(repeats):
        for name, fn in modes.items():
            samples[name].append(median_ms(fn, 1))
        (tick or _noop)()
    return samples


def machine_info() -> dict[str, Any]:
    """Where the numbers came from: platform, Python, torch, its thread count and where that
    count came from (flag, default, caller), the usable CPUs and the load average: a timing
    means little without the threads it ran on and the work beside it."""
    from mellea_local.threads import current_choice

    info: dict[str, Any] = {
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        **current_choice().as_dict(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info
