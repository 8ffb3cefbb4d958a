r"""DeepSpeed-Ulysses (Jacobs et al., 2023, "DeepSpeed Ulysses: System Optimizations for
Enabling Training of Extreme Long Sequence Transformer Models"): trade the sequence split
for a head split, attend locally, trade back.

Each of the $P$ ranks holds $n = N/P$ tokens of every head: ``(B, H, n, d_h)``. Heads are
independent, so if each rank held *all* $N$ tokens of $H/P$ heads, ordinary attention would
do. One all-to-all gets there: rank $r$ cuts its tensor into $P$ groups of $H/P$ heads and
sends group $j$ to rank $j$; it receives, from every rank $i$, rank $i$'s tokens of head
group $r$, and stacks them in rank order along the sequence:

.. math::

    (B, H, n, d_h) \text{ on each rank} \;\xrightarrow{\text{all-to-all}}\;
    (B, H/P, N, d_h) \text{ on each rank}.

After attention the inverse all-to-all sends each rank's tokens back. Four all-to-alls per
forward ($Q, K, V$ in, $O$ out), four per backward; no step depends on $N/P$ being large,
but $P$ can be at most $H$ (and must divide it).

:func:`all_to_all_seq_to_head` and :func:`all_to_all_head_to_seq` do the collective for all
ranks at once on lists of tensors, in one process: the shape bookkeeping alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .comm import Comm
from .merge import causal_mask_from_positions
from .sharding import shard_positions

__all__ = [
    "all_to_all_head_to_seq",
    "all_to_all_seq_to_head",
    "head_to_seq",
    "seq_to_head",
    "ulysses_attention",
]


def _check_heads(shape, world_size, who):
    if len(shape) != 4:
        raise ValueError(
            f"{who}: expected a tensor [B, H, N, d_h] (4 dimensions: batch, "
            f"heads, tokens, head width), got shape {tuple(shape)}"
        )
    if shape[1] % world_size:
        raise ValueError(
            f"{who}: Ulysses gives each of the world_size = {world_size} ranks "
            f"H / world_size heads, but H = {shape[1]} is not divisible by "
            f"{world_size}. Use at most H ranks (a divisor of H), or ring "
            f"attention, which has no such limit."
        )


# --------------------------------------------------------------------------- in one process


def all_to_all_seq_to_head(xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The all-to-all for all ranks at once: ``xs[i] (B, H, n, d_h)`` → ``ys[j] (B, H/P, P*n, d_h)``.

    ``ys[j]`` holds head group j (heads ``j*H/P .. (j+1)*H/P - 1``) of every rank's tokens,
    rank 0's first.
    """
    P = len(xs)
    _check_heads(xs[0].shape, P, "all_to_all_seq_to_head")
    h = xs[0].shape[1] // P
    return [torch.cat([x[:, j * h : (j + 1) * h] for x in xs], dim=2) for j in range(P)]


def all_to_all_head_to_seq(ys: list[torch.Tensor]) -> list[torch.Tensor]:
    """The inverse: ``ys[j] (B, H/P, P*n, d_h)`` → ``xs[i] (B, H, n, d_h)``."""
    P = len(ys)
    n = ys[0].shape[2] // P
    return [torch.cat([y[:, :, i * n : (i + 1) * n] for y in ys], dim=1) for i in range(P)]


# --------------------------------------------------------------------------- over the network


def seq_to_head(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    """This rank's ``(B, H, n, d_h)`` → ``(B, H/P, N, d_h)``: one all-to-all."""
    P = comm.world_size
    _check_heads(x.shape, P, "seq_to_head")
    B, H, n, head_dim = x.shape
    send = x.reshape(B, P, H // P, n, head_dim).transpose(0, 1)  # (P, B, H/P, n, d_h) [j]: group j
    recv = comm.all_to_all(send)  # (P, B, H/P, n, d_h) [i]: rank i's tokens of my group
    return recv.permute(1, 2, 0, 3, 4).reshape(B, H // P, P * n, head_dim)  # (B, H/P, N, d_h)


def head_to_seq(y: torch.Tensor, comm: Comm) -> torch.Tensor:
    """This rank's ``(B, H/P, N, d_h)`` → ``(B, H, n, d_h)``: the inverse all-to-all."""
    P = comm.world_size
    B, h, N, head_dim = y.shape
    if N % P:
        raise ValueError(f"head_to_seq: N = {N} tokens do not split over {P} ranks")
    n = N // P
    send = y.reshape(B, h, P, n, head_dim).permute(
        2, 0, 1, 3, 4
    )  # (P, B, H/P, n, d_h) [i]: rank i's tokens
    recv = comm.all_to_all(send)  # (P, B, H/P, n, d_h) [j]: head group j of my tokens
    return recv.transpose(0, 1).reshape(B, P * h, n, head_dim)  # (B, H, n, d_h)


class _SeqToHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return seq_to_head(x, comm)

    @staticmethod
    def backward(ctx, grad):  # the adjoint of an all-to-all is the inverse all-to-all
        return head_to_seq(grad.contiguous(), ctx.comm), None


class _HeadToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, comm):
        ctx.comm = comm
        return head_to_seq(y, comm)

    @staticmethod
    def backward(ctx, grad):
        return seq_to_head(grad.contiguous(), ctx.comm), None


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    layout: str = "contiguous",
    comm: Comm | None = None,
) -> torch.Tensor:
    r"""Attention over the whole sequence from this rank's shard ``(B, H, N/P, d_h)``, by
    all-to-all to a head split and back. Differentiable; returns ``(B, H, N/P, d_v)``.

    After the first all-to-all the sequence is in rank order (rank 0's tokens first), which
    for a non-contiguous ``layout`` is not position order: the causal mask is built from
    the positions, so it stays right.
    """
    if comm is None:
        comm = Comm()
    P = comm.world_size
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_heads(t.shape, P, f"ulysses_attention ({name})")
    seq_len = q.shape[2] * P
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    qh, kh, vh = (_SeqToHead.apply(t, comm) for t in (q, k, v))  # (B, H/P, N, d_h) each
    mask = None
    if is_causal:
        positions = torch.cat([shard_positions(seq_len, P, i, layout) for i in range(P)]).to(
            q.device
        )  # (N,) in rank order
        mask = causal_mask_from_positions(positions, positions)  # (N, N)
    out = F.scaled_dot_product_attention(
        qh, kh, vh, attn_mask=mask, scale=scale
    )  # (B, H/P, N, d_v)
    return _HeadToSeq.apply(out, comm)  # (B, H, N/P, d_v)
