"""The chapter 11 exercises: references pass, every declared mistake is caught and named,
and the prediction is shown beside the measurement."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import CheckFailed, check
from course_lib.checks.core import get_exercise

IDS = ["11.1", "11.2"]


def test_mistakes_are_told_apart():
    """Each wrong twin is named by its own hint, not by another mistake's hint."""
    for ex_id in IDS:
        ex = get_exercise(ex_id)
        for hint, wrong in ex.mistakes.items():
            with pytest.raises(CheckFailed) as failure:
                check(ex_id, wrong, quiet=True)
            named = [h for h in ex.mistakes if h in str(failure.value)]
            assert named and named[0] == hint, (ex_id, hint[:40], named)


def _learner_share(weights):
    """11.1 written another way: a loop over queries."""
    w = torch.as_tensor(weights)
    n = w.shape[-1]
    return sum(float(w[:, :, q, 0].mean()) for q in range(1, n)) / (n - 1)


def _learner_kept(n, window, sinks):
    """11.2 written another way: count per query."""
    total = 0
    for q in range(n):
        keys = set(range(max(0, q - window + 1), q + 1)) | set(range(min(sinks, q + 1)))
        total += len(keys)
    return total


def test_11_1_another_correct_share_passes_and_shows_the_prediction(capsys):
    assert check("11.1", _learner_share, prediction=0.125).passed
    assert check("11.1", _learner_share, hidden=True).passed
    out = capsys.readouterr().out
    assert "you predicted 0.125" in out


def test_11_1_counting_query_0_is_named():
    with pytest.raises(CheckFailed, match="you counted query 0"):
        check("11.1", lambda w: float(torch.as_tensor(w)[:, :, :, 0].mean()), quiet=True)


def test_11_2_another_correct_count_passes_and_shows_the_prediction(capsys):
    assert check("11.2", _learner_kept, prediction=lambda n, w, s: n * w).passed
    assert check("11.2", _learner_kept, hidden=True).passed
    assert "you predicted 6.554e+04, measured 6.352e+04" in capsys.readouterr().out


def test_11_2_a_window_one_too_wide_is_named():
    def too_wide(n, window, sinks):
        i = torch.arange(n)
        keep = (i[None] <= i[:, None]) & ((i[:, None] - i[None] <= window) | (i[None] < sinks))
        return int(keep.sum())

    with pytest.raises(CheckFailed, match="your window holds W \\+ 1 keys"):
        check("11.2", too_wide, quiet=True)


def test_11_2_the_reference_matches_the_library_mask():
    from course_lib.checks.ch11 import kept_pairs_reference
    from course_lib.gpt.transparent import sliding_window_mask

    for n, w, s in ((1024, 64, 4), (10, 3, 2), (64, 100, 4), (5, 1, 1)):
        assert kept_pairs_reference(n, w, s) == int(sliding_window_mask(n, w, s).sum())


def _ablate_in_place(out, heads):
    """11.4 as a learner may write it: right values, written into the caller's tensor."""
    for h in heads:
        out[:, h] = out[:, h].mean(dim=(0, 1), keepdim=True)
    return out


def _ablate_copy(out, heads):
    o = out.clone()
    for h in heads:
        o[:, h] = out[:, h].mean(dim=(0, 1), keepdim=True)
    return o


def test_11_4_changing_the_input_in_place_is_named_in_two_tiers(monkeypatch):
    from course_lib.checks import core

    monkeypatch.setattr(core, "_FAILED_BEFORE", {})
    hint = get_exercise("11.4").keeps_inputs
    with pytest.raises(CheckFailed) as first:
        check("11.4", _ablate_in_place, quiet=True)
    assert "the call changed its argument `out`" in str(first.value)
    assert f"Likely cause: {hint}" in str(first.value)
    assert "out.clone()" not in str(first.value)
    with pytest.raises(CheckFailed) as second:
        check("11.4", _ablate_in_place, quiet=True)
    assert hint.detail in str(second.value) and "out.clone()" in str(second.value)
    with pytest.raises(CheckFailed, match="changed its input in place"):
        check("11.4", _ablate_in_place, hidden=True)


def test_11_4_a_copy_passes():
    assert check("11.4", _ablate_copy).passed
    assert check("11.4", _ablate_copy, hidden=True).passed
