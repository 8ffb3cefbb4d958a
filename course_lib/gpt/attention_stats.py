r"""Statistics of queries, keys and attention weights, as the chapters state them.

The variance of :math:`q \cdot k` against :math:`d_k` (chapter 03), softmax entropies with and
without the scale (03), the energy of each RoPE frequency pair (05) and the share of attention
on the first token (08). Chapter 11 computes them on a real model's tensors, read with
:func:`course_lib.gpt.transparent.run_model`; the tests that decide whether a difference is
real are in :mod:`course_lib.stats`.
"""

from __future__ import annotations

import math

import torch

from ..multihead import repeat_kv
from .transparent import sliding_window_mask

__all__ = ["attention_entropy", "first_token_share", "qk_variance", "rope_pair_energy"]


def qk_variance(q: torch.Tensor, k: torch.Tensor) -> float:
    r"""The variance of the raw scores :math:`q_n \cdot k_m` over every causal pair
    :math:`m \le n`, every head and batch row: ``q [B, H, N, d]``, ``k [B, H_kv, N, d]``.
    Chapter 03's argument says :math:`d_k` when components are i.i.d. with unit variance."""
    k = repeat_kv(k, q.shape[1] // k.shape[1])  # (B, H, N, d)
    s = q.double() @ k.double().transpose(-2, -1)  # (B, H, N, N)
    keep = sliding_window_mask(q.shape[-2])  # (N, N)
    return float(s[..., keep].var())


def attention_entropy(q: torch.Tensor, k: torch.Tensor, scale: float) -> float:
    r"""Mean entropy (nats) of the causal softmax rows :math:`\mathrm{softmax}(\text{scale}\cdot
    q_n \cdot k_m)_{m \le n}`, over every query with at least 2 keys, head and batch row."""
    k = repeat_kv(k, q.shape[1] // k.shape[1])  # (B, H, N, d)
    s = scale * (q.double() @ k.double().transpose(-2, -1))  # (B, H, N, N)
    keep = sliding_window_mask(q.shape[-2])  # (N, N)
    logp = torch.log_softmax(s.masked_fill(~keep, -math.inf), dim=-1)  # (B, H, N, N)
    ent = -(logp.exp() * logp.masked_fill(~keep, 0.0)).sum(-1)  # (B, H, N)
    return float(ent[..., 1:].mean())


def rope_pair_energy(x: torch.Tensor, interleaved: bool = True) -> torch.Tensor:
    r"""``[d/2]``: each RoPE pair's share of :math:`\lVert x \rVert^2`, averaged over every
    vector of ``x [..., d]`` (rotation keeps a pair's norm, so before or after RoPE is the same).
    Pair :math:`i` is :math:`(2i, 2i+1)` interleaved, :math:`(i, i + d/2)` half-split."""
    d = x.shape[-1]
    x = x.double().reshape(-1, d)  # (M, d)
    a, b = (x[:, 0::2], x[:, 1::2]) if interleaved else (x[:, : d // 2], x[:, d // 2 :])
    e = (a**2 + b**2).mean(0)  # (d/2,)
    return e / e.sum()


def first_token_share(weights: torch.Tensor, start: int = 1) -> float:
    """The mean weight on key 0 over the queries ``n >= start`` (and every head and row) of
    ``weights [B, H, N, N]``: the "attention sink" of Xiao et al. (2023)."""
    return float(weights[:, :, start:, 0].mean())
