r"""The Triton kernels of FlashAttention: forward, backward, and a split-key decode path.

Imported lazily by :mod:`course_lib.flash` (Triton must see ``TRITON_INTERPRET`` before it
is first imported). Tensors are addressed through three strides, batch ``b``, head ``h`` and
token ``n`` (the last dimension, the features, is contiguous), so one kernel reads the
course's ``[B, H, N, d_h]`` layout and flash-attn's ``[B, N, H, d_h]`` alike, without a copy.

Notation, for one (batch, head) pair: :math:`S = \text{scale}\cdot QK^\top`,
:math:`P = \mathrm{softmax}(S)` row by row over the keys a query may see, :math:`O = PV`, and
the log-sum-exp :math:`L_i = \log\sum_j e^{S_{ij}}` so that :math:`P_{ij} = e^{S_{ij} - L_i}`.

**Which keys a query sees.** Query :math:`i` sits at position :math:`i + \delta` of the key
sequence, with the *diagonal offset* :math:`\delta = 0` for top-left alignment (torch SDPA's
``is_causal``) and :math:`\delta = N_k - N_q` for bottom-right alignment (flash-attn's causal,
what a KV cache needs: the last query sees every key). Causal: key :math:`j` is visible when
:math:`j \le i + \delta`. A sliding window of :math:`W` keys adds :math:`j \ge i + \delta - W + 1`.

**What makes them fast** (each trick is also explained in chapter 06):

* *Tile classes.* For a tile of queries, the key tiles fall into three classes: skipped
  (no query of the tile sees any of their keys: never loaded), **full** (every query sees
  every key: no mask is built at all) and **partial** (crossing the causal diagonal, the
  window's edge or the end of the sequence: the element-wise mask is applied).
  :func:`_key_range` computes the classes' boundaries once per program, and each kernel
  runs two loops: the full tiles with no mask in the loop body, then the partial tiles of
  both edges (a window's left edge, the diagonal) in one loop with the mask, a compile-time
  switch (``MASKED``). The online softmax does not care about the order of the tiles, and
  two loops keep fewer registers alive than three. Only a couple of tiles per row of tiles
  are partial, so almost every tile runs the unmasked body: fewer instructions per tile, and
  no ``-inf`` handling.
* *The even fast path.* ``EVEN_M``/``EVEN_N``/``EVEN_D`` are compile-time flags that say the
  lengths are multiples of the tile sizes (and ``d_h`` a power of two): loads and stores then
  carry no bounds masks. They are set per launch from the actual lengths (Triton compiles
  one variant for each combination it meets).
* *Heaviest first.* With a causal mask the last query tiles see the most keys. Programs are
  numbered so that, within each (batch, head), those start first; the last programs to start
  are the cheapest, so the final wave of the GPU ends nearly together instead of waiting on
  one long program.
* *Register-safe tile sizes* (in :func:`course_lib.flash.kernel_config`): checked with
  ``ptxas`` for sm_80 and sm_90 (``python -m course_lib.flash.aot``); a tile that spills
  registers to local memory turns the on-chip loop into a memory-bound one. On a GPU the
  autotuner picks among them once per *bucket* of lengths (the next power of two), not per
  exact length, so a new length does not re-tune.
* *Base 2.* ``exp2`` is what the GPU's special-function unit computes:
  :math:`e^{x} = 2^{x\log_2 e}`, so scores are multiplied by :math:`\text{scale}\cdot\log_2 e`
  (fused with the max subtraction into one multiply-add) and the log-sum-exp is converted
  back to natural log only when stored.

**The backward.** FlashAttention-2 (Dao, 2023) computes :math:`dK, dV` *and* :math:`dQ` in one
pass, one program per key tile, adding each tile's :math:`dQ` contribution into a float32
buffer with atomic additions: five tile matmuls per tile. Triton's fused-attention tutorial
avoids atomics: a program computes :math:`dK, dV` for a key tile, then :math:`dQ` for a query
tile in a second loop that recomputes :math:`S` and :math:`dP`: seven matmuls per tile,
deterministic. The course does the same as the tutorial, in two kernels (after a small
*preprocess* kernel for :math:`D = \mathrm{rowsum}(dO\circ O)`): each kernel is one loop a
learner can read on its own, and the gradients are bit-for-bit reproducible (float32
atomics add in a different order on every run). The price is 7/5 of the matmul work.

**Grouped-query attention.** K and V have :math:`H_{kv}` heads, :math:`H = G\,H_{kv}`; query head
:math:`h` reads key/value head :math:`\lfloor h/G\rfloor` (no repeated K, V is materialised). The
:math:`dK, dV` program of a key/value head loops over its :math:`G` query heads, so the sum
over the group happens in registers.

**Decoding.** With a few queries against a long cache, one program per query tile would leave
almost every SM idle. :func:`_decode_kernel` splits the *keys* over programs, each returning
a partial output and its log-sum-exp; :func:`_decode_merge_kernel` combines them,
:math:`L = \log\sum_s e^{L_s}`, :math:`O = \sum_s e^{L_s - L} O_s` (flash-decoding). The
:math:`G` query heads of a key/value head are packed into one tile of rows, so each key is
read once per key/value head.

Two details that only matter once the kernels are compiled for a GPU (the interpreter hides
them): offsets of a (batch, head) pair are computed in int64, because ``B*H*N*d`` can exceed
:math:`2^{31}` elements; and every ``tl.dot`` gets ``input_precision=DOT_PRECISION`` ("ieee"
for float32 inputs), because a compiled ``tl.dot`` silently rounds float32 operands to TF32
while the interpreter multiplies in float32.

References: Dao et al. (2022), "FlashAttention: Fast and Memory-Efficient Exact Attention
with IO-Awareness"; Dao (2023), "FlashAttention-2: Faster Attention with Better
Parallelism and Work Partitioning"; Dao, Haziza, Massa and Sizov (2023), "Flash-Decoding for
long-context inference"; the fused-attention tutorial of the Triton project.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e), for the launchers (qk_scale = scale * LOG2E)
_LOG2E = tl.constexpr(1.4426950408889634)  # the same, readable inside the kernels
_LN2 = tl.constexpr(0.6931471805599453)  # ln(2)


# --------------------------------------------------------------------------- helpers


@triton.jit
def _load_2d(ptrs, rows, cols, n_rows, n_cols, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    """``tl.load`` of a tile, with bounds masks only where the compile-time flags ask."""
    if MASK_ROWS:
        if MASK_COLS:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0)
        else:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
    else:
        if MASK_COLS:
            x = tl.load(ptrs, mask=cols[None, :] < n_cols, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _store_2d(
    ptrs, x, rows, cols, n_rows, n_cols, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr
):
    if MASK_ROWS:
        if MASK_COLS:
            tl.store(ptrs, x, mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols))
        else:
            tl.store(ptrs, x, mask=rows[:, None] < n_rows)
    else:
        if MASK_COLS:
            tl.store(ptrs, x, mask=cols[None, :] < n_cols)
        else:
            tl.store(ptrs, x)


@triton.jit
def _load_1d(ptrs, idx, n, other, MASK: tl.constexpr):
    if MASK:
        x = tl.load(ptrs, mask=idx < n, other=other)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _key_range(
    m_first,
    m_last,
    N_K,
    DIAG,
    WINDOW,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
):
    r"""Key offsets ``lo <= full_lo <= full_hi <= hi`` for the queries ``m_first..m_last``.

    Key tiles in ``[lo, full_lo)`` and ``[full_hi, hi)`` are partial (masked), those in
    ``[full_lo, full_hi)`` are full (every query sees every key, and every key exists); keys
    outside ``[lo, hi)`` are skipped. ``lo``, ``full_lo`` and ``full_hi`` are multiples of
    ``BLOCK_N`` (or equal to ``hi``). Query :math:`i` sees key :math:`j` when
    :math:`j \le i + \delta` (causal) and :math:`j \ge i + \delta - W + 1` (window), with
    :math:`\delta` = ``DIAG``. Mirrored in Python by ``course_lib.flash.key_tile_range``.
    """
    hi = N_K
    full_hi = (N_K // BLOCK_N) * BLOCK_N  # the ragged last key tile needs a bounds mask
    lo = 0
    full_lo = 0
    if IS_CAUSAL:
        # keys up to the last query's diagonal are seen by someone; up to the first's by all
        hi = tl.minimum(hi, tl.maximum(m_last + DIAG + 1, 0))
        full_hi = tl.minimum(full_hi, (tl.maximum(m_first + DIAG + 1, 0) // BLOCK_N) * BLOCK_N)
    if HAS_WINDOW:
        # keys from the first query's window start are seen by someone; from the last's by all
        first_key = tl.maximum(m_first + DIAG - WINDOW + 1, 0)
        hi = tl.where(first_key >= hi, 0, hi)  # the window lies past the last key: nothing
        lo = (first_key // BLOCK_N) * BLOCK_N
        full_lo = tl.cdiv(tl.maximum(m_last + DIAG - WINDOW + 1, 0), BLOCK_N) * BLOCK_N
    lo = tl.minimum(lo, hi)
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def _query_range(
    n_first,
    n_last,
    N_Q,
    DIAG,
    WINDOW,
    BLOCK_M: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
):
    r"""Query offsets ``lo <= full_lo <= full_hi <= hi`` that see the keys ``n_first..n_last``.

    The transpose of :func:`_key_range`: query :math:`i` sees key :math:`j` when
    :math:`i \ge j - \delta` (causal) and :math:`i \le j - \delta + W - 1` (window).
    """
    hi = N_Q
    full_hi = (N_Q // BLOCK_M) * BLOCK_M
    lo = 0
    full_lo = 0
    first_query = 0
    if IS_CAUSAL:
        first_query = tl.maximum(n_first - DIAG, 0)
        lo = (first_query // BLOCK_M) * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(n_last - DIAG, 0), BLOCK_M) * BLOCK_M
    if HAS_WINDOW:
        hi = tl.minimum(hi, tl.maximum(n_last - DIAG + WINDOW, 0))
        full_hi = tl.minimum(full_hi, (tl.maximum(n_first - DIAG + WINDOW, 0) // BLOCK_M) * BLOCK_M)
    hi = tl.where(first_query >= hi, 0, hi)  # no query sees these keys: nothing to visit
    lo = tl.minimum(lo, hi)
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def _tile_count(lo, full_lo, full_hi, hi, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """How many tiles one loop visits: the partial ones (``[lo, full_lo)`` then
    ``[full_hi, hi)``, one loop for both edges) or the full ones (``[full_lo, full_hi)``)."""
    if MASKED:
        n = tl.cdiv(full_lo - lo, BLOCK) + tl.cdiv(hi - full_hi, BLOCK)
    else:
        n = tl.cdiv(full_hi - full_lo, BLOCK)
    return n


@triton.jit
def _tile_start(t, lo, full_lo, full_hi, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """Offset of the ``t``-th tile of :func:`_tile_count`'s loop (a multiple of BLOCK)."""
    if MASKED:
        n_left = tl.cdiv(full_lo - lo, BLOCK)
        start = tl.where(t < n_left, lo + t * BLOCK, full_hi + (t - n_left) * BLOCK)
    else:
        start = full_lo + t * BLOCK
    return tl.multiple_of(start, BLOCK)


@triton.jit
def _visible(qpos, cols, N_K, DIAG, WINDOW, IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """``(rows, cols)`` boolean: which keys each query may see (bounds, causal, window)."""
    valid = (cols[None, :] < N_K) & (qpos[:, None] >= 0)  # (rows, cols)
    if IS_CAUSAL:
        valid = valid & (cols[None, :] <= qpos[:, None] + DIAG)
    if HAS_WINDOW:
        valid = valid & (cols[None, :] >= qpos[:, None] + DIAG - WINDOW + 1)
    return valid


# --------------------------------------------------------------------------- forward


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
    """
    for t in range(0, _tile_count(lo, full_lo, full_hi, hi, BLOCK_N, MASKED)):
        start_n = _tile_start(t, lo, full_lo, full_hi, BLOCK_N, MASKED)
        cols = start_n + offs_n  # (BLOCK_N,)
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
            p = tl.exp2(s * qk_scale - m_new[:, None])  # (BLOCK_M, BLOCK_N) one multiply-add
            alpha = tl.exp2(m_i - m_new)  # (BLOCK_M,) rescales what was accumulated so far
        l_i = l_i * alpha + tl.sum(p, 1)  # (BLOCK_M,)
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
):
    r"""One program = one tile of BLOCK_M queries of one (batch, head).

    Loads its query tile once, runs the online softmax over the partial, full and partial
    key tiles of :func:`_key_range` (never loading the skipped ones), and stores
    :math:`O = A / \ell` and :math:`L = m + \log \ell`.
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

    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :]
    q = _load_2d(
        q_ptrs, offs_m, offs_d, N_Q, HEAD_DIM, not EVEN_M, not EVEN_D
    )  # (BLOCK_M, BLOCK_D)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh

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
        EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n, offs_d,
        lo, full_lo, full_hi, hi, qk_scale, N_K, DIAG, WINDOW, HEAD_DIM, BLOCK_N, True, EVEN_N,
        EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION,
    )  # fmt: skip

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # (BLOCK_M,) a row that sees no key: O = 0
    acc = acc / l_safe[:, None]  # (BLOCK_M, BLOCK_D) O = A / l
    lse = (m_i + tl.log2(l_safe)) * _LN2  # (BLOCK_M,) natural log; -inf for a row with no key
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :]
    _store_2d(
        o_ptrs, acc.to(O.dtype.element_ty), offs_m, offs_d, N_Q, HEAD_DIM, not EVEN_M, not EVEN_D
    )
    lse_ptrs = LSE + (b * H + h) * N_Q + offs_m
    if EVEN_M:
        tl.store(lse_ptrs, lse)
    else:
        tl.store(lse_ptrs, lse, mask=offs_m < N_Q)


# --------------------------------------------------------------------------- backward


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
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MASKED: tl.constexpr,
    EVEN_M: tl.constexpr,
    EVEN_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    r"""Accumulate :math:`dV_j \mathrel{+}= P_{ij}^\top dO_i`, :math:`dK_j \mathrel{+}= dS_{ij}^\top Q_i`.

    Over the full query tiles, or the partial ones (``MASKED``), with the transposed tiles
    (keys on rows) so that no transpose of :math:`P` is needed:
    :math:`P^\top = 2^{\,K Q^\top\cdot\text{scale}\log_2 e - L\log_2 e}`,
    :math:`dP^\top = V dO^\top`, :math:`dS^\top = P^\top\circ(dP^\top - D)`.

    One loop runs over the query tiles of all :math:`G` query heads of the group (``g``, the
    head, is ``t // n_tiles``): a loop of loops would keep more registers alive.
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
        # a row that saw no key has L = -inf; +inf makes its P exactly 0
        lse2 = tl.where(lse == float("-inf"), float("inf"), lse) * _LOG2E
        st = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M) S^T
        pt = tl.exp2(st * qk_scale - lse2[None, :])  # (BLOCK_N, BLOCK_M) P^T
        if MASKED:
            valid = tl.trans(_visible(rows, offs_n, N_K, DIAG, WINDOW, IS_CAUSAL, HAS_WINDOW))
            valid = valid & (rows[None, :] < N_Q)  # (BLOCK_N, BLOCK_M)
            pt = tl.where(valid, pt, 0.0)  # (BLOCK_N, BLOCK_M)
        dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=DOT_PRECISION)  # dV += P^T dO
        dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # (BLOCK_N, BLOCK_M) dP^T
        dst = pt * (dpt - delta[None, :])  # (BLOCK_N, BLOCK_M) dS^T = P^T o (dP^T - D)
        dk = tl.dot(dst.to(q.dtype), q, dk, input_precision=DOT_PRECISION)  # dK += dS^T Q
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
    r"""One program = one tile of BLOCK_N keys of one (batch, key/value head).

    Loops over the query tiles that see the key tile (full ones without a mask, then the
    partial ones), of each of the :math:`G` query heads that read this key/value head, so
    :math:`dK_j = \text{scale}\sum_{g,i} dS_{ij}^\top Q_i` and :math:`dV_j = \sum_{g,i} P_{ij}^\top dO_i`
    are summed over the group in registers. Each dK, dV tile is owned by one program: no atomics.
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
    for masked in tl.static_range(2):  # the full query tiles, then the partial ones
        dk, dv = _bwd_dkdv_inner(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qh, stride_qn,
            stride_doh, stride_don, offs_n, offs_m, offs_d, lo, full_lo, full_hi, hi, qk_scale,
            N_Q, N_K, DIAG, WINDOW, NUM_GROUPS, HEAD_DIM, BLOCK_M, masked == 1, EVEN_M, EVEN_D,
            IS_CAUSAL, HAS_WINDOW, DOT_PRECISION,
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
    lse2,
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
        p = tl.exp2(s * qk_scale - lse2[:, None])  # (BLOCK_M, BLOCK_N) P = e^(S - L)
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
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse) * _LOG2E  # base 2
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
            dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n,
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


# --------------------------------------------------------------------------- decoding


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
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)  # (BLOCK_R, BLOCK_D)
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
    for masked in tl.static_range(2):  # the full key tiles, then the partial ones
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, qpos, offs_n, offs_d,
            lo, full_lo, full_hi, hi, qk_scale, N_K, DIAG, WINDOW, HEAD_DIM, BLOCK_N,
            masked == 1, EVEN_N, EVEN_D, IS_CAUSAL, HAS_WINDOW, DOT_PRECISION,
        )  # fmt: skip
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # (BLOCK_R,)
    acc = acc / l_safe[:, None]  # (BLOCK_R, BLOCK_D)
    lse = (m_i + tl.log2(l_safe)) * _LN2  # (BLOCK_R,) -inf when this split saw no key
    rowg = (b * H + h) * N_Q + (r % N_Q)  # (BLOCK_R,) global row index
    tl.store(
        O_PART + (rowg[:, None] * NUM_SPLITS + split) * HEAD_DIM + offs_d[None, :],
        acc,
        mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM),
    )
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


def is_interpreted() -> bool:
    """True when these kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return type(_fwd_kernel).__name__ == "InterpretedFunction"
