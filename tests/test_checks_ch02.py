"""Chapter 02's exercise checks: references pass, every known mistake fails with its hint."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.checks import CheckFailed, ch02, check, get_exercise

IDS = ["02.1", "02.2", "02.3", "02.4", "02.5"]


def test_five_exercises_with_points():
    exercises = [get_exercise(i) for i in IDS]
    assert [e.target for e in exercises] == [
        "attention",
        "causal_mask",
        "padding_mask",
        "masked_softmax",
        "attention_weights",
    ]
    assert all(1 <= e.points <= 2 for e in exercises)
    assert all(e.mistakes for e in exercises)


def test_k_dot_T_fails_visibly_on_a_batch():
    def attention(q, k, v):  # k.T reverses *all* axes: wrong for batched inputs
        s = q @ k.T / np.sqrt(q.shape[-1])
        w = np.exp(s - s.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
        return w @ v, w

    with pytest.raises(CheckFailed, match=r"batch of 2 sequences.*raised"):
        check("02.1", attention, quiet=True)


def test_naive_masked_softmax_gets_the_nan_explanation():
    with pytest.raises(CheckFailed, match="NaN"):
        check("02.4", ch02._naive_masked, quiet=True)


def test_float_mask_instead_of_bool_is_explained():
    def causal_mask(n_q, n_k):
        return np.tril(np.ones((n_q, n_k)))

    with pytest.raises(CheckFailed, match="boolean"):
        check("02.2", causal_mask, quiet=True)
