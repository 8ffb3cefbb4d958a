"""course_lib.context_parallel.merge: partial attention over a block of keys, and its exact
merge by log-sum-exp (pure functions: no processes)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.context_parallel import (
    block_attention,
    block_attention_backward,
    causal_mask_from_positions,
    merge_attention,
    merge_many,
    ring_step,
    shard_positions,
)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_two_halves_merge_into_full_attention():
    q, k, v = _randn(2, 3, 10, 8, seed=1), _randn(2, 3, 16, 8, seed=2), _randn(2, 3, 16, 5)
    out_a, lse_a = block_attention(q, k[..., :7, :], v[..., :7, :])
    out_b, lse_b = block_attention(q, k[..., 7:, :], v[..., 7:, :])
    out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
    ref = F.scaled_dot_product_attention(q, k, v)
    ref_lse = torch.logsumexp(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(out, ref, atol=1e-13, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=1e-13, rtol=0)


def test_merge_is_order_free_and_matches_flash_reference():
    from course_lib.flash import flash_attention_reference

    q, k, v = _randn(1, 2, 12, 4, seed=3), _randn(1, 2, 20, 4, seed=4), _randn(1, 2, 20, 4)
    parts = [
        block_attention(q, k[..., i : i + 5, :], v[..., i : i + 5, :]) for i in range(0, 20, 5)
    ]
    ref_out, ref_lse = flash_attention_reference(q, k, v, block_size=(4, 5))
    for order in ([0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 1, 0]):
        out, lse = merge_many([parts[i][0] for i in order], [parts[i][1] for i in order])
        torch.testing.assert_close(out, ref_out, atol=1e-13, rtol=0)
        torch.testing.assert_close(lse, ref_lse.double(), atol=1e-13, rtol=0)
    assert merge_many([parts[0][0]], [parts[0][1]]) == parts[0]  # one part: itself


def test_a_fully_masked_part_changes_nothing_and_never_makes_nan():
    q, k, v = _randn(4, 3, seed=5), _randn(6, 3, seed=6), _randn(6, 2, seed=7)
    nothing = torch.zeros(4, 6, dtype=torch.bool)
    out_0, lse_0 = block_attention(q, k, v, mask=nothing)
    assert torch.equal(out_0, torch.zeros(4, 2, dtype=torch.float64))
    assert torch.isinf(lse_0).all() and (lse_0 < 0).all()
    out_1, lse_1 = block_attention(q, k, v)
    for merged in (
        merge_attention(out_0, lse_0, out_1, lse_1),
        merge_attention(out_1, lse_1, out_0, lse_0),
    ):
        torch.testing.assert_close(merged[0], out_1, atol=0, rtol=0)
        torch.testing.assert_close(merged[1], lse_1, atol=0, rtol=0)
    out, lse = merge_attention(out_0, lse_0, out_0, lse_0)  # nothing seen anywhere
    assert not out.isnan().any() and torch.equal(out, out_0) and torch.isinf(lse).all()


def test_merge_survives_huge_log_sum_exps():
    out_a, out_b = _randn(3, 4, seed=8), _randn(3, 4, seed=9)
    lse_a = torch.tensor([1000.0, -1000.0, 5.0], dtype=torch.float64)
    lse_b = lse_a + torch.tensor([0.0, 1.0, -800.0], dtype=torch.float64)
    out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
    w_b = torch.sigmoid(lse_b - lse_a)  # = e^{L_b} / (e^{L_a} + e^{L_b})
    torch.testing.assert_close(out, (1 - w_b)[:, None] * out_a + w_b[:, None] * out_b)
    torch.testing.assert_close(lse, torch.logaddexp(lse_a, lse_b))


def test_merge_names_mismatched_shapes():
    with pytest.raises(ValueError, match="trailing dimension of 1"):
        merge_attention(_randn(3, 4), _randn(3, 1), _randn(3, 4), _randn(3, 1))
    with pytest.raises(ValueError, match="same shapes"):
        merge_attention(_randn(3, 4), _randn(3), _randn(2, 4), _randn(2))
    with pytest.raises(ValueError, match="as many LSEs as outputs"):
        merge_many([_randn(3, 4)], [])
    with pytest.raises(ValueError, match="at least one"):
        merge_many([], [])


def test_block_attention_dtypes_scale_and_shape_errors():
    q, k, v = (_randn(2, 5, 4, seed=s).float() for s in (20, 21, 22))
    out, lse = block_attention(q.half(), k.half(), v.half(), scale=0.3)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32  # computed in float32
    ref = F.scaled_dot_product_attention(q.half().float(), k.half().float(), v.half().float(),
                                         scale=0.3)  # fmt: skip
    torch.testing.assert_close(out.float(), ref, atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match=r"q \[..., Nq, d_k\]"):
        block_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match=r"v \[..., Nk, d_v\]"):
        block_attention(q, k, v[:, :4])


def test_causal_mask_from_positions_works_for_any_order():
    q_pos, k_pos = torch.tensor([5, 0, 3]), torch.tensor([3, 6, 0])
    assert causal_mask_from_positions(q_pos, k_pos).tolist() == [
        [True, False, True],
        [False, False, True],
        [True, False, True],
    ]


def test_ring_step_from_the_empty_state_is_block_attention():
    q, k, v = _randn(5, 4, seed=10), _randn(5, 4, seed=11), _randn(5, 4, seed=12)
    out, lse = ring_step(
        q,
        k,
        v,
        torch.zeros(5, 4, dtype=torch.float64),
        torch.full((5,), -math.inf, dtype=torch.float64),
    )
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-14, rtol=0)


def test_block_backward_with_the_global_lse_sums_to_autograd():
    """Per-block gradients, each computed with the *final* O and LSE, add up exactly."""
    P, N = 4, 16
    q, k, v, do = (_randn(1, 2, N, 4, seed=s) for s in (13, 14, 15, 16))
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
    ref.backward(do)
    out = ref.detach()
    lse = torch.logsumexp(
        (q @ k.transpose(-2, -1) / 2).masked_fill(
            ~causal_mask_from_positions(torch.arange(N), torch.arange(N)), -math.inf
        ),
        dim=-1,
    )
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for src in range(P):  # zigzag key blocks, all queries
        pos = shard_positions(N, P, src, "zigzag")
        mask = causal_mask_from_positions(torch.arange(N), pos)
        a, b, c = block_attention_backward(
            q, k[..., pos, :], v[..., pos, :], out, lse, do, mask=mask
        )
        dq += a
        dk[..., pos, :] += b
        dv[..., pos, :] += c
    for got, want in zip((dq, dk, dv), (qa.grad, ka.grad, va.grad)):
        torch.testing.assert_close(got, want, atol=1e-13, rtol=0)
