r"""The decode kernels: the keys split over programs, then the partial results merged."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    _LN2,
    _key_range,
    _load_2d,
    _tile_count,
    _tile_start,
    _visible,
)
from .forward import _fwd_inner


@triton.jit
def _decode_inner(
    acc_t,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    stride_kn,
    stride_vn,
    qpos,
    offs_n,
    offs_d,
    lo,
    full_lo,
    full_hi,
    hi,
    qk_scale,
    N_K,
    DIAG,
    WINDOW,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    EVEN_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    r"""The forward's online softmax (:func:`.forward._fwd_inner`) on transposed tiles.

    A decode tile has few query rows (one token of a group of 8 query heads: 8 rows, in a
    tile of 16), too few for Hopper's warpgroup MMA, whose tiles have 64 rows: as
    :math:`S = QK^\top` and :math:`A \mathrel{+}= PV` it would fall back to the warp-level
    ``mma.sync`` (or pad 16 rows to 64, four times the work). Transposed, the keys and the features are the MMA's rows
    and the query rows its (narrow) columns:

    .. math::

        S^\top = K Q^\top \quad (\text{BLOCK\_N} \times R),\qquad
        A^\top \leftarrow e^{m - m^{new}} A^\top + V^\top P^\top \quad (d \times R)

    The statistics :math:`m, \ell` are per column (query row): maxima and sums over axis 0.
    """
    for t in range(0, _tile_count(lo, full_lo, full_hi, hi, BLOCK_N, MASKED)):
        start_n = _tile_start(t, lo, full_lo, full_hi, BLOCK_N, MASKED)
        cols = start_n + offs_n  # (BLOCK_N,) keys
        k = _load_2d(
            k_base + cols[:, None] * stride_kn + offs_d[None, :],
            cols,
            offs_d,
            N_K,
            HEAD_DIM,
            MASKED and not EVEN_N,
            not EVEN_D,
        )  # (BLOCK_N, BLOCK_D)
        st = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_R) S^T
        if MASKED:
            st = st * qk_scale  # (BLOCK_N, BLOCK_R) base-2 units
            valid = tl.trans(_visible(qpos, cols, N_K, DIAG, WINDOW, IS_CAUSAL, HAS_WINDOW))
            st = tl.where(valid, st, float("-inf"))  # (BLOCK_N, BLOCK_R)
            m_new = tl.maximum(m_i, tl.max(st, 0))  # (BLOCK_R,)
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)  # (BLOCK_R,) no inf - inf
            pt = tl.exp2(st - m_sub[None, :])  # (BLOCK_N, BLOCK_R) P^T
            alpha = tl.exp2(m_i - m_sub)  # (BLOCK_R,)
        else:
            m_new = tl.maximum(m_i, tl.max(st, 0) * qk_scale)  # (BLOCK_R,)
            pt = tl.exp2(tl.fma(st, qk_scale, -m_new[None, :]))  # (BLOCK_N, BLOCK_R) P^T
            alpha = tl.exp2(m_i - m_new)  # (BLOCK_R,)
        l_i = l_i * alpha + tl.sum(pt, 0)  # (BLOCK_R,)
        v = _load_2d(
            v_base + cols[:, None] * stride_vn + offs_d[None, :],
            cols,
            offs_d,
            N_K,
            HEAD_DIM,
            MASKED and not EVEN_N,
            not EVEN_D,
        )  # (BLOCK_N, BLOCK_D)
        acc_t = acc_t * alpha[None, :]  # (BLOCK_D, BLOCK_R)
        acc_t = tl.dot(tl.trans(v), pt.to(v.dtype), acc_t, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc_t, l_i, m_i


@triton.jit
def _decode_kernel(
    Q,
    K,
    V,
    O_PART,
    LSE_PART,  # O_PART (B*H*NQ, SPLITS, D) fp32, LSE_PART (B*H*NQ, SPLITS) fp32
    qk_scale,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    H,
    NUM_GROUPS,
    N_Q,
    N_K,
    DIAG,
    WINDOW,
    KEYS_PER_SPLIT,  # a multiple of BLOCK_N
    NUM_SPLITS,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    EVEN_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    r"""One program = one split of the keys for all queries of one (batch, key/value head).

    Its tile of rows packs the :math:`G` query heads times :math:`N_q` queries (row
    :math:`r`: head :math:`hk\,G + \lfloor r/N_q\rfloor`, query :math:`r \bmod N_q`), so each key
    tile is loaded once for the whole group. Stores the split's normalised output and its
    log-sum-exp (:math:`-\infty` when it saw no key).
    """
    split = tl.program_id(0)
    bhk = tl.program_id(1)
    H_KV = H // NUM_GROUPS
    b = (bhk // H_KV).to(tl.int64)
    hk = (bhk % H_KV).to(tl.int64)
    r = tl.arange(0, BLOCK_R)  # (BLOCK_R,) packed rows
    row_ok = r < NUM_GROUPS * N_Q  # (BLOCK_R,)
    qpos = tl.where(row_ok, r % N_Q, -1)  # (BLOCK_R,) query index; -1 for padding rows
    h = hk * NUM_GROUPS + (r // N_Q).to(tl.int64)  # (BLOCK_R,) query head of each row
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q_ptrs = Q + b * stride_qb + h[:, None] * stride_qh + (r % N_Q)[:, None] * stride_qn
    q = tl.load(
        q_ptrs + offs_d[None, :], mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0
    )  # (BLOCK_R, BLOCK_D)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh

    m_i = tl.full([BLOCK_R], float("-inf"), tl.float32)  # (BLOCK_R,)
    l_i = tl.zeros([BLOCK_R], tl.float32)  # (BLOCK_R,)
    # the keys any of the N_q queries sees, intersected with this split's keys
    lo, full_lo, full_hi, hi = _key_range(
        0, N_Q - 1, N_K, DIAG, WINDOW, BLOCK_N, IS_CAUSAL, HAS_WINDOW
    )
    s_lo = split * KEYS_PER_SPLIT
    s_hi = tl.minimum(s_lo + KEYS_PER_SPLIT, N_K)
    hi = tl.minimum(hi, s_hi)
    lo = tl.minimum(tl.maximum(lo, s_lo), hi)
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    rowg = (b * H + h) * N_Q + (r % N_Q)  # (BLOCK_R,) global row index
    out_ptrs = O_PART + (rowg * NUM_SPLITS + split) * HEAD_DIM  # (BLOCK_R,) each row's output
    if BLOCK_R < 64:  # too few rows for a warpgroup MMA: the transposed tiles
        acc_t = tl.zeros([BLOCK_D, BLOCK_R], tl.float32)  # (BLOCK_D, BLOCK_R) A^T
        for masked in tl.static_range(2):  # the full key tiles, then the partial ones
            acc_t, l_i, m_i = _decode_inner(
                acc_t, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, qpos, offs_n, offs_d,
                lo, full_lo, full_hi, hi, qk_scale, N_K, DIAG, WINDOW, HEAD_DIM, BLOCK_N,
                masked == 1, EVEN_N, EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION,
            )  # fmt: skip
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # (BLOCK_R,)
        acc_t = acc_t / l_safe[None, :]  # (BLOCK_D, BLOCK_R) O^T
        ok = row_ok[None, :] & (offs_d[:, None] < HEAD_DIM)  # (BLOCK_D, BLOCK_R)
        tl.store(out_ptrs[None, :] + offs_d[:, None], acc_t, mask=ok)
    else:  # 64 rows or more: the forward's tiles, queries on the MMA's rows
        acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)  # (BLOCK_R, BLOCK_D)
        for masked in tl.static_range(2):
            acc, l_i, m_i = _fwd_inner(
                acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, qpos, offs_n, offs_d,
                lo, full_lo, full_hi, hi, qk_scale, N_K, DIAG, WINDOW, HEAD_DIM, BLOCK_N,
                masked == 1, EVEN_N, EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION,
            )  # fmt: skip
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # (BLOCK_R,)
        acc = acc / l_safe[:, None]  # (BLOCK_R, BLOCK_D) O
        ok = row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)  # (BLOCK_R, BLOCK_D)
        tl.store(out_ptrs[:, None] + offs_d[None, :], acc, mask=ok)
    lse = (m_i + tl.log2(l_safe)) * _LN2  # (BLOCK_R,) -inf when this split saw no key
    tl.store(LSE_PART + rowg * NUM_SPLITS + split, lse, mask=row_ok)


@triton.jit
def _decode_merge_kernel(
    O_PART,
    LSE_PART,
    O,
    LSE,  # O (B, H, NQ, D) through strides, LSE (B*H, NQ) fp32
    stride_ob,
    stride_oh,
    stride_on,
    H,
    N_Q,
    NUM_SPLITS,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    r"""Merge the splits of one query row: :math:`L = \log\sum_s e^{L_s}`, :math:`O = \sum_s e^{L_s - L} O_s`."""
    row = tl.program_id(0).to(tl.int64)  # (b * H + h) * N_Q + i
    s = tl.arange(0, BLOCK_S)  # (BLOCK_S,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    s_ok = s < NUM_SPLITS
    lse = tl.load(LSE_PART + row * NUM_SPLITS + s, mask=s_ok, other=float("-inf"))  # (BLOCK_S,)
    m = tl.max(lse, 0)
    m = tl.where(m == float("-inf"), 0.0, m)  # every split empty: weights 0, O = 0
    w = tl.exp(lse - m)  # (BLOCK_S,) 0 for empty splits
    total = tl.sum(w, 0)
    o_part = tl.load(
        O_PART + (row * NUM_SPLITS + s[:, None]) * HEAD_DIM + offs_d[None, :],
        mask=s_ok[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )  # (BLOCK_S, BLOCK_D)
    o = tl.sum(w[:, None] * o_part, 0) / tl.where(total == 0.0, 1.0, total)  # (BLOCK_D,)
    i = row % N_Q
    bh = row // N_Q
    b = bh // H
    h = bh % H
    tl.store(
        O + b * stride_ob + h * stride_oh + i * stride_on + offs_d,
        o.to(O.dtype.element_ty),
        mask=offs_d < HEAD_DIM,
    )
    lse_out = m + tl.log(tl.where(total == 0.0, 1.0, total))
    tl.store(LSE + row, tl.where(total == 0.0, float("-inf"), lse_out))
