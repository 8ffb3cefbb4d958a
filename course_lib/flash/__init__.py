r"""FlashAttention: exact attention computed tile by tile, with O(N) extra memory.

Naive attention materialises the :math:`N \times N` matrices :math:`S = QK^\top` and
:math:`P = \mathrm{softmax}(S)`. FlashAttention (Dao et al., 2022, "FlashAttention: Fast and
Memory-Efficient Exact Attention with IO-Awareness") never does: it walks over tiles of
keys and keeps, per query row, a running maximum :math:`m`, a running denominator
:math:`\ell` and an unnormalised output :math:`A` (the *online softmax* of Milakov &
Gimelshein, 2018, "Online normalizer calculation for softmax"):

.. math::

    m' = \max(m, \max_j S_{ij}),\quad
    \ell' = e^{m - m'}\,\ell + \sum_j e^{S_{ij} - m'},\quad
    A' = e^{m - m'}\,A + \sum_j e^{S_{ij} - m'}\,V_j,

and at the end :math:`O = A/\ell`, :math:`L = m + \log\ell` (the log-sum-exp, saved so
the backward pass can recompute :math:`P = e^{S - L}` instead of storing it).

Three implementations of the same algorithm:

* :func:`flash_attention_reference`: the tiled loop in plain torch, any device and dtype,
  returns ``(output, lse)``, with a backward that recomputes the tiles from the saved
  log-sum-exp (so autograd never holds more than one tile of scores either): the algorithm
  to read.
* :func:`flash_attention`: Triton kernels (forward, and a backward in three kernels) behind
  a ``torch.autograd.Function``: the algorithm to run. On a CUDA GPU the kernels are
  compiled; on a CPU they run in Triton's interpreter (``TRITON_INTERPRET=1``, set by
  ``course_lib.env.setup()``), slowly but exactly.
* :func:`flash_decode`: the forward for a few queries against a long key/value cache, with
  the keys split over programs and the partial results merged by their log-sum-exps.

**Conventions** (and where other libraries differ):

====================  ============================  ==============================  ===============================  ===============================
                      course_lib (this module)      torch SDPA                      flash-attn (``flash_attn_func``)  Triton's fused-attention tutorial
====================  ============================  ==============================  ===============================  ===============================
layout                ``[B, H, N, d_h]``;           ``[B, H, N, d_h]``              ``[B, N, H, d_h]``               ``[B, H, N, d_h]``
                      ``layout="bnhd"`` for
                      flash-attn's
causal alignment      top-left (``is_causal``);     top-left (``is_causal``);       bottom-right                     top-left, and only
                      ``causal_alignment=``         bottom-right through            (query :math:`i` sees keys up     :math:`N_q = N_k`
                      ``"bottom_right"``            ``causal_lower_right``          to :math:`i + N_k - N_q`)
grouped-query (GQA)   k, v with :math:`H_{kv}`       ``enable_gqa=True``             :math:`H_{kv}` heads accepted     no
                      heads, :math:`H_{kv} \mid H`
sliding window        ``window=W``: keys            a boolean ``attn_mask``         ``window_size=(W - 1, 0)``        no
                      :math:`i + \delta - W + 1 ..`
                      :math:`i + \delta`
scale default         :math:`1/\sqrt{d_h}`          :math:`1/\sqrt{d_h}`            :math:`1/\sqrt{d_h}`              none (``sm_scale`` required)
log-sum-exp           ``flash_attention_with_lse``  not returned                    ``return_attn_probs=True``:       kept internally (``M``), base 2
                      ``[B, H, N_q]``, natural log                                  ``[B, H, N_q]``, natural log
====================  ============================  ==============================  ===============================  ===============================

Both alignments are correct by their own definitions and agree when :math:`N_q = N_k`; they
differ for a KV cache or chunked prefill (:math:`N_q < N_k`), where bottom-right is what
one wants (the new queries come last). A query that sees no key at all (bottom-right with
:math:`N_q > N_k`) gets zero output and :math:`L = -\infty`, like a fully masked row in
chapter 02.
"""

from __future__ import annotations

import importlib
import math
import os
from dataclasses import dataclass

import numpy as np
import torch

from ..validation import check_flash_inputs, shape_of

__all__ = [
    "ALIGNMENTS",
    "LAYOUTS",
    "SUPPORTED_HEAD_DIMS",
    "decode_splits",
    "flash_attention",
    "flash_attention_reference",
    "flash_attention_with_lse",
    "flash_decode",
    "kernel_config",
    "kernel_tile_map",
    "key_tile_range",
    "triton_mode",
]

SUPPORTED_HEAD_DIMS = (16, 128)  # inclusive range of head dimensions the kernel takes
ALIGNMENTS = ("top_left", "bottom_right")
LAYOUTS = ("bhnd", "bnhd")

# --------------------------------------------------------------------------- conventions


def _check_options(is_causal, causal_alignment, window, who: str) -> int | None:
    """Validate the mask options; returns the window as an int (or None)."""
    if not isinstance(is_causal, (bool, np.bool_)):
        raise TypeError(
            f"{who}: is_causal must be True or False, got {is_causal!r}; choose the alignment "
            f"with causal_alignment={ALIGNMENTS}"
        )
    if causal_alignment not in ALIGNMENTS:
        raise ValueError(
            f"{who}: causal_alignment must be one of {ALIGNMENTS}, got {causal_alignment!r} "
            "('top_left': query i sees keys j <= i, as torch SDPA's is_causal; "
            "'bottom_right': j <= i + Nk - Nq, as flash-attn's causal and a KV cache)"
        )
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"{who}: window must be a positive int (a number of keys), got {window!r}")
    if not is_causal:
        raise ValueError(
            f"{who}: window={window} is a causal sliding window (query i sees keys "
            f"i - {window} + 1 .. i); pass is_causal=True with it"
        )
    return int(window)


def _diag_offset(n_q: int, n_k: int, causal_alignment: str) -> int:
    r"""The diagonal offset :math:`\delta`: query :math:`i` sits at key position :math:`i + \delta`."""
    return 0 if causal_alignment == "top_left" else n_k - n_q


def _layout_views(q, k, v, layout, who: str):
    """The inputs as ``[B, H, N, d_h]`` views (no copy), after checking ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(
            f"{who}: layout must be one of {LAYOUTS}, got {layout!r} ('bhnd' = [B, H, N, d_h], "
            "torch SDPA's and the course's; 'bnhd' = [B, N, H, d_h], flash-attn's)"
        )
    if layout == "bnhd":
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.dim() != 4:
                raise ValueError(
                    f"{who}: layout='bnhd' expects {name} of shape [B, N, H, d_h] (4 "
                    f"dimensions), got {shape_of(x)}"
                )
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return q, k, v


def _check_heads(q, k, v, who: str, layout: str) -> None:
    """Batch dimensions equal; k and v share H_kv; H a multiple of H_kv (GQA), on axis -3."""
    names = "[B, N, H, d_h]" if layout == "bnhd" else "[..., H, N, d_h]"
    hint = (
        ""
        if layout == "bnhd"
        else " If your tensors are [B, N, H, d_h] (flash-attn's layout, or Hugging Face's "
        "before the transpose), pass layout='bnhd'."
    )
    if not (q.dim() == k.dim() == v.dim()):
        raise ValueError(
            f"{who}: q, k and v must have the same number of dimensions {names}: got q "
            f"{shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}"
        )
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"{who}: k and v must have the same batch, heads and number of keys: got k "
            f"{shape_of(k)}, v {shape_of(v)}" + hint
        )
    if q.dim() < 3 or q.shape[-3] == k.shape[-3]:
        if q.shape[:-2] != k.shape[:-2]:
            raise ValueError(
                f"{who}: q, k and v must have the same batch dimensions: got q "
                f"{shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}" + hint
            )
        return
    h, h_kv = q.shape[-3], k.shape[-3]
    if q.shape[:-3] != k.shape[:-3]:
        raise ValueError(
            f"{who}: q, k and v must have the same batch dimensions: got q {shape_of(q)}, "
            f"k {shape_of(k)}, v {shape_of(v)}" + hint
        )
    if h_kv == 0 or h % h_kv:
        raise ValueError(
            f"{who}: q has H = {h} heads and k, v have H_kv = {h_kv}: grouped-query attention "
            f"needs H to be a multiple of H_kv (query head h reads key/value head h // (H / "
            f"H_kv)). Got q {shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}." + hint
        )


def _validate(q, k, v, scale, who: str, layout: str) -> float:
    """The checks of :func:`check_flash_inputs`, with grouped key/value heads allowed."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who}: expected {name} to be a torch.Tensor, got {type(x).__name__}")
    _check_heads(q, k, v, who, layout)
    if q.dim() >= 3 and q.shape[-3] != k.shape[-3]:  # let the shared checks see equal heads
        k = k[..., :1, :, :].expand(*q.shape[:-2], *k.shape[-2:])
        v = v[..., :1, :, :].expand(*q.shape[:-2], *v.shape[-2:])
    return check_flash_inputs(q, k, v, scale, who=who)


# --------------------------------------------------------------------------- tile classes


def key_tile_range(
    m_first: int,
    m_last: int,
    n_k: int,
    block_n: int,
    *,
    is_causal: bool = False,
    diag: int = 0,
    window: int | None = None,
) -> tuple[int, int, int, int]:
    r"""Which key tiles the queries ``m_first..m_last`` compute: ``(lo, full_lo, full_hi, hi)``.

    The Python twin of the kernels' ``_key_range`` (same arithmetic, tested equal). Keys in
    ``[lo, hi)`` are visited; key tiles starting in ``[full_lo, full_hi)`` are *full* (every
    query sees every key: no mask), those in ``[lo, full_lo)`` and ``[full_hi, hi)`` are
    *partial* (crossing the causal diagonal, the window's edge or the end of the keys: the
    element-wise mask is applied); the rest are *skipped*. Query :math:`i` sees key :math:`j`
    when :math:`j \le i + \delta` (causal, :math:`\delta` = ``diag``) and
    :math:`j \ge i + \delta - W + 1` (window :math:`W`).
    """
    hi = n_k
    full_hi = n_k // block_n * block_n
    lo = full_lo = 0
    if is_causal:
        hi = min(hi, max(m_last + diag + 1, 0))
        full_hi = min(full_hi, max(m_first + diag + 1, 0) // block_n * block_n)
    if window is not None:
        first_key = max(m_first + diag - window + 1, 0)
        hi = 0 if first_key >= hi else hi  # the window lies past the last key: nothing
        lo = first_key // block_n * block_n
        full_lo = -(-max(m_last + diag - window + 1, 0) // block_n) * block_n
    lo = min(lo, hi)
    full_lo = min(max(full_lo, lo), hi)
    full_hi = min(max(full_hi, full_lo), hi)
    return lo, full_lo, full_hi, hi


def kernel_tile_map(
    n_q: int,
    n_k: int,
    block_m: int,
    block_n: int,
    *,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: int | None = None,
) -> torch.Tensor:
    """The forward kernel's tile map ``tiles [ceil(n_q/block_m), ceil(n_k/block_n)]``.

    0 = skipped (never loaded), 1 = partial (the element-wise mask is applied), 2 = full
    (computed without a mask), exactly as the kernel's loops classify them
    (:func:`key_tile_range`, with a ragged last tile counted as partial).
    """
    window = _check_options(is_causal, causal_alignment, window, "kernel_tile_map")
    diag = _diag_offset(n_q, n_k, causal_alignment)
    t_q, t_k = -(-n_q // block_m), -(-n_k // block_n)
    tiles = torch.zeros(t_q, t_k, dtype=torch.long)  # (Tq, Tk)
    for i in range(t_q):
        m_first, m_last = i * block_m, min(n_q, (i + 1) * block_m) - 1
        lo, full_lo, full_hi, hi = key_tile_range(
            m_first, m_last, n_k, block_n, is_causal=is_causal, diag=diag, window=window
        )
        for j0 in range(lo, hi, block_n):
            tiles[i, j0 // block_n] = 2 if full_lo <= j0 < full_hi else 1
    return tiles


# --------------------------------------------------------------------------- the algorithm


def _grouped(q, k, v):
    """q as ``(..., H_kv, G, Nq, d)``, k and v as ``(..., H_kv, 1, Nk, d)`` (views, no copy)."""
    if q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        qg = q.unflatten(-3, (k.shape[-3], g))  # (..., H_kv, G, Nq, d)
    else:
        qg = q.unsqueeze(-3)  # (..., H, 1, Nq, d)
    return qg, k.unsqueeze(-3), v.unsqueeze(-3)


def _tile_mask(i0, i1, j0, j1, diag, is_causal, window, device):
    """``(bq, bk)`` boolean: which keys ``j0..j1-1`` the queries ``i0..i1-1`` see."""
    rows = torch.arange(i0, i1, device=device)[:, None] + diag  # (bq, 1) key positions
    cols = torch.arange(j0, j1, device=device)[None, :]  # (1, bk)
    ok = torch.ones(i1 - i0, j1 - j0, dtype=torch.bool, device=device)  # (bq, bk)
    if is_causal:
        ok &= cols <= rows
    if window is not None:
        ok &= cols >= rows - window + 1
    return ok


def _reference_tiles(n_q, n_k, bq, bk, is_causal, diag, window):
    """``(i0, i1, [(j0, j1, masked), ...])`` for every query tile: the kernel's tile classes."""
    for i0 in range(0, n_q, bq):
        i1 = min(i0 + bq, n_q)
        lo, full_lo, full_hi, hi = key_tile_range(
            i0, i1 - 1, n_k, bk, is_causal=is_causal, diag=diag, window=window
        )
        yield (
            i0,
            i1,
            [(j0, min(j0 + bk, hi), not (full_lo <= j0 < full_hi)) for j0 in range(lo, hi, bk)],
        )


def _reference_forward(qg, kg, vg, scale, bq, bk, is_causal, diag, window):
    """The tiled forward on grouped views: ``(out (..., G, Nq, dv), lse (..., G, Nq))``, in work dtype."""
    work = torch.float64 if qg.dtype == torch.float64 else torch.float32
    n_q, n_k = qg.shape[-2], kg.shape[-2]
    dev = qg.device
    out = torch.zeros(*qg.shape[:-1], vg.shape[-1], dtype=work, device=dev)  # (..., G, Nq, dv)
    lse = torch.full(qg.shape[:-1], -math.inf, dtype=work, device=dev)  # (..., G, Nq)
    for i0, i1, key_tiles in _reference_tiles(n_q, n_k, bq, bk, is_causal, diag, window):
        qi = qg[..., i0:i1, :].to(work)  # (..., G, bq, d)
        m = torch.full(qi.shape[:-1], -math.inf, dtype=work, device=dev)  # (..., G, bq)
        ell = torch.zeros_like(m)  # (..., G, bq)
        acc = torch.zeros(*qi.shape[:-1], vg.shape[-1], dtype=work, device=dev)  # (..., G, bq, dv)
        for j0, j1, masked in key_tiles:
            kj = kg[..., j0:j1, :].to(work)  # (..., 1, bk, d)
            vj = vg[..., j0:j1, :].to(work)  # (..., 1, bk, dv)
            s = (qi @ kj.transpose(-2, -1)) * scale  # (..., G, bq, bk) one tile of scores
            if masked:  # a partial tile: the diagonal, the window's edge
                s = s.masked_fill(
                    ~_tile_mask(i0, i1, j0, j1, diag, is_causal, window, dev), -math.inf
                )
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., G, bq)
            m_sub = m_new.masked_fill(m_new == -math.inf, 0.0)  # rows with no key yet: no inf - inf
            alpha = torch.exp(m - m_sub)  # (..., G, bq) rescales the old statistics
            p = torch.exp(s - m_sub[..., None])  # (..., G, bq, bk)
            ell = alpha * ell + p.sum(dim=-1)  # (..., G, bq)
            acc = alpha[..., None] * acc + p @ vj  # (..., G, bq, dv)
            m = m_new
        seen = ell > 0  # (..., G, bq) rows that saw at least one key
        out[..., i0:i1, :] = acc / torch.where(seen, ell, 1.0)[..., None]  # (..., G, bq, dv)
        lse[..., i0:i1] = torch.where(seen, m + torch.log(torch.where(seen, ell, 1.0)), -math.inf)
    return out, lse


def _reference_backward(qg, kg, vg, out, lse, dout, dlse, scale, bq, bk, is_causal, diag, window):
    r"""dQ, dK, dV tile by tile from the saved output and log-sum-exp (in the work dtype).

    :math:`P = e^{S - L}` (recomputed), :math:`dV_j \mathrel{+}= P^\top dO`,
    :math:`dP = dO\,V_j^\top`, :math:`dS = P\circ(dP - D + dL)` with
    :math:`D = \mathrm{rowsum}(dO\circ O)` (and :math:`dL`, the gradient of the returned
    log-sum-exp: :math:`\partial L_i/\partial S_{ij} = P_{ij}`), :math:`dQ \mathrel{+}=
    \text{scale}\,dS\,K_j`, :math:`dK_j \mathrel{+}= \text{scale}\,dS^\top Q`, summed over
    the query heads of a group.
    """
    work = out.dtype
    n_q, n_k = qg.shape[-2], kg.shape[-2]
    dev = qg.device
    dq = torch.zeros(qg.shape, dtype=work, device=dev)  # (..., G, Nq, d)
    dk = torch.zeros(kg.shape, dtype=work, device=dev)  # (..., 1, Nk, d)
    dv = torch.zeros(vg.shape, dtype=work, device=dev)  # (..., 1, Nk, dv)
    dout = torch.zeros_like(out) if dout is None else dout.to(work)  # (..., G, Nq, dv)
    delta = (dout * out).sum(dim=-1)  # (..., G, Nq) D = rowsum(dO o O)
    if dlse is not None:
        delta = delta - dlse.to(work)  # dS = P o (dP - D + dL)
    lse_safe = lse.masked_fill(lse == -math.inf, math.inf)  # rows with no key: P = 0
    for i0, i1, key_tiles in _reference_tiles(n_q, n_k, bq, bk, is_causal, diag, window):
        qi = qg[..., i0:i1, :].to(work)  # (..., G, bq, d)
        doi = dout[..., i0:i1, :]  # (..., G, bq, dv)
        li = lse_safe[..., i0:i1, None]  # (..., G, bq, 1)
        di = delta[..., i0:i1, None]  # (..., G, bq, 1)
        for j0, j1, masked in key_tiles:
            kj = kg[..., j0:j1, :].to(work)  # (..., 1, bk, d)
            vj = vg[..., j0:j1, :].to(work)  # (..., 1, bk, dv)
            p = torch.exp((qi @ kj.transpose(-2, -1)) * scale - li)  # (..., G, bq, bk)
            if masked:
                p = p.masked_fill(~_tile_mask(i0, i1, j0, j1, diag, is_causal, window, dev), 0.0)
            dv[..., j0:j1, :] += (p.transpose(-2, -1) @ doi).sum(dim=-3, keepdim=True)
            ds = p * (doi @ vj.transpose(-2, -1) - di)  # (..., G, bq, bk)
            dq[..., i0:i1, :] += scale * ds @ kj  # (..., G, bq, d)
            dk[..., j0:j1, :] += scale * (ds.transpose(-2, -1) @ qi).sum(dim=-3, keepdim=True)
    return dq, dk, dv


class _ReferenceFunction(torch.autograd.Function):
    """Autograd for the tiled reference: saves q, k, v, O and L; the backward recomputes tiles."""

    @staticmethod
    def forward(ctx, q, k, v, scale, bq, bk, is_causal, diag, window):
        qg, kg, vg = _grouped(q, k, v)
        out, lse = _reference_forward(qg, kg, vg, scale, bq, bk, is_causal, diag, window)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (scale, bq, bk, is_causal, diag, window)
        ctx.set_materialize_grads(False)
        out_user = out.reshape(*q.shape[:-1], out.shape[-1]).to(q.dtype)  # (..., H, Nq, dv)
        return out_user, lse.reshape(q.shape[:-1])  # (..., H, Nq)

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None and dlse is None:
            return (None,) * 9
        qg, kg, vg = _grouped(q, k, v)
        dout_g = None if dout is None else dout.reshape(out.shape)
        dlse_g = None if dlse is None else dlse.reshape(lse.shape)
        dq, dk, dv = _reference_backward(qg, kg, vg, out, lse, dout_g, dlse_g, *ctx.options)
        return (
            dq.reshape(q.shape).to(q.dtype),
            dk.squeeze(-3).to(k.dtype),
            dv.squeeze(-3).to(v.dtype),
            *(None,) * 6,
        )


def flash_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_size: int | tuple[int, int] = 64,
    causal_alignment: str = "top_left",
    window: int | None = None,
    layout: str = "bhnd",
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Tiled attention with the online softmax, in plain torch: returns ``(output, lse)``.

    ``q [..., H, Nq, d]``, ``k [..., H_kv, Nk, d]``, ``v [..., H_kv, Nk, d_v]`` →
    ``output [..., H, Nq, d_v]`` and ``lse [..., H, Nq]`` with
    :math:`L_i = \log\sum_j e^{S_{ij}}` over the keys query :math:`i` may see
    (:math:`-\infty` and a zero output for a query that sees none). :math:`H_{kv}` may divide
    :math:`H` (grouped-query attention on the third-last axis: query head :math:`h` reads
    key/value head :math:`\lfloor h/G\rfloor`, with no repeated K, V); any other leading
    dimensions must match. ``layout="bnhd"`` takes flash-attn's ``[B, N, H, d]`` (and returns
    the output that way; the LSE stays ``[B, H, Nq]``). ``block_size`` is an int (queries
    and keys) or a pair ``(block_q, block_k)``.

    ``is_causal`` aligns top-left (query :math:`i` sees keys :math:`j \le i`, as torch SDPA)
    or, with ``causal_alignment="bottom_right"``, bottom-right (:math:`j \le i + N_k - N_q`, as
    flash-attn and a KV cache); ``window=W`` (with ``is_causal``) keeps the last :math:`W`
    keys, its own included. Key tiles that no query of a tile sees are skipped; only the
    tiles crossing the diagonal or the window's edge are masked element-wise (the same tile
    classes as the kernel: :func:`kernel_tile_map`).

    Memory: never more than one ``(block_q, block_k)`` tile of scores per (batch, head),
    in the forward *and* under autograd: the backward is a custom one that recomputes each
    tile from the saved log-sum-exp, as the kernel does (autograd of the loop itself would
    keep every tile). Computes in float32 (float64 for float64 inputs) and returns the
    output in the inputs' dtype, the LSE in float32/64. Differentiable in q, k, v, through
    the output and the LSE.
    """
    who = "flash_attention_reference"
    window = _check_options(is_causal, causal_alignment, window, who)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who}: expected {name} to be a torch.Tensor, got {type(x).__name__}")
    q, k, v = _layout_views(q, k, v, layout, who)
    scale = _validate(q, k, v, scale, who, layout)
    if isinstance(block_size, int):
        block_size = (block_size, block_size)
    bq, bk = (int(b) for b in block_size)
    if bq < 1 or bk < 1:
        raise ValueError(f"block_size must be positive, got {block_size!r}")
    diag = _diag_offset(q.shape[-2], k.shape[-2], causal_alignment)
    out, lse = _ReferenceFunction.apply(q, k, v, scale, bq, bk, bool(is_causal), diag, window)
    if layout == "bnhd":
        out = out.transpose(1, 2)
    return out, lse


# --------------------------------------------------------------------------- Triton


def _load_kernels():
    """Import the Triton kernels, turning on the interpreter first when there is no GPU."""
    from ..env import choose_triton_mode

    choose_triton_mode()
    try:
        kernels = importlib.import_module("course_lib.flash.kernels")
    except ImportError as err:
        from ..env import TRITON_HELP

        raise ImportError(f"flash_attention needs Triton. {TRITON_HELP}") from err
    return kernels


def triton_mode() -> str:
    """``"interpreter"`` (CPU), ``"compiled"`` (GPU) or ``"unavailable"``."""
    try:
        kernels = _load_kernels()
    except ImportError:
        return "unavailable"
    return "interpreter" if kernels.is_interpreted() else "compiled"


def _cfg(bm: int, bn: int, warps: int = 4, stages: int = 2) -> dict:
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages)


def kernel_config(
    head_dim: int,
    device: torch.device | str,
    *,
    interpreted: bool | None = None,
    dtype: torch.dtype | None = None,
) -> dict[str, list[dict]]:
    """Candidate tile sizes and launch settings per kernel: ``{"fwd", "dkdv", "dq", "decode"}``.

    Each entry is a list of configs ``{BLOCK_M, BLOCK_N, num_warps, num_stages}``
    (``BLOCK_M`` counts queries, ``BLOCK_N`` keys). ``decode`` is a menu by size, not a set
    of candidates: :func:`flash_decode` takes the first whose ``BLOCK_M`` (rows of packed
    queries) holds its :math:`G N_q` rows, with more warps for more rows (a 128-row tile on 4
    warps would spill). For the other kernels, one candidate: launched as is. Several (on a GPU):
    Triton's autotuner times them once per (bucket of the sequence lengths, d_h, causal,
    window, dtype) and keeps the fastest; the bucket is the next power of two of each length,
    so a new length does not re-tune. Configs that need more shared memory than the GPU has
    are discarded by the autotuner, so the same list works on an H100 and on a T4.

    Every GPU candidate compiles without register spills for sm_80 and sm_90 (``ptxas -v``,
    ``python -m course_lib.flash.aot --all``; a test checks): a spilled tile stores its
    accumulator in local memory, a round trip through the cache on every step of the loop.
    The first candidate is what runs without autotuning (``COURSE_FLASH_AUTOTUNE=0``).

    In the interpreter the tiles are small so that tests on short sequences still cross
    several tiles (ragged ends, the causal diagonal); there the cost is per element, not
    per program. float32 on a GPU gets one small config and no autotuning: its ``tl.dot``
    runs in true float32 on the ordinary cores (no tensor cores), where large tiles only cost
    registers, and compiling such a kernel takes tens of seconds per candidate.
    """
    if interpreted is None:
        interpreted = triton_mode() == "interpreter"
    if interpreted or torch.device(device).type != "cuda":
        return {
            "fwd": [_cfg(64, 32)],
            "dkdv": [_cfg(32, 64)],
            "dq": [_cfg(64, 32)],
            "decode": [_cfg(16, 32)],
        }
    if dtype == torch.float32:
        return {
            "fwd": [_cfg(64, 32, 4, 2)],
            "dkdv": [_cfg(32, 64, 4, 2)],
            "dq": [_cfg(64, 32, 4, 2)],
            "decode": [_cfg(16, 32, 4, 2)],
        }
    cands = _gpu_candidates(head_dim)
    if os.environ.get("COURSE_FLASH_AUTOTUNE", "1") == "0":  # first candidate only: no tuning
        return {k: configs if k == "decode" else configs[:1] for k, configs in cands.items()}
    return cands


def _gpu_candidates(head_dim: int) -> dict[str, list[dict]]:
    """The autotuner's candidates on a GPU, the default first.

    Every one compiles without register spills for sm_90 and sm_80, causal or not, and with
    grouped heads, a window and ragged lengths at once (``benchmarks/results/
    flash_aot_registers.json``; ``tests/test_flash.py`` keeps the two in step). Tiles of 128
    queries keep the forward's and the dQ pass's query tile on chip with 8 warps; the dK/dV
    pass holds two float32 accumulators (dK and dV) per key tile, hence its narrower tiles.
    """
    if head_dim > 64:
        return {
            "fwd": [_cfg(128, 64, 8, 3), _cfg(128, 64, 8, 4), _cfg(128, 32, 8, 3)],
            "dkdv": [_cfg(32, 64, 8, 2), _cfg(32, 64, 8, 3), _cfg(64, 32, 8, 2)],
            "dq": [_cfg(128, 32, 8, 2), _cfg(64, 32, 4, 3)],
            "decode": [_cfg(16, 64, 4, 3), _cfg(64, 32, 4, 3), _cfg(128, 64, 8, 3)],
        }
    return {
        "fwd": [_cfg(128, 64, 8, 3), _cfg(128, 128, 8, 3), _cfg(64, 64, 4, 4), _cfg(128, 32, 8, 3)],
        "dkdv": [_cfg(32, 128, 8, 2), _cfg(32, 128, 8, 3), _cfg(32, 64, 8, 2)],
        "dq": [_cfg(128, 64, 8, 2), _cfg(128, 32, 8, 3), _cfg(64, 32, 4, 3)],
        "decode": [_cfg(16, 64, 4, 4), _cfg(64, 64, 4, 4), _cfg(128, 64, 8, 4)],
    }


_AUTOTUNE_KEY = ["NQ_BUCKET", "NK_BUCKET", "HEAD_DIM", "IS_CAUSAL", "HAS_WINDOW"]
_EVEN = {
    "EVEN_M": lambda args: args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_N": lambda args: args["N_K"] % args["BLOCK_N"] == 0,
}
_autotuned: dict = {}
_DO_BENCH = None  # None: Triton's GPU timer; tests put a CPU timer here to tune in the interpreter


def _launch(kernels, name: str, configs: list[dict], grid, n_q: int, n_k: int, *args, **meta):
    """Launch ``kernels.<name>`` with one config, or autotune over several.

    ``grid(meta)`` maps the chosen tile sizes to the launch grid. ``EVEN_M`` and ``EVEN_N``
    (``n_q``, ``n_k`` divisible by the tile sizes) are derived from the chosen config:
    directly for one config, by ``triton.heuristics`` under the autotuner.
    """
    import triton

    kernel = getattr(kernels, name)
    if len(configs) == 1:
        c = configs[0]
        kernel[grid(c)](
            *args,
            **meta,
            BLOCK_M=c["BLOCK_M"],
            BLOCK_N=c["BLOCK_N"],
            EVEN_M=n_q % c["BLOCK_M"] == 0,
            EVEN_N=n_k % c["BLOCK_N"] == 0,
            num_warps=c["num_warps"],
            num_stages=c["num_stages"],
        )
        return
    key = (
        name,
        kernels.is_interpreted(),
        _DO_BENCH,
        tuple(tuple(sorted(c.items())) for c in configs),
    )
    if key not in _autotuned:
        tconfigs = [
            triton.Config(
                {"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"]},
                num_warps=c["num_warps"],
                num_stages=c["num_stages"],
            )
            for c in configs
        ]
        _autotuned[key] = triton.autotune(configs=tconfigs, key=_AUTOTUNE_KEY, do_bench=_DO_BENCH)(
            triton.heuristics(_EVEN)(kernel)
        )
    _autotuned[key][grid](*args, **meta)


_DTYPES_CPU = (torch.float32, torch.float16)
_MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y: the kernels put batch x heads there
_DTYPES_CUDA = (torch.float16, torch.bfloat16, torch.float32)


def _kernel_views(q, k, v, scale, layout, who: str):
    """Validate a kernel call; returns ``[B, H, N, d_h]`` views, the layout and the scale."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who}: expected {name} to be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(
                f"{who}: expected q, k, v of shape [B, H, N, d_h] (4 dimensions; or [B, N, H, "
                f"d_h] with layout='bnhd'), got q {shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}"
            )
    if layout is None:
        # [B, N, H, d_h] read as [B, H, N, d_h] looks like more heads than tokens, in q and
        # k alike: the one mistake shapes can reveal. Ask rather than guess.
        if q.shape[1] == k.shape[1] > max(q.shape[2], k.shape[2]) and q.shape[2] > 1:
            raise ValueError(
                f"{who}: q {shape_of(q)} and k {shape_of(k)} read as [B, H, N, d_h] have "
                f"more heads ({q.shape[1]}) than tokens ({q.shape[2]}): is this flash-attn's "
                "[B, N, H, d_h] layout? Pass layout='bnhd' for [B, N, H, d_h], or "
                "layout='bhnd' if you do mean so many heads."
            )
        layout = "bhnd"
    qv, kv, vv = _layout_views(q, k, v, layout, who)
    scale = _validate(qv, kv, vv, scale, who, layout)
    if scale <= 0:
        raise ValueError(f"{who}: the kernels take a positive scale, got {scale!r}")
    head_dim = qv.shape[-1]
    if vv.shape[-1] != head_dim:
        raise ValueError(
            f"{who}: v must have the same head dimension as q and k (d_h = {head_dim}), got "
            f"v {shape_of(v)}"
        )
    lo, hi = SUPPORTED_HEAD_DIMS
    if not lo <= head_dim <= hi:
        raise ValueError(
            f"{who}: head dimension d_h = {head_dim} is not supported; the kernel takes "
            f"{lo} <= d_h <= {hi} (use flash_attention_reference or torch SDPA otherwise)"
        )
    if qv.shape[-2] == 0:
        raise ValueError(f"{who}: there are no queries (Nq = 0)")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"{who} runs on CUDA GPUs or on the CPU through Triton's interpreter, got "
            f"tensors on {q.device}"
        )
    allowed = _DTYPES_CUDA if q.device.type == "cuda" else _DTYPES_CPU
    if q.dtype not in allowed:
        where = "on CUDA" if q.device.type == "cuda" else "on the CPU (Triton's interpreter)"
        names = ", ".join(str(t).replace("torch.", "") for t in allowed)
        raise TypeError(f"{who}: dtype {q.dtype} is not supported {where}; use one of {names}")
    if (
        q.device.type == "cuda"
        and q.dtype == torch.bfloat16
        and torch.cuda.get_device_capability(q.device) < (8, 0)
    ):
        raise TypeError(
            f"{who}: bfloat16 needs a GPU of compute capability 8.0 or newer (Ampere); use "
            "float16 on this GPU"
        )
    if q.device.type == "cuda" and qv.shape[0] * qv.shape[1] > _MAX_GRID_Y:
        raise ValueError(
            f"{who}: B*H = {qv.shape[0] * qv.shape[1]} (batch x heads) exceeds the CUDA grid "
            f"limit of {_MAX_GRID_Y} programs on the second grid axis; split the batch into "
            "chunks"
        )
    return qv, kv, vv, layout, scale


def _dot_precision(dtype: torch.dtype) -> str:
    """``input_precision`` of every ``tl.dot``: full float32 ("ieee") for float32 inputs.

    On a GPU ``tl.dot`` would otherwise round float32 operands to TF32 (a 10-bit mantissa,
    errors ~1e-3) while the CPU interpreter multiplies in true float32: results would
    silently depend on the machine. float16/bfloat16 operands ignore the setting.
    """
    return "ieee" if dtype == torch.float32 else "tf32"


def _on_device(x: torch.Tensor):
    """Launch on the tensors' GPU (Triton launches on the *current* CUDA device)."""
    import contextlib

    return torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The kernels need unit stride along d_h (any strides elsewhere: no copy for 'bnhd')."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _empty_like_layout(x: torch.Tensor, layout: str, dtype=None) -> torch.Tensor:
    """An empty ``[B, H, N, d]`` view whose memory is contiguous in the caller's layout."""
    B, H, N, d = x.shape
    dtype = x.dtype if dtype is None else dtype
    if layout == "bnhd":
        return torch.empty(B, N, H, d, dtype=dtype, device=x.device).transpose(1, 2)
    return torch.empty(B, H, N, d, dtype=dtype, device=x.device)


def _prepare(q):
    kernels = _load_kernels()
    interpreted = kernels.is_interpreted()
    if q.device.type == "cpu" and not interpreted:
        raise RuntimeError(
            "flash_attention got CPU tensors but Triton is in compiled (GPU) mode. Triton "
            "reads TRITON_INTERPRET when @triton.jit decorates a kernel, the first time "
            "course_lib.flash.kernels is imported: restart the kernel and call "
            "course_lib.env.setup() (or set TRITON_INTERPRET=1) before anything imports "
            "the kernels, or move the tensors to a CUDA GPU."
        )
    return kernels, interpreted


@dataclass(frozen=True)
class _Mask:
    """What a kernel call masks: causal (with its diagonal offset) and a sliding window."""

    is_causal: bool
    diag: int
    window: int | None
    scale: float
    layout: str

    def kernel_args(self) -> tuple[int, int]:
        return self.diag, self.window or 0

    def meta(self) -> dict:
        return dict(IS_CAUSAL=self.is_causal, HAS_WINDOW=self.window is not None)


def _strides(x: torch.Tensor) -> tuple[int, int, int]:
    """(batch, head, token) strides of a ``[B, H, N, d]`` view."""
    return x.stride(0), x.stride(1), x.stride(2)


def _bucket(n: int) -> int:
    """The autotuner's key for a length: its next power of two."""
    import triton

    return triton.next_power_of_2(n)


def _forward(q, k, v, mask: _Mask):
    """Run the forward kernel: ``O [B, H, Nq, d_h]`` (caller's layout) and ``LSE [B*H, Nq]``."""
    import triton

    kernels, interpreted = _prepare(q)
    B, H, n_q, head_dim = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    o = _empty_like_layout(q, mask.layout)  # (B, H, Nq, d_h)
    lse = torch.empty(B * H, n_q, dtype=torch.float32, device=q.device)  # (BH, Nq)
    cfg = kernel_config(head_dim, q.device, interpreted=interpreted, dtype=q.dtype)
    block_d = max(16, triton.next_power_of_2(head_dim))
    _launch(
        kernels,
        "_fwd_kernel",
        cfg["fwd"],
        lambda meta: (triton.cdiv(n_q, meta["BLOCK_M"]), B * H),  # (query tiles, B*H)
        n_q,
        n_k,
        q,
        k,
        v,
        o,
        lse,
        mask.scale * kernels.LOG2E,
        *_strides(q),
        *_strides(k),
        *_strides(v),
        *_strides(o),
        H,
        H // h_kv,
        n_q,
        n_k,
        *mask.kernel_args(),
        _bucket(n_q),
        _bucket(n_k),
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        EVEN_D=block_d == head_dim,
        DOT_PRECISION=_dot_precision(q.dtype),
        **mask.meta(),
    )
    return o, lse


def _backward(do, q, k, v, o, lse, mask: _Mask):
    """Run the three backward kernels: returns ``dQ, dK, dV`` shaped like q, k, v."""
    import triton

    kernels, interpreted = _prepare(q)
    B, H, n_q, head_dim = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    do = _last_dim_contiguous(do)
    cfg = kernel_config(head_dim, q.device, interpreted=interpreted, dtype=q.dtype)
    block_d = max(16, triton.next_power_of_2(head_dim))

    delta = torch.empty_like(lse)  # (BH, Nq) D_i = rowsum(dO * O)
    kernels._bwd_preprocess_kernel[(triton.cdiv(n_q, 64), B * H)](
        o, do, delta, *_strides(o), *_strides(do), H, n_q,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=64,
    )  # fmt: skip
    dq = _empty_like_layout(q, mask.layout)  # (B, H, Nq, d_h)
    dk = _empty_like_layout(k, mask.layout)  # (B, H_kv, Nk, d_h)
    dv = _empty_like_layout(v, mask.layout)  # (B, H_kv, Nk, d_h)
    common = (H, H // h_kv, n_q, n_k, *mask.kernel_args(), _bucket(n_q), _bucket(n_k))
    meta = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        EVEN_D=block_d == head_dim,
        DOT_PRECISION=_dot_precision(q.dtype),
        **mask.meta(),
    )
    inputs = (q, k, v, do, lse, delta)
    strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(do))
    _launch(
        kernels,
        "_bwd_dkdv_kernel",
        cfg["dkdv"],
        lambda m: (triton.cdiv(n_k, m["BLOCK_N"]), B * h_kv),  # (key tiles, B*H_kv)
        n_q, n_k, *inputs, dk, dv, mask.scale, mask.scale * kernels.LOG2E,
        *strides, *_strides(dk), *_strides(dv), *common, **meta,
    )  # fmt: skip
    _launch(
        kernels,
        "_bwd_dq_kernel",
        cfg["dq"],
        lambda m: (triton.cdiv(n_q, m["BLOCK_M"]), B * H),  # (query tiles, B*H)
        n_q, n_k, *inputs, dq, mask.scale, mask.scale * kernels.LOG2E,
        *strides, *_strides(dq), *common, **meta,
    )  # fmt: skip
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: the forward saves only q, k, v, O and the LSE — never P."""

    @staticmethod
    def forward(ctx, q, k, v, mask):
        q, k, v = (_last_dim_contiguous(x) for x in (q, k, v))
        with _on_device(q):
            o, lse = _forward(q, k, v, mask)  # (B, H, Nq, d_h), (BH, Nq)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mask = mask
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        with _on_device(q):
            dq, dk, dv = _backward(do, q, k, v, o, lse, ctx.mask)
        return dq, dk, dv, None


def _mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who) -> _Mask:
    window = _check_options(is_causal, causal_alignment, window, who)
    diag = _diag_offset(qv.shape[-2], kv.shape[-2], causal_alignment)
    return _Mask(bool(is_causal), diag, window, scale, layout)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: int | None = None,
    layout: str | None = None,
) -> torch.Tensor:
    r"""Exact attention :math:`\mathrm{softmax}(\text{scale}\cdot QK^\top)V` by Triton kernels.

    ``q [B, H, Nq, d_h]``, ``k, v [B, H_kv, Nk, d_h]`` with :math:`16 \le d_h \le 128` and
    :math:`H_{kv}` dividing :math:`H` (grouped-query attention, read directly: query head
    :math:`h` uses key/value head :math:`\lfloor h / (H/H_{kv})\rfloor`; the backward sums
    dK, dV over each group). Any sequence lengths. ``layout="bnhd"`` takes flash-attn's
    ``[B, N, H, d_h]`` and returns the output that way (read through strides, no copy);
    shapes that look like that layout (more heads than tokens in q and k) must say which
    layout they are in.

    ``is_causal``: top-left aligned by default, as torch SDPA (query :math:`i` sees keys
    :math:`j \le i`); ``causal_alignment="bottom_right"`` as flash-attn and a KV cache
    (:math:`j \le i + N_k - N_q`). ``window=W`` (with ``is_causal``): only the last :math:`W`
    keys, the query's own included (tiles outside the window are never loaded). See the
    module's table for the conventions of torch SDPA, flash-attn and Triton's tutorial.

    Differentiable in q, k, v (the backward recomputes the attention weights from the saved
    log-sum-exp). dtypes: float16/bfloat16 on CUDA (the fast path; float32 works too, in
    true float32 matmuls without tensor cores — for checking, not speed); float32/float16 on
    the CPU through Triton's interpreter. For a few queries against a long cache, use
    :func:`flash_decode`.
    """
    who = "flash_attention"
    qv, kv, vv, layout, scale = _kernel_views(q, k, v, scale, layout, who)
    mask = _mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who)
    out = FlashAttentionFunction.apply(qv, kv, vv, mask)  # (B, H, Nq, d_h)
    return out.transpose(1, 2) if layout == "bnhd" else out


def flash_attention_with_lse(
    q,
    k,
    v,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: int | None = None,
    layout: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward kernel's two outputs, ``O`` (q's layout) and ``LSE [B, H, Nq]`` (no autograd)."""
    who = "flash_attention_with_lse"
    qv, kv, vv, layout, scale = _kernel_views(q, k, v, scale, layout, who)
    mask = _mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who)
    qv, kv, vv = (_last_dim_contiguous(x) for x in (qv, kv, vv))
    with torch.no_grad(), _on_device(qv):
        o, lse = _forward(qv, kv, vv, mask)
    o = o.transpose(1, 2) if layout == "bnhd" else o
    return o, lse.view(qv.shape[:-1])


# --------------------------------------------------------------------------- decoding

DECODE_MAX_ROWS = 128  # G * Nq packed into one tile of rows


def decode_splits(
    batch_kv_heads: int, n_k: int, block_n: int, device, *, num_sms: int | None = None
) -> int:
    """How many programs share one (batch, key/value head)'s keys in :func:`flash_decode`.

    Enough programs to fill the GPU twice (two per streaming multiprocessor), each with at
    least 4 key tiles, and never more splits than key tiles. ``num_sms`` defaults to the
    GPU's count (132 on an H100 SXM); in Triton's interpreter (no GPU to fill, and each
    split a Python-speed program): at most 4.
    """
    tiles = -(-n_k // block_n)
    if num_sms is None:
        if torch.device(device).type != "cuda":
            return max(1, min(4, tiles))
        num_sms = torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    want = -(-2 * num_sms // max(1, batch_kv_heads))
    return max(1, min(want, tiles // 4 or 1, tiles))


def flash_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: int | None = None,
    layout: str | None = None,
    num_splits: int | None = None,
    return_lse: bool = False,
):
    r"""Attention for a few queries against a long key/value cache (forward only).

    Same arguments and conventions as :func:`flash_attention`; for a KV cache with
    :math:`N_q > 1` new queries pass ``is_causal=True, causal_alignment="bottom_right"``
    (with :math:`N_q = 1` and no window, causal or not makes no difference). The keys are
    split over ``num_splits`` programs per (batch, key/value head) (default:
    :func:`decode_splits`), each computing a partial output :math:`O_s` and its log-sum-exp
    :math:`L_s` over its keys; a second kernel merges them,
    :math:`L = \log\sum_s e^{L_s}`, :math:`O = \sum_s e^{L_s - L} O_s` (the merge rule of the
    online softmax, chapter 09's too). The :math:`G\cdot N_q` query rows of a key/value head
    share one tile, so the cache is read once per key/value head (:math:`G N_q \le 128`).
    Returns the output, or ``(output, lse [B, H, Nq])`` with ``return_lse``.
    """
    import triton

    who = "flash_decode"
    qv, kv, vv, layout, scale = _kernel_views(q, k, v, scale, layout, who)
    mask = _mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError(
            "flash_decode is forward-only (inference): it has no backward. Use "
            "flash_attention for training, or call it under torch.no_grad()."
        )
    B, H, n_q, head_dim = qv.shape
    h_kv, n_k = kv.shape[1], kv.shape[2]
    rows = (H // h_kv) * n_q
    if rows > DECODE_MAX_ROWS:
        raise ValueError(
            f"{who}: G * Nq = {H // h_kv} * {n_q} = {rows} query rows per key/value head; the "
            f"decode kernel packs at most {DECODE_MAX_ROWS} (use flash_attention for long "
            "query sequences)"
        )
    qv, kv, vv = (_last_dim_contiguous(x) for x in (qv, kv, vv))
    kernels, interpreted = _prepare(qv)
    menu = kernel_config(head_dim, qv.device, interpreted=interpreted, dtype=qv.dtype)["decode"]
    c = next((c for c in menu if c["BLOCK_M"] >= rows), menu[-1])  # the smallest row tile that fits
    block_n = c["BLOCK_N"]
    splits = decode_splits(B * h_kv, n_k, block_n, qv.device) if num_splits is None else num_splits
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ValueError(f"{who}: num_splits must be a positive int, got {num_splits!r}")
    keys_per_split = triton.cdiv(triton.cdiv(n_k, splits), block_n) * block_n
    splits = triton.cdiv(n_k, keys_per_split)
    block_d = max(16, triton.next_power_of_2(head_dim))
    dev = qv.device
    o_part = torch.empty(B * H * n_q, splits, head_dim, dtype=torch.float32, device=dev)
    lse_part = torch.empty(B * H * n_q, splits, dtype=torch.float32, device=dev)
    o = _empty_like_layout(qv, layout)  # (B, H, Nq, d_h)
    lse = torch.empty(B * H, n_q, dtype=torch.float32, device=dev)  # (BH, Nq)
    with torch.no_grad(), _on_device(qv):
        kernels._decode_kernel[(splits, B * h_kv)](
            qv, kv, vv, o_part, lse_part, scale * kernels.LOG2E,
            *_strides(qv), *_strides(kv), *_strides(vv),
            H, H // h_kv, n_q, n_k, *mask.kernel_args(), keys_per_split, splits,
            HEAD_DIM=head_dim, BLOCK_D=block_d,
            BLOCK_R=max(c["BLOCK_M"], triton.next_power_of_2(rows)), BLOCK_N=block_n,
            EVEN_N=n_k % block_n == 0, EVEN_D=block_d == head_dim,
            DOT_PRECISION=_dot_precision(qv.dtype), num_warps=c["num_warps"],
            num_stages=c["num_stages"], **mask.meta(),
        )  # fmt: skip
        kernels._decode_merge_kernel[(B * H * n_q,)](
            o_part, lse_part, o, lse, *_strides(o), H, n_q, splits,
            HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_S=max(2, triton.next_power_of_2(splits)),
        )  # fmt: skip
    out = o.transpose(1, 2) if layout == "bnhd" else o
    return (out, lse.view(B, H, n_q)) if return_lse else out
