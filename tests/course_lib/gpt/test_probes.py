"""course_lib.gpt.probes: repeated and random-period tokens, the previous-token, induction
and duplicate-token scores, the uniform baseline and the top heads that chapter 10 measures a
real model with."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.gpt.probes import (
    duplicate_token_scores,
    induction_scores,
    previous_token_scores,
    random_period_tokens,
    repeated_random_tokens,
    top_heads,
    uniform_induction_score,
)


def test_repeated_and_random_period_tokens():
    g = torch.Generator().manual_seed(0)
    rep = repeated_random_tokens(3, 5, 20, copies=3, generator=g)
    assert rep.shape == (3, 15) and torch.equal(rep[:, :5], rep[:, 10:])
    rows = random_period_tokens(50, 32, 20, min_period=4, max_period=9, generator=g)
    assert rows.shape == (50, 32)
    for row in rows:
        periods = [t for t in range(4, 10) if torch.equal(row[t:], row[:-t])]
        assert periods, row


def test_induction_and_previous_token_scores():
    n, period = 8, 4
    w = torch.zeros(1, 2, n, n)
    for i in range(n):  # head 0: induction head; head 1: previous-token head
        w[0, 0, i, i - period + 1 if i >= period else 0] = 1.0
        w[0, 1, i, max(i - 1, 0)] = 1.0
    torch.testing.assert_close(induction_scores(w, period), torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(previous_token_scores(w), torch.tensor([1 / 7, 1.0]))
    with pytest.raises(ValueError, match=r"period must be in \[1, N=8\)"):
        induction_scores(w, 8)
    with pytest.raises(ValueError, match=r"\[B, H, N, N\]"):
        induction_scores(w[0], 4)


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
