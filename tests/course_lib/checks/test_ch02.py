"""Chapter 02's exercise checks: references pass, every known mistake fails with its hint."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from course_lib.attention import numpy_attention, numpy_masked_softmax
from course_lib.checks import CheckFailed, ch02, check, core, get_exercise
from course_lib.checks.core import Hint

IDS = ["02.1", "02.2", "02.3", "02.4", "02.5", "02.6", "02.7"]


@pytest.fixture(autouse=True)
def _fresh_hint_tiers():
    core._FAILED_BEFORE.clear()
    yield
    core._FAILED_BEFORE.clear()


def test_seven_exercises_with_points_and_two_tier_hints():
    exercises = [get_exercise(i) for i in IDS]
    assert [e.target for e in exercises] == [
        "attention",
        "causal_mask",
        "padding_mask",
        "masked_softmax",
        "attention_weights",
        "padded_attention",
        "measure_self_weight",
    ]
    assert all(1 <= e.points <= 2 for e in exercises)
    for e in exercises:
        assert e.mistakes and isinstance(e.hint, Hint) and e.hint.detail, e.id
        assert all(isinstance(h, Hint) and h.detail for h in e.mistakes), e.id
    assert get_exercise("02.1").outputs == get_exercise("02.6").outputs == ("output", "weights")


def _softmax_rows(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_k_dot_T_on_a_batch_is_named():
    def attention(q, k, v):  # k.T reverses *all* axes: wrong for batched inputs
        w = _softmax_rows(q @ k.T / np.sqrt(q.shape[-1]))
        return w @ v, w

    with pytest.raises(CheckFailed) as failure:
        check("02.1", attention, quiet=True)
    msg = str(failure.value)
    assert "batch of 2 sequences: q (2, 4, 8)" in msg and "raised ValueError" in msg
    assert "k.T reverses ALL the axes" in msg


def test_attention_without_the_max_subtraction_fails_a_visible_case():
    def attention(q, k, v):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        w = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
        return w @ v, w

    with np.errstate(all="ignore"), pytest.raises(CheckFailed) as failure:
        check("02.1", attention, quiet=True)
    msg = str(failure.value)
    assert "1 of 4 cases failed" in msg and "large scores" in msg
    assert "exp overflowed to inf on large scores" in msg


def test_feedback_names_the_weights_not_item_1():
    def attention(q, k, v):
        out, w = ch02.attention_reference(q, k, v)
        return out, w * 1.5

    with pytest.raises(CheckFailed, match=r"weights: \d+ of \d+ values are off"):
        check("02.1", attention, quiet=True)


def test_attention_weights_without_the_max_subtraction_fail_a_visible_case():
    def attention_weights(x, W_Q, W_K):
        s = (x @ W_Q) @ (x @ W_K).T / np.sqrt(W_Q.shape[1])
        return np.exp(s) / np.exp(s).sum(-1, keepdims=True)

    with np.errstate(all="ignore"), pytest.raises(CheckFailed) as failure:
        check("02.5", attention_weights, quiet=True)
    assert "large embeddings" in str(failure.value) and "exp overflowed" in str(failure.value)


def test_float_mask_instead_of_bool_is_explained():
    def causal_mask(n_q, n_k):
        return np.tril(np.ones((n_q, n_k)))

    with pytest.raises(CheckFailed, match="boolean"):
        check("02.2", causal_mask, quiet=True)


@pytest.mark.parametrize(
    "padding_mask,named",
    [
        (lambda lengths, n_k: np.arange(n_k)[None, :] < lengths[:, None], "no query axis"),
        (
            lambda lengths, n_k: (np.arange(lengths.max())[None, :] < lengths[:, None])[:, None],
            r"max\(lengths\) key positions",
        ),
        (
            lambda lengths, n_k: (np.arange(n_k)[None, :] < lengths[:, None])[:, :, None],
            r"wrong place: \(B, Nk, 1\)",
        ),
    ],
)
def test_padding_mask_shape_mistakes_are_named(padding_mask, named):
    with pytest.raises(CheckFailed, match=named):
        check("02.3", padding_mask, quiet=True)


def test_the_lectures_torch_padding_mask_with_n_k_passes():
    """What the lecture shows, (B, 1, Nk) from course_lib, is the expected answer."""
    from course_lib.attention import padding_mask as torch_padding_mask

    def padding_mask(lengths, n_k):
        return torch_padding_mask(lengths, n_k).numpy()

    assert check("02.3", padding_mask, quiet=True).passed


def test_naive_masked_softmax_gets_the_nan_explanation():
    def masked_softmax(scores, mask):
        return _softmax_rows(np.where(mask, scores, -np.inf))

    with pytest.raises(CheckFailed) as failure:
        check("02.4", masked_softmax, quiet=True)
    msg = str(failure.value)
    assert "RuntimeWarning" in msg and "every key masked gives NaN" in msg


def test_a_masked_softmax_that_warns_fails_even_with_the_right_numbers():
    def masked_softmax(scores, mask):
        s = np.where(mask, scores, -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        tot = e.sum(-1, keepdims=True)
        return np.where(tot > 0, e / tot, 0.0)  # e / tot runs on the empty rows too

    with np.errstate(all="ignore"):
        assert np.allclose(
            masked_softmax(*core.cases_for("02.4")[1].args),
            ch02.masked_softmax_reference(*core.cases_for("02.4")[1].args),
        )  # the values are right
    with pytest.raises(CheckFailed) as failure:
        check("02.4", masked_softmax, quiet=True, hints="full")
    msg = str(failure.value)
    assert "invalid value encountered in divide" in msg and "e / tot" in msg
    assert "np.where(cond, a, b) computes a and b for EVERY entry" in msg
    assert "e / np.where(total > 0, total, 1.0)" in msg  # the fix, on request


def test_masked_softmax_over_axis_0_is_named():
    def masked_softmax(scores, mask):
        return numpy_masked_softmax(scores, np.broadcast_to(mask, scores.shape), axis=0)

    with pytest.raises(CheckFailed, match="columns sum to 1"):
        check("02.4", masked_softmax, quiet=True)


# ------------------------------------------------------------------- 02.6 padded attention


def test_a_B_by_Nk_mask_is_caught_when_B_equals_N():
    """The (B, Nk) mask raises when B != N and runs silently when B == N: both named."""

    def padded_attention(q, k, v, tokens, pad_id, is_causal=False):
        keep = tokens != pad_id  # (B, Nk): broadcasts as (Nq, Nk)
        if is_causal:
            keep = keep & np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
        return numpy_attention(q, k, v, keep)

    with pytest.raises(CheckFailed) as failure:
        check("02.6", padded_attention, quiet=True)
    msg = str(failure.value)
    assert "3 of 3 cases failed" in msg
    silent = msg.split("B = N = 3")[1]
    assert "values are off" in silent and "no query axis" in silent  # ran, and was wrong
    assert "raised ValueError" in msg.split("B = N = 3")[0]  # B != N: a broadcast error


@pytest.mark.parametrize(
    "slip,named",
    [
        (dict(mask_axis=2), "padded QUERIES"),
        (dict(inverted=True), "keeps the padding"),
        (dict(pad_zero=True), "not with pad_id"),
        (dict(causal=False), "still see later keys"),
        (dict(causal=True), "see only earlier keys"),
        (dict(combine="or"), "combined the masks with OR"),
        (dict(fill=-1e9), "filling with -1e9"),
        (dict(power=0), "factor sqrt"),
    ],
)
def test_each_padded_attention_mistake_is_named(slip, named):
    twin = functools.partial(ch02.padded_attention_reference, **slip)
    with np.errstate(all="ignore"), pytest.raises(CheckFailed, match=named):
        check("02.6", twin, quiet=True)


def test_padded_attention_with_a_nan_row_is_named():
    def padded_attention(q, k, v, tokens, pad_id, is_causal=False):
        keep = (tokens != pad_id)[:, None, :]
        if is_causal:
            keep = keep & np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
        s = np.where(keep, q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), -np.inf)
        w = _softmax_rows(s)
        return w @ v, w

    with pytest.raises(CheckFailed, match=r"(?s)left padding, causal.*gives NaN"):
        check("02.6", padded_attention, quiet=True)


def _learner_self_weight(num_tokens, d, trials, seed, *, scale=True):
    """02.7 written another way: one trial at a time, torch's generator and softmax."""
    import torch

    g = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(trials):
        x = torch.randn(num_tokens, d, generator=g, dtype=torch.float64)
        w = torch.softmax(x @ x.T / (d**0.5 if scale else 1.0), dim=-1)
        total += float(w.diagonal().mean())
    return total / trials


def test_02_7_another_correct_experiment_passes_and_shows_the_prediction(capsys):
    assert check("02.7", _learner_self_weight, prediction=0.99).passed
    assert check("02.7", _learner_self_weight, hidden=True).passed
    assert "you predicted 0.99, measured 0.98" in capsys.readouterr().out


def test_02_7_unscaled_scores_are_named():
    with pytest.raises(CheckFailed, match="not scaled by 1/sqrt"):
        check("02.7", lambda *a: _learner_self_weight(*a, scale=False), quiet=True)
