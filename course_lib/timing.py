"""Timing and threads: the one way the course measures how long something takes.

:func:`best_time` is used by the lectures (chapter 01's sequential steps, chapter 02's cost
of attention) and by the FlashAttention benchmark; :func:`single_thread` pins torch to one
CPU thread for small tensors and steady timings.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["best_time", "single_thread"]


def best_time(
    fn: Callable[[], object],
    repeats: int = 3,
    *,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    statistic: str = "min",
    device: str = "cpu",
) -> float:
    """Seconds that ``fn()`` takes: the fastest of ``repeats`` runs after ``warmup`` runs.

    The minimum is the least noisy estimate on a shared machine: other programs can only add
    time, never remove it. ``statistic="median"`` gives the median instead (the upper one for
    an even count). ``device="cuda"`` times with CUDA events (kernels run asynchronously, so
    wall time at the launch would measure nothing); otherwise ``clock`` (wall time) is used.
    """
    if repeats < 1:
        raise ValueError(f"expected repeats >= 1, got {repeats}")
    if statistic not in ("min", "median"):
        raise ValueError(f"statistic must be 'min' or 'median', got {statistic!r}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)  # elapsed_time is in ms
        else:
            t0 = clock()
            fn()
            times.append(clock() - t0)
    if statistic == "median":
        return statistics.median_high(times)
    return min(times, default=math.inf)


class single_thread:
    """``with single_thread():`` run torch on one CPU thread, then restore the setting.

    Small matrices gain nothing from several threads and, on a busy machine, lose a lot to
    thread synchronisation; one thread also makes timings steadier.
    """

    def __enter__(self):
        self._n = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        torch.set_num_threads(self._n)
        return False
