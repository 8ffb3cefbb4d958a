"""The chapter 09 exercises: references are right, every declared mistake is caught and named."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.checks import CheckFailed, check
from course_lib.checks.core import cases_for, get_exercise

IDS = ["09.1", "09.2", "09.3", "09.4", "09.5", "09.6", "09.7"]


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


def test_09_1_weights_without_a_last_axis_are_named():
    def no_axis(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse

    with pytest.raises(CheckFailed, match="do not line up"):
        check("09.1", no_axis, quiet=True)


def test_09_1_misderived_merges_are_named():
    """The statement asks for the derivation: the two ways of getting it wrong by algebra."""
    from course_lib.context_parallel import merge_attention

    def lse_added(out_a, lse_a, out_b, lse_b):
        return merge_attention(out_a, lse_a, out_b, lse_b)[0], lse_a + lse_b

    with pytest.raises(CheckFailed, match="you added the two LSEs"):
        check("09.1", lse_added, quiet=True)

    def weighted_by_lse(out_a, lse_a, out_b, lse_b):
        w_a = (lse_a / (lse_a + lse_b))[..., None]
        out = w_a * out_a + (1 - w_a) * out_b
        return out, merge_attention(out_a, lse_a, out_b, lse_b)[1]

    with pytest.raises(CheckFailed, match="you weighted each output by its LSE"):
        check("09.1", weighted_by_lse, quiet=True)


def _learner_ring_step(q, k, v, out, lse, mask, *, fill=-math.inf, scale_by=None):
    from course_lib.context_parallel import merge_attention

    d = q.shape[-1] if scale_by is None else scale_by(q, v)
    s = q @ k.T / math.sqrt(d)
    if mask is not None:
        s = s.masked_fill(~mask, fill)
    lse_b = torch.logsumexp(s, -1)
    out_b = torch.softmax(s, -1).nan_to_num(0.0) @ v
    return merge_attention(out, lse, out_b, lse_b)


def test_09_2_learner_mistakes_are_named():
    assert check("09.2", _learner_ring_step, quiet=True).passed
    with pytest.raises(CheckFailed, match="-1e9"):
        check("09.2", lambda *a: _learner_ring_step(*a, fill=-1e9), quiet=True)
    with pytest.raises(CheckFailed, match="1/sqrt\\(d_v\\)"):
        check(
            "09.2", lambda *a: _learner_ring_step(*a, scale_by=lambda q, v: v.shape[-1]), quiet=True
        )


def test_09_3_positions_must_be_integers_a_list_of_ints_is_right():
    def as_list(seq_len, world_size, rank):
        c = seq_len // (2 * world_size)
        b = 2 * world_size - 1 - rank
        return list(range(rank * c, (rank + 1) * c)) + list(range(b * c, (b + 1) * c))

    assert check("09.3", as_list, quiet=True).passed
    assert check("09.3", as_list, hidden=True, quiet=True).passed

    def as_float_list(seq_len, world_size, rank):
        return [float(p) for p in as_list(seq_len, world_size, rank)]

    with pytest.raises(CheckFailed, match="expected a list of int positions, got a list of float"):
        check("09.3", as_float_list, quiet=True)

    def as_float(seq_len, world_size, rank):
        return torch.tensor(as_list(seq_len, world_size, rank), dtype=torch.float32)

    with pytest.raises(CheckFailed, match="expected integer positions"):
        check("09.3", as_float, quiet=True)


def test_09_4_a_stacked_result_is_named():
    from course_lib.context_parallel import all_to_all_seq_to_head

    with pytest.raises(CheckFailed, match="one stacked tensor"):
        check("09.4", lambda xs: torch.stack(all_to_all_seq_to_head(list(xs))), quiet=True)


def test_09_5_learner_mistakes_are_named():
    def as_float(seq_len, world_size, num_heads, head_dim, b):
        shard = num_heads * seq_len / world_size * head_dim * b
        return 2 * (world_size - 1) * shard, 4 * shard * (world_size - 1) / world_size

    with pytest.raises(CheckFailed, match="expected an int"):
        check("09.5", as_float, quiet=True)

    def to_each(seq_len, world_size, num_heads, head_dim, b):
        shard = num_heads * (seq_len // world_size) * head_dim * b
        return 2 * (world_size - 1) * shard, 4 * (world_size - 1) * shard

    with pytest.raises(CheckFailed, match="to \\*each\\* other rank"):
        check("09.5", to_each, quiet=True)


def _learner_backward(q, k, v, out, lse, dout, mask, *, D="final", dv="transposed"):
    scale = 1 / math.sqrt(q.shape[-1])
    s = q @ k.T * scale
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    p = torch.exp(s - lse[:, None])
    dp = dout @ v.T
    d_row = {"final": (dout * out).sum(-1), "dout": dout.sum(-1), "block": (p * dp).sum(-1)}[D]
    ds = p * (dp - d_row[:, None])
    dv_block = p.T @ dout if dv == "transposed" else p @ dout
    return ds @ k * scale, ds.T @ q * scale, dv_block


def test_09_6_learner_mistakes_are_named():
    assert check("09.6", _learner_backward, quiet=True).passed
    with pytest.raises(CheckFailed, match="rowsum\\(dO\\): the output O is missing"):
        check("09.6", lambda *a: _learner_backward(*a, D="dout"), quiet=True)
    with pytest.raises(CheckFailed, match="over this block only"):
        check("09.6", lambda *a: _learner_backward(*a, D="block"), quiet=True)
    with pytest.raises(CheckFailed, match="not transposed"):
        check("09.6", lambda *a: _learner_backward(*a, dv="plain"), quiet=True)


def _learner_imbalance(seq_len, world_size, layout, *, inverted=False):
    """09.7 written another way: the causal work of a query at position p is p + 1 keys."""
    from course_lib import context_parallel as cp

    work = [
        int((cp.shard_positions(seq_len, world_size, r, layout) + 1).sum())
        for r in range(world_size)
    ]
    return min(work) / max(work) if inverted else max(work) / min(work)


def test_09_7_another_correct_count_passes_and_shows_the_prediction(capsys):
    assert check("09.7", _learner_imbalance, prediction=lambda n, p, lay: p).passed
    assert check("09.7", _learner_imbalance, hidden=True).passed
    assert "you predicted 4, measured 6.977: your prediction is 43% low" in capsys.readouterr().out


def test_09_7_an_inverted_ratio_is_named():
    with pytest.raises(CheckFailed, match="your ratio is the least busy rank over the busiest"):
        check("09.7", lambda *a: _learner_imbalance(*a, inverted=True), quiet=True)
