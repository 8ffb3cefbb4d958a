r"""Ring attention (Liu et al., 2023, "Ring Attention with Blockwise Transformers for
Near-Infinite Context"), forward and backward, over ``torch.distributed``.

$P$ ranks each hold $N/P$ tokens of $Q, K, V$. The queries never move. The key/value blocks
travel around a ring: at step $s$ rank $r$ holds the block that started on rank
$r - s \pmod P$, attends to it (:func:`~.merge.ring_step`: one partial attention merged by
log-sum-exp) and passes it on to rank $r+1$. The transfer of the next block is started
*before* the attention on the current one, so the network works while the rank computes:
with enough tokens per shard the communication is hidden entirely.

The backward pass sends $K, V$ around once more. Each block travels together with two
accumulators $dK, dV$ to which every rank adds its queries' contribution
(:func:`~.merge.block_attention_backward`, with the *final* $O$ and LSE, so the weights
it recomputes are the true ones); after $P$ hops the accumulators are back on the block's
own rank, complete. $dQ$ stays where the queries are.

Causal masking uses token positions (:func:`~.sharding.shard_positions`), so any layout
works; a block in which no query may see any key is skipped (that step does no work).

:func:`simulate_ring_attention` runs the same steps for all ranks in one process (lists
instead of messages): the algorithm without the machinery.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from .comm import Comm
from .merge import (
    _work_dtype,
    block_attention_backward,
    causal_mask_from_positions,
    ring_step,
)
from .sharding import count_tiles, shard, shard_positions, unshard

__all__ = ["RingStats", "ring_attention", "simulate_ring_attention"]


@dataclass
class RingStats:
    """What one rank did in ring attention: work per step, and where the time went.

    ``tiles[s]``: tiles of ``tile`` x ``tile`` tokens with at least one visible pair in
    step s's block, per (batch, head): what a tiled kernel with block skipping computes.
    ``compute_s`` / ``wait_s``: seconds attending vs. seconds blocked waiting for a block.
    """

    tile: int = 16
    tiles: list[int] = field(default_factory=list)
    backward_tiles: list[int] = field(default_factory=list)
    compute_s: float = 0.0
    wait_s: float = 0.0

    @property
    def steps_with_work(self) -> int:
        return sum(t > 0 for t in self.tiles)


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:  # time the GPU's work, not only the launch
        torch.cuda.synchronize(x.device)


def _ring_forward(q, k, v, *, is_causal, scale, layout, comm, overlap, stats):
    P, r = comm.world_size, comm.rank
    n = q.shape[-2]
    seq_len = n * P
    work = _work_dtype(q.dtype)
    q_pos = shard_positions(seq_len, P, r, layout).to(q.device)
    qw = q.to(work)  # (..., n, d_h)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=work, device=q.device)  # (..., n, d_v)
    lse = torch.full(q.shape[:-1], -math.inf, dtype=work, device=q.device)  # (..., n)
    k_cur, v_cur = k, v
    for step in range(P):
        src = (r - step) % P  # the rank this block started on
        last = step == P - 1
        pending = None if last or not overlap else comm.ring_shift([k_cur, v_cur])
        k_pos = shard_positions(seq_len, P, src, layout).to(q.device)
        mask = causal_mask_from_positions(q_pos, k_pos) if is_causal else None  # (n, n)
        t0 = time.perf_counter()
        if mask is None or bool(mask.any()):  # a fully masked block is skipped
            out, lse = ring_step(qw, k_cur, v_cur, out, lse, mask=mask, scale=scale)
        if stats is not None:
            _sync(out)
        t1 = time.perf_counter()
        if stats is not None:
            stats.tiles.append(count_tiles(q_pos, k_pos, tile=stats.tile, is_causal=is_causal))
            stats.compute_s += t1 - t0
        if not last:
            if pending is None:  # no overlap: only now start sending
                pending = comm.ring_shift([k_cur, v_cur])
            k_cur, v_cur = pending.wait()
            if stats is not None:
                _sync(k_cur)
                stats.wait_s += time.perf_counter() - t1
    return out, lse


def _ring_backward(q, k, v, out, lse, dout, *, is_causal, scale, layout, comm, stats):
    P, r = comm.world_size, comm.rank
    n = q.shape[-2]
    seq_len = n * P
    work = _work_dtype(q.dtype)
    q_pos = shard_positions(seq_len, P, r, layout).to(q.device)
    dq = torch.zeros(q.shape, dtype=work, device=q.device)  # (..., n, d_h)
    dk_cur = torch.zeros(k.shape, dtype=work, device=q.device)  # (..., n, d_h) travels with K
    dv_cur = torch.zeros(v.shape, dtype=work, device=q.device)  # (..., n, d_v) travels with V
    k_cur, v_cur = k, v
    for step in range(P):
        src = (r - step) % P
        last = step == P - 1
        pending = None if last else comm.ring_shift([k_cur, v_cur])
        k_pos = shard_positions(seq_len, P, src, layout).to(q.device)
        mask = causal_mask_from_positions(q_pos, k_pos) if is_causal else None  # (n, n)
        if mask is None or bool(mask.any()):
            dq_b, dk_b, dv_b = block_attention_backward(
                q, k_cur, v_cur, out, lse, dout, mask=mask, scale=scale
            )
            dq += dq_b
            dk_cur += dk_b
            dv_cur += dv_b
        if stats is not None:
            stats.backward_tiles.append(
                count_tiles(q_pos, k_pos, tile=stats.tile, is_causal=is_causal)
            )
        if pending is not None:
            k_cur, v_cur = pending.wait()
        # the accumulators follow their block; after the last step this hop brings them home
        dk_cur, dv_cur = comm.ring_shift([dk_cur, dv_cur]).wait()
    return dq.to(q.dtype), dk_cur.to(k.dtype), dv_cur.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale, layout, comm, overlap, stats):
        out, lse = _ring_forward(
            q,
            k,
            v,
            is_causal=is_causal,
            scale=scale,
            layout=layout,
            comm=comm,
            overlap=overlap,
            stats=stats,
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        ctx.args = (is_causal, scale, layout, comm, stats)
        return out.to(q.dtype), lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        is_causal, scale, layout, comm, stats = ctx.args
        dq, dk, dv = _ring_backward(
            q,
            k,
            v,
            out,
            lse,
            dout,
            is_causal=is_causal,
            scale=scale,
            layout=layout,
            comm=comm,
            stats=stats,
        )
        return dq, dk, dv, None, None, None, None, None, None


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    layout: str = "contiguous",
    comm: Comm | None = None,
    overlap: bool = True,
    stats: RingStats | None = None,
    return_lse: bool = False,
):
    r"""Attention over the whole sequence, from this rank's shard: differentiable.

    Call it on every rank of the process group with this rank's shard
    ``q, k, v [..., N/P, d_h]`` (the tokens :func:`~.sharding.shard_positions` gives it in
    ``layout``); returns this rank's rows of $\mathrm{softmax}(QK^\top\cdot\text{scale})V$,
    ``[..., N/P, d_v]`` (and the LSE with ``return_lse``). Gradients flow to ``q, k, v``
    through the ring backward. ``overlap=False`` starts each transfer only after the
    step's attention (for measuring what overlap buys). ``comm`` counts bytes.
    """
    if comm is None:
        comm = Comm()
    if q.shape[-2] != k.shape[-2] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"ring_attention: every rank holds the same tokens of q, k and v, so "
            f"their sequence lengths must match; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, lse = _RingAttention.apply(q, k, v, is_causal, scale, layout, comm, overlap, stats)
    return (out, lse) if return_lse else out


def simulate_ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    world_size: int,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    layout: str = "contiguous",
    tile: int | None = None,
):
    r"""Ring attention for all ranks in one process: ``(output, lse, tiles)``.

    ``q, k, v [..., N, d_h]`` are the *full* tensors. They are sharded, every rank runs its
    ``P`` ring steps (the block held at step s is the one from rank r - s), and the outputs
    are put back in sequence order. ``tiles[r][s]`` counts the tiles of ``tile`` tokens
    (default: the shard length, one tile per step) rank r computed at step s.
    """
    n = q.shape[-2] // world_size
    tile = n if tile is None else tile
    qs, ks, vs = ([shard(t, world_size, r, layout) for r in range(world_size)] for t in (q, k, v))
    positions = [shard_positions(q.shape[-2], world_size, r, layout) for r in range(world_size)]
    outs, lses = [], []
    tiles: list[list[int]] = []
    work = _work_dtype(q.dtype)
    for r in range(world_size):
        out = torch.zeros(*qs[r].shape[:-1], v.shape[-1], dtype=work)  # (..., n, d_v)
        lse = torch.full(qs[r].shape[:-1], -math.inf, dtype=work)  # (..., n)
        tiles.append([])
        for step in range(world_size):
            src = (r - step) % world_size
            mask = causal_mask_from_positions(positions[r], positions[src]) if is_causal else None
            tiles[r].append(
                count_tiles(positions[r], positions[src], tile=tile, is_causal=is_causal)
            )
            if mask is None or bool(mask.any()):
                out, lse = ring_step(
                    qs[r].to(work), ks[src], vs[src], out, lse, mask=mask, scale=scale
                )
        outs.append(out.to(q.dtype))
        lses.append(lse)
    return unshard(outs, layout), unshard([s[..., None] for s in lses], layout)[..., 0], tiles
