"""Chapter 01's exercise checks: references pass, every known mistake fails with its hint."""

from __future__ import annotations

import pytest

from course_lib import rnn as R
from course_lib.checks import CheckFailed, check, get_exercise

IDS = ["01.1", "01.2", "01.3", "01.4"]


def test_the_chapter_declares_four_exercises_worth_nine_points():
    exercises = [get_exercise(i) for i in IDS]
    assert [e.target for e in exercises] == [
        "rnn_forward",
        "scale_to_spectral_radius",
        "jacobian_norms_through_time",
        "critical_path",
    ]
    assert sum(e.points for e in exercises) == 9


def test_the_visible_check_explains_a_transposed_recurrent_matrix():
    def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
        return R.rnn_forward(x, W_xh, W_hh.T, b_h, h0)

    with pytest.raises(CheckFailed, match=r"W_hh instead of W_hhᵀ"):
        check("01.1", rnn_forward)


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


def test_the_cheap_01_3_twins_equal_their_definitions():
    """Some wrong twins use closed forms for speed; they must still be the mistake they name."""
    import torch

    from course_lib.checks import ch01

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
        ch01._local_jacobian(x, W_xh, W_hh, b), J[t, :, t].pow(2).sum(dim=(1, 2)).sqrt()
    )  # dh_t/dx_t
    torch.testing.assert_close(
        ch01._previous_state(x, W_xh, W_hh, b), J[-2].pow(2).sum(dim=(0, 2)).sqrt()
    )  # dh_{N-1}/dx_t
