r"""Partial attention and its exact merge by log-sum-exp: the algebra every ring step uses.

Split the keys of one query row into two sets $a$ and $b$. Attention over each set alone
gives a *partial* output and a log-sum-exp,

.. math::

    O_a = \frac{\sum_{j\in a} e^{S_j} V_j}{\sum_{j\in a} e^{S_j}},\qquad
    L_a = \log \sum_{j \in a} e^{S_j},

and the same for $b$. The sums $\ell_a = e^{L_a}$, $\ell_b = e^{L_b}$ simply add, and each
partial output is weighted by its share of the total:

.. math::

    L = \log\big(e^{L_a} + e^{L_b}\big)
      = m + \log\big(e^{L_a - m} + e^{L_b - m}\big),\quad m = \max(L_a, L_b),

    O = e^{L_a - L}\,O_a + e^{L_b - L}\,O_b .

This is chapter 06's online-softmax update with the running state $(m, \ell, A)$ written as
$(L, O)$: exact, associative and commutative, and every exponent is $\le 0$. A set of keys
that a query may not see at all (causal masking) has $\ell = 0$, i.e. $L = -\infty$ and an
output of zeros; it then gets weight $e^{-\infty} = 0$.

Everything here is a pure function of tensors: no processes, no communication.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "block_attention",
    "block_attention_backward",
    "causal_mask_from_positions",
    "merge_attention",
    "merge_many",
    "ring_step",
]


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else is computed in float32 (as chapter 06 does)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def merge_attention(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Merge two partial attentions over disjoint key sets into one: ``(output, lse)``.

    .. math::

        L = m + \log(e^{L_a - m} + e^{L_b - m}),\ m = \max(L_a, L_b),\qquad
        O = e^{L_a - L} O_a + e^{L_b - L} O_b

    ``out_a, out_b [..., Nq, d_v]``, ``lse_a, lse_b [..., Nq]``. Rows where both LSEs are
    $-\infty$ (no visible key yet) stay zero with LSE $-\infty$, never NaN.
    """
    if out_a.shape != out_b.shape or lse_a.shape != lse_b.shape:
        raise ValueError(
            f"merge_attention: the two partial results must have the same "
            f"shapes, got outputs {tuple(out_a.shape)} and {tuple(out_b.shape)}, "
            f"LSEs {tuple(lse_a.shape)} and {tuple(lse_b.shape)}"
        )
    if out_a.shape[:-1] != lse_a.shape:
        raise ValueError(
            f"merge_attention: an output [..., Nq, d_v] goes with an LSE "
            f"[..., Nq]; got output {tuple(out_a.shape)} and LSE "
            f"{tuple(lse_a.shape)} (did you keep a trailing dimension of 1?)"
        )
    m = torch.maximum(lse_a, lse_b)  # (..., Nq)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # both -inf: any finite shift
    w_a = torch.exp(lse_a - m)  # (..., Nq) = l_a / e^m, <= 1
    w_b = torch.exp(lse_b - m)  # (..., Nq)
    total = w_a + w_b  # (..., Nq) = (l_a + l_b) / e^m
    lse = m + torch.log(total)  # (..., Nq) -inf where nothing was seen
    safe = torch.where(total > 0, total, torch.ones_like(total))  # (..., Nq)
    out = (w_a / safe)[..., None] * out_a.to(lse.dtype) + (w_b / safe)[..., None] * out_b.to(
        lse.dtype
    )  # (..., Nq, d_v)
    return out.to(out_a.dtype), lse


def merge_many(
    outs: list[torch.Tensor], lses: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge P partial results (any order: the merge is associative and commutative)."""
    if len(outs) != len(lses) or not outs:
        raise ValueError(
            f"merge_many: expected as many LSEs as outputs (at least one), got "
            f"{len(outs)} outputs and {len(lses)} LSEs"
        )
    out, lse = outs[0], lses[0]
    for o, s in zip(outs[1:], lses[1:]):
        out, lse = merge_attention(out, lse, o, s)
    return out, lse


def causal_mask_from_positions(
    q_positions: torch.Tensor, k_positions: torch.Tensor
) -> torch.Tensor:
    r"""``mask[i, j] = k_positions[j] <= q_positions[i]`` (True = may attend): causal masking
    by *token positions*, so it is right for any sharding, not only for contiguous blocks."""
    return k_positions[None, :] <= q_positions[:, None]  # (Nq, Nk)


def _scores(q, k, scale, mask):
    s = (q @ k.transpose(-2, -1)) * scale  # (..., Nq, Nk)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)  # (..., Nq, Nk)
    return s


def block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention of ``q`` over one block of keys: ``(output, lse)``, the partial result.

    ``q [..., Nq, d_k]``, ``k [..., Nk, d_k]``, ``v [..., Nk, d_v]``, ``mask`` boolean
    broadcastable to ``[..., Nq, Nk]`` (True = may attend). A row with no visible key gets
    output 0 and LSE $-\infty$, so that merging it changes nothing. Computed in float32
    (float64 for float64 inputs); the output is returned in ``q``'s dtype, the LSE in the
    working dtype. Dense: on a GPU this is where a FlashAttention kernel that returns its
    LSE (chapter 06) would run.
    """
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"block_attention: expected q [..., Nq, d_k], k [..., Nk, d_k], "
            f"v [..., Nk, d_v]; got q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    work = _work_dtype(q.dtype)
    s = _scores(q.to(work), k.to(work), scale, mask)  # (..., Nq, Nk)
    lse = torch.logsumexp(s, dim=-1)  # (..., Nq) -inf for fully masked rows
    lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))  # (..., Nq)
    p = torch.exp(s - lse_safe[..., None])  # (..., Nq, Nk) exactly 0 where masked
    out = p @ v.to(work)  # (..., Nq, d_v)
    return out.to(q.dtype), lse


def block_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Gradient contributions of one key block: ``(dq_part, dk, dv)`` in the working dtype.

    Chapter 06's backward, restricted to the block's columns. The key point: ``out`` and
    ``lse`` are the *final* output and log-sum-exp of the queries (over all keys), so
    $P_{ij} = e^{S_{ij} - L_i}$ are the true attention weights of this block's columns:

    .. math::

        dV = P^\top dO,\quad dP = dO\,V^\top,\quad D = \mathrm{rowsum}(dO\circ O),\quad
        dS = P\circ(dP - D),\quad dQ = \text{scale}\,dS\,K,\quad dK = \text{scale}\,dS^\top Q .

    Summed over all blocks, ``dq_part`` gives $dQ$; ``dk``, ``dv`` are this block's
    complete gradients once every query block has added its share.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    work = _work_dtype(q.dtype)
    q, k, v, out, dout = (t.to(work) for t in (q, k, v, out, dout))
    lse = lse.to(work)
    s = _scores(q, k, scale, mask)  # (..., Nq, Nk)
    lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))  # (..., Nq)
    p = torch.exp(s - lse_safe[..., None])  # (..., Nq, Nk) the true weights of these keys
    dv = p.transpose(-2, -1) @ dout  # (..., Nk, d_v)
    dp = dout @ v.transpose(-2, -1)  # (..., Nq, Nk)
    delta = (dout * out).sum(dim=-1)  # (..., Nq) D = rowsum(dO * O)
    ds = p * (dp - delta[..., None])  # (..., Nq, Nk)
    dq = scale * ds @ k  # (..., Nq, d_k)
    dk = scale * ds.transpose(-2, -1) @ q  # (..., Nk, d_k)
    return dq, dk, dv


def ring_step(
    q: torch.Tensor,
    k_block: torch.Tensor,
    v_block: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""One step of ring attention on one rank: attend to the block that just arrived and
    merge it into the running ``(out, lse)``. Start from ``out = 0``, ``lse = -inf``."""
    out_b, lse_b = block_attention(q, k_block, v_block, mask=mask, scale=scale)
    return merge_attention(out, lse.to(lse_b.dtype), out_b.to(out.dtype), lse_b)
