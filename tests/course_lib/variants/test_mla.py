"""Unit tests of course_lib.variants.mla: multi-head latent attention, its cache and its absorption."""

from __future__ import annotations

import pytest
import torch

from course_lib.positional import apply_rope
from course_lib.variants.mla import (
    DEEPSEEK_V2,
    MLAConfig,
    MultiHeadLatentAttention,
    cache_bytes_per_token,
    mla_cache_bytes,
)

SMALL = MLAConfig(d_model=32, num_heads=4, head_dim=8, kv_latent_dim=12, rope_head_dim=4)


@pytest.mark.parametrize("q_latent_dim", [None, 16])
def test_naive_and_absorbed_decoding_equal_the_full_forward(q_latent_dim):
    torch.manual_seed(0)
    cfg = MLAConfig(**{**SMALL.__dict__, "q_latent_dim": q_latent_dim})
    m = MultiHeadLatentAttention(cfg).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    with torch.no_grad():
        full = m(x)  # (B, N, D)
        c1 = kr1 = c2 = kr2 = None
        for t in range(9):
            o1, c1, kr1 = m.decode_naive(x[:, t : t + 1], c1, kr1)
            o2, c2, kr2 = m.decode_absorbed(x[:, t : t + 1], c2, kr2)
            torch.testing.assert_close(o1[:, 0], full[:, t], atol=1e-12, rtol=0)
            torch.testing.assert_close(o2[:, 0], full[:, t], atol=1e-12, rtol=0)
    assert c2.shape == (2, 9, 12) and kr2.shape == (2, 9, 4)  # the whole cache


def test_forward_is_causal():
    torch.manual_seed(1)
    m = MultiHeadLatentAttention(SMALL).double()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    y = x.clone()
    y[:, 4:] += 1.0
    with torch.no_grad():
        torch.testing.assert_close(m(x)[:, :4], m(y)[:, :4], atol=1e-12, rtol=0)


def test_rope_on_the_compressed_keys_cannot_be_absorbed():
    """With the rotation on k^C = W_UK c, the matrix between q and c depends on the distance."""
    torch.manual_seed(2)
    head_dim, d_c = 8, 6
    w_uk = torch.randn(head_dim, d_c, dtype=torch.float64)
    q, c = torch.randn(head_dim, dtype=torch.float64), torch.randn(d_c, dtype=torch.float64)

    def score(i, j):  # query at i, key at j, RoPE on the up-projected key
        qi = apply_rope(q[None], torch.tensor([i]))[0]
        kj = apply_rope((w_uk @ c)[None], torch.tensor([j]))[0]
        return float(qi @ kj)

    fixed = float((w_uk.T @ q) @ c)  # what one absorbed matrix would give
    assert abs(score(5, 5) - fixed) < 1e-12  # distance 0: the rotations cancel
    assert abs(score(5, 2) - fixed) > 1e-3  # any other distance: they do not


def test_cache_bytes_deepseek_v2():
    per_token = cache_bytes_per_token(DEEPSEEK_V2)
    assert per_token["MLA"] == 60 * (512 + 64) * 2
    assert per_token["MHA"] == 2 * 60 * 128 * 128 * 2
    assert per_token["MQA"] == 2 * 60 * 128 * 2
    # DeepSeek-V2's paper: MLA's cache equals GQA with 2.25 groups
    assert per_token["MLA"] / (2 * 60 * 128 * 2) == pytest.approx(2.25)
    assert per_token["MQA"] < per_token["MLA"] < per_token["GQA"] < per_token["MHA"]
    assert mla_cache_bytes(60, 512, 64, 1000, 3, 2) == 1000 * 3 * per_token["MLA"]


def test_config_and_input_errors():
    with pytest.raises(ValueError, match="even"):
        MLAConfig(d_model=8, num_heads=2, head_dim=4, kv_latent_dim=4, rope_head_dim=3)
    with pytest.raises(ValueError, match="positive integer"):
        MLAConfig(d_model=8, num_heads=0, head_dim=4, kv_latent_dim=4, rope_head_dim=2)
    m = MultiHeadLatentAttention(SMALL)
    with pytest.raises(ValueError, match=r"\[B, N, d_model=32\]"):
        m(torch.zeros(2, 3, 31))
    with pytest.raises(ValueError, match="one new token"):
        m.decode_absorbed(torch.zeros(1, 2, 32), None, None)
    with pytest.raises(ValueError, match="non-negative"):
        mla_cache_bytes(1, 2, 3, -1)
