r"""The tiles the kernels run with, as data: one table per architecture, and the rule that picks.

A :class:`Tile` is one launch configuration (queries by keys, warps, pipeline stages);
:data:`GPU_TILES` lists the autotuner's candidates per kernel for sm_90 (H100/H200) and sm_80
(A100), at :math:`d_h \le 64` and :math:`d_h \le 128`, the default first; :data:`SMALL_TILES`
serve Triton's interpreter and float32. :func:`kernel_config` picks a call's candidates
(pruned by :func:`shared_estimate`). Every GPU tile is compiled ahead of time by :mod:`.aot`
(``benchmarks/results/flash_aot_registers.json``), and ``tests/course_lib/flash/test_aot.py``
checks that the recorded table covers this one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from .launch import device_arch, shared_limit, triton_mode


@dataclass(frozen=True)
class Tile(Mapping):
    """One launch configuration: ``block_m`` queries by ``block_n`` keys, on ``num_warps``
    warps, with ``num_stages`` buffers in the software pipeline of the streamed tiles.

    Read as Triton's launch options too: ``tile["BLOCK_M"]``, ``dict(tile)`` and
    ``kernel[grid](..., **tile)`` give ``BLOCK_M``, ``BLOCK_N``, ``num_warps`` and
    ``num_stages``. (The decode kernel reads ``block_m`` as its tile of packed query rows.)
    """

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2

    def __getitem__(self, key: str) -> int:
        if key not in _LAUNCH_OPTIONS:
            raise KeyError(key)
        return getattr(self, _LAUNCH_OPTIONS[key])

    def __iter__(self) -> Iterator[str]:
        return iter(_LAUNCH_OPTIONS)

    def __len__(self) -> int:
        return len(_LAUNCH_OPTIONS)


_LAUNCH_OPTIONS = dict(BLOCK_M="block_m", BLOCK_N="block_n", num_warps="num_warps",
                       num_stages="num_stages")  # fmt: skip

# The autotuner's candidates per architecture and head dimension (d_h <= 64, d_h <= 128),
# the default (what runs without autotuning) first. Every one compiles for its architecture
# without a register spill, without a duplicated warpgroup and, on sm_90, with Hopper's
# warpgroup MMA, causal or not, with grouped heads, a window and ragged lengths at once
# (benchmarks/results/flash_aot_registers.json). Why these:
#
# * 128-query tiles keep the forward's and the dQ pass's query tile on chip with 8 warps.
# * The dK/dV pass holds two float32 accumulators (dK, dV) per key tile, and its warps are
#   laid along the key tile: 8 warps need 128 keys (two warpgroups of 64 rows); 64 keys get
#   4 warps (8 would hold every row twice: the S^T and dP^T products computed twice).
# * At d_h = 128 the 128-key dK/dV tile and the 128 x 64 dQ tile spill on sm_80: Hopper only.
# * dkdv_atomic (deterministic=False) also holds the step's dQ tile: on sm_80 it fits only
#   smaller tiles on 4 warps.
# * decode is a menu by size, not a set of candidates: the first tile whose block_m holds
#   the G * N_q packed query rows, with more warps for more rows (a 128-row tile on 4 warps
#   would spill).
_FWD_64 = (Tile(128, 64, 8, 3), Tile(128, 128, 8, 3), Tile(64, 64, 4, 4), Tile(128, 32, 8, 3))
_FWD_128 = (Tile(128, 64, 8, 3), Tile(128, 64, 8, 4), Tile(128, 32, 8, 3))
_DKDV_64 = (Tile(32, 128, 8, 2), Tile(32, 128, 8, 3), Tile(32, 64, 4, 2))
_DQ_64 = (Tile(128, 64, 8, 2), Tile(128, 32, 8, 3), Tile(64, 32, 4, 3))
_DECODE_64 = (Tile(16, 64, 4, 4), Tile(64, 64, 4, 4), Tile(128, 64, 8, 4))
_DECODE_128 = (Tile(16, 64, 4, 3), Tile(64, 32, 4, 3), Tile(128, 64, 8, 3))
GPU_TILES: dict[tuple[int, int], dict[str, tuple[Tile, ...]]] = {
    (90, 64): dict(fwd=_FWD_64, dkdv=_DKDV_64, dkdv_atomic=(Tile(32, 128, 8, 2),), dq=_DQ_64,
                   decode=_DECODE_64),
    (90, 128): dict(fwd=_FWD_128,
                    dkdv=(Tile(32, 128, 8, 2), Tile(32, 64, 4, 2), Tile(32, 64, 4, 3)),
                    dkdv_atomic=(Tile(32, 128, 8, 2),),
                    dq=(Tile(128, 32, 8, 2), Tile(128, 64, 8, 2), Tile(64, 32, 4, 3)),
                    decode=_DECODE_128),
    (80, 64): dict(fwd=_FWD_64, dkdv=_DKDV_64, dkdv_atomic=(Tile(32, 64, 4, 2),), dq=_DQ_64,
                   decode=_DECODE_64),
    (80, 128): dict(fwd=_FWD_128, dkdv=(Tile(32, 64, 4, 2), Tile(32, 64, 4, 3)),
                    dkdv_atomic=(Tile(32, 32, 4, 2),),
                    dq=(Tile(128, 32, 8, 2), Tile(64, 32, 4, 3)),
                    decode=_DECODE_128),
}  # fmt: skip

# Triton's interpreter: small tiles, so that tests on short sequences still cross several
# tiles (ragged ends, the causal diagonal); there the cost is per element, not per program.
# float32 on a GPU gets the same: its tl.dot runs in true float32 without tensor cores,
# where large tiles only cost registers (and tens of seconds of compilation each).
SMALL_TILES: dict[str, tuple[Tile, ...]] = dict(
    fwd=(Tile(64, 32),), dkdv=(Tile(32, 64),), dkdv_atomic=(Tile(32, 64),), dq=(Tile(64, 32),),
    decode=(Tile(16, 32),),
)  # fmt: skip


def gpu_tiles(head_dim: int, arch: int = 90) -> dict[str, tuple[Tile, ...]]:
    """The rows of :data:`GPU_TILES` for ``head_dim`` on ``arch`` (sm_90's for newer GPUs)."""
    return GPU_TILES[(90 if arch >= 90 else 80, 64 if head_dim <= 64 else 128)]


def shared_estimate(kind: str, config: Mapping, head_dim: int, elem_bytes: int = 2) -> int:
    r"""An upper bound of the shared memory (bytes) one program of ``kind`` needs with ``config``.

    The tiles a program keeps for its whole loop (*resident*: the forward's and the dQ
    pass's query tiles, the dK/dV pass's key and value tiles) once, plus ``num_stages``
    copies of the tiles it streams (the software pipeline's buffers), at ``elem_bytes`` per
    element, and 1 KiB of barriers and conversions (the atomic dK/dV pass also stages K in
    the dQ product's layout, and dS^T). Checked against what the compiler
    reports for every recorded configuration (``tests/course_lib/flash/test_aot.py``).
    """
    d = max(16, 1 << (head_dim - 1).bit_length())
    m, n, stages = config["BLOCK_M"], config["BLOCK_N"], config["num_stages"]
    resident, streamed, extra = {
        "fwd": (m * d, 2 * n * d, 0),
        "decode": (m * d, 2 * n * d, 0),
        "dq": (2 * m * d, 2 * n * d, 0),
        "dkdv": (2 * n * d, 2 * m * d, 8 * m),  # + the LSE and D of each query row, fp32
    }[kind.removesuffix("_atomic")]
    if kind == "dkdv_atomic":  # K again in the dQ product's operand layout, and dS^T staged
        resident += n * d + n * m
    return elem_bytes * (resident + stages * streamed) + stages * extra + 1024


def kernel_config(
    head_dim: int,
    device: torch.device | str,
    *,
    interpreted: bool | None = None,
    dtype: torch.dtype | None = None,
    arch: int | None = None,
) -> dict[str, list[Tile]]:
    """Candidate tiles per kernel: ``{"fwd", "dkdv", "dkdv_atomic", "dq", "decode"}``.

    Each entry is a list of :class:`Tile` (``BLOCK_M`` counts queries, ``BLOCK_N`` keys; a
    tile reads as the dict ``{BLOCK_M, BLOCK_N, num_warps, num_stages}`` too). ``decode`` is
    a menu by size, not a set of candidates: :func:`flash_decode` takes the first whose
    ``BLOCK_M`` (rows of packed queries) holds its :math:`G N_q` rows. For the other
    kernels, one candidate: launched as is. Several (on a GPU): Triton's autotuner times them
    once per (bucket of the sequence lengths, d_h, causal, window, dtype) and keeps the
    fastest; the bucket is the next power of two of each length, so a new length does not
    re-tune.

    ``arch`` (``10 * major + minor``; default: the device's, or 90 without a GPU) chooses
    the row of :data:`GPU_TILES` (``python -m course_lib.flash.aot --all`` compiles every
    one; ``tests/course_lib/flash/test_aot.py`` checks the table). Candidates whose shared
    memory (:func:`shared_estimate`) exceeds the device's are pruned before the autotuner
    sees them, as Triton's tutorial does, so the same lists serve an H100 and a smaller GPU.
    The first candidate is what runs without autotuning (``COURSE_FLASH_AUTOTUNE=0``).

    The forward's loads and stores go through Hopper's tensor descriptors (TMA) instead of
    pointers only where :func:`tma_enabled` says so (``COURSE_FLASH_TMA=1``, sm_90 or newer,
    compiled); the same tiles serve both paths. In the interpreter, and for float32 on a GPU,
    :data:`SMALL_TILES`.
    """
    if interpreted is None:
        interpreted = triton_mode() == "interpreter"
    if interpreted or torch.device(device).type != "cuda" or dtype == torch.float32:
        return {kind: list(tiles) for kind, tiles in SMALL_TILES.items()}
    if arch is None:
        arch = device_arch(device)
    tune = os.environ.get("COURSE_FLASH_AUTOTUNE", "1") != "0"
    limit = shared_limit(device, arch)
    return {kind: list(tiles) for kind, tiles in _candidates(head_dim, arch, tune, limit).items()}


@functools.cache
def _candidates(head_dim: int, arch: int, tune: bool, shared_limit: int) -> dict:
    """:func:`gpu_tiles`, pruned by shared memory, the first only without tuning (cached)."""
    out = {}
    for kind, tiles in gpu_tiles(head_dim, arch).items():
        fits = [t for t in tiles if shared_estimate(kind, t, head_dim) <= shared_limit]
        fits = fits or list(tiles[-1:])  # the smallest, when nothing fits: let the compiler say
        out[kind] = tuple(fits if (tune or kind == "decode") else fits[:1])
    return out
