"""The chapter 09 exercises: references are right, every declared mistake is caught and named."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.checks import CheckFailed, check
from course_lib.checks.core import cases_for, get_exercise

IDS = ["09.1", "09.2", "09.3", "09.4", "09.5", "09.6"]


@pytest.mark.parametrize("ex_id", IDS)
def test_mistakes_are_told_apart(ex_id):
    """Each wrong twin is named first by its own hint on the visible cases."""
    ex = get_exercise(ex_id)
    for hint, wrong in ex.mistakes.items():
        with pytest.raises(CheckFailed) as failure, np.errstate(all="ignore"):
            check(ex_id, wrong, quiet=True)
        named = [h for h in ex.mistakes if h in str(failure.value)]
        assert named and named[0] == hint, (ex_id, hint[:50], [n[:50] for n in named])


def test_09_1_merge_reference_equals_attention_over_all_keys():
    ex = get_exercise("09.1")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 6, 3, generator=g, dtype=torch.float64) for _ in range(3))
    parts = [
        F.scaled_dot_product_attention(q, k[:, s], v[:, s]) for s in (slice(0, 2), slice(2, 6))
    ]
    lses = [
        torch.logsumexp(q @ k[:, s].transpose(1, 2) / math.sqrt(3), -1)
        for s in (slice(0, 2), slice(2, 6))
    ]
    out, lse = ex.reference(parts[0], lses[0], parts[1], lses[1])
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.transpose(1, 2) / math.sqrt(3), -1))


def test_09_1_both_empty_rows_stay_zero_and_minus_infinity():
    case = cases_for("09.1")[2]
    out, lse = get_exercise("09.1").reference(*case.args)
    assert torch.equal(out[2], torch.zeros(2, dtype=torch.float64))
    assert lse[2] == -math.inf and torch.isfinite(lse[:2]).all()


def test_09_2_steps_over_every_block_give_causal_attention():
    """Two zigzag ranks: each one's two ring steps reproduce its rows of causal attention."""
    from course_lib.context_parallel import causal_mask_from_positions, shard_positions

    step = get_exercise("09.2").reference
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(8, 4, generator=g, dtype=torch.float64) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    pos = [shard_positions(8, 2, r, "zigzag") for r in range(2)]
    for r in range(2):
        out, lse = (
            torch.zeros(4, 4, dtype=torch.float64),
            torch.full((4,), -math.inf, dtype=torch.float64),
        )
        for s in range(2):
            src = (r - s) % 2
            out, lse = step(
                q[pos[r]],
                k[pos[src]],
                v[pos[src]],
                out,
                lse,
                causal_mask_from_positions(pos[r], pos[src]),
            )
        torch.testing.assert_close(out, ref[pos[r]])


def test_09_2_a_fully_masked_block_leaves_the_state_alone():
    case = cases_for("09.2", hidden=True)[2]
    out, lse = get_exercise("09.2").reference(*case.args)
    torch.testing.assert_close(out, case.args[3], atol=0, rtol=0)
    torch.testing.assert_close(lse, case.args[4], atol=0, rtol=0)


def test_09_4_reference_is_what_the_network_version_computes():
    """The pure all-to-all equals seq_to_head's reshapes, done for every rank by hand."""
    ex = get_exercise("09.4")
    xs = cases_for("09.4")[1].args[0]
    ys = ex.reference(xs)
    P = len(xs)
    B, H, n, d = xs[0].shape
    for j in range(P):  # rank j receives chunk j of every rank's send buffer, in rank order
        recv = torch.stack([x.reshape(B, P, H // P, n, d).transpose(0, 1)[j] for x in xs])
        assert torch.equal(ys[j], recv.permute(1, 2, 0, 3, 4).reshape(B, H // P, P * n, d))


def test_09_5_reference_formulas_by_hand():
    ring, ulysses = get_exercise("09.5").reference(4096, 4, 8, 64, 2)
    shard = 8 * 1024 * 64 * 2  # H * (N / P) * d_h * bytes = 1 MiB
    assert (ring, ulysses) == (6 * shard, 3 * shard)


def test_09_6_blocks_sum_to_autograd():
    ex = get_exercise("09.6")
    g = torch.Generator().manual_seed(2)
    q, k, v, do = (torch.randn(n, 3, generator=g, dtype=torch.float64) for n in (5, 9, 9, 5))
    mask = torch.ones(5, 9, dtype=torch.bool).tril(2)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qa, ka, va, attn_mask=mask)
    out.backward(do)
    s = (q @ k.T / math.sqrt(3)).masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, -1)
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for blk in (slice(0, 4), slice(4, 9)):
        a, b, c = ex.reference(q, k[blk], v[blk], out.detach(), lse, do, mask[:, blk])
        dq += a
        dk[blk], dv[blk] = b, c
    for got, want in zip((dq, dk, dv), (qa.grad, ka.grad, va.grad)):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
