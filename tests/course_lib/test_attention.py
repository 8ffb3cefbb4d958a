"""course_lib.attention against torch.nn.functional.scaled_dot_product_attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import (
    causal_mask,
    masked_softmax,
    numpy_attention,
    numpy_causal_mask,
    numpy_masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)
from course_lib.attention import plot_attention as A_plot

DT = torch.float64


def _qkv(batch, n_q, n_k, d_k, d_v, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n_q, d_k, generator=g, dtype=DT)
    k = torch.randn(*batch, n_k, d_k, generator=g, dtype=DT)
    v = torch.randn(*batch, n_k, d_v, generator=g, dtype=DT)
    return q, k, v


def _torch_weights(q, k, mask=None, is_causal=False, scale=None):
    """Reference weights computed by hand (torch's SDPA does not return them)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    keep = torch.ones(s.shape, dtype=torch.bool)
    if mask is not None:
        keep = keep & mask
    if is_causal:
        keep = keep & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)


# --------------------------------------------------------------------------- against SDPA


@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
@pytest.mark.parametrize("n_q,n_k", [(5, 5), (3, 7), (6, 2)])
def test_matches_torch_sdpa(batch, n_q, n_k):
    q, k, v = _qkv(batch, n_q, n_k, 8, 6)
    out, w = scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == (*batch, n_q, 6) and w.shape == (*batch, n_q, n_k)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w, _torch_weights(q, k))
    torch.testing.assert_close(w.sum(-1), torch.ones(*batch, n_q, dtype=DT))
    torch.testing.assert_close(out, w @ v)


@pytest.mark.parametrize("n_q,n_k", [(5, 5), (3, 7), (7, 3)])
def test_is_causal_top_left_like_torch(n_q, n_k):
    q, k, v = _qkv((2, 3), n_q, n_k, 4, 5, seed=1)
    out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref)
    # future keys get exactly zero weight; query 0 sees key 0 only
    future = ~causal_mask(n_q, n_k)
    assert (w[..., future] == 0).all()
    torch.testing.assert_close(w[..., 0, 0], torch.ones(2, 3, dtype=DT))


def test_causal_mask_values():
    m = causal_mask(3, 5)
    assert m.dtype == torch.bool and m.shape == (3, 5)
    assert m.tolist() == [
        [True, False, False, False, False],
        [True, True, False, False, False],
        [True, True, True, False, False],
    ]
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    assert np.array_equal(numpy_causal_mask(3, 5), m.numpy())
    with pytest.raises(ValueError):
        causal_mask(-1)


@pytest.mark.parametrize("mask_shape", [(5, 7), (1, 7), (2, 1, 5, 7), (2, 3, 1, 7)])
def test_boolean_mask_broadcasts_like_torch(mask_shape):
    q, k, v = _qkv((2, 3), 5, 7, 4, 4, seed=2)
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(*mask_shape, generator=g) > 0.3
    mask[..., 0] = True  # keep every row non-empty so torch gives no NaN
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref)
    assert (w.masked_select(~mask.expand_as(w)) == 0).all()


def test_float_mask_is_added_like_torch():
    q, k, v = _qkv((2,), 4, 6, 8, 3, seed=4)
    bias = torch.randn(4, 6, dtype=DT)
    out, _ = scaled_dot_product_attention(q, k, v, bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


def test_integer_mask_is_rejected():
    q, k, v = _qkv((), 3, 3, 4, 4)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 3, dtype=torch.int64))


def test_mask_and_is_causal_combine():
    q, k, v = _qkv((2,), 5, 5, 4, 4, seed=5)
    pad = padding_mask(torch.tensor([5, 3]))  # (2, 1, 5)
    out, w = scaled_dot_product_attention(q, k, v, pad, is_causal=True)
    both = pad & causal_mask(5)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=both)
    torch.testing.assert_close(out, ref)
    assert (w[1, :, 3:] == 0).all()


@pytest.mark.parametrize("scale", [0.1, 1.0, 3.0])
def test_custom_scale(scale):
    q, k, v = _qkv((2, 2), 4, 6, 16, 5, seed=6)
    out, w = scaled_dot_product_attention(q, k, v, scale=scale)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale))
    torch.testing.assert_close(w, _torch_weights(q, k, scale=scale))
    # and the default differs from scale=1 whenever d_k > 1
    out_default, _ = scaled_dot_product_attention(q, k, v)
    assert not torch.allclose(out_default, scaled_dot_product_attention(q, k, v, scale=1.0)[0])


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = _qkv((2, 3), 4, 5, 8, 6, seed=7)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w[..., 1, :] == 0).all() and (out[..., 1, :] == 0).all()
    # every other row equals torch's SDPA
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    rows = [0, 2, 3]
    torch.testing.assert_close(out[..., rows, :], ref[..., rows, :])
    # the naive softmax really does produce NaN on that row: the trap exists
    naive = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf")), -1)
    assert torch.isnan(naive[..., 1, :]).all()


def test_fully_masked_rows_have_finite_gradients():
    q, k, v = (t.requires_grad_() for t in _qkv((2,), 3, 4, 4, 4, seed=8))
    mask = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, 1] == 0).all()


def test_gradients_match_torch():
    q, k, v = _qkv((2, 2), 5, 6, 4, 3, seed=9)
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_args = [t.clone().requires_grad_() for t in (q, k, v)]
    scaled_dot_product_attention(*args, is_causal=True)[0].pow(2).sum().backward()
    F.scaled_dot_product_attention(*ref_args, is_causal=True).pow(2).sum().backward()
    for a, b in zip(args, ref_args):
        torch.testing.assert_close(a.grad, b.grad)


def test_float16_runs_and_is_close():
    q, k, v = _qkv((2,), 6, 6, 8, 8, seed=10)
    out16, w16 = scaled_dot_product_attention(q.half(), k.half(), v.half(), is_causal=True)
    assert out16.dtype == torch.float16 and torch.isfinite(out16).all()
    out64, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out16.double(), out64, atol=1e-2, rtol=1e-2)


# --------------------------------------------------------------------------- dropout


def test_dropout_only_when_positive():
    q, k, v = _qkv((2,), 6, 6, 4, 4, seed=11)
    a, _ = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    b, _ = scaled_dot_product_attention(q, k, v)
    assert torch.equal(a, b)  # p = 0 is deterministic
    torch.manual_seed(0)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    _, w_clean = scaled_dot_product_attention(q, k, v)
    dropped = w == 0
    assert dropped.any() and (~dropped).any()
    torch.testing.assert_close(w[~dropped], w_clean[~dropped] / 0.5)  # survivors rescaled
    torch.testing.assert_close(out, w @ v)  # returned weights are the ones used


def test_dropout_keeps_expectation():
    q, k, v = _qkv((), 4, 5, 4, 4, seed=12)
    torch.manual_seed(1)
    mean = torch.stack(
        [scaled_dot_product_attention(q, k, v, dropout_p=0.3)[1] for _ in range(4000)]
    ).mean(0)
    _, w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(mean, w, atol=0.03, rtol=0)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_bad_dropout_is_rejected(p):
    q, k, v = _qkv((), 3, 3, 2, 2)
    with pytest.raises(ValueError, match="dropout_p"):
        scaled_dot_product_attention(q, k, v, dropout_p=p)


# --------------------------------------------------------------------------- errors


def test_wrong_shapes_name_the_shapes():
    q, k, v = _qkv((2,), 3, 4, 8, 5)
    with pytest.raises(ValueError, match=r"q \(2, 3, 8\) and k \(2, 4, 7\)"):
        scaled_dot_product_attention(q, k[..., :7], v)
    with pytest.raises(ValueError, match=r"k \(2, 4, 8\) and v \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v[:, :3])
    with pytest.raises(ValueError, match=r"expected q of shape \[\.\.\., Nq, d_k\].*got \(8,\)"):
        scaled_dot_product_attention(q[0, 0], k, v)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 3\).*\(2, 3, 4\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"batch dimensions.*q \(2, 3, 8\), k \(3, 4, 8\)"):
        scaled_dot_product_attention(q, torch.randn(3, 4, 8, dtype=DT), v)
    with pytest.raises(TypeError, match="numpy_attention"):
        scaled_dot_product_attention(q.numpy(), k, v)


def test_numpy_wrong_shapes_name_the_shapes():
    q, k, v = (t.numpy() for t in _qkv((), 3, 4, 8, 5))
    with pytest.raises(ValueError, match=r"q \(3, 8\) and k \(4, 6\)"):
        numpy_attention(q, k[:, :6], v)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\)"):
        numpy_attention(q, k, v, np.ones((4, 4), dtype=bool))


# --------------------------------------------------------------------------- numpy twin


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("n_q,n_k", [(4, 4), (3, 6)])
def test_numpy_equals_torch(is_causal, n_q, n_k):
    q, k, v = _qkv((2, 3), n_q, n_k, 8, 5, seed=13)
    mask = torch.rand(2, 1, n_q, n_k, generator=torch.Generator().manual_seed(0)) > 0.4
    mask[..., 1, :] = False  # a fully masked row as well
    out_t, w_t = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=0.7)
    out_n, w_n = numpy_attention(
        q.numpy(), k.numpy(), v.numpy(), mask.numpy(), is_causal=is_causal, scale=0.7
    )
    assert isinstance(out_n, np.ndarray) and isinstance(w_n, np.ndarray)
    np.testing.assert_allclose(out_n, out_t.numpy(), atol=1e-12)
    np.testing.assert_allclose(w_n, w_t.numpy(), atol=1e-12)
    assert np.isfinite(out_n).all() and (w_n[..., 1, :] == 0).all()


def test_numpy_float32_stays_float32_and_dropout_uses_rng():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(4, 8)).astype(np.float32) for _ in range(3))
    out, w = numpy_attention(q, k, v)
    assert out.dtype == np.float32 and w.dtype == np.float32
    a = numpy_attention(q, k, v, dropout_p=0.5, rng=np.random.default_rng(1))[1]
    b = numpy_attention(q, k, v, dropout_p=0.5, rng=np.random.default_rng(1))[1]
    assert np.array_equal(a, b) and (a == 0).any()


# --------------------------------------------------------------------------- helpers


def test_masked_softmax_matches_softmax_and_handles_empty_rows():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 5, generator=g, dtype=DT) * 10
    torch.testing.assert_close(masked_softmax(s), torch.softmax(s, -1))
    m = torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5])
    w = masked_softmax(s, m)
    assert (w[1] == 0).all() and (w[0, [1, 4]] == 0).all()
    torch.testing.assert_close(w[[0, 2]].sum(-1), torch.ones(2, dtype=DT))
    np.testing.assert_allclose(numpy_masked_softmax(s.numpy(), m.numpy()), w.numpy())
    # large scores do not overflow
    big = torch.tensor([[1000.0, 1001.0, 1002.0]], dtype=DT)
    assert torch.isfinite(masked_softmax(big)).all()


def test_masked_softmax_fused_path_equals_the_readable_path():
    """The fused torch.softmax path equals the step-by-step numpy version, with and without
    fully masked rows in the batch."""
    g = torch.Generator().manual_seed(3)
    s = torch.randn(2, 4, 6, generator=g, dtype=DT) * 5
    m = torch.rand(2, 4, 6, generator=g) > 0.3
    m[:, :, 0] = True  # no empty row: the fused path
    np.testing.assert_allclose(
        masked_softmax(s, m).numpy(), numpy_masked_softmax(s.numpy(), m.numpy())
    )
    m[1, 2] = False  # one empty row: the NaN-safe path
    w = masked_softmax(s, m)
    np.testing.assert_allclose(w.numpy(), numpy_masked_softmax(s.numpy(), m.numpy()))
    assert (w[1, 2] == 0).all() and torch.isfinite(w).all()


def test_masked_softmax_gradients_are_finite_for_minus_inf_rows_without_a_mask():
    """Rows that are all -inf in the scores themselves (a float mask, say): zeros, and
    finite gradients, not NaN."""
    s = torch.randn(3, 4, dtype=DT)
    s[1] = float("-inf")
    s.requires_grad_(True)
    w = masked_softmax(s)
    assert (w[1] == 0).all()
    (w * torch.arange(4.0, dtype=DT)).sum().backward()
    assert torch.isfinite(s.grad).all() and (s.grad[1] == 0).all()
    ref = s.detach()[[0, 2]].clone().requires_grad_(True)
    (torch.softmax(ref, -1) * torch.arange(4.0, dtype=DT)).sum().backward()
    torch.testing.assert_close(s.grad[[0, 2]], ref.grad)


def test_padding_mask():
    m = padding_mask([3, 1, 4])
    assert m.shape == (3, 1, 4) and m.dtype == torch.bool
    assert m[:, 0].tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [True, True, True, True],
    ]
    assert padding_mask(torch.tensor([2]), n_k=5).shape == (1, 1, 5)
    assert padding_mask(np.array([0, 2])).tolist() == [[[False, False]], [[True, True]]]
    assert padding_mask([], n_k=3).shape == (0, 1, 3)
    with pytest.raises(ValueError, match=r"\[B\]"):
        padding_mask(torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="n_k=2"):
        padding_mask([3, 1], n_k=2)  # a length longer than the keys: a bug upstream
    with pytest.raises(ValueError, match=">= 0"):
        padding_mask([-1, 2])
    with pytest.raises(TypeError, match="integer"):
        padding_mask([1.5, 2.0])
    with pytest.raises(ValueError, match="n_k"):
        padding_mask([])


def test_masked_softmax_rejects_non_boolean_masks():
    with pytest.raises(TypeError, match=r"boolean.*int64"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 3, dtype=torch.int64))


@pytest.mark.parametrize(
    "scale", [np.float32(0.5), np.float64(0.5), torch.tensor(0.5), np.array(0.5)]
)
def test_scale_accepts_numpy_and_tensor_scalars(scale):
    q, k, v = _qkv((2,), 3, 4, 8, 5, seed=14)
    out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, scale=0.5)[0])
    out_n, _ = numpy_attention(q.numpy(), k.numpy(), v.numpy(), scale=scale)
    np.testing.assert_allclose(out_n, out.numpy(), atol=1e-12)


@pytest.mark.parametrize("scale", [True, "0.5", float("nan"), float("inf"), torch.ones(2)])
def test_bad_scale_is_rejected(scale):
    q, k, v = _qkv((), 3, 3, 2, 2)
    with pytest.raises(ValueError, match="scale"):
        scaled_dot_product_attention(q, k, v, scale=scale)
    with pytest.raises(ValueError, match="scale"):
        numpy_attention(q.numpy(), k.numpy(), v.numpy(), scale=scale)


def test_mask_with_more_batch_dims_than_q():
    # q, k, v without batch dims, a mask [B, Nq, Nk]: the batch comes from the mask
    q, k, v = _qkv((), 3, 5, 4, 2, seed=15)
    mask = torch.rand(2, 3, 5, generator=torch.Generator().manual_seed(0)) > 0.3
    mask[..., 0] = True
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (2, 3, 2) and w.shape == (2, 3, 5)
    for b in range(2):
        torch.testing.assert_close(
            out[b], F.scaled_dot_product_attention(q, k, v, attn_mask=mask[b])
        )
    out_n, _ = numpy_attention(q.numpy(), k.numpy(), v.numpy(), mask.numpy())
    np.testing.assert_allclose(out_n, out.numpy(), atol=1e-12)


def test_plot_attention_labels_and_errors():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = torch.softmax(torch.randn(3, 4), -1)
    ax = A_plot(w, ["a", "b", "c"], ["w", "x", "y", "z"], title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "t" and len(ax.texts) == 12  # small matrix: annotated
    # numpy arrays of labels work too (their truth value is ambiguous: never test it)
    ax = A_plot(w.numpy(), np.array(["a", "b", "c"]), np.array(["w", "x", "y", "z"]))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    plt.close("all")
    with pytest.raises(ValueError, match=r"\[Nq, Nk\]"):
        A_plot(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="k_tokens has 3 labels"):
        A_plot(w, None, ["w", "x", "y"])
    plt.close("all")
