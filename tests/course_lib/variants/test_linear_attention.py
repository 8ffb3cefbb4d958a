"""Unit tests of course_lib.variants.linear_attention (what it costs on recall:
tests/course_lib/experiments/test_recall.py)."""

from __future__ import annotations

import pytest
import torch

from course_lib.variants.linear_attention import (
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_step,
    linear_state_bytes,
)


def _qkv(n=13, d_k=5, d_v=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, 3, n, d_k, generator=g, dtype=torch.float64),
        torch.randn(2, 3, n, d_k, generator=g, dtype=torch.float64),
        torch.randn(2, 3, n, d_v, generator=g, dtype=torch.float64),
    )


def test_parallel_form_is_the_formula():
    q, k, v = _qkv()
    out = linear_attention(q, k, v, eps=0.0)
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    for i in (0, 5, 12):
        w = fq[..., i, None, :] @ fk[..., : i + 1, :].transpose(-2, -1)  # (2, 3, 1, i+1)
        want = (w @ v[..., : i + 1, :]) / w.sum(-1, keepdim=True)
        torch.testing.assert_close(out[..., i, :], want[..., 0, :], atol=1e-9, rtol=1e-9)


def test_recurrent_form_equals_parallel_form():
    q, k, v = _qkv()
    out, state, z = linear_attention_recurrent(q, k, v)
    torch.testing.assert_close(out, linear_attention(q, k, v), atol=1e-12, rtol=1e-10)
    assert state.shape == (2, 3, 5, 7) and z.shape == (2, 3, 5)
    torch.testing.assert_close(state, elu_feature_map(k).transpose(-2, -1) @ v)


def test_state_does_not_grow_and_decoding_continues():
    q, k, v = _qkv(n=20)
    _, state, z = linear_attention_recurrent(q[..., :12, :], k[..., :12, :], v[..., :12, :])
    size = state.numel() + z.numel()
    outs = []
    for t in range(12, 20):
        o, state, z = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], state, z)
        outs.append(o)
        assert state.numel() + z.numel() == size
    torch.testing.assert_close(
        torch.stack(outs, -2), linear_attention(q, k, v)[..., 12:, :], atol=1e-12, rtol=1e-10
    )


def test_non_causal_and_feature_map_positive():
    q, k, v = _qkv()
    assert (elu_feature_map(torch.linspace(-20, 20, 101, dtype=torch.float64)) > 0).all()
    full = linear_attention(q, k, v, causal=False)
    torch.testing.assert_close(full[..., -1, :], linear_attention(q, k, v)[..., -1, :])


def test_state_bytes_and_errors():
    assert linear_state_bytes(32, 32, 128, 128) == 32 * 32 * (128 * 128 + 128) * 2
    with pytest.raises(ValueError, match="same N"):
        linear_attention(torch.zeros(4, 3), torch.zeros(5, 3), torch.zeros(5, 2))
    with pytest.raises(ValueError, match="non-negative"):
        linear_state_bytes(-1, 1, 1, 1)
