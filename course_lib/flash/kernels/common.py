r"""Helpers shared by the FlashAttention kernels: masked loads and stores, and the tile classes.

Every pass (:mod:`.forward`, :mod:`.backward`, :mod:`.decode`) walks tiles the same way;
these ``@triton.jit`` functions are inlined into each kernel when it is compiled.
"""

from __future__ import annotations

import triton
import triton.language as tl

_LOG2E = tl.constexpr(1.4426950408889634)  # log2(e), readable inside the kernels
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
