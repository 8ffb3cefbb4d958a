"""course_lib.flash.kernels.common: the @triton.jit helpers every kernel inlines, each run
through Triton (the interpreter without a GPU) in a small probe kernel and compared with
its definition: the tile classes (_key_range, _query_range), the order of the tiles a loop
visits, which keys a query sees, and the masked loads and stores."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from flash_lab import DEVICE, visible

import course_lib.flash as flash
from course_lib.flash import launch

launch.load_kernels()  # in the mode conftest.py has chosen already
from course_lib.flash.kernels.common import (  # noqa: E402
    _key_range,
    _load_2d,
    _query_range,
    _store_2d,
    _tile_count,
    _tile_start,
    _visible,
)


@triton.jit
def _probe_ranges(OUT, A, B, N, DIAG, WINDOW, BLOCK: tl.constexpr, QUERY: tl.constexpr):
    """Store the kernels' (lo, full_lo, full_hi, hi) for one call, causal with a window."""
    if QUERY:
        lo, flo, fhi, hi = _query_range(A, B, N, DIAG, WINDOW, BLOCK, True, True)
    else:
        lo, flo, fhi, hi = _key_range(A, B, N, DIAG, WINDOW, BLOCK, True, True)
    tl.store(OUT + 0, lo)
    tl.store(OUT + 1, flo)
    tl.store(OUT + 2, fhi)
    tl.store(OUT + 3, hi)


def test_tile_ranges_in_the_kernel_equal_the_python_twin():
    """_key_range and _query_range, run through Triton, against the Python key_tile_range
    and the brute-force classification of the query tiles seeing a key tile."""
    out = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    cases = [
        (0, 7, 30, 0, 5),
        (8, 15, 30, 9, 4),
        (24, 29, 30, -5, 30),
        (0, 3, 13, 16, 2),
        (4, 11, 20, 3, 1),
    ]
    for first, last, n, diag, window in cases:
        _probe_ranges[(1,)](out, first, last, n, diag, window, BLOCK=4, QUERY=False)
        want = flash.key_tile_range(first, last, n, 4, is_causal=True, diag=diag, window=window)
        assert tuple(out.tolist()) == want, (first, last, n, diag, window)
        # the transpose: queries 0..n_q-1 that see keys first..last, in tiles of 4
        _probe_ranges[(1,)](out, first, last, n, diag, window, BLOCK=4, QUERY=True)
        lo, flo, fhi, hi = out.tolist()
        rows = torch.arange(n)[:, None] + diag
        cols = torch.arange(first, last + 1)[None, :]
        ok = (cols <= rows) & (cols >= rows - window + 1)  # (n, keys)
        sees = ok.any(1).nonzero().flatten().tolist()
        if sees:
            assert lo <= sees[0] and hi > sees[-1] and hi <= n
        for t0 in range(0, n, 4):
            rows_t = slice(t0, min(t0 + 4, n))
            if flo <= t0 < fhi:
                assert ok[rows_t].all() and t0 + 4 <= n  # claimed full: really full
            elif ok[rows_t].any():
                assert lo <= t0 < hi  # a tile with a visible key is visited


@triton.jit
def _probe_tiles(OUT, LO, FULL_LO, FULL_HI, HI, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """OUT[0]: how many tiles the loop visits; OUT[1 + t]: where the t-th one starts."""
    n = _tile_count(LO, FULL_LO, FULL_HI, HI, BLOCK, MASKED)
    tl.store(OUT, n)
    for t in range(0, n):
        tl.store(OUT + 1 + t, _tile_start(t, LO, FULL_LO, FULL_HI, BLOCK, MASKED))


def test_the_two_loops_visit_the_partial_tiles_of_both_edges_then_the_full_ones():
    out = torch.full((16,), -1, dtype=torch.int32, device=DEVICE)
    for lo, full_lo, full_hi, hi in ((0, 0, 24, 30), (8, 16, 40, 45), (4, 4, 4, 4), (0, 8, 8, 16)):
        for masked in (True, False):
            out.fill_(-1)
            _probe_tiles[(1,)](out, lo, full_lo, full_hi, hi, BLOCK=8, MASKED=masked)
            if masked:  # the window's left edge, then the diagonal or the ragged end
                want = list(range(lo, full_lo, 8)) + list(range(full_hi, hi, 8))
            else:
                want = list(range(full_lo, full_hi, 8))
            got = out.tolist()
            assert got[0] == len(want) and got[1 : 1 + len(want)] == want, (lo, hi, masked)
            assert all(x == -1 for x in got[1 + len(want) :])  # nothing else visited


@triton.jit
def _probe_visible(OUT, QPOS, N_K, DIAG, WINDOW, IS_CAUSAL: tl.constexpr,
                   HAS_WINDOW: tl.constexpr):  # fmt: skip
    rows = tl.arange(0, 8)
    cols = tl.arange(0, 16)
    qpos = tl.load(QPOS + rows)
    ok = _visible(qpos, cols, N_K, DIAG, WINDOW, IS_CAUSAL, HAS_WINDOW)  # (8, 16)
    tl.store(OUT + rows[:, None] * 16 + cols[None, :], ok.to(tl.int32))


def test_visible_is_the_mask_definition_with_bounds_and_padding_rows():
    """Keys past N_K are never visible, nor anything to a padding row (query index -1)."""
    out = torch.zeros(8, 16, dtype=torch.int32, device=DEVICE)
    qpos = torch.tensor([0, 1, 2, 3, 4, 5, 6, -1], dtype=torch.int32, device=DEVICE)
    for causal, diag, window in ((False, 0, None), (True, 0, None), (True, 6, None),
                                 (True, 6, 3)):  # fmt: skip
        _probe_visible[(1,)](out, qpos, 13, diag, window or 0, IS_CAUSAL=causal,
                             HAS_WINDOW=window is not None)  # fmt: skip
        want = torch.zeros(8, 16, dtype=torch.bool)
        alignment = "bottom_right" if diag else "top_left"  # bottom-right: 13 - 7 = 6
        want[:7, :13] = visible(7, 13, causal, alignment, window)
        assert torch.equal(out.bool().cpu(), want), (causal, diag, window)


@triton.jit
def _probe_load_store(X, Y, N_ROWS, N_COLS, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    """Load an 8 x 4 tile of a row-major ``[N_ROWS, 4]`` matrix, add 1, store it back to Y."""
    rows = tl.arange(0, 8)
    cols = tl.arange(0, 4)
    ptrs = rows[:, None] * 4 + cols[None, :]
    x = _load_2d(X + ptrs, rows, cols, N_ROWS, N_COLS, MASK_ROWS, MASK_COLS)
    _store_2d(Y + ptrs, x + 1.0, rows, cols, N_ROWS, N_COLS, MASK_ROWS, MASK_COLS)


def test_masked_loads_read_zeros_and_masked_stores_write_nothing_out_of_bounds():
    x = torch.arange(32, dtype=torch.float32, device=DEVICE).reshape(8, 4)
    for mask_rows, mask_cols in ((True, True), (True, False), (False, True), (False, False)):
        y = torch.full((8, 4), -7.0, device=DEVICE)
        n_rows, n_cols = (5 if mask_rows else 8), (3 if mask_cols else 4)
        _probe_load_store[(1,)](x, y, n_rows, n_cols, MASK_ROWS=mask_rows, MASK_COLS=mask_cols)
        want = torch.full((8, 4), -7.0, device=DEVICE)
        want[:n_rows, :n_cols] = x[:n_rows, :n_cols] + 1
        assert torch.equal(y, want), (mask_rows, mask_cols)
