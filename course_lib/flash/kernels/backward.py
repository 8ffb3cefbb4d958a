r"""The backward kernels: :math:`D = \mathrm{rowsum}(dO\circ O)`, then dK/dV per key tile, then dQ per query tile."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    _key_range,
    _load_1d,
    _load_2d,
    _query_range,
    _store_2d,
    _tile_count,
    _tile_start,
    _visible,
)


@triton.jit
def _bwd_preprocess_kernel(
    O,
    DO,
    DELTA,  # O, dO (B, H, NQ, D) through strides; DELTA (B*H, NQ) fp32
    stride_ob,
    stride_oh,
    stride_on,
    stride_dob,
    stride_doh,
    stride_don,
    H,
    N_Q,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    r""":math:`D_i = \sum_k dO_{ik} O_{ik}` (equal to :math:`\sum_j P_{ij} dP_{ij}`)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)  # int64 offsets: B*H*N*d may exceed 2^31
    h = (bh % H).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    mask = (offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM)  # (BLOCK_M, BLOCK_D)
    o = tl.load(
        O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :],
        mask=mask,
        other=0.0,
    ).to(tl.float32)  # (BLOCK_M, BLOCK_D)
    do = tl.load(
        DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_don + offs_d[None, :],
        mask=mask,
        other=0.0,
    ).to(tl.float32)  # (BLOCK_M, BLOCK_D)
    delta = tl.sum(o * do, 1)  # (BLOCK_M,)
    tl.store(DELTA + (b * H + h) * N_Q + offs_m, delta, mask=offs_m < N_Q)


@triton.jit
def _bwd_dkdv_inner(
    dk,
    dv,
    k,
    v,
    q_base,
    do_base,
    lse_base,
    delta_base,
    stride_qh,
    stride_qn,
    stride_doh,
    stride_don,
    offs_n,
    offs_m,
    offs_d,
    lo,
    full_lo,
    full_hi,
    hi,
    qk_scale,
    N_Q,
    N_K,
    DIAG,
    WINDOW,
    NUM_GROUPS,
    dq_base,
    stride_dqh,
    stride_dqn,
    sm_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MASKED: tl.constexpr,
    EVEN_M: tl.constexpr,
    EVEN_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,
    DQ_TRANSPOSED: tl.constexpr,
):
    r"""Accumulate :math:`dV_j \mathrel{+}= P_{ij}^\top dO_i`, :math:`dK_j \mathrel{+}= dS_{ij}^\top Q_i`.

    Over the full query tiles, or the partial ones (``MASKED``), with the transposed tiles
    (keys on rows) so that no transpose of :math:`P` is needed:
    :math:`P^\top = 2^{\,K Q^\top\cdot\text{scale}\log_2 e - L_2}` (one fused multiply-add,
    with the base-2 log-sum-exp :math:`L_2` the forward stored),
    :math:`dP^\top = V dO^\top`, :math:`dS^\top = P^\top\circ(dP^\top - D)`.

    One loop runs over the query tiles of all :math:`G` query heads of the group (``g``, the
    head, is ``t // n_tiles``): a loop of loops would keep more registers alive.

    ``ATOMIC_DQ`` (the fast, non-deterministic backward of FlashAttention-2): also
    :math:`dQ_i \mathrel{+}= \text{scale}\,dS_{ij} K_j`, added with float32 atomics into
    ``dq_base`` (every key tile's program adds to the same query rows, in whatever order the
    GPU runs them): the fifth matmul, instead of the dQ kernel's three.
    """
    n_tiles = _tile_count(lo, full_lo, full_hi, hi, BLOCK_M, MASKED)
    for t in range(0, NUM_GROUPS * n_tiles):
        g = t // n_tiles  # which query head of the group
        start_m = _tile_start(t - g * n_tiles, lo, full_lo, full_hi, BLOCK_M, MASKED)
        rows = start_m + offs_m  # (BLOCK_M,)
        mask_rows = MASKED and not EVEN_M
        q = _load_2d(
            q_base + g * stride_qh + rows[:, None] * stride_qn + offs_d[None, :],
            rows,
            offs_d,
            N_Q,
            HEAD_DIM,
            mask_rows,
            not EVEN_D,
        )  # (BLOCK_M, BLOCK_D)
        do = _load_2d(
            do_base + g * stride_doh + rows[:, None] * stride_don + offs_d[None, :],
            rows,
            offs_d,
            N_Q,
            HEAD_DIM,
            mask_rows,
            not EVEN_D,
        )  # (BLOCK_M, BLOCK_D)
        lse = _load_1d(lse_base + g * N_Q + rows, rows, N_Q, float("inf"), mask_rows)  # (BLOCK_M,)
        delta = _load_1d(delta_base + g * N_Q + rows, rows, N_Q, 0.0, mask_rows)  # (BLOCK_M,)
        # L_2 is base 2 (as the forward stored it); a row that saw no key has L_2 = -inf,
        # and -L_2 = -inf there makes its P exactly 0
        neg_lse = tl.where(lse == float("-inf"), float("-inf"), -lse)  # (BLOCK_M,)
        st = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M) S^T
        pt = tl.exp2(tl.fma(st, qk_scale, neg_lse[None, :]))  # (BLOCK_N, BLOCK_M) P^T
        if MASKED:
            valid = tl.trans(_visible(rows, offs_n, N_K, DIAG, WINDOW, IS_CAUSAL, HAS_WINDOW))
            valid = valid & (rows[None, :] < N_Q)  # (BLOCK_N, BLOCK_M)
            pt = tl.where(valid, pt, 0.0)  # (BLOCK_N, BLOCK_M)
        dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=DOT_PRECISION)  # dV += P^T dO
        dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M) dP^T
        dst = pt * (dpt - delta[None, :])  # (BLOCK_N, BLOCK_M) dS^T = P^T o (dP^T - D)
        dk = tl.dot(dst.to(q.dtype), q, dk, input_precision=DOT_PRECISION)  # dK += dS^T Q
        if ATOMIC_DQ and DQ_TRANSPOSED:
            # dQ^T = K^T dS^T (Hopper): the product has d_h rows (64 or 128), tall enough for
            # the warpgroup MMA; dS K has BLOCK_M (32) rows and would fall back to mma.sync
            dqt = tl.dot(tl.trans(k), dst.to(k.dtype), input_precision=DOT_PRECISION)
            ptrs = dq_base + g * stride_dqh + rows[None, :] * stride_dqn + offs_d[:, None]
            ok = (rows[None, :] < N_Q) & (offs_d[:, None] < HEAD_DIM)  # (BLOCK_D, BLOCK_M)
            tl.atomic_add(ptrs, dqt * sm_scale, mask=ok, sem="relaxed")  # (BLOCK_D, BLOCK_M)
        elif ATOMIC_DQ:  # dQ = dS K (Ampere: its warp-level MMA takes the 32 rows as they are)
            dq = tl.dot(tl.trans(dst.to(k.dtype)), k, input_precision=DOT_PRECISION)
            ptrs = dq_base + g * stride_dqh + rows[:, None] * stride_dqn + offs_d[None, :]
            ok = (rows[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM)  # (BLOCK_M, BLOCK_D)
            tl.atomic_add(ptrs, dq * sm_scale, mask=ok, sem="relaxed")  # (BLOCK_M, BLOCK_D)
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    DQ_ACC,
    sm_scale,
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
    stride_dob,
    stride_doh,
    stride_don,
    stride_dkb,
    stride_dkh,
    stride_dkn,
    stride_dvb,
    stride_dvh,
    stride_dvn,
    stride_dqb,
    stride_dqh,
    stride_dqn,
    H,
    NUM_GROUPS,
    N_Q,
    N_K,
    DIAG,
    WINDOW,
    NQ_BUCKET,
    NK_BUCKET,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    EVEN_M: tl.constexpr,
    EVEN_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    ATOMIC_DQ: tl.constexpr = False,
    DQ_TRANSPOSED: tl.constexpr = True,
):
    r"""One program = one tile of BLOCK_N keys of one (batch, key/value head).

    Loops over the query tiles that see the key tile (full ones without a mask, then the
    partial ones), of each of the :math:`G` query heads that read this key/value head, so
    :math:`dK_j = \text{scale}\sum_{g,i} dS_{ij}^\top Q_i` and :math:`dV_j = \sum_{g,i} P_{ij}^\top dO_i`
    are summed over the group in registers. Each dK, dV tile is owned by one program: no atomics.
    With ``ATOMIC_DQ`` the program also adds its share of dQ into ``DQ_ACC`` (float32,
    zeroed by the caller) with atomics, and the dQ kernel is not launched; ``DQ_TRANSPOSED``
    (the host sets it on sm_90) computes that share as :math:`(dQ)^\top = K^\top dS^\top`.
    """
    pid_n = tl.program_id(0)  # which key tile; the first ones are the heaviest when causal
    bhk = tl.program_id(1)  # b * H_kv + hk
    H_KV = H // NUM_GROUPS
    b = (bhk // H_KV).to(tl.int64)  # int64 offsets: B*H*N*d may exceed 2^31
    hk = (bhk % H_KV).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows
    offs_m = tl.arange(0, BLOCK_M)  # (BLOCK_M,) query columns within a tile
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    k = _load_2d(
        K + b * stride_kb + hk * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :],
        offs_n,
        offs_d,
        N_K,
        HEAD_DIM,
        not EVEN_N,
        not EVEN_D,
    )  # (BLOCK_N, BLOCK_D)
    v = _load_2d(
        V + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
        offs_n,
        offs_d,
        N_K,
        HEAD_DIM,
        not EVEN_N,
        not EVEN_D,
    )  # (BLOCK_N, BLOCK_D)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # (BLOCK_N, BLOCK_D)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # (BLOCK_N, BLOCK_D)

    n_last = tl.minimum(pid_n * BLOCK_N + BLOCK_N, N_K) - 1
    lo, full_lo, full_hi, hi = _query_range(
        pid_n * BLOCK_N, n_last, N_Q, DIAG, WINDOW, BLOCK_M, IS_CAUSAL, HAS_WINDOW
    )
    if not EVEN_N:  # the ragged last key tile: every query tile gets the element-wise mask
        ragged = pid_n * BLOCK_N + BLOCK_N > N_K
        full_lo = tl.where(ragged, hi, full_lo)
        full_hi = tl.where(ragged, hi, full_hi)
    h0 = hk * NUM_GROUPS  # the first query head of this key/value head's group
    q_base = Q + b * stride_qb + h0 * stride_qh
    do_base = DO + b * stride_dob + h0 * stride_doh
    lse_base = LSE + (b * H + h0) * N_Q
    delta_base = DELTA + (b * H + h0) * N_Q
    dq_base = DQ_ACC + b * stride_dqb + h0 * stride_dqh  # used only with ATOMIC_DQ
    for masked in tl.static_range(2):  # the full query tiles, then the partial ones
        dk, dv = _bwd_dkdv_inner(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qh, stride_qn,
            stride_doh, stride_don, offs_n, offs_m, offs_d, lo, full_lo, full_hi, hi, qk_scale,
            N_Q, N_K, DIAG, WINDOW, NUM_GROUPS, dq_base, stride_dqh, stride_dqn, sm_scale,
            HEAD_DIM, BLOCK_M, masked == 1, EVEN_M, EVEN_D, IS_CAUSAL, HAS_WINDOW,
            DOT_PRECISION, ATOMIC_DQ, DQ_TRANSPOSED,
        )  # fmt: skip
    dk = dk * sm_scale  # (BLOCK_N, BLOCK_D)
    _store_2d(
        DK + b * stride_dkb + hk * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :],
        dk.to(DK.dtype.element_ty),
        offs_n,
        offs_d,
        N_K,
        HEAD_DIM,
        not EVEN_N,
        not EVEN_D,
    )
    _store_2d(
        DV + b * stride_dvb + hk * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :],
        dv.to(DV.dtype.element_ty),
        offs_n,
        offs_d,
        N_K,
        HEAD_DIM,
        not EVEN_N,
        not EVEN_D,
    )


@triton.jit
def _bwd_dq_inner(
    dq,
    q,
    do,
    neg_lse,
    delta,
    k_base,
    v_base,
    stride_kn,
    stride_vn,
    offs_m,
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
    r""":math:`dQ_i \mathrel{+}= dS_{ij} K_j` over the full key tiles, or the partial ones."""
    for t in range(0, _tile_count(lo, full_lo, full_hi, hi, BLOCK_N, MASKED)):
        start_n = _tile_start(t, lo, full_lo, full_hi, BLOCK_N, MASKED)
        cols = start_n + offs_n  # (BLOCK_N,)
        mask_cols = MASKED and not EVEN_N
        k = _load_2d(
            k_base + cols[:, None] * stride_kn + offs_d[None, :],
            cols,
            offs_d,
            N_K,
            HEAD_DIM,
            mask_cols,
            not EVEN_D,
        )  # (BLOCK_N, BLOCK_D)
        v = _load_2d(
            v_base + cols[:, None] * stride_vn + offs_d[None, :],
            cols,
            offs_d,
            N_K,
            HEAD_DIM,
            mask_cols,
            not EVEN_D,
        )  # (BLOCK_N, BLOCK_D)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)
        p = tl.exp2(tl.fma(s, qk_scale, neg_lse[:, None]))  # (BLOCK_M, BLOCK_N) P = e^(S - L)
        if MASKED:
            valid = _visible(offs_m, cols, N_K, DIAG, WINDOW, IS_CAUSAL, HAS_WINDOW)
            p = tl.where(valid, p, 0.0)  # (BLOCK_M, BLOCK_N)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N) dO V^T
        ds = p * (dp - delta[:, None])  # (BLOCK_M, BLOCK_N)  dS = P o (dP - D)
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=DOT_PRECISION)  # dQ += dS K
    return dq


@triton.jit
def _bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    sm_scale,
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
    stride_dob,
    stride_doh,
    stride_don,
    stride_dqb,
    stride_dqh,
    stride_dqn,
    H,
    NUM_GROUPS,
    N_Q,
    N_K,
    DIAG,
    WINDOW,
    NQ_BUCKET,
    NK_BUCKET,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    EVEN_M: tl.constexpr,
    EVEN_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    r"""One program = one tile of BLOCK_M queries: :math:`dQ_i = \text{scale}\sum_j dS_{ij} K_j`.

    A second pass over the key tiles, like the forward, so each dQ tile is owned by one
    program (the atomic-free split of Triton's fused-attention tutorial; FlashAttention-2
    instead adds dQ atomically from the dK/dV pass).
    """
    pid_m = tl.program_id(0)
    if IS_CAUSAL:  # heaviest first, as in the forward
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)  # int64 offsets: B*H*N*d may exceed 2^31
    h = bh % H
    hk = (h // NUM_GROUPS).to(tl.int64)
    h = h.to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    q = _load_2d(
        Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :],
        offs_m,
        offs_d,
        N_Q,
        HEAD_DIM,
        not EVEN_M,
        not EVEN_D,
    )  # (BLOCK_M, BLOCK_D)
    do = _load_2d(
        DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_don + offs_d[None, :],
        offs_m,
        offs_d,
        N_Q,
        HEAD_DIM,
        not EVEN_M,
        not EVEN_D,
    )  # (BLOCK_M, BLOCK_D)
    row = (b * H + h) * N_Q
    lse = _load_1d(LSE + row + offs_m, offs_m, N_Q, float("inf"), not EVEN_M)  # (BLOCK_M,)
    neg_lse = tl.where(lse == float("-inf"), float("-inf"), -lse)  # -L_2; -inf: no key
    delta = _load_1d(DELTA + row + offs_m, offs_m, N_Q, 0.0, not EVEN_M)  # (BLOCK_M,)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # (BLOCK_M, BLOCK_D)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh

    m_last = tl.minimum(pid_m * BLOCK_M + BLOCK_M, N_Q) - 1
    lo, full_lo, full_hi, hi = _key_range(
        pid_m * BLOCK_M, m_last, N_K, DIAG, WINDOW, BLOCK_N, IS_CAUSAL, HAS_WINDOW
    )
    for masked in tl.static_range(2):  # the full key tiles, then the partial ones
        dq = _bwd_dq_inner(
            dq, q, do, neg_lse, delta, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n,
            offs_d, lo, full_lo, full_hi, hi, qk_scale, N_K, DIAG, WINDOW, HEAD_DIM, BLOCK_N,
            masked == 1, EVEN_N, EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION,
        )  # fmt: skip
    dq = dq * sm_scale  # (BLOCK_M, BLOCK_D)
    _store_2d(
        DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqn + offs_d[None, :],
        dq.to(DQ.dtype.element_ty),
        offs_m,
        offs_d,
        N_Q,
        HEAD_DIM,
        not EVEN_M,
        not EVEN_D,
    )
