"""Unit tests of course_lib.scaling: the chapter 03 measurements."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib import scaling


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- variance


@pytest.mark.parametrize("distribution", ["normal", "uniform", "rademacher"])
def test_sample_qk_has_zero_mean_unit_variance(distribution):
    q, k = scaling.sample_qk(20_000, 8, distribution=distribution, generator=gen())
    assert q.shape == k.shape == (20_000, 8)
    assert abs(float(q.mean())) < 0.02 and abs(float(k.var()) - 1.0) < 0.03
    assert not torch.equal(q, k)  # independent draws, not the same tensor twice


def test_sample_qk_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown distribution"):
        scaling.sample_qk(4, 4, distribution="cauchy")
    with pytest.raises(ValueError, match="d_k >= 1"):
        scaling.sample_qk(4, 0)


def test_dot_product_variance_matches_definition_numpy_and_torch():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(50, 6)), rng.normal(size=(50, 6))
    expected = np.var(0.5 * (q * k).sum(-1))
    assert scaling.dot_product_variance(q, k, 0.5) == pytest.approx(expected, rel=1e-12)
    assert scaling.dot_product_variance(
        torch.from_numpy(q), torch.from_numpy(k), 0.5
    ) == pytest.approx(expected, rel=1e-12)


def test_dot_product_variance_shape_error_names_shapes():
    with pytest.raises(ValueError, match=r"got q \(3, 4\) and k \(3, 5\)"):
        scaling.dot_product_variance(np.zeros((3, 4)), np.zeros((3, 5)))


def test_variance_sweep_grows_like_d_k_and_scaled_is_one():
    sweep = scaling.variance_sweep([2, 16, 128], n_samples=8000, generator=gen(1))
    np.testing.assert_array_equal(sweep["d_k"], [2, 16, 128])
    # within 5 standard errors of the theory, for both
    assert np.all(np.abs(sweep["var"] - sweep["d_k"]) < 5 * sweep["stderr"])
    assert np.all(np.abs(sweep["var_scaled"] - 1.0) < 5 * sweep["stderr_scaled"])
    # and the mean is near 0 (standard error sqrt(d_k / n))
    assert np.all(np.abs(sweep["mean"]) < 5 * np.sqrt(sweep["d_k"] / 8000))


def test_rademacher_variance_is_d_k_too():
    sweep = scaling.variance_sweep(
        [64], n_samples=8000, distribution="rademacher", generator=gen(2)
    )
    assert abs(sweep["var_scaled"][0] - 1.0) < 0.1


def test_gaussian_stderr_formula_matches_monte_carlo():
    # the spread of the variance estimate over repeated experiments
    d, n, reps = 8, 400, 300
    g = gen(3)
    estimates = [
        scaling.dot_product_variance(*scaling.sample_qk(n, d, generator=g)) for _ in range(reps)
    ]
    predicted = scaling.gaussian_variance_stderr(d, n)
    assert np.std(estimates) == pytest.approx(predicted, rel=0.2)
    assert scaling.gaussian_variance_stderr(d, n, scale=0.5) == pytest.approx(predicted / 4)


# --------------------------------------------------------------------------- softmax


def test_entropy_uniform_onehot_and_zeros():
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    h = scaling.softmax_entropy(p)
    torch.testing.assert_close(h, torch.tensor([math.log(4), 0.0, math.log(2)]))
    assert torch.isfinite(h).all()


def test_jacobian_matches_autograd_and_is_symmetric():
    s = torch.randn(3, 5, dtype=torch.float64, generator=gen(4))
    p = s.softmax(-1)
    jac = scaling.softmax_jacobian(p)
    assert jac.shape == (3, 5, 5)
    for b in range(3):
        auto = torch.autograd.functional.jacobian(lambda x: x.softmax(-1), s[b])
        torch.testing.assert_close(jac[b], auto)
    torch.testing.assert_close(jac, jac.transpose(-1, -2))
    torch.testing.assert_close(jac.sum(-1), torch.zeros(3, 5, dtype=torch.float64))


def test_jacobian_abs_sum_closed_form_and_bound():
    s = torch.randn(200, 7, dtype=torch.float64, generator=gen(5)) * 4
    p = s.softmax(-1)
    total = scaling.softmax_jacobian(p).abs().sum((-1, -2))
    torch.testing.assert_close(scaling.jacobian_abs_sum(p), total)
    assert torch.all(total <= 4 * (1 - p.amax(-1)) + 1e-12)


def test_jacobian_entry_bounds_are_exact_and_the_sum_is_between_its_bounds():
    """max |J_ij| = p_max(1 - p_max) and max row sum = 2 p_max(1 - p_max), exactly; the
    total lies in [2(1 - m), 2(1 - m^2 - (1 - m)^2/(n - 1))], the upper bound attained."""
    g = torch.Generator().manual_seed(3)
    n = 10
    rows = torch.randn(3000, n, dtype=torch.float64, generator=g)
    rows = rows * torch.logspace(-1, 2, 3000, dtype=torch.float64)[:, None]
    p = rows.softmax(-1)  # (3000, n) from flat to one-hot
    J = scaling.softmax_jacobian(p).abs()  # (3000, n, n)
    entry, row_sum = scaling.jacobian_entry_bounds(p)
    torch.testing.assert_close(J.amax((-1, -2)), entry, rtol=0, atol=1e-15)
    torch.testing.assert_close(J.sum(-1).amax(-1), row_sum, rtol=0, atol=1e-15)
    m, total = p.amax(-1), scaling.jacobian_abs_sum(p)
    upper = 2 * (1 - m**2 - (1 - m) ** 2 / (n - 1))
    assert torch.all(total >= 2 * (1 - m) - 1e-12) and torch.all(total <= upper + 1e-12)
    even = torch.full((n,), 0.4 / (n - 1), dtype=torch.float64)
    even[3] = 0.6  # m = 0.6, the other weights equal: the upper bound is attained
    assert scaling.jacobian_abs_sum(even).item() == pytest.approx(
        2 * (1 - 0.36 - 0.16 / (n - 1)), abs=1e-14
    )
    assert torch.all(entry <= 1 - m) and torch.all(entry <= 0.25)  # the looser statements


def test_softmax_backward_is_the_jacobian_product_and_autograd():
    g = torch.Generator().manual_seed(4)
    s = torch.randn(4, 3, 7, dtype=torch.float64, generator=g, requires_grad=True)
    grad_p = torch.randn(4, 3, 7, dtype=torch.float64, generator=g)
    p = s.softmax(-1)
    (auto,) = torch.autograd.grad(p, s, grad_p)
    ours = scaling.softmax_backward(p.detach(), grad_p)
    torch.testing.assert_close(ours, auto, rtol=0, atol=1e-14)
    via_j = (scaling.softmax_jacobian(p.detach()) @ grad_p[..., None])[..., 0]
    torch.testing.assert_close(ours, via_j, rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="same shape"):
        scaling.softmax_backward(p.detach(), grad_p[..., :3])


def test_jacobian_rejects_scalar():
    with pytest.raises(ValueError, match="shape"):
        scaling.softmax_jacobian(torch.tensor(1.0))


def test_saturation_unscaled_collapses_scaled_does_not():
    d_ks = [4, 64, 1024]
    raw = scaling.saturation_sweep(d_ks, scaled=False, n_keys=32, n_queries=64, generator=gen(6))
    ok = scaling.saturation_sweep(d_ks, scaled=True, n_keys=32, n_queries=64, generator=gen(6))
    assert raw.max_weight[-1] > 0.85 and raw.entropy[-1] < 0.3
    assert np.all(np.diff(raw.entropy) < 0)
    assert np.ptp(ok.entropy) < 0.15 * ok.max_entropy
    assert np.all(ok.max_weight < 0.5)
    assert raw.jacobian_abs[-1] < 0.2 * ok.jacobian_abs[-1]


# --------------------------------------------------------------------------- multi-head


def test_project_and_score_equal_per_head_computation_and_bug_factor():
    b, n, d_model, h = 2, 5, 24, 4
    x = torch.randn(b, n, d_model, dtype=torch.float64, generator=gen(7))
    W_Q = torch.randn(d_model, d_model, dtype=torch.float64, generator=gen(8))
    W_K = torch.randn(d_model, d_model, dtype=torch.float64, generator=gen(9))
    good = scaling.project_and_score(x, W_Q, W_K, h)
    bad = scaling.project_and_score(x, W_Q, W_K, h, scale_by="d_model")
    assert good.shape == (b, h, n, n)
    head_dim = d_model // h
    for i in range(h):
        cols = slice(i * head_dim, (i + 1) * head_dim)
        ref = (x @ W_Q[:, cols]) @ (x @ W_K[:, cols]).transpose(-1, -2) / math.sqrt(head_dim)
        torch.testing.assert_close(good[:, i], ref)
    torch.testing.assert_close(bad * math.sqrt(h), good)


def test_project_and_score_errors():
    x = torch.zeros(1, 3, 6)
    w = torch.zeros(6, 6)
    with pytest.raises(ValueError, match="not divisible"):
        scaling.project_and_score(x, w, w, 4)
    with pytest.raises(ValueError, match=r"\[B, N, d_model\]"):
        scaling.project_and_score(torch.zeros(3, 6), w, w, 2)
    with pytest.raises(ValueError, match="scale_by"):
        scaling.project_and_score(x, w, w, 2, scale_by="d_k")


# --------------------------------------------------------------------------- training


def test_retrieval_task_targets_are_values_of_the_matching_key():
    task = scaling.RetrievalTask(seed=0)
    x_q, x_k, v, target = task.batch(16, gen(10))
    assert x_q.shape == (16, 64) and x_k.shape == (16, 8, 64) and v.shape == (16, 8, 16)
    match = (x_k == x_q[:, None]).all(-1)  # (B, Nk): exactly one key equals the query
    assert torch.all(match.sum(-1) == 1)
    torch.testing.assert_close(target, v[match])


def test_score_gradients_vanish_without_scaling():
    g_ok, m_ok = scaling.score_gradients_at_init(None, d_k=128, batch_size=128)
    g_raw, m_raw = scaling.score_gradients_at_init(1.0, d_k=128, batch_size=128)
    assert np.median(m_raw) > 0.95 > np.median(m_ok)
    assert np.median(g_raw) < 0.25 * np.median(g_ok)  # worst of 30 seeds: 0.13


def test_training_with_scale_beats_without():
    ok = scaling.train_retrieval(None, d_k=128, steps=80, seed=0)
    raw = scaling.train_retrieval(1.0, d_k=128, steps=80, seed=0)
    assert ok.losses.shape == (80,) and ok.scale == pytest.approx(1 / math.sqrt(128))
    assert ok.final_loss(20) < 0.01
    assert raw.final_loss(20) > 10 * ok.final_loss(20)
    assert scaling.evaluate_retrieval(ok) < 0.01


def test_adam_update_is_torch_adam_step_for_step():
    w0 = torch.randn(5, 3, dtype=torch.float64, generator=gen(11))
    mine, ref = w0.clone(), w0.clone().requires_grad_()
    opt = torch.optim.Adam([ref], lr=0.05)
    m, v = torch.zeros_like(mine), torch.zeros_like(mine)
    for step in range(1, 8):
        g = torch.randn(5, 3, dtype=torch.float64, generator=gen(20 + step)) * step
        scaling.adam_update(mine, g, m, v, step, lr=0.05)
        ref.grad = g.clone()
        opt.step()
        torch.testing.assert_close(mine, ref.detach(), rtol=1e-12, atol=1e-14)
    assert not torch.equal(mine, w0)


def test_train_retrieval_sgd_is_plain_gradient_descent():
    one = scaling.train_retrieval(steps=1, d_k=8, optimizer="sgd", lr=0.1, seed=4)
    task, W_Q, W_K = scaling._init_retrieval(8, 64, 4)
    loss, _ = scaling.retrieval_loss(
        task.batch(64, torch.Generator().manual_seed(6)), W_Q, W_K, 1 / math.sqrt(8)
    )
    g_q, g_k = torch.autograd.grad(loss, [W_Q, W_K])
    torch.testing.assert_close(one.W_Q, (W_Q - 0.1 * g_q).detach())
    torch.testing.assert_close(one.W_K, (W_K - 0.1 * g_k).detach())
    assert one.losses[0] == pytest.approx(loss.item())


def test_train_retrieval_is_deterministic_and_rejects_unknown_optimizer():
    a = scaling.train_retrieval(steps=5, d_k=16, seed=3)
    b = scaling.train_retrieval(steps=5, d_k=16, seed=3)
    np.testing.assert_array_equal(a.losses, b.losses)
    with pytest.raises(ValueError, match="optimizer"):
        scaling.train_retrieval(steps=1, optimizer="lbfgs")
