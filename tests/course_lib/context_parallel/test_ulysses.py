"""course_lib.context_parallel.ulysses: all-to-all from a sequence split to a head split and
back, simulated for all ranks in one call, and run for P ranks as threads of this process
(tests/support/context_parallel_lab.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from context_parallel_lab import run_ranks

from course_lib.context_parallel import (
    LAYOUTS,
    all_to_all_head_to_seq,
    all_to_all_seq_to_head,
    head_to_seq,
    seq_to_head,
    shard,
    ulysses_attention,
    ulysses_comm_bytes,
    unshard,
)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_all_to_all_simulation_is_a_head_split_and_inverts():
    P, B, H, n, d = 4, 2, 8, 3, 5
    xs = [_randn(B, H, n, d, seed=r) for r in range(P)]
    ys = all_to_all_seq_to_head(xs)
    assert [tuple(y.shape) for y in ys] == [(B, H // P, P * n, d)] * P
    full = torch.cat(xs, dim=2)  # (B, H, N, d) every token, every head
    for j, y in enumerate(ys):
        assert torch.equal(y, full[:, j * 2 : (j + 1) * 2])
    back = all_to_all_head_to_seq(ys)
    assert all(torch.equal(a, b) for a, b in zip(back, xs))
    with pytest.raises(ValueError, match="H = 6 is not divisible by 4"):
        all_to_all_seq_to_head([_randn(1, 6, 2, 2)] * 4)
    with pytest.raises(ValueError, match=r"\[B, H, N, d_h\]"):
        all_to_all_seq_to_head([_randn(6, 2, 2)] * 2)


def test_over_the_network_each_rank_gets_what_the_simulation_says():
    """seq_to_head on every rank gives the simulation's head groups; head_to_seq undoes it;
    each all-to-all sends (P - 1) / P of the tensor."""
    P, B, H, n, d = 2, 1, 4, 3, 2
    xs = [_randn(B, H, n, d, seed=r) for r in range(P)]

    def rank_fn(rank, comm):
        y = seq_to_head(xs[rank], comm)
        return y, head_to_seq(y, comm), comm.bytes_sent

    ranks = run_ranks(P, rank_fn)
    for (y, back, sent), want, x in zip(ranks, all_to_all_seq_to_head(xs), xs):
        assert torch.equal(y, want) and torch.equal(back, x)
        assert sent == 2 * (P - 1) * (B * H // P * n * d * 8)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("world_size", [2, 4])
def test_ulysses_attention_equals_one_device(layout, is_causal, world_size):
    """Output and gradients; the causal mask follows the positions of any layout; four
    all-to-alls forward and four backward, the bytes of the formula."""
    B, H, N, d = 1, 4, 4 * world_size, 4
    q, k, v, do = (_randn(B, H, N, d, seed=s) for s in range(4))
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qa, ka, va, is_causal=is_causal)
    ref.backward(do)

    def rank_fn(rank, comm):
        ql, kl, vl = (shard(t, world_size, rank, layout).requires_grad_() for t in (q, k, v))
        out = ulysses_attention(ql, kl, vl, is_causal=is_causal, layout=layout, comm=comm)
        forward_bytes = comm.bytes_sent
        out.backward(shard(do, world_size, rank, layout))
        return out.detach(), (ql.grad, kl.grad, vl.grad), forward_bytes, comm.bytes_sent

    ranks = run_ranks(world_size, rank_fn)
    got = [unshard([r[0] for r in ranks], layout)]
    got += [unshard([r[1][i] for r in ranks], layout) for i in range(3)]
    for name, g, want in zip(("out", "dq", "dk", "dv"), got, (ref, qa.grad, ka.grad, va.grad)):
        torch.testing.assert_close(g, want, atol=1e-12, rtol=0, msg=name)
    kw = dict(num_heads=H, head_dim=d, batch_size=B, bytes_per_element=8)
    for *_, forward_bytes, total in ranks:
        assert forward_bytes == ulysses_comm_bytes(N, world_size, **kw)
        assert total - forward_bytes == ulysses_comm_bytes(N, world_size, **kw, backward=True)


def test_shapes_that_do_not_split_over_the_ranks_are_named():
    x = _randn(1, 3, 4, 2)

    def rank_fn(rank, comm):
        with pytest.raises(ValueError, match="H = 3 is not divisible by 2"):
            ulysses_attention(x, x, x, comm=comm)
        with pytest.raises(ValueError, match="N = 5 tokens do not split over 2 ranks"):
            head_to_seq(_randn(1, 2, 5, 2), comm)
        with pytest.raises(ValueError, match=r"ulysses_attention \(k\)"):
            ulysses_attention(_randn(1, 2, 4, 2), _randn(2, 4, 2), _randn(2, 4, 2), comm=comm)
        return True

    assert run_ranks(2, rank_fn) == [True, True]
