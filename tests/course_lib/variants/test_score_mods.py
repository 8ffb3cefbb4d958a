"""Unit tests of course_lib.variants.score_mods: ALiBi and soft-capping as score_mods, on
whole score tensors (apply_score_mod), on FlexAttention's 0-dimensional indices, and in
attention (course_lib.variants.flex.mod_attention) against explicit biases and formulas."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import causal_mask, scaled_dot_product_attention
from course_lib.variants import flex as FX
from course_lib.variants import mask_mods as M
from course_lib.variants import score_mods as S
from course_lib.variants.alibi import alibi_bias, alibi_slopes

DT = torch.float64
B, H, N, D = 2, 3, 24, 8


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, N, D, generator=g, dtype=DT) for _ in range(3))


def _scores(seed=0, n_q=N, n_k=N):
    return torch.randn(B, H, n_q, n_k, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_alibi_is_the_linear_bias_of_chapter_08():
    slopes = alibi_slopes(H, dtype=DT)
    s = _scores(1)
    got = S.apply_score_mod(s, S.alibi(slopes))
    torch.testing.assert_close(got, s + alibi_bias(H, N, dtype=DT), atol=1e-12, rtol=0)
    assert S.alibi(slopes).__name__ == "alibi"


def test_score_mods_take_flexattentions_scalar_indices():
    """Inside FlexAttention a score_mod is called with 0-dimensional tensors."""
    slopes = torch.tensor([0.5, 0.25])
    t = torch.tensor
    score = S.alibi(slopes)(t(1.0), t(0), t(1), t(7), t(3))  # head 1, query 7, key 3
    assert score.shape == () and score.item() == pytest.approx(1.0 - 0.25 * 4)
    capped = S.soft_cap(2.0)(t(100.0), t(0), t(0), t(0), t(0))
    assert capped.item() == pytest.approx(2.0 * torch.tanh(t(50.0)).item())


def test_alibi_score_mod_equals_the_explicit_bias():
    q, k, v = _qkv(2)
    slopes = alibi_slopes(H, dtype=DT)
    out, _ = FX.mod_attention(q, k, v, score_mod=S.alibi(slopes), mask_mod=M.causal)
    ref, _ = scaled_dot_product_attention(q, k, v, alibi_bias(H, N, dtype=DT), is_causal=True)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_soft_cap_score_mod_equals_the_formula_and_bounds_the_scores():
    q, k, v = _qkv(3)
    q = q * 20  # large scores, so that the cap matters
    cap = 5.0
    out, w = FX.mod_attention(q, k, v, score_mod=S.soft_cap(cap), mask_mod=M.causal)
    scores = cap * torch.tanh(q @ k.transpose(-2, -1) / D**0.5 / cap)
    assert scores.abs().max() < cap
    ref_w = torch.softmax(scores.masked_fill(~causal_mask(N), float("-inf")), dim=-1)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, ref_w @ v, atol=1e-12, rtol=0)
    plain, _ = FX.mod_attention(q, k, v, mask_mod=M.causal)
    assert (out - plain).abs().max() > 1e-2  # the cap changed something
    assert S.soft_cap(cap).__name__ == "soft_cap_5"


def test_soft_cap_with_a_huge_cap_is_the_identity():
    q, k, v = _qkv(4)
    out, _ = FX.mod_attention(q, k, v, score_mod=S.soft_cap(1e6))
    ref, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, ref, atol=1e-9, rtol=0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="floating-point slopes of shape \\[H\\]"):
        S.alibi(torch.ones(2, 3))
    with pytest.raises(ValueError, match="floating-point slopes"):
        S.alibi(torch.tensor([1, 2]))
    for cap in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="cap must be a positive number"):
            S.soft_cap(cap)
    with pytest.raises(ValueError, match=r"scores of shape \[B, H, Nq, Nk\]"):
        S.apply_score_mod(torch.zeros(3, 4, 4), S.soft_cap(1.0))
    with pytest.raises(ValueError, match="'halve' must return a tensor shaped like the scores"):

        def halve(score, b, h, q_idx, kv_idx):
            return score[..., :1] / 2

        S.apply_score_mod(_scores(), halve)
