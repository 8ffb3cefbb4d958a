r"""The FlashAttention algorithm in plain torch: tile classes, the tiled forward and backward.

:func:`flash_attention_reference` is the algorithm to read (any device, any dtype); the
kernels (:mod:`course_lib.flash.kernels`) do the same tile by tile on a GPU, and
:func:`key_tile_range` is the Python twin of their ``_key_range`` (tested equal).
"""

from __future__ import annotations

import math

import torch

from .inputs import _check_options, _diag_offset, _layout_views, _validate

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
