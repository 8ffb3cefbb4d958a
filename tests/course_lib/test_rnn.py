"""Unit tests of course_lib.rnn: the recurrence, depth counting, gradients, the recall task."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import rnn as R


def _torch_rnn(d_in, d_hidden, seed=0, bias=True):
    torch.manual_seed(seed)
    return torch.nn.RNN(d_in, d_hidden, batch_first=True, bias=bias).double()


@pytest.mark.parametrize("B,T,d_in,d_hidden", [(2, 7, 3, 5), (1, 1, 4, 4), (3, 30, 6, 2)])
@pytest.mark.parametrize("with_h0", [False, True])
def test_rnn_forward_equals_torch_rnn(B, T, d_in, d_hidden, with_h0):
    m = _torch_rnn(d_in, d_hidden)
    x = torch.randn(B, T, d_in, dtype=torch.float64)
    h0 = torch.randn(B, d_hidden, dtype=torch.float64) if with_h0 else None
    expected, h_last = m(x, None if h0 is None else h0.unsqueeze(0))
    got = R.rnn_forward(x, *R.rnn_weights_from_torch(m), h0)
    assert got.shape == (B, T, d_hidden)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[:, -1], h_last[0].detach(), rtol=1e-12, atol=1e-12)


def test_rnn_forward_without_bias_and_in_float32():
    m = _torch_rnn(3, 4, bias=False).float()
    x = torch.randn(2, 5, 3)
    got = R.rnn_forward(x, *R.rnn_weights_from_torch(m))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, m(x)[0].detach(), rtol=1e-5, atol=1e-6)


def test_rnn_forward_is_differentiable_like_torch():
    m = _torch_rnn(3, 4)
    x1 = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    m(x1)[0].pow(2).sum().backward()
    W_xh, W_hh, b_h = R.rnn_weights_from_torch(m)
    R.rnn_forward(x2, W_xh, W_hh, b_h).pow(2).sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad)


def test_rnn_forward_empty_sequence():
    W_xh, W_hh, b_h = torch.randn(4, 3), torch.randn(4, 4), torch.randn(4)
    assert R.rnn_forward(torch.randn(2, 0, 3), W_xh, W_hh, b_h).shape == (2, 0, 4)


@pytest.mark.parametrize(
    "x,W_xh,W_hh,b_h,h0,msg",
    [
        ((5, 3), (4, 3), (4, 4), (4,), None, r"expected x of shape \[B, N, d_in\], got \(5, 3\)"),
        (
            (2, 5, 3),
            (4, 2),
            (4, 4),
            (4,),
            None,
            r"W_xh of shape \[d_hidden, d_in\] = \[4, 3\].*\(4, 2\)",
        ),
        ((2, 5, 3), (4, 3), (4, 3), (4,), None, r"W_hh of shape \[d_hidden, d_hidden\].*\(4, 3\)"),
        ((2, 5, 3), (4, 3), (4, 4), (3,), None, r"b_h of shape \[d_hidden\] = \[4\], got \(3,\)"),
        ((2, 5, 3), (4, 3), (4, 4), (4,), (1, 2, 4), r"h0 of shape \[B, d_hidden\] = \[2, 4\]"),
    ],
)
def test_rnn_forward_shape_errors_name_the_shapes(x, W_xh, W_hh, b_h, h0, msg):
    args = [torch.zeros(s) for s in (x, W_xh, W_hh, b_h)]
    with pytest.raises(ValueError, match=msg):
        R.rnn_forward(*args, None if h0 is None else torch.zeros(h0))


def test_rnn_forward_rejects_non_tensors():
    with pytest.raises(TypeError, match="x to be a torch.Tensor"):
        R.rnn_forward([[[1.0]]], torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1))
    with pytest.raises(TypeError, match="W_hh to have x's dtype torch.float64, got torch.float32"):
        R.rnn_forward(
            torch.zeros(1, 2, 1, dtype=torch.float64),
            torch.zeros(1, 1, dtype=torch.float64),
            torch.zeros(1, 1),
            torch.zeros(1, dtype=torch.float64),
        )


@pytest.mark.parametrize("bias", [True, False])
def test_rnn_weights_from_torch_keep_the_rnns_device_and_dtype(bias):
    """The zero bias of a bias-free RNN lives where the weights live (meta here, CUDA
    elsewhere), not on the CPU."""
    rnn = torch.nn.RNN(3, 4, bias=bias, device="meta", dtype=torch.float64)
    W_xh, W_hh, b_h = R.rnn_weights_from_torch(rnn)
    for t in (W_xh, W_hh, b_h):
        assert t.device.type == "meta" and t.dtype == torch.float64
    assert b_h.shape == (4,)


def test_rnn_weights_from_torch_rejects_stacked_rnn():
    with pytest.raises(ValueError, match="one-layer"):
        R.rnn_weights_from_torch(torch.nn.RNN(2, 3, num_layers=2))


# --------------------------------------------------------------------------- depth


def test_critical_path_of_known_graphs():
    assert R.critical_path([]) == 0
    assert R.critical_path([[], [], []]) == 1  # three independent nodes: one round
    assert R.critical_path([[], [0], [1], [2]]) == 4  # a chain
    assert R.critical_path([[], [0], [0], [1, 2]]) == 3  # a diamond
    assert R.critical_path([[], [0], [], [2, 1]]) == 3  # the slowest parent decides


def test_critical_path_rejects_forward_references():
    with pytest.raises(ValueError, match="node 1 lists parents \\[2\\]"):
        R.critical_path([[], [2], []])


@pytest.mark.parametrize("T,L", [(1, 1), (7, 1), (7, 3), (40, 5)])
def test_dependency_graph_depths(T, L):
    rnn = R.dependency_graph("rnn", T, L)
    att = R.dependency_graph("attention", T, L)
    assert len(rnn) == len(att) == T * L  # the same work, in node count
    assert R.critical_path(rnn) == T + L - 1  # a wavefront through the (layer, time) grid
    assert R.critical_path(att) == L


def test_dependency_graph_rejects_unknown_kind():
    with pytest.raises(ValueError, match="'rnn' or 'attention'"):
        R.dependency_graph("lstm", 3)


def test_autograd_depth_grows_with_length_for_rnn_only():
    torch.manual_seed(0)
    d = 4
    W_xh, W_hh, b = (torch.randn(d, d, requires_grad=True), torch.randn(d, d), torch.zeros(d))
    Wq = torch.randn(d, d, requires_grad=True)

    def attention(x):
        q = x @ Wq  # (1, N, d)
        return torch.softmax(q @ x.transpose(1, 2), -1) @ x  # (1, N, d)

    depths = {
        n: (
            R.autograd_depth(R.rnn_forward(torch.randn(1, n, d), W_xh, W_hh, b)),
            R.autograd_depth(attention(torch.randn(1, n, d))),
        )
        for n in (5, 10, 200)
    }
    per_step = (depths[10][0] - depths[5][0]) / 5
    assert per_step >= 1 and depths[200][0] == depths[5][0] + per_step * 195  # linear in N
    assert depths[5][1] == depths[10][1] == depths[200][1]  # constant in N
    assert R.autograd_depth(torch.randn(3)) == 0  # no graph


# --------------------------------------------------------------------------- spectral radius, Jacobians


def test_scale_to_spectral_radius_uses_eigenvalues_not_singular_values():
    W = torch.tensor([[0.0, 4.0], [0.25, 0.0]], dtype=torch.float64)  # eigenvalues ±1, ‖W‖₂ = 4
    assert R.spectral_radius(W) == pytest.approx(1.0)
    S = R.scale_to_spectral_radius(W, 0.5)
    assert R.spectral_radius(S) == pytest.approx(0.5)
    assert torch.linalg.matrix_norm(S, ord=2) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="spectral radius 0"):
        R.scale_to_spectral_radius(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), 1.0)
    with pytest.raises(ValueError, match="square"):
        R.spectral_radius(torch.zeros(2, 3))


@pytest.mark.parametrize("kind", ["orthogonal", "gaussian"])
def test_recurrent_matrix_has_the_requested_spectral_radius(kind):
    g = torch.Generator().manual_seed(0)
    W = R.recurrent_matrix(16, 1.3, kind=kind, generator=g)
    assert W.shape == (16, 16)
    assert R.spectral_radius(W) == pytest.approx(1.3, rel=1e-9)
    if kind == "orthogonal":  # every singular value equals rho
        torch.testing.assert_close(torch.linalg.svdvals(W), torch.full((16,), 1.3, dtype=W.dtype))
    with pytest.raises(ValueError, match="kind"):
        R.recurrent_matrix(3, 1.0, kind="nope")


def test_jacobian_norms_match_autograd_functional_jacobian():
    g = torch.Generator().manual_seed(1)
    T, d_in, d_hidden = 6, 3, 4
    x = torch.randn(T, d_in, generator=g, dtype=torch.float64)
    W_xh = torch.randn(d_hidden, d_in, generator=g, dtype=torch.float64)
    W_hh = torch.randn(d_hidden, d_hidden, generator=g, dtype=torch.float64) / 2
    b = torch.randn(d_hidden, generator=g, dtype=torch.float64)
    h0 = torch.randn(d_hidden, generator=g, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(
        lambda xx: R.rnn_forward(xx[None], W_xh, W_hh, b, h0[None])[0, -1], x
    )  # (d_hidden, T, d_in)
    expected = J.pow(2).sum(dim=(0, 2)).sqrt()  # (T,)
    got = R.jacobian_norms_through_time(x, W_xh, W_hh, b, h0)
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match=r"\[N, d_in\]"):
        R.jacobian_norms_through_time(x[None], W_xh, W_hh, b)
    with pytest.raises(ValueError, match=r"h0 of shape \[d_hidden\] = \[4\].*\(1, 4\)"):
        R.jacobian_norms_through_time(x, W_xh, W_hh, b, h0[None])
    with pytest.raises(ValueError, match=r"W_xh of shape \[d_hidden, d_in\] = \[4, 3\]"):
        R.jacobian_norms_through_time(x, W_xh.T, W_hh, b)


def test_jacobian_norms_are_powers_of_rho_in_the_linear_regime():
    # At x = 0, h = 0: tanh' = 1 and dh_T/dx_t = W_hh^(T-t) W_xh exactly.
    g = torch.Generator().manual_seed(2)
    T, d = 12, 5
    W_xh = torch.randn(d, 3, generator=g, dtype=torch.float64)
    for rho in (0.7, 1.0, 1.4):
        W_hh = R.recurrent_matrix(d, rho, generator=g)
        n = R.jacobian_norms_through_time(
            torch.zeros(T, 3, dtype=torch.float64), W_xh, W_hh, torch.zeros(d, dtype=torch.float64)
        )
        dist = torch.arange(T - 1, -1, -1, dtype=torch.float64)  # T - t for t = 1..T
        torch.testing.assert_close(n, torch.linalg.matrix_norm(W_xh) * rho**dist)


# --------------------------------------------------------------------------- the recall task


def test_make_recall_batch_marks_one_position_and_targets_its_symbol():
    g = torch.Generator().manual_seed(0)
    b = R.make_recall_batch(50, 9, 5, generator=g)
    assert b.tokens.shape == b.marker.shape == (50, 9)
    assert b.tokens.min() >= 0 and b.tokens.max() < 5
    assert torch.equal(b.marker.sum(1), torch.ones(50))
    assert torch.equal(b.marker.argmax(1), b.position)
    assert b.position.max() <= 7  # at least one question after the marker
    assert torch.equal(b.tokens[torch.arange(50), b.position], b.target)
    assert torch.equal(b.distance[torch.arange(50), b.position], torch.zeros(50, dtype=torch.long))
    assert torch.equal(b.distance[:, -1], 8 - b.position)


def test_make_recall_batch_with_given_positions_and_errors():
    b = R.make_recall_batch(3, 6, 4, positions=[0, 2, 4])
    assert b.position.tolist() == [0, 2, 4]
    with pytest.raises(ValueError, match="positions must lie in 0..4"):
        R.make_recall_batch(2, 6, 4, positions=[0, 5])
    with pytest.raises(ValueError, match="expected 2 positions"):
        R.make_recall_batch(2, 6, 4, positions=[0, 1, 2])
    with pytest.raises(ValueError, match="seq_len >= 2"):
        R.make_recall_batch(2, 1, 4)


def test_recall_loss_ignores_steps_before_and_at_the_marker():
    b = R.make_recall_batch(4, 5, 3, positions=[3, 3, 3, 3])
    logits = torch.zeros(4, 5, 3)
    logits[:, 4] = 50 * torch.nn.functional.one_hot(b.target, 3)  # only the last step is asked
    assert float(R.recall_loss(logits, b)) < 1e-6
    assert float(R.recall_loss(torch.zeros(4, 5, 3), b)) == pytest.approx(math.log(3))


@pytest.mark.parametrize("cls", [R.RecallRNN, R.RecallAttention])
def test_recall_models_shapes(cls):
    b = R.make_recall_batch(2, 7, 5)
    assert cls(5)(b.tokens, b.marker).shape == (2, 7, 5)


def test_attention_model_returns_causal_weights():
    b = R.make_recall_batch(2, 6, 5)
    _, w = R.RecallAttention(5)(b.tokens, b.marker, return_weights=True)
    assert w.shape == (2, 6, 6)
    assert torch.all(w.triu(1) == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 6))


def test_short_training_separates_rnn_and_attention():
    """The notebook's claim at a smaller, faster size: attention recalls at any distance."""
    torch.manual_seed(0)
    att = R.RecallAttention(4, d_model=16)
    losses = R.train_recall(att, steps=120, batch_size=32, seq_len=16, vocab_size=4, lr=1e-2)
    assert losses[-1] < losses[0] / 5
    _, acc = R.recall_accuracy_by_distance(att, seq_len=16, vocab_size=4, batch_size=1024)
    assert acc.min() > 0.9
    torch.manual_seed(0)
    rnn = R.RecallRNN(4, d_hidden=32)
    R.train_recall(rnn, steps=120, batch_size=32, seq_len=16, vocab_size=4, lr=3e-3)
    _, acc = R.recall_accuracy_by_distance(rnn, seq_len=16, vocab_size=4, batch_size=1024)
    assert acc[:2].mean() > acc[10:].mean() + 0.1  # recall fades with distance


def test_recall_accuracy_counts_every_question_like_training():
    """marker="random" scores the questions training asks; "start" asks each distance B times."""

    class Oracle(torch.nn.Module):  # answers right exactly when the distance is odd
        def forward(self, tokens, marker):
            pos = marker.argmax(-1, keepdim=True)  # (B, 1)
            target = tokens.gather(1, pos)  # (B, 1)
            dist = torch.arange(tokens.shape[1])[None] - pos  # (B, N)
            pred = torch.where(dist % 2 == 1, target, (target + 1) % 5)  # (B, N)
            return torch.nn.functional.one_hot(pred, 5).float()  # (B, N, V)

    d, acc, counts = R.recall_accuracy_by_distance(
        Oracle(), seq_len=9, vocab_size=5, batch_size=800, return_counts=True
    )
    assert d.tolist() == list(range(1, 9))
    assert acc.tolist() == [1.0, 0.0] * 4  # each distance scored on its own questions
    assert (counts[:-1] >= counts[1:]).all() and counts[0] == 800  # every row asks k = 1
    _, _, start = R.recall_accuracy_by_distance(
        Oracle(), seq_len=9, vocab_size=5, batch_size=50, marker="start", return_counts=True
    )
    assert (start == 50).all()
    with pytest.raises(ValueError, match="marker"):
        R.recall_accuracy_by_distance(Oracle(), marker="end")


def test_node_depths_are_rounds_of_a_parallel_schedule():
    assert R.node_depths([[], [0], [0], [1, 2], []]) == [1, 2, 2, 3, 1]
    T, L = 5, 3
    depths = R.node_depths(R.dependency_graph("rnn", T, L))
    assert depths == [layer + t + 1 for layer in range(L) for t in range(T)]  # wavefront
    assert R.node_depths(R.dependency_graph("attention", T, L)) == [
        layer + 1 for layer in range(L) for _ in range(T)
    ]
