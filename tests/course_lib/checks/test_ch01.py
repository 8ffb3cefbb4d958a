"""Chapter 01's exercise checks: references pass, every known mistake fails with its hint."""

from __future__ import annotations

import functools

import pytest
import torch

from course_lib import rnn as R
from course_lib.checks import CheckFailed, check, core, get_exercise
from course_lib.checks.ch01 import clip_grad_norm_reference, jacobian_norms_reference
from course_lib.checks.core import Hint

IDS = ["01.1", "01.2", "01.3", "01.4", "01.5", "01.6"]


@pytest.fixture(autouse=True)
def _fresh_hint_tiers():
    core._FAILED_BEFORE.clear()
    yield
    core._FAILED_BEFORE.clear()


def test_the_chapter_declares_six_exercises_worth_twelve_points():
    exercises = [get_exercise(i) for i in IDS]
    assert [e.target for e in exercises] == [
        "rnn_forward",
        "scale_to_spectral_radius",
        "jacobian_norms_through_time",
        "critical_path",
        "clip_grad_norm",
        "measure_growth_rate",
    ]
    assert sum(e.points for e in exercises) == 12


def test_every_hint_has_a_nudge_and_a_detail():
    for i in IDS:
        ex = get_exercise(i)
        assert isinstance(ex.hint, Hint) and ex.hint.detail, i
        assert all(isinstance(h, Hint) and h.detail for h in ex.mistakes), i


def test_the_visible_check_explains_a_transposed_recurrent_matrix():
    def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
        return R.rnn_forward(x, W_xh, W_hh.T, b_h, h0)

    with pytest.raises(CheckFailed, match=r"W_hh the wrong way round") as first:
        check("01.1", rnn_forward)
    assert "h @ W_hh.T" not in str(first.value)  # the nudge first
    with pytest.raises(CheckFailed, match=r"h @ W_hh.T"):
        check("01.1", rnn_forward)  # the fix on the second failure


def test_float32_zeros_get_a_named_hint_not_a_bare_dtype_error():
    def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
        h = torch.zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # float32
        states = []
        for t in range(x.shape[1]):
            h = torch.tanh(x[:, t] @ W_xh.T + h @ W_hh.T + b_h)
            states.append(h)
        return torch.stack(states, dim=1)

    with pytest.raises(CheckFailed) as failure:
        check("01.1", rnn_forward, hints="full")
    msg = str(failure.value)
    assert "raised RuntimeError" in msg and "Likely cause: your starting state" in msg
    assert "x.new_zeros(B, d_hidden)" in msg
    assert "with an initial state h0" not in msg.split("failed.")[1]  # h0 given: that case passes


def test_summing_the_parents_depths_is_named_not_called_counting_every_node():
    def critical_path(parents):
        depth = []
        for ps in parents:
            depth.append(1 + sum(depth[p] for p in ps))
        return max(depth, default=0)

    with pytest.raises(CheckFailed) as failure:
        check("01.4", critical_path)
    msg = str(failure.value)
    assert "added up the parents' depths" in msg and "counted every node" not in msg


@pytest.mark.parametrize(
    "slip,named",
    [
        (dict(clip="per tensor"), "clipped each tensor by its own norm"),
        (dict(shrink_only=False), "already small enough"),
        (dict(clip="value"), "clamped each entry"),
        (dict(norm="sum of norms"), "adds up the tensors' norms"),
        (dict(report="after"), "norm after clipping"),
        (dict(squared=True), "squared norm"),
    ],
)
def test_each_clipping_mistake_is_named_on_the_visible_cases(slip, named):
    with pytest.raises(CheckFailed, match=named):
        check("01.5", functools.partial(clip_grad_norm_reference, **slip), quiet=True)


def test_clipping_by_zero_norm_is_named():
    unguarded = functools.partial(clip_grad_norm_reference, guard=False)
    with pytest.raises(CheckFailed, match=r"(?s)all-zero gradients.*ZeroDivisionError.*norm is 0"):
        check("01.5", unguarded, quiet=True)


def test_torchs_clip_grad_norm_passes_and_feedback_names_the_outputs():
    def clip_grad_norm(grads, max_norm):
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return [p.grad for p in params], float(total)

    assert check("01.5", clip_grad_norm, quiet=True).passed
    assert check("01.5", clip_grad_norm, hidden=True, quiet=True).passed

    def swapped(grads, max_norm):
        clipped, total = clip_grad_norm_reference(grads, max_norm)
        return clipped, total + 1.0

    with pytest.raises(CheckFailed, match=r"total_norm: expected"):
        check("01.5", swapped, quiet=True)


def test_the_visible_check_explains_singular_values():
    import torch

    def scale_to_spectral_radius(W, rho):
        return W * (rho / torch.linalg.matrix_norm(W, ord=2))

    with pytest.raises(CheckFailed, match="largest singular value"):
        check("01.2", scale_to_spectral_radius)


def test_a_crashing_function_is_reported_not_raised():
    def critical_path(parents):
        return parents[10]

    with pytest.raises(CheckFailed, match="IndexError"):
        check("01.4", critical_path)


def test_the_visible_check_names_off_by_one_mistakes():
    import torch

    def rnn_forward(x, W_xh, W_hh, b_h, h0=None):  # keeps h0 as the first "state"
        H = R.rnn_forward(x, W_xh, W_hh, b_h, h0)
        first = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0
        return torch.cat([first[:, None], H], dim=1)

    with pytest.raises(CheckFailed, match=r"N \+ 1 states, starting with h0"):
        check("01.1", rnn_forward)

    def jacobian_norms_through_time(x, W_xh, W_hh, b_h):  # differentiates h_{N-1}
        J = torch.autograd.functional.jacobian(
            lambda xx: R.rnn_forward(xx[None], W_xh, W_hh, b_h)[0, -2], x
        )
        return J.pow(2).sum(dim=(0, 2)).sqrt()

    with pytest.raises(CheckFailed, match=r"differentiated h_\{N-1\}"):
        check("01.3", jacobian_norms_through_time)


def test_the_visible_check_includes_the_empty_graph():
    def critical_path(parents):  # forgets that max() of nothing fails
        depth = []
        for ps in parents:
            depth.append(1 + max((depth[p] for p in ps), default=0))
        return max(depth)

    with pytest.raises(CheckFailed, match="empty graph.*ValueError"):
        check("01.4", critical_path)


def test_the_01_3_slips_equal_their_definitions():
    """The reference's slips that differentiate another state are the mistakes they name."""
    g = torch.Generator().manual_seed(0)
    seq_len, d_in, d_hidden = 7, 3, 4
    x, W_xh, b = (
        torch.randn(*s, generator=g, dtype=torch.float64)
        for s in ((seq_len, d_in), (d_hidden, d_in), (d_hidden,))
    )
    W_hh = torch.randn(d_hidden, d_hidden, generator=g, dtype=torch.float64) / 2
    J = torch.autograd.functional.jacobian(
        lambda xx: R.rnn_forward(xx[None], W_xh, W_hh, b)[0], x
    )  # (N, d_hidden, N, d_in)
    t = torch.arange(seq_len)
    torch.testing.assert_close(
        jacobian_norms_reference(x, W_xh, W_hh, b, of="h_t"),
        J[t, :, t].pow(2).sum(dim=(1, 2)).sqrt(),
    )  # dh_t/dx_t
    torch.testing.assert_close(
        jacobian_norms_reference(x, W_xh, W_hh, b, of="h_N-1"),
        J[-2].pow(2).sum(dim=(0, 2)).sqrt(),
    )  # dh_{N-1}/dx_t


def _learner_growth(d_hidden, rho, num_steps, seed, *, by="eigenvalues"):
    """01.6 written another way: torch's generator, the matrix power, the norm of W^T h0."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(d_hidden, d_hidden, generator=g, dtype=torch.float64)
    if by == "eigenvalues":
        W = W * rho / torch.linalg.eigvals(W).abs().max()
    else:
        W = W * rho / torch.linalg.matrix_norm(W, ord=2)
    h0 = torch.randn(d_hidden, generator=g, dtype=torch.float64)
    hT = torch.linalg.matrix_power(W, num_steps) @ h0
    return float((hT.norm() / h0.norm()) ** (1 / num_steps))


def test_01_6_another_correct_experiment_passes_and_shows_the_prediction(capsys):
    assert check("01.6", _learner_growth, prediction=lambda d, rho, t, s: rho).passed
    assert check("01.6", _learner_growth, hidden=True).passed
    assert "you predicted 0.9, measured 0.88" in capsys.readouterr().out


def test_01_6_scaling_by_the_singular_value_is_named():
    with pytest.raises(CheckFailed, match="you scaled W by its largest singular value"):
        check("01.6", lambda *a: _learner_growth(*a, by="singular value"), quiet=True)
