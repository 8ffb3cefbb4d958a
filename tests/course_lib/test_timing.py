"""course_lib.timing: best_time (a fake clock and fake CUDA events: no test asserts on real
time) and single_thread."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import timing as T


def _clock(*durations):
    """A fake clock whose successive timed runs last ``durations`` seconds."""
    ticks, now = [], 0.0
    for d in durations:
        ticks += [now, now + d]
        now += d + 10.0
    it = iter(ticks)
    return lambda: next(it)


def test_best_time_warms_up_then_returns_the_fastest_run():
    ticks = iter([0.0, 5.0, 10.0, 12.0, 20.0, 23.0])  # runs of 5, 2 and 3 "seconds"
    calls = []
    t = T.best_time(lambda: calls.append(1), repeats=3, clock=lambda: next(ticks))
    assert t == 2.0 and len(calls) == 4  # one warm-up, three timed runs
    with pytest.raises(ValueError, match="repeats >= 1"):
        T.best_time(lambda: None, repeats=0)


def test_the_warm_up_runs_are_not_timed():
    calls = []
    t = T.best_time(lambda: calls.append(1), repeats=2, warmup=3, clock=_clock(4.0, 1.5))
    assert t == 1.5 and len(calls) == 5
    calls.clear()
    assert T.best_time(lambda: calls.append(1), repeats=1, warmup=0, clock=_clock(7.0)) == 7.0
    assert len(calls) == 1


def test_the_median_is_the_upper_one_for_an_even_count():
    assert T.best_time(lambda: None, repeats=3, statistic="median", clock=_clock(5, 1, 3)) == 3
    assert T.best_time(lambda: None, repeats=4, statistic="median", clock=_clock(4, 1, 3, 2)) == 3
    with pytest.raises(ValueError, match="statistic must be 'min' or 'median', got 'mean'"):
        T.best_time(lambda: None, statistic="mean")


def test_cuda_timing_reads_events_in_milliseconds(monkeypatch):
    """device="cuda": each run between two recorded events, synchronised, ms -> s (fake
    events, so this runs anywhere); the wall clock is not read."""
    log, durations = [], iter([30.0, 10.0, 20.0])  # ms

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self):
            log.append("record")

        def elapsed_time(self, end):
            return next(durations)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))

    def no_clock():
        raise AssertionError("the wall clock was read")

    t = T.best_time(lambda: log.append("run"), repeats=3, warmup=0, device="cuda", clock=no_clock)
    assert t == pytest.approx(0.010)
    assert log == ["record", "run", "record", "sync"] * 3


@pytest.mark.gpu
def test_cuda_timing_on_a_gpu():
    x = torch.randn(256, 256, device="cuda")
    t = T.best_time(lambda: x @ x, repeats=3, device="cuda")
    assert math.isfinite(t) and t > 0


def test_single_thread_restores_the_thread_count():
    n = torch.get_num_threads()
    with T.single_thread() as st:
        assert torch.get_num_threads() == 1 and isinstance(st, T.single_thread)
    assert torch.get_num_threads() == n


def test_single_thread_restores_the_count_after_an_error_and_lets_it_through():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(KeyError), T.single_thread():
            assert torch.get_num_threads() == 1
            raise KeyError("boom")
        assert torch.get_num_threads() == 2
        with T.single_thread(), T.single_thread():  # nested: the outer setting comes back
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
