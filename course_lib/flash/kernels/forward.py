r"""The forward kernel: one program per tile of queries, the online softmax over key tiles."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    _key_range,
    _load_2d,
    _store_2d,
    _tile_count,
    _tile_start,
    _visible,
)


@triton.jit
def _head_descriptor(
    base, n_rows, stride_n, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr
):
    """A tensor descriptor of one head's ``[n_rows, HEAD_DIM]`` matrix, read in ``ROWS x BLOCK_D`` tiles."""
    return tl.make_tensor_descriptor(base, [n_rows, HEAD_DIM], [stride_n, 1], [ROWS, BLOCK_D])


@triton.jit
def _fwd_inner(
    acc,
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
    USE_TMA: tl.constexpr = False,
):
    r"""The online softmax over the full key tiles, or over the partial ones (``MASKED``).

    .. math::

        m^{new} = \max(m, \mathrm{rowmax}(S_j)),\quad
        \ell \leftarrow e^{m - m^{new}}\ell + \mathrm{rowsum}(e^{S_j - m^{new}}),\quad
        A \leftarrow e^{m - m^{new}} A + e^{S_j - m^{new}} V_j

    ``MASKED`` (a compile-time flag) applies the element-wise mask; full tiles skip it and
    fuse the scaling into the exponent's multiply-add. ``qpos`` is each row's query index.
    The order of the tiles does not matter to the online softmax, so the partial tiles of
    both edges (a window's left edge, the diagonal) share one loop: two loops per kernel,
    fewer registers than three.

    ``USE_TMA``: ``k_base`` and ``v_base`` are tensor descriptors of this head's keys and
    values (``[N_K, HEAD_DIM]``), loaded by the copy engine, zero past either end.
    """
    for t in range(0, _tile_count(lo, full_lo, full_hi, hi, BLOCK_N, MASKED)):
        start_n = _tile_start(t, lo, full_lo, full_hi, BLOCK_N, MASKED)
        cols = start_n + offs_n  # (BLOCK_N,)
        if USE_TMA:
            k = k_base.load([start_n, 0])  # (BLOCK_N, BLOCK_D) zero past N_K and HEAD_DIM
        else:
            k = _load_2d(
                k_base + cols[:, None] * stride_kn + offs_d[None, :],
                cols,
                offs_d,
                N_K,
                HEAD_DIM,
                MASKED and not EVEN_N,
                not EVEN_D,
            )  # (BLOCK_N, BLOCK_D)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N) Q_i K_j^T
        if MASKED:
            s = s * qk_scale  # (BLOCK_M, BLOCK_N) base-2 units
            valid = _visible(qpos, cols, N_K, DIAG, WINDOW, IS_CAUSAL, HAS_WINDOW)
            s = tl.where(valid, s, float("-inf"))  # (BLOCK_M, BLOCK_N)
            m_new = tl.maximum(m_i, tl.max(s, 1))  # (BLOCK_M,)
            # a row that has seen no key yet keeps m = -inf: subtract 0 instead (no inf - inf)
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)  # (BLOCK_M,)
            p = tl.exp2(s - m_sub[:, None])  # (BLOCK_M, BLOCK_N)
            alpha = tl.exp2(m_i - m_sub)  # (BLOCK_M,)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # (BLOCK_M,) finite: no mask
            p = tl.exp2(tl.fma(s, qk_scale, -m_new[:, None]))  # (BLOCK_M, BLOCK_N) one FMA
            alpha = tl.exp2(m_i - m_new)  # (BLOCK_M,) rescales what was accumulated so far
        l_i = l_i * alpha + tl.sum(p, 1)  # (BLOCK_M,)
        if USE_TMA:
            v = v_base.load([start_n, 0])  # (BLOCK_N, BLOCK_D)
        else:
            v = _load_2d(
                v_base + cols[:, None] * stride_vn + offs_d[None, :],
                cols,
                offs_d,
                N_K,
                HEAD_DIM,
                MASKED and not EVEN_N,
                not EVEN_D,
            )  # (BLOCK_N, BLOCK_D)
        acc = acc * alpha[:, None]  # (BLOCK_M, BLOCK_D)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)  # acc += P_j V_j
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    O,
    LSE,  # Q, O (B, H, NQ, D), K, V (B, HKV, NK, D) through strides; LSE (B*H, NQ) fp32
    qk_scale,  # scale * log2(e)
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_on,
    H,
    NUM_GROUPS,
    N_Q,
    N_K,
    DIAG,
    WINDOW,
    NQ_BUCKET,  # the autotuner's key only: next power of two of N_Q
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
    USE_TMA: tl.constexpr = False,
):
    r"""One program = one tile of BLOCK_M queries of one (batch, head).

    Loads its query tile once, runs the online softmax over the partial, full and partial
    key tiles of :func:`_key_range` (never loading the skipped ones), and stores
    :math:`O = A / \ell` and the log-sum-exp in base 2, :math:`L_2 = m + \log_2 \ell`
    (:math:`m` is in base-2 units: the scores were multiplied by scale · log2 e).

    ``USE_TMA`` (a compile-time flag; :func:`course_lib.flash.launch.tma_enabled` decides):
    Q, K, V are loaded and O stored through *tensor descriptors*, one per tensor of this
    (batch, head), ``[N, HEAD_DIM]`` with the token stride. On Hopper (sm_90) a descriptor
    load is a TMA copy: the copy engine moves a whole ``BLOCK x BLOCK_D`` tile between
    global and shared memory, issued by one thread and signalled by a barrier, instead of
    every thread computing and masking its own addresses; the registers and instructions
    that address math took are freed. The hardware checks the bounds of each dimension:
    rows past ``N`` and features past ``HEAD_DIM`` (``BLOCK_D`` is a power of two) read as
    zero and are not written, so no ``EVEN_*`` bounds mask is needed; the causal and window
    masks of the partial tiles still apply. The descriptors are built on the device (the
    arguments stay pointers, and the block shapes follow whichever config the autotuner
    picks). The flag is off by default (``COURSE_FLASH_TMA=1`` turns it on) until a GPU run
    has measured it against the pointer path, which older GPUs and the interpreter keep.
    Triton 3.9's automatic warp specialisation (``tl.range(..., warp_specialize=True)``)
    did not apply here on sm_90 when tried ahead of time (2026-12-02, the key-tile loops,
    either path): with 8 warps the hint was ignored (no partitions in the TritonGPU IR),
    with 4 warps the compiler's ``NVGPUWarpSpecialization`` pass failed on this kernel.
    """
    pid_m = tl.program_id(0)
    if IS_CAUSAL:  # heaviest first: the last query tiles see the most keys
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)  # b * H + h
    b = (bh // H).to(tl.int64)  # int64: B*H*N*d may pass 2^31
    h = bh % H
    hk = (h // NUM_GROUPS).to(tl.int64)  # grouped-query attention: the key/value head
    h = h.to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,) key columns within a tile
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,) features (BLOCK_D = next power of 2 >= d)

    if USE_TMA:  # one descriptor per tensor of this (batch, head): bounds N and HEAD_DIM
        q_desc = _head_descriptor(
            Q + b * stride_qb + h * stride_qh, N_Q, stride_qn, HEAD_DIM, BLOCK_M, BLOCK_D
        )
        q = q_desc.load([pid_m * BLOCK_M, 0])  # (BLOCK_M, BLOCK_D) zero past N_Q, HEAD_DIM
    else:
        q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :]
        q = _load_2d(
            q_ptrs, offs_m, offs_d, N_Q, HEAD_DIM, not EVEN_M, not EVEN_D
        )  # (BLOCK_M, BLOCK_D)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh
    if USE_TMA:
        k_base = _head_descriptor(k_base, N_K, stride_kn, HEAD_DIM, BLOCK_N, BLOCK_D)
        v_base = _head_descriptor(v_base, N_K, stride_vn, HEAD_DIM, BLOCK_N, BLOCK_D)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # (BLOCK_M,) running max (base 2)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # (BLOCK_M,) running denominator
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # (BLOCK_M, BLOCK_D) unnormalised output

    m_last = tl.minimum(pid_m * BLOCK_M + BLOCK_M, N_Q) - 1
    lo, full_lo, full_hi, hi = _key_range(
        pid_m * BLOCK_M, m_last, N_K, DIAG, WINDOW, BLOCK_N, IS_CAUSAL, HAS_WINDOW
    )
    # the full tiles, without any mask; then the partial ones (the diagonal, a window's left
    # edge, the ragged end) in one loop with the element-wise mask. Skipped tiles: never.
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n, offs_d,
        lo, full_lo, full_hi, hi, qk_scale, N_K, DIAG, WINDOW, HEAD_DIM, BLOCK_N, False, EVEN_N,
        EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION, USE_TMA,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n, offs_d,
        lo, full_lo, full_hi, hi, qk_scale, N_K, DIAG, WINDOW, HEAD_DIM, BLOCK_N, True, EVEN_N,
        EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION, USE_TMA,
    )  # fmt: skip

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # (BLOCK_M,) a row that sees no key: O = 0
    acc = acc / l_safe[:, None]  # (BLOCK_M, BLOCK_D) O = A / l
    lse = m_i + tl.log2(l_safe)  # (BLOCK_M,) base 2, as the backward uses it; -inf: no key
    if USE_TMA:  # rows past N_Q and columns past HEAD_DIM are not written
        o_desc = _head_descriptor(
            O + b * stride_ob + h * stride_oh, N_Q, stride_on, HEAD_DIM, BLOCK_M, BLOCK_D
        )
        o_desc.store([pid_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))
    else:
        o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :]
        _store_2d(
            o_ptrs,
            acc.to(O.dtype.element_ty),
            offs_m,
            offs_d,
            N_Q,
            HEAD_DIM,
            not EVEN_M,
            not EVEN_D,
        )
    lse_ptrs = LSE + (b * H + h) * N_Q + offs_m
    if EVEN_M:
        tl.store(lse_ptrs, lse)
    else:
        tl.store(lse_ptrs, lse, mask=offs_m < N_Q)
