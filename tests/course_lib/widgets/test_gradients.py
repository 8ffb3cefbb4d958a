"""course_lib.widgets.gradients: chapter 01's gradient explorer, driven from code; its norms
are course_lib.rnn's."""

from __future__ import annotations

import pytest
import torch

from course_lib import rnn as R

pytest.importorskip("ipywidgets")

from course_lib.widgets.gradients import GradientExplorer, verdict  # noqa: E402


def test_gradient_explorer_redraws_and_agrees_with_the_library():
    ex = GradientExplorer(seq_len=20, d_hidden=8, d_in=3)
    assert ex.draws == 1 and ex.plot.value[:4] == b"\x89PNG"
    assert "gradient-explorer" in ex.widget._dom_classes
    assert "gradient-explorer-rho" in ex.rho._dom_classes
    assert ex.ratio == pytest.approx(1.0, rel=1e-6)  # rho = 1, tiny inputs: no decay
    ex.rho.value = 0.5  # what a drag would do
    assert ex.draws == 2
    assert ex.ratio == pytest.approx(0.5**19, rel=1e-6)
    assert "vanishes" in ex.summary.value
    png = ex.plot.value
    ex.scale.value = 1.0
    assert ex.draws == 3 and ex.plot.value != png
    direct = R.jacobian_norms_through_time(ex.x, ex.W_xh, 0.5 * ex.Q, ex.b)
    torch.testing.assert_close(ex.norms, direct)
    torch.testing.assert_close(ex.compute(), direct)
    assert [verdict(r) for r in (2e3, 5e-4, 1.0)] == [
        "explodes",
        "vanishes",
        "stays within a factor 1000",
    ]
    with pytest.raises(ValueError, match="seq_len >= 2"):
        GradientExplorer(seq_len=1)


def test_verdict_thresholds_and_factor():
    assert verdict(1000.0) == verdict(1e-3) == "stays within a factor 1000"
    assert verdict(11.0, factor=10) == "explodes" and verdict(0.09, factor=10) == "vanishes"
    assert verdict(5.0, factor=10) == "stays within a factor 10"


def test_large_inputs_saturate_below_the_linear_bound():
    """At any input size the norms stay under rho^(N-t) ||W_xh||_F (tanh' <= 1); with large
    inputs the tanh saturates and they fall far below it, even at rho = 2."""
    ex = GradientExplorer(seq_len=12, d_hidden=6, d_in=2, rho=2.0, input_scale=10.0)
    dist = torch.arange(11, -1, -1, dtype=torch.float64)  # N - t for t = 1..N
    bound = torch.linalg.matrix_norm(ex.W_xh) * 2.0**dist
    assert (ex.norms <= bound * (1 + 1e-9)).all()
    assert ex.norms[0] < 1e-3 * bound[0]
    ex.scale.value = 1e-8  # tiny inputs: the linear regime, rho^(N-t) exactly (Q orthogonal)
    torch.testing.assert_close(ex.norms, bound, rtol=1e-6, atol=0)
    assert "explodes" in ex.summary.value and f"{ex.ratio:.3g}" in ex.summary.value


def test_the_draws_are_seeded():
    a, b = (GradientExplorer(seq_len=5, d_hidden=4, d_in=2, seed=3) for _ in range(2))
    assert torch.equal(a.W_xh, b.W_xh) and torch.equal(a.x, b.x) and torch.equal(a.norms, b.norms)
    c = GradientExplorer(seq_len=5, d_hidden=4, d_in=2, seed=4)
    assert not torch.equal(a.W_xh, c.W_xh)
    torch.testing.assert_close(a.Q @ a.Q.T, torch.eye(4, dtype=torch.float64))  # orthogonal
    with pytest.raises(ValueError, match="d_hidden >= 1"):
        GradientExplorer(d_hidden=0)
