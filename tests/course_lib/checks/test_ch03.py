"""Chapter 03's exercise checks: references pass, every known mistake fails with its hint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib import scaling
from course_lib.checks import CheckFailed, check, get_exercise
from course_lib.checks.core import cases_for

IDS = ["03.1", "03.2", "03.3", "03.4", "03.5", "03.6", "03.7"]


def test_seven_exercises_with_points():
    exercises = [get_exercise(i) for i in IDS]
    assert [e.target for e in exercises] == [
        "dot_product_variance",
        "stable_softmax",
        "softmax_jacobian",
        "attention_entropy",
        "multihead_scores",
        "softmax_backward",
        "measure_max_weight",
    ]
    assert all(1 <= e.points <= 2 for e in exercises)
    assert all(e.mistakes for e in exercises)


def test_references_agree_with_course_lib():
    for case in cases_for("03.1") + list(cases_for("03.1", hidden=True)):
        ex = get_exercise("03.1")
        assert ex.reference(*case.args, **case.kwargs) == pytest.approx(
            scaling.dot_product_variance(*case.args, **case.kwargs), rel=1e-12
        )
    for case in cases_for("03.3", hidden=True):
        torch.testing.assert_close(
            get_exercise("03.3").reference(*case.args), scaling.softmax_jacobian(*case.args)
        )
    for case in cases_for("03.4", hidden=True):
        torch.testing.assert_close(
            get_exercise("03.4").reference(*case.args), scaling.softmax_entropy(*case.args)
        )


def test_multihead_reference_matches_course_lib_projection():
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    W_Q, W_K = torch.randn(12, 12, dtype=torch.float64), torch.randn(12, 12, dtype=torch.float64)
    torch.testing.assert_close(
        get_exercise("03.5").reference(x @ W_Q, x @ W_K, 3),
        scaling.project_and_score(x, W_Q, W_K, 3),
    )


def test_naive_softmax_gets_the_overflow_explanation():
    def stable_softmax(scores, temperature=1.0):
        e = torch.exp(scores / temperature)
        return e / e.sum(-1, keepdim=True)

    with pytest.raises(CheckFailed, match="NaN"):
        check("03.2", stable_softmax, quiet=True)


def test_softmax_without_keepdim_or_per_row_max_is_caught_before_grading():
    def global_max(scores, temperature=1.0):
        z = scores / temperature
        e = torch.exp(z - z.max())
        return e / e.sum(-1, keepdim=True)

    with pytest.raises(CheckFailed, match="each row's own maximum"):
        check("03.2", global_max, quiet=True, hints="full")


def test_softmax_in_float64_is_told_to_keep_the_dtype():
    def stable_softmax(scores, temperature=1.0):
        z = scores.double() / temperature
        e = torch.exp(z - z.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    with pytest.raises(CheckFailed) as err:
        check("03.2", stable_softmax, quiet=True, hints="full")
    msg = str(err.value)
    assert "expected dtype float32, got float64" in msg and "scores.dtype" in msg
    assert "overflowed" not in msg  # the right hint, not the first twin whose values agree


def test_entropy_nan_from_zero_weights_is_caught_before_grading():
    def attention_entropy(weights):
        return -(weights * torch.log(weights)).sum(-1)

    with pytest.raises(CheckFailed, match=r"NaN[\s\S]*0 · log 0"):
        check("03.4", attention_entropy, quiet=True, hints="full")


def test_entropy_with_a_small_epsilon_is_accepted(capsys):
    def attention_entropy(weights):
        return -(weights * torch.log(weights.clamp_min(1e-12))).sum(-1)

    assert check("03.4", attention_entropy).passed


def test_torch_var_user_is_told_about_ddof():
    def dot_product_variance(q, k, scale=1.0):
        return float(torch.var(scale * torch.from_numpy((q * k).sum(-1))))

    with pytest.raises(CheckFailed, match="N − 1"):
        check("03.1", dot_product_variance, quiet=True)


def test_cases_are_deterministic_per_seed():
    a, b = cases_for("03.1", seed=5), cases_for("03.1", seed=5)
    np.testing.assert_array_equal(a[0].args[0], b[0].args[0])


def test_hints_come_in_two_tiers_nudge_first():
    """The first failure shows the nudge only; a repeated failure adds the formula."""
    from course_lib.checks import core

    def no_scale(q, k, num_heads):
        b, n, d = q.shape
        qh = q.view(b, n, num_heads, d // num_heads).transpose(1, 2)
        kh = k.view(b, n, num_heads, d // num_heads).transpose(1, 2)
        return qh @ kh.transpose(-2, -1)

    core._FAILED_BEFORE.pop("03.5", None)
    with pytest.raises(CheckFailed) as first:
        check("03.5", no_scale, quiet=True)
    assert "did not scale the scores" in str(first.value)
    assert "Divide by √d_h" not in str(first.value) and "fuller hint" in str(first.value)
    with pytest.raises(CheckFailed) as second:
        check("03.5", no_scale, quiet=True)
    assert "Divide by √d_h" in str(second.value)


def test_interleaved_head_split_is_named():
    """Head h must own features h·d_h ... (h+1)·d_h − 1, not h, h+H, h+2H, ..."""

    def multihead_scores(q, k, num_heads):
        b, n, d = q.shape
        head_dim = d // num_heads
        qh = q.reshape(b, n, head_dim, num_heads).permute(0, 3, 1, 2)
        kh = k.reshape(b, n, head_dim, num_heads).permute(0, 3, 1, 2)
        return qh @ kh.transpose(-2, -1) / head_dim**0.5

    with pytest.raises(CheckFailed, match=r"split the features as \(d_h, H\)"):
        check("03.5", multihead_scores, quiet=True)


def test_softmax_backward_mistakes_are_named():
    def no_subtraction(p, grad_p):
        return p * grad_p

    def no_keepdim(p, grad_p):
        return p * (grad_p - (p * grad_p).sum(-1))

    with pytest.raises(CheckFailed, match="rows do not sum to 0"):
        check("03.6", no_subtraction, quiet=True)
    with pytest.raises(CheckFailed) as err:  # raises on the (2, 3, 6) case, wrong on (4, 4)
        check("03.6", no_keepdim, quiet=True)
    msg = str(err.value)
    assert "keepdim missing" in msg and "raised RuntimeError" in msg
    assert "broadcast along the wrong axis" in msg


def test_softmax_backward_reference_is_autograds_gradient():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 7, dtype=torch.float64, generator=g, requires_grad=True)
    grad_p = torch.randn(3, 7, dtype=torch.float64, generator=g)
    (auto,) = torch.autograd.grad(s.softmax(-1), s, grad_p)
    torch.testing.assert_close(
        get_exercise("03.6").reference(s.softmax(-1).detach(), grad_p), auto, rtol=0, atol=1e-14
    )
    torch.testing.assert_close(
        scaling.softmax_backward(s.softmax(-1).detach(), grad_p), auto, rtol=0, atol=1e-14
    )


def _learner_max_weight(d_k, num_keys, scaled, trials, seed, *, divisor=None):
    """03.7 written another way: torch's generator, one matrix product per trial batch."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(trials, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(trials, num_keys, d_k, generator=g, dtype=torch.float64)
    s = torch.einsum("td,tnd->tn", q, k)
    if scaled:
        s = s / (d_k**0.5 if divisor is None else divisor(d_k))
    return float(torch.softmax(s, -1).amax(-1).mean())


def test_03_7_another_correct_experiment_passes_and_shows_the_prediction(capsys):
    assert check("03.7", _learner_max_weight, prediction=lambda *a: 0.9 if not a[2] else 0.2).passed
    assert check("03.7", _learner_max_weight, hidden=True).passed
    assert "you predicted 0.9, measured 0.9" in capsys.readouterr().out


def test_03_7_dividing_by_d_k_is_named():
    with pytest.raises(CheckFailed, match="you divided the scores by d_k, not sqrt"):
        check("03.7", lambda *a: _learner_max_weight(*a, divisor=lambda d: d), quiet=True)
