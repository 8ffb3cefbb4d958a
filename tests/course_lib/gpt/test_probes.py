"""course_lib.gpt.probes: the duplicate-token score, the uniform baseline and the top heads
that chapter 10 measures a real model with (the induction and previous-token scores are
tested in test_gpt.py)."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.gpt.probes import (
    duplicate_token_scores,
    induction_scores,
    repeated_random_tokens,
    top_heads,
    uniform_induction_score,
)


def _planted(period: int, back: int) -> torch.Tensor:
    """Weights [1, 2, 2T, 2T]: head 0 puts all its weight on key n - T + back in the second
    copy (uniform elsewhere), head 1 attends uniformly."""
    n = 2 * period
    w = torch.ones(n, n).tril()
    w = (w / w.sum(-1, keepdim=True)).expand(1, 2, n, n).clone()  # (1, 2, N, N)
    q = torch.arange(period, n)
    w[0, 0, q] = 0.0
    w[0, 0, q, q - period + back] = 1.0
    return w


def test_duplicate_and_induction_scores_read_neighbouring_keys():
    dup, ind = _planted(6, back=0), _planted(6, back=1)
    assert duplicate_token_scores(dup, 6)[0] == 1.0 and induction_scores(dup, 6)[0] == 0.0
    assert induction_scores(ind, 6)[0] == 1.0 and duplicate_token_scores(ind, 6)[0] == 0.0


def test_uniform_attention_scores_the_baseline():
    period = 7
    uniform = _planted(period, back=1)[:, 1:]  # (1, 1, 2T, 2T) the uniform head
    baseline = uniform_induction_score(period)
    assert math.isclose(float(induction_scores(uniform, period)[0]), baseline, rel_tol=1e-6)
    assert math.isclose(float(duplicate_token_scores(uniform, period)[0]), baseline, rel_tol=1e-6)
    assert abs(uniform_induction_score(50) - math.log(2) / 50) < 2e-4  # about ln 2 / T
    with pytest.raises(ValueError):
        uniform_induction_score(0)


def test_top_heads_are_strongest_first_with_float_scores():
    scores = torch.tensor([[0.1, 0.9], [0.5, 0.25]])
    assert top_heads(scores, 3) == [(0, 1, 0.9), (1, 0, 0.5), (1, 1, 0.25)]
    assert all(isinstance(s, float) for _, _, s in top_heads(scores))
    with pytest.raises(ValueError, match=r"\[L, H\]"):
        top_heads(scores[0])


def test_duplicate_token_scores_refuse_what_is_not_weights():
    with pytest.raises(ValueError, match="period"):
        duplicate_token_scores(_planted(4, 0), 8)
    with pytest.raises(ValueError, match=r"\[B, H, N, N\]"):
        duplicate_token_scores(torch.ones(2, 3, 3), 1)
    assert repeated_random_tokens(1, 3, 10).shape == (1, 6)
