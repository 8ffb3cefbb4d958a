"""course_lib.context_parallel.ring: ring attention, forward and backward, for P ranks.

The ranks run as threads of this process, their messages passed through queues
(tests/support/context_parallel_lab.py): the output, the LSE and every gradient equal
attention on one device, for every layout, causal or not; the bytes sent equal the
formulas; the work counted per step equals the tiles a kernel computes. The same
algorithm simulated in one loop (simulate_ring_attention), and ring_attention over a real
gloo group of one process, are checked too.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from context_parallel_lab import one_process_group, run_ranks

from course_lib.context_parallel import (
    LAYOUTS,
    RingStats,
    count_tiles,
    ring_attention,
    ring_comm_bytes,
    shard,
    shard_positions,
    simulate_ring_attention,
    unshard,
)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _one_device(q, k, v, do, is_causal):
    """Output, LSE and gradients of attention on the full sequence."""
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qa, ka, va, is_causal=is_causal)
    out.backward(do)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    return out.detach(), torch.logsumexp(s, -1), qa.grad, ka.grad, va.grad


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_attention_equals_one_device(layout, is_causal, world_size):
    B, H, N, d = 2, 2, 8 * world_size, 4
    q, k, v, do = (_randn(B, H, N, d, seed=s) for s in range(4))
    want = _one_device(q, k, v, do, is_causal)

    def rank_fn(rank, comm):
        ql, kl, vl = (shard(t, world_size, rank, layout).requires_grad_() for t in (q, k, v))
        out, lse = ring_attention(ql, kl, vl, is_causal=is_causal, layout=layout, comm=comm,
                                  return_lse=True)  # fmt: skip
        forward_bytes = comm.bytes_sent
        out.backward(shard(do, world_size, rank, layout))
        grads = (ql.grad, kl.grad, vl.grad)
        return out.detach(), lse, grads, forward_bytes, comm.bytes_sent - forward_bytes

    ranks = run_ranks(world_size, rank_fn)
    out = unshard([r[0] for r in ranks], layout)
    lse = unshard([r[1][..., None] for r in ranks], layout)[..., 0]
    grads = [unshard([r[2][i] for r in ranks], layout) for i in range(3)]
    for name, got, ref in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads), want):
        torch.testing.assert_close(got, ref, atol=1e-12, rtol=0, msg=name)
    kw = dict(num_heads=H, head_dim=d, batch_size=B, bytes_per_element=8)
    for *_, fwd_bytes, bwd_bytes in ranks:  # K and V around the ring; dK, dV home again
        assert fwd_bytes == ring_comm_bytes(N, world_size, **kw)
        assert bwd_bytes == ring_comm_bytes(N, world_size, **kw, backward=True)


def test_the_ring_sends_grouped_kv_heads_as_they_are():
    """K, V with H_kv = 1 head travel as one head: 4x fewer bytes than H = 4 heads would."""
    P, N, d = 2, 8, 4
    q = _randn(1, 4, N, d)
    k, v = _randn(1, 1, N, d, seed=1), _randn(1, 1, N, d, seed=2)

    def rank_fn(rank, comm):
        kl, vl = (shard(t, P, rank) for t in (k, v))
        with torch.no_grad():  # broadcasting one K/V head over the four query heads
            out = ring_attention(shard(q, P, rank), kl, vl, comm=comm)
        return out, comm.bytes_sent

    ranks = run_ranks(P, rank_fn)
    want = F.scaled_dot_product_attention(q, k.expand_as(q), v.expand_as(q))
    torch.testing.assert_close(unshard([o for o, _ in ranks], "contiguous"), want)
    kw = dict(num_heads=4, head_dim=d, bytes_per_element=8, num_kv_heads=1)
    assert all(b == ring_comm_bytes(N, P, **kw) for _, b in ranks)


def test_overlap_changes_when_blocks_are_sent_not_the_result():
    P = 3
    q, k, v = (_randn(1, 2, 12, 4, seed=s) for s in (5, 6, 7))

    def rank_fn(rank, comm):
        mine = [shard(t, P, rank, "striped") for t in (q, k, v)]
        with torch.no_grad():
            return [ring_attention(*mine, is_causal=True, layout="striped", comm=comm,
                                   overlap=overlap) for overlap in (True, False)]  # fmt: skip

    for overlapped, serial in run_ranks(P, rank_fn):
        assert torch.equal(overlapped, serial)


def test_stats_count_the_tiles_of_every_step():
    """Rank r holds the block of rank r - s at step s; with the plain split and a causal
    mask, rank r has work in r + 1 steps; the backward visits the same tiles."""
    P, N, tile = 4, 16, 2

    def rank_fn(rank, comm):
        stats = RingStats(tile=tile)
        ql, kl, vl = (
            shard(_randn(1, 1, N, 4, seed=s), P, rank).requires_grad_() for s in (1, 2, 3)
        )
        ring_attention(ql, kl, vl, is_causal=True, comm=comm, stats=stats).sum().backward()
        return stats

    for rank, stats in enumerate(run_ranks(P, rank_fn)):
        q_pos = shard_positions(N, P, rank)
        want = [count_tiles(q_pos, shard_positions(N, P, (rank - s) % P), tile=tile)
                for s in range(P)]  # fmt: skip
        assert stats.tiles == want and stats.backward_tiles == want
        assert stats.steps_with_work == rank + 1
        assert stats.compute_s >= 0 and stats.wait_s >= 0


def test_ring_attention_refuses_shards_of_different_lengths():
    x = _randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match="sequence lengths must match"):
        ring_attention(x, x[..., :3, :], x[..., :3, :], comm=object())


def test_ring_attention_on_one_rank_of_a_real_group_is_attention(tmp_path):
    """With no comm given, the default process group: one rank holds the whole sequence."""
    q, k, v = (_randn(1, 2, 6, 4, seed=s) for s in (8, 9, 10))
    with one_process_group(tmp_path):
        out = ring_attention(q, k, v, is_causal=True, scale=0.5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                   scale=0.5))  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_simulated_ring_equals_one_device(layout, is_causal, world_size):
    q, k, v = _randn(2, 2, 24, 8, seed=17), _randn(2, 2, 24, 8, seed=18), _randn(2, 2, 24, 8)
    out, lse, tiles = simulate_ring_attention(
        q, k, v, world_size, is_causal=is_causal, layout=layout
    )
    ref, ref_lse, *_ = _one_device(q, k, v, torch.zeros_like(q), is_causal)
    torch.testing.assert_close(out, ref, atol=1e-13, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=1e-13, rtol=0)
    assert len(tiles) == world_size and all(len(t) == world_size for t in tiles)
    if is_causal and layout == "contiguous":  # a tile is a whole step: work in r + 1 steps
        assert [sum(t) for t in tiles] == list(range(1, world_size + 1))
