r"""Launching the Triton kernels: the interpreter switch, tile configs, autotuning, helpers.

:func:`kernel_config` holds the candidate tiles per kernel (checked with ``ptxas`` for sm_80
and sm_90 by :mod:`.aot`); :func:`_launch` runs one config as is, or several under Triton's
autotuner. Nothing here imports Triton before :func:`_load_kernels` (which first lets
``course_lib.env`` choose the interpreter on a machine without a GPU).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from pathlib import Path

import torch


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


SHARED_LIMIT = {90: 227 * 1024, 80: 163 * 1024}  # bytes of shared memory one block may use


@functools.cache
def _capability(index: int) -> int:
    """The compute capability of CUDA device ``index`` as ``10 * major + minor`` (asked once)."""
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor


@functools.cache
def _shared_limit(index: int) -> int:
    """Shared memory one block may use on CUDA device ``index`` (bytes; asked once)."""
    props = torch.cuda.get_device_properties(index)
    optin = getattr(props, "shared_memory_per_block_optin", 0)
    return int(optin) or SHARED_LIMIT.get(_capability(index), 99 * 1024)


def device_arch(device: torch.device | str) -> int:
    """``10 * major + minor`` of a CUDA device, cached; 90 (Hopper) when there is no GPU."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return 90
    return _capability(device.index if device.index is not None else torch.cuda.current_device())


def shared_estimate(kind: str, config: dict, head_dim: int, elem_bytes: int = 2) -> int:
    r"""An upper bound of the shared memory (bytes) one program of ``kind`` needs with ``config``.

    The tiles a program keeps for its whole loop (*resident*: the forward's and the dQ
    pass's query tiles, the dK/dV pass's key and value tiles) once, plus ``num_stages``
    copies of the tiles it streams (the software pipeline's buffers), at ``elem_bytes`` per
    element, and 1 KiB of barriers and conversions (the atomic dK/dV pass also stages K in
    the dQ product's layout, and dS^T). Checked against what the compiler
    reports for every recorded configuration (``tests/library/flash/test_flash_aot.py``).
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
) -> dict[str, list[dict]]:
    """Candidate tile sizes and launch settings per kernel: ``{"fwd", "dkdv", "dkdv_atomic", "dq", "decode"}``.

    Each entry is a list of configs ``{BLOCK_M, BLOCK_N, num_warps, num_stages}``
    (``BLOCK_M`` counts queries, ``BLOCK_N`` keys). ``decode`` is a menu by size, not a set
    of candidates: :func:`flash_decode` takes the first whose ``BLOCK_M`` (rows of packed
    queries) holds its :math:`G N_q` rows, with more warps for more rows (a 128-row tile on 4
    warps would spill). For the other kernels, one candidate: launched as is. Several (on a GPU):
    Triton's autotuner times them once per (bucket of the sequence lengths, d_h, causal,
    window, dtype) and keeps the fastest; the bucket is the next power of two of each length,
    so a new length does not re-tune.

    ``arch`` (``10 * major + minor``; default: the device's, or 90 without a GPU) chooses
    the candidates: every one compiles for that architecture without register spills,
    without duplicated warpgroups and, on sm_90, with Hopper's warpgroup MMA
    (``python -m course_lib.flash.aot --all``; ``tests/library/flash/test_flash_aot.py`` checks the
    table). Candidates whose shared memory (:func:`shared_estimate`) exceeds the device's are
    pruned before the autotuner sees them, as Triton's tutorial does, so the same lists
    serve an H100 and a smaller GPU. The first candidate is what runs without autotuning
    (``COURSE_FLASH_AUTOTUNE=0``).

    The forward's loads and stores go through Hopper's tensor descriptors (TMA) instead of
    pointers only where :func:`tma_enabled` says so (``COURSE_FLASH_TMA=1``, sm_90 or newer,
    compiled); the same configs serve both paths.

    In the interpreter the tiles are small so that tests on short sequences still cross
    several tiles (ragged ends, the causal diagonal); there the cost is per element, not
    per program. float32 on a GPU gets one small config and no autotuning: its ``tl.dot``
    runs in true float32 on the ordinary cores (no tensor cores), where large tiles only cost
    registers, and compiling such a kernel takes tens of seconds per candidate.
    """
    if interpreted is None:
        interpreted = triton_mode() == "interpreter"
    if interpreted or torch.device(device).type != "cuda":
        return _INTERPRETER_CONFIGS
    if dtype == torch.float32:
        return _FLOAT32_CONFIGS
    if arch is None:
        arch = device_arch(device)
    tune = os.environ.get("COURSE_FLASH_AUTOTUNE", "1") != "0"
    limit = SHARED_LIMIT.get(arch, 99 * 1024)
    if arch == device_arch(device) and torch.cuda.is_available():
        dev = torch.device(device)
        limit = _shared_limit(dev.index if dev.index is not None else torch.cuda.current_device())
    return _candidates_for(head_dim, arch, tune, limit)


_INTERPRETER_CONFIGS = {
    "fwd": [dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)],
    "dkdv": [dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2)],
    "dkdv_atomic": [dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2)],
    "dq": [dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)],
    "decode": [dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=2)],
}
_FLOAT32_CONFIGS = _INTERPRETER_CONFIGS  # the same small tiles, compiled


@functools.cache
def _candidates_for(head_dim: int, arch: int, tune: bool, shared_limit: int) -> dict:
    """:func:`_gpu_candidates`, pruned by shared memory, the first only without tuning (cached)."""
    out = {}
    for kind, configs in _gpu_candidates(head_dim, arch).items():
        fits = [c for c in configs if shared_estimate(kind, c, head_dim) <= shared_limit]
        fits = fits or configs[-1:]  # the smallest, when nothing fits: let the compiler say
        out[kind] = fits if (tune or kind == "decode") else fits[:1]
    return out


def _gpu_candidates(head_dim: int, arch: int = 90) -> dict[str, list[dict]]:
    """The autotuner's candidates on a GPU of architecture ``arch``, the default first.

    Every one compiles clean for its architecture (no register spill, no duplicated
    warpgroup, wgmma on sm_90), causal or not, and with grouped heads, a window and ragged
    lengths at once (``benchmarks/results/flash_aot_registers.json``). Tiles of 128 queries
    keep the forward's and the dQ pass's query tile on chip with 8 warps. The dK/dV pass
    holds two float32 accumulators (dK and dV) per key tile; its key tile is the one the
    warps are laid along, so 8 warps need 128 keys (two warpgroups of 64 rows each) and 64
    keys get 4 warps: 8 warps on 64 keys would hold every row twice (a duplicated
    warpgroup, the S^T and dP^T products computed twice). For d_h = 128 the 128-key dK/dV
    tile and the 128 x 64 dQ tile are Hopper's only: they spill on sm_80.

    ``dkdv_atomic``, the dK/dV pass that also adds dQ (``deterministic=False``), holds the
    dQ tile of the step besides dK and dV: on sm_80 it fits only smaller tiles on 4 warps
    (8 warps there lay the 32-query dQ tile across the warps and duplicate the rest).
    """
    hopper = arch >= 90
    if head_dim > 64:
        dq = [_cfg(128, 32, 8, 2), _cfg(64, 32, 4, 3)]
        if hopper:
            dq.insert(1, _cfg(128, 64, 8, 2))
        return {
            "fwd": [_cfg(128, 64, 8, 3), _cfg(128, 64, 8, 4), _cfg(128, 32, 8, 3)],
            "dkdv": ([_cfg(32, 128, 8, 2)] if hopper else [])
            + [_cfg(32, 64, 4, 2), _cfg(32, 64, 4, 3)],
            "dkdv_atomic": [_cfg(32, 128, 8, 2) if hopper else _cfg(32, 32, 4, 2)],
            "dq": dq,
            "decode": [_cfg(16, 64, 4, 3), _cfg(64, 32, 4, 3), _cfg(128, 64, 8, 3)],
        }
    return {
        "fwd": [_cfg(128, 64, 8, 3), _cfg(128, 128, 8, 3), _cfg(64, 64, 4, 4), _cfg(128, 32, 8, 3)],
        "dkdv": [_cfg(32, 128, 8, 2), _cfg(32, 128, 8, 3), _cfg(32, 64, 4, 2)],
        "dkdv_atomic": [_cfg(32, 128, 8, 2) if hopper else _cfg(32, 64, 4, 2)],
        "dq": [_cfg(128, 64, 8, 2), _cfg(128, 32, 8, 3), _cfg(64, 32, 4, 3)],
        "decode": [_cfg(16, 64, 4, 4), _cfg(64, 64, 4, 4), _cfg(128, 64, 8, 4)],
    }


TMA_ENV = "COURSE_FLASH_TMA"


def tma_enabled(device: torch.device | str, *, interpreted: bool | None = None) -> bool:
    """Whether the forward kernel loads and stores through tensor descriptors (TMA) here.

    Tensor descriptors hand a whole tile to Hopper's copy engine (the *Tensor Memory
    Accelerator*): one thread issues the copy of a ``BLOCK x d_h`` tile, the bounds are
    checked by the hardware, and the other threads spend no registers on addresses. The rule:

    * ``COURSE_FLASH_TMA`` unset, empty or ``0``: never (the default: the pointer path, until
      a GPU run has measured the descriptor path against it);
    * ``1``: when the kernels are compiled (not the interpreter), ``device`` is a CUDA GPU
      of compute capability 9.0 or more (Hopper: an H100/H200) and the installed Triton has
      ``tl.make_tensor_descriptor``; otherwise the pointer path (an A100, the CPU);
    * ``force``: as ``1``, and also in Triton's CPU interpreter (which emulates the
      descriptors): how the tests compare both paths without a GPU.

    A launch whose tensors break TMA's alignment rules (a base or a batch, head or token
    stride that is not a multiple of 16 bytes) takes the pointer path whatever this says
    (:func:`tma_compatible`).
    """
    setting = os.environ.get(TMA_ENV, "").strip().lower()
    if setting in ("", "0"):
        return False
    if setting not in ("1", "force"):
        raise ValueError(f"{TMA_ENV} must be 0, 1 or force, got {setting!r}")
    kernels = _load_kernels()
    import triton.language as tl

    if not hasattr(tl, "make_tensor_descriptor"):
        return False
    if interpreted is None:
        interpreted = kernels.is_interpreted()
    if interpreted:
        return setting == "force"
    return torch.device(device).type == "cuda" and device_arch(device) >= 90


def tma_compatible(*tensors: torch.Tensor) -> bool:
    """Whether every ``[B, H, N, d]`` view meets TMA's rules: unit stride along d, and its
    base address and its batch, head and token strides multiples of 16 bytes (the batch and
    head strides of a dimension of size 1 are never used; the token stride always goes into
    the descriptor)."""
    for x in tensors:
        size = x.element_size()
        if x.stride(-1) != 1 or x.data_ptr() % 16 or (x.stride(-2) * size) % 16:
            return False
        if any((s * size) % 16 for s, n in zip(x.stride()[:-2], x.shape[:-2]) if n > 1):
            return False
    return True


def _tma_scratch(size: int, alignment: int, stream):
    """Triton's allocator for the descriptors a kernel builds on the GPU (global memory)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_allocator() -> None:
    """Give Triton an allocator for device-side descriptors, unless one is set already."""
    import triton

    try:
        from triton.runtime import _allocation

        unset = isinstance(_allocation._allocator.get(), _allocation.NullAllocator)
    except (ImportError, AttributeError):  # another Triton's internals: set ours
        unset = True
    if unset:
        triton.set_allocator(_tma_scratch)


_AUTOTUNE_KEY = ["NQ_BUCKET", "NK_BUCKET", "HEAD_DIM", "IS_CAUSAL", "HAS_WINDOW"]
_EVEN = {
    "EVEN_M": lambda args: args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_N": lambda args: args["N_K"] % args["BLOCK_N"] == 0,
}
_autotuned: dict = {}
_DO_BENCH = None  # None: Triton's GPU timer; tests put a CPU timer here to tune in the interpreter


def _launch(
    kernels, name: str, configs: list[dict], grid, n_q: int, n_k: int, *args, reset=(), **meta
):
    """Launch ``kernels.<name>`` with one config, or autotune over several.

    ``grid(meta)`` maps the chosen tile sizes to the launch grid. ``EVEN_M`` and ``EVEN_N``
    (``n_q``, ``n_k`` divisible by the tile sizes) are derived from the chosen config:
    directly for one config, by ``triton.heuristics`` under the autotuner. ``reset`` names
    the arguments the autotuner must zero before each trial (buffers added to atomically,
    which every timed trial would otherwise add to again); it also keys a separate tuner.
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
        tuple(reset),
        meta.get("USE_TMA", False),  # the TMA and pointer paths tune apart
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
        tuner = triton.autotune(
            configs=tconfigs,
            key=_AUTOTUNE_KEY,
            do_bench=_DO_BENCH,
            reset_to_zero=list(reset) or None,
        )
        _autotuned[key] = tuner(triton.heuristics(_EVEN)(kernel))
    _autotuned[key][grid](*args, **meta)


def _dot_precision(dtype: torch.dtype) -> str:
    """``input_precision`` of every ``tl.dot``: full float32 ("ieee") for float32 inputs.

    On a GPU ``tl.dot`` would otherwise round float32 operands to TF32 (a 10-bit mantissa,
    errors ~1e-3) while the CPU interpreter multiplies in true float32: results would
    silently depend on the machine. float16/bfloat16 operands ignore the setting.
    """
    return "ieee" if dtype == torch.float32 else "tf32"


def _on_device(x: torch.Tensor):
    """Launch on the tensors' GPU (Triton launches on the *current* CUDA device)."""
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


def _strides(x: torch.Tensor) -> tuple[int, int, int]:
    """(batch, head, token) strides of a ``[B, H, N, d]`` view."""
    return x.stride(0), x.stride(1), x.stride(2)


def _bucket(n: int) -> int:
    """The autotuner's key for a length: its next power of two."""
    import triton

    return triton.next_power_of_2(n)


KERNEL_MODULES = ("common", "forward", "backward", "decode")


def kernel_source() -> str:
    """The source of the Triton kernels (readable without Triton): ``kernels/*.py`` in pass order."""
    here = Path(__file__).parent / "kernels"
    return "\n\n".join((here / f"{name}.py").read_text() for name in KERNEL_MODULES)
