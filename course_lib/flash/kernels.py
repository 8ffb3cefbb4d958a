r"""The Triton kernels of FlashAttention: forward, and a three-kernel backward.

Imported lazily by :mod:`course_lib.flash` (Triton must see ``TRITON_INTERPRET`` before it
is first imported). Every kernel works on tensors laid out as ``[B*H, N, d]`` with the
last dimension contiguous; ``stride_*b`` jumps from one (batch, head) pair to the next and
``stride_*n`` from one token to the next.

Notation, for one (batch, head) pair: :math:`S = \text{scale}\cdot QK^\top`,
:math:`P = \mathrm{softmax}(S)` row by row, :math:`O = PV`, and the log-sum-exp
:math:`L_i = \log\sum_j e^{S_{ij}}` so that :math:`P_{ij} = e^{S_{ij} - L_i}`.

We work in base 2 inside the loops (``exp2`` is what the GPU's special-function unit
computes): :math:`e^{x} = 2^{x\log_2 e}`, so scores are pre-multiplied by
:math:`\text{scale}\cdot\log_2 e` and the log-sum-exp is converted back to natural log
only when stored.

Two details that only matter once the kernels are compiled for a GPU (the interpreter hides
them): the offset of a (batch, head) pair, ``bh * stride_b``, is computed in int64 because
``B*H*N*d`` can exceed :math:`2^{31}` elements; and every ``tl.dot`` gets
``input_precision=DOT_PRECISION`` ("ieee" for float32 inputs), because a compiled ``tl.dot``
silently rounds float32 operands to TF32 while the interpreter multiplies in float32.

References: Dao et al. (2022), "FlashAttention: Fast and Memory-Efficient Exact Attention
with IO-Awareness"; Dao (2023), "FlashAttention-2: Faster Attention with Better
Parallelism and Work Partitioning"; the fused-attention tutorial of the Triton project.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e)
LN2 = 0.6931471805599453  # ln(2)


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    O,
    LSE,  # pointers: Q (BH, NQ, D), K/V (BH, NK, D), O (BH, NQ, D), LSE (BH, NQ)
    qk_scale,  # scale * log2(e)
    stride_qb,
    stride_qn,
    stride_kb,
    stride_kn,
    stride_vb,
    stride_vn,
    stride_ob,
    stride_on,
    N_Q,
    N_K,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    r"""One program = one block of BLOCK_M queries of one (batch, head).

    For each key block :math:`j` (online softmax, Milakov & Gimelshein 2018):

    .. math::

        m^{new} = \max(m, \mathrm{rowmax}(S_j)),\quad
        \ell \leftarrow e^{m - m^{new}}\ell + \mathrm{rowsum}(e^{S_j - m^{new}}),\quad
        A \leftarrow e^{m - m^{new}} A + e^{S_j - m^{new}} V_j

    and at the end :math:`O = A / \ell`, :math:`L = m + \log \ell`.
    """
    start_m = tl.program_id(0)  # which query block
    bh = tl.program_id(1).to(tl.int64)  # which (batch, head); int64: B*H*N*d may pass 2^31
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,) key columns within a block
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,) features (BLOCK_D = next power of 2 >= d)
    mask_d = offs_d < HEAD_DIM  # (BLOCK_D,)
    row_ok = offs_m < N_Q  # (BLOCK_M,) the last block may be ragged

    q_ptrs = Q + bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & mask_d[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # (BLOCK_M,) running max (base 2)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # (BLOCK_M,) running denominator
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # (BLOCK_M, BLOCK_D) unnormalised output

    # Causal: query i sees keys j <= i, so key blocks starting after the block's last
    # query are never loaded at all: this loop bound is the "block skipping".
    hi = N_K
    if IS_CAUSAL:
        hi = tl.minimum(N_K, (start_m + 1) * BLOCK_M)
    k_base = K + bh * stride_kb
    v_base = V + bh * stride_vb
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,)
        col_ok = cols < N_K  # (BLOCK_N,)
        kt = tl.load(
            k_base + cols[None, :] * stride_kn + offs_d[:, None],
            mask=col_ok[None, :] & mask_d[:, None],
            other=0.0,
        )  # (BLOCK_D, BLOCK_N) K_j^T
        s = tl.dot(q, kt, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N) Q_i K_j^T
        s = s * qk_scale  # (BLOCK_M, BLOCK_N) scores in base-2 units
        valid = col_ok[None, :]  # (1, BLOCK_N) keys past the end do not exist
        if IS_CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])  # (BLOCK_M, BLOCK_N)
        s = tl.where(valid, s, float("-inf"))  # (BLOCK_M, BLOCK_N)
        # Every row sees key 0 in the first block, so m_new is finite from then on.
        m_new = tl.maximum(m_i, tl.max(s, 1))  # (BLOCK_M,)
        alpha = tl.exp2(m_i - m_new)  # (BLOCK_M,) rescales what was accumulated so far
        p = tl.exp2(s - m_new[:, None])  # (BLOCK_M, BLOCK_N) in [0, 1]
        l_i = l_i * alpha + tl.sum(p, 1)  # (BLOCK_M,)
        v = tl.load(
            v_base + cols[:, None] * stride_vn + offs_d[None, :],
            mask=col_ok[:, None] & mask_d[None, :],
            other=0.0,
        )  # (BLOCK_N, BLOCK_D)
        pv = tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_D)
        acc = acc * alpha[:, None] + pv  # (BLOCK_M, BLOCK_D)
        m_i = m_new

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # (BLOCK_M,) guard; every real row has l >= 1
    acc = acc / l_safe[:, None]  # (BLOCK_M, BLOCK_D) O = A / l
    lse = (m_i + tl.log2(l_safe)) * 0.6931471805599453  # (BLOCK_M,) natural-log LSE
    o_ptrs = O + bh * stride_ob + offs_m[:, None] * stride_on + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None] & mask_d[None, :])
    tl.store(LSE + bh * N_Q + offs_m, lse, mask=row_ok)


@triton.jit
def _bwd_preprocess_kernel(
    O,
    DO,
    DELTA,  # O, dO (BH, NQ, D); DELTA (BH, NQ) fp32
    stride_ob,
    stride_on,
    stride_dob,
    stride_don,
    N_Q,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    r""":math:`D_i = \sum_k dO_{ik} O_{ik}` (equal to :math:`\sum_j P_{ij} dP_{ij}`)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # int64 offsets: B*H*N*d may exceed 2^31
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    mask = (offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM)  # (BLOCK_M, BLOCK_D)
    o = tl.load(
        O + bh * stride_ob + offs_m[:, None] * stride_on + offs_d[None, :], mask=mask, other=0.0
    ).to(tl.float32)  # (BLOCK_M, BLOCK_D)
    do = tl.load(
        DO + bh * stride_dob + offs_m[:, None] * stride_don + offs_d[None, :], mask=mask, other=0.0
    ).to(tl.float32)  # (BLOCK_M, BLOCK_D)
    delta = tl.sum(o * do, 1)  # (BLOCK_M,)
    tl.store(DELTA + bh * N_Q + offs_m, delta, mask=offs_m < N_Q)


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
    sm_scale,
    qk_scale,
    stride_qb,
    stride_qn,
    stride_kb,
    stride_kn,
    stride_vb,
    stride_vn,
    stride_dob,
    stride_don,
    N_Q,
    N_K,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    r"""One program = one block of BLOCK_N keys; it loops over the query blocks that see it.

    With :math:`P` recomputed from the saved :math:`L` (never stored):

    .. math::

        dV_j = \sum_i P_{ij}^\top dO_i,\qquad
        dP_{ij} = dO_i V_j^\top,\qquad
        dS_{ij} = P_{ij}\circ(dP_{ij} - D_i),\qquad
        dK_j = \text{scale}\sum_i dS_{ij}^\top Q_i.

    We compute the transposed tiles (keys on rows) so no transpose of P is ever needed.
    dK and dV of a key block are owned by one program: no atomics.
    """
    start_n = tl.program_id(0)  # which key block
    bh = tl.program_id(1).to(tl.int64)  # int64 offsets: B*H*N*d may exceed 2^31
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows
    offs_m = tl.arange(0, BLOCK_M)  # (BLOCK_M,) query columns within a block
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    mask_d = offs_d < HEAD_DIM  # (BLOCK_D,)
    col_ok = offs_n < N_K  # (BLOCK_N,)
    kv_mask = col_ok[:, None] & mask_d[None, :]  # (BLOCK_N, BLOCK_D)
    k = tl.load(
        K + bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0
    )  # (BLOCK_N, BLOCK_D)
    v = tl.load(
        V + bh * stride_vb + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0
    )  # (BLOCK_N, BLOCK_D)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # (BLOCK_N, BLOCK_D)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # (BLOCK_N, BLOCK_D)

    # Causal: queries before this key block never see it; start at the query block that
    # holds query number start_n * BLOCK_N (the diagonal).
    lo = 0
    if IS_CAUSAL:
        lo = ((start_n * BLOCK_N) // BLOCK_M) * BLOCK_M
    for start_m in range(lo, N_Q, BLOCK_M):
        rows = start_m + offs_m  # (BLOCK_M,)
        row_ok = rows < N_Q  # (BLOCK_M,)
        qt = tl.load(
            Q + bh * stride_qb + rows[None, :] * stride_qn + offs_d[:, None],
            mask=row_ok[None, :] & mask_d[:, None],
            other=0.0,
        )  # (BLOCK_D, BLOCK_M) Q_i^T
        do = tl.load(
            DO + bh * stride_dob + rows[:, None] * stride_don + offs_d[None, :],
            mask=row_ok[:, None] & mask_d[None, :],
            other=0.0,
        )  # (BLOCK_M, BLOCK_D)
        lse = tl.load(LSE + bh * N_Q + rows, mask=row_ok, other=float("inf"))  # (BLOCK_M,)
        delta = tl.load(DELTA + bh * N_Q + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
        # (BLOCK_N, BLOCK_M): S^T in base-2 units
        st = tl.dot(k, qt, input_precision=DOT_PRECISION) * qk_scale
        pt = tl.exp2(st - lse[None, :] * 1.4426950408889634)  # (BLOCK_N, BLOCK_M) P^T
        valid = col_ok[:, None] & row_ok[None, :]  # (BLOCK_N, BLOCK_M)
        if IS_CAUSAL:
            valid = valid & (offs_n[:, None] <= rows[None, :])
        pt = tl.where(valid, pt, 0.0)  # (BLOCK_N, BLOCK_M)
        # (BLOCK_N, BLOCK_D): dV += P^T dO
        dv += tl.dot(pt.to(do.dtype), do, input_precision=DOT_PRECISION)
        # (BLOCK_N, BLOCK_M): dP^T = V dO^T
        dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
        dst = pt * (dpt - delta[None, :])  # (BLOCK_N, BLOCK_M)  dS^T
        # (BLOCK_N, BLOCK_D): dK += dS^T Q
        dk += tl.dot(dst.to(k.dtype), tl.trans(qt), input_precision=DOT_PRECISION)
    dk = dk * sm_scale  # (BLOCK_N, BLOCK_D)
    tl.store(
        DK + bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :],
        dk.to(DK.dtype.element_ty),
        mask=kv_mask,
    )
    tl.store(
        DV + bh * stride_vb + offs_n[:, None] * stride_vn + offs_d[None, :],
        dv.to(DV.dtype.element_ty),
        mask=kv_mask,
    )


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
    stride_qn,
    stride_kb,
    stride_kn,
    stride_vb,
    stride_vn,
    stride_dob,
    stride_don,
    N_Q,
    N_K,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    r"""One program = one block of BLOCK_M queries: :math:`dQ_i = \text{scale}\sum_j dS_{ij} K_j`.

    A second pass over the key blocks, like the forward, so each dQ block is owned by one
    program (FlashAttention-2's atomic-free split of the backward).
    """
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)  # int64 offsets: B*H*N*d may exceed 2^31
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    mask_d = offs_d < HEAD_DIM  # (BLOCK_D,)
    row_ok = offs_m < N_Q  # (BLOCK_M,)
    q_mask = row_ok[:, None] & mask_d[None, :]  # (BLOCK_M, BLOCK_D)
    q = tl.load(
        Q + bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :], mask=q_mask, other=0.0
    )  # (BLOCK_M, BLOCK_D)
    do = tl.load(
        DO + bh * stride_dob + offs_m[:, None] * stride_don + offs_d[None, :],
        mask=q_mask,
        other=0.0,
    )  # (BLOCK_M, BLOCK_D)
    lse = tl.load(LSE + bh * N_Q + offs_m, mask=row_ok, other=float("inf"))  # (BLOCK_M,)
    lse2 = lse * 1.4426950408889634  # (BLOCK_M,) base 2
    delta = tl.load(DELTA + bh * N_Q + offs_m, mask=row_ok, other=0.0)  # (BLOCK_M,)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # (BLOCK_M, BLOCK_D)

    hi = N_K
    if IS_CAUSAL:
        hi = tl.minimum(N_K, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,)
        col_ok = cols < N_K  # (BLOCK_N,)
        kt = tl.load(
            K + bh * stride_kb + cols[None, :] * stride_kn + offs_d[:, None],
            mask=col_ok[None, :] & mask_d[:, None],
            other=0.0,
        )  # (BLOCK_D, BLOCK_N)
        vt = tl.load(
            V + bh * stride_vb + cols[None, :] * stride_vn + offs_d[:, None],
            mask=col_ok[None, :] & mask_d[:, None],
            other=0.0,
        )  # (BLOCK_D, BLOCK_N)
        s = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        p = tl.exp2(s - lse2[:, None])  # (BLOCK_M, BLOCK_N)
        valid = row_ok[:, None] & col_ok[None, :]  # (BLOCK_M, BLOCK_N)
        if IS_CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        p = tl.where(valid, p, 0.0)  # (BLOCK_M, BLOCK_N)
        dp = tl.dot(do, vt, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N)  dP = dO V^T
        ds = p * (dp - delta[:, None])  # (BLOCK_M, BLOCK_N)  dS = P o (dP - D)
        # (BLOCK_M, BLOCK_D): dQ += dS K
        dq += tl.dot(ds.to(kt.dtype), tl.trans(kt), input_precision=DOT_PRECISION)
    dq = dq * sm_scale  # (BLOCK_M, BLOCK_D)
    tl.store(
        DQ + bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :],
        dq.to(DQ.dtype.element_ty),
        mask=q_mask,
    )


def is_interpreted() -> bool:
    """True when these kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return type(_fwd_kernel).__name__ == "InterpretedFunction"
