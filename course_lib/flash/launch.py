r"""What every launcher shares: Triton's mode, the GPU, arguments by name, autotuning, TMA.

Each pass's launcher (:mod:`.forward`, :mod:`.backward`, :mod:`.decode`) reads top to bottom
as Triton's fused-attention tutorial does: it calls :func:`prepare` (Triton's mode chosen,
the kernels imported), imports its kernel *object* from ``kernels/<pass>.py``, and hands it
to :func:`run_kernel` with keyword arguments. This module holds what those launchers share:

* :func:`load_kernels` and :func:`triton_mode`: the kernels are imported lazily, after
  ``course_lib.env`` has chosen the interpreter on a machine without a GPU (Triton reads
  ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a kernel). Nothing here imports Triton
  at import time, so chapter 06 reads without it up to its first kernel.
* :func:`device_arch`, :func:`shared_limit`: what the GPU is (the tiles it may run are in
  :mod:`.tiles`).
* :func:`with_strides`, :func:`sizes`, :func:`buckets`, :func:`head_dim_args`: the
  arguments every kernel takes, by the kernels' names.
* :func:`run_kernel`: one tile launched as is, or several under Triton's autotuner;
  :func:`autotuners` says what each autotuned kernel chose.
* :func:`tma_enabled`, :func:`tma_compatible`: whether the forward reads through tensor
  descriptors (Hopper's TMA).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

LOG2E = math.log2(math.e)  # the kernels' exponents are base 2: qk_scale = scale * LOG2E

# --------------------------------------------------------------------------- Triton's mode


def load_kernels():
    """Import the Triton kernels (``course_lib.flash.kernels``), choosing Triton's mode first.

    On a machine without a GPU, ``course_lib.env`` turns the interpreter on before any kernel
    is decorated. Raises an ImportError that says where to run the kernels when Triton is
    missing.
    """
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
        kernels = load_kernels()
    except ImportError:
        return "unavailable"
    return "interpreter" if kernels.is_interpreted() else "compiled"


def prepare(q: torch.Tensor) -> bool:
    """Load the kernels for a launch on ``q``'s device; returns whether they are interpreted."""
    interpreted = load_kernels().is_interpreted()
    if q.device.type == "cpu" and not interpreted:
        raise RuntimeError(
            "flash_attention got CPU tensors but Triton is in compiled (GPU) mode. Triton "
            "reads TRITON_INTERPRET when @triton.jit decorates a kernel, the first time "
            "course_lib.flash.kernels is imported: restart the kernel and call "
            "course_lib.env.setup() (or set TRITON_INTERPRET=1) before anything imports "
            "the kernels, or move the tensors to a CUDA GPU."
        )
    return interpreted


KERNEL_MODULES = ("common", "forward", "backward", "decode")


def kernel_source() -> str:
    """The source of the Triton kernels (readable without Triton): ``kernels/*.py`` in pass order."""
    here = Path(__file__).parent / "kernels"
    return "\n\n".join((here / f"{name}.py").read_text() for name in KERNEL_MODULES)


# --------------------------------------------------------------------------- the GPU


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


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def shared_limit(device: torch.device | str, arch: int) -> int:
    """Bytes of shared memory one block may use: the device's own figure when ``arch`` is
    its architecture, else :data:`SHARED_LIMIT`'s for ``arch`` (99 KiB for one not listed)."""
    if arch == device_arch(device) and torch.cuda.is_available():
        return _shared_limit(_index(torch.device(device)))
    return SHARED_LIMIT.get(arch, 99 * 1024)


def device_arch(device: torch.device | str) -> int:
    """``10 * major + minor`` of a CUDA device, cached; 90 (Hopper) when there is no GPU."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return 90
    return _capability(_index(device))


def on_device(x: torch.Tensor):
    """Launch on the tensors' GPU (Triton launches on the *current* CUDA device)."""
    return torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()


# --------------------------------------------------------------------------- launching


def dot_precision(dtype: torch.dtype) -> str:
    """``input_precision`` of every ``tl.dot``: full float32 ("ieee") for float32 inputs.

    On a GPU ``tl.dot`` would otherwise round float32 operands to TF32 (a 10-bit mantissa,
    errors ~1e-3) while the CPU interpreter multiplies in true float32: results would
    silently depend on the machine. float16/bfloat16 operands ignore the setting.
    """
    return "ieee" if dtype == torch.float32 else "tf32"


def head_dim_args(head_dim: int, dtype: torch.dtype) -> dict:
    """The kernels' compile-time arguments of the feature axis, and the dots' precision."""
    block_d = max(16, 1 << (head_dim - 1).bit_length())  # the next power of two, 16 at least
    return dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        EVEN_D=block_d == head_dim,
        DOT_PRECISION=dot_precision(dtype),
    )


def strides(name: str, x: torch.Tensor) -> dict[str, int]:
    """``{stride_<name>b, stride_<name>h, stride_<name>n}``: a ``[B, H, N, d]`` view's batch,
    head and token strides, as the kernels name them (``strides("q", q)``: ``stride_qb``, ...)."""
    return {f"stride_{name}{axis}": x.stride(i) for i, axis in enumerate("bhn")}


def with_strides(**tensors: torch.Tensor) -> dict:
    """``[B, H, N, d]`` tensors by their kernel names, each with its three strides:
    ``with_strides(Q=q, DO=do)`` is ``{Q: q, stride_qb: ..., ..., DO: do, stride_dob: ...}``."""
    out: dict[str, torch.Tensor | int] = {}
    for name, x in tensors.items():
        out[name] = x
        out.update(strides(name.lower(), x))
    return out


def sizes(q: torch.Tensor, k: torch.Tensor) -> dict[str, int]:
    """The sizes every kernel takes, by name, of ``q [B, H, N_q, d]`` and ``k [B, H_kv, N_k, d]``:
    ``H``, ``NUM_GROUPS`` (:math:`G = H / H_{kv}`), ``N_Q`` and ``N_K``."""
    return dict(H=q.shape[1], NUM_GROUPS=q.shape[1] // k.shape[1], N_Q=q.shape[2], N_K=k.shape[2])


def bucket(n: int) -> int:
    """The autotuner's key for a length: its next power of two."""
    return 1 << max(0, n - 1).bit_length()


def buckets(q: torch.Tensor, k: torch.Tensor) -> dict[str, int]:
    """``NQ_BUCKET``, ``NK_BUCKET``: the lengths as the autotuner's key sees them."""
    return dict(NQ_BUCKET=bucket(q.shape[2]), NK_BUCKET=bucket(k.shape[2]))


def last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The kernels need unit stride along d_h (any strides elsewhere: no copy for 'bnhd')."""
    return x if x.stride(-1) == 1 else x.contiguous()


def empty_like_layout(x: torch.Tensor, layout: str, dtype=None) -> torch.Tensor:
    """An empty ``[B, H, N, d]`` view whose memory is contiguous in the caller's layout."""
    B, H, N, d = x.shape
    dtype = x.dtype if dtype is None else dtype
    if layout == "bnhd":
        return torch.empty(B, N, H, d, dtype=dtype, device=x.device).transpose(1, 2)
    return torch.empty(B, H, N, d, dtype=dtype, device=x.device)


AUTOTUNE_KEY = ["NQ_BUCKET", "NK_BUCKET", "HEAD_DIM", "IS_CAUSAL", "HAS_WINDOW"]
EVEN = {  # the lengths are multiples of the chosen tile: no bounds masks (set per launch)
    "EVEN_M": lambda args: args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_N": lambda args: args["N_K"] % args["BLOCK_N"] == 0,
}
AUTOTUNE_TIMER = None  # None: Triton's GPU timer; tests put a CPU timer here to tune on a CPU


@dataclass(frozen=True)
class Tuner:
    """One autotuned kernel: what it tunes over, and Triton's autotuner that chose."""

    kernel: Any  # the @triton.jit function (Triton has no type information)
    tiles: tuple  # of tiles.Tile
    reset: tuple[str, ...]  # arguments zeroed before each timed trial (atomic buffers)
    tma: bool  # the forward's tensor-descriptor path tunes apart from its pointer path
    timer: Callable | None  # AUTOTUNE_TIMER when it was made
    autotuner: Any  # triton.runtime.Autotuner

    @property
    def name(self) -> str:
        """The kernel's name, ``fwd_kernel``, ``bwd_dkdv_kernel_atomic_dq``, ..."""
        name = getattr(self.kernel, "__name__", None) or self.kernel.fn.__name__
        return name.strip("_") + ("_atomic_dq" if self.reset else "")

    @property
    def best_config(self):
        """The configuration the last launch ran with (None before the first)."""
        return getattr(self.autotuner, "best_config", None)

    def chosen(self, **key) -> object | None:
        """The configuration chosen for the autotuning key ``NQ_BUCKET=..., NK_BUCKET=...,
        HEAD_DIM=..., IS_CAUSAL=..., HAS_WINDOW=...`` (None when not tuned there)."""
        want = tuple(key[name] for name in AUTOTUNE_KEY)
        for cache_key, config in getattr(self.autotuner, "cache", {}).items():
            if tuple(cache_key[: len(want)]) == want:
                return config
        return None


_TUNERS: dict[tuple, Tuner] = {}


def autotuners() -> list[Tuner]:
    """Every kernel autotuned in this process, with the choices Triton's autotuner made."""
    return list(_TUNERS.values())


def _tuner(kernel, tiles: tuple, reset: tuple[str, ...], tma: bool) -> Tuner:
    """The autotuner of ``kernel`` over ``tiles`` (made once, then reused)."""
    import triton

    key = (kernel, tiles, reset, tma, AUTOTUNE_TIMER)
    if key not in _TUNERS:
        configs = [
            triton.Config(
                {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n},
                num_warps=t.num_warps,
                num_stages=t.num_stages,
            )
            for t in tiles
        ]
        tune = triton.autotune(
            configs=configs,
            key=AUTOTUNE_KEY,
            do_bench=AUTOTUNE_TIMER,
            reset_to_zero=list(reset) or None,
        )
        autotuner = tune(triton.heuristics(EVEN)(kernel))
        _TUNERS[key] = Tuner(kernel, tiles, reset, tma, AUTOTUNE_TIMER, autotuner)
    return _TUNERS[key]


def run_kernel(kernel, tiles, grid: Callable[[Mapping], tuple], *, reset=(), **args) -> None:
    """Launch ``kernel`` with the keyword ``args``: one tile as is, or autotune over several.

    ``grid(tile)`` maps the chosen tile sizes to the launch grid. ``EVEN_M`` and ``EVEN_N``
    (``N_Q``, ``N_K`` divisible by the tile sizes) are derived from the chosen tile:
    directly for one tile, by ``triton.heuristics`` under the autotuner. ``reset`` names
    the arguments the autotuner must zero before each trial (buffers added to atomically,
    which every timed trial would otherwise add to again); it also keys a separate tuner.
    """
    if len(tiles) == 1:
        tile = tiles[0]
        even = {name: rule({**args, **tile}) for name, rule in EVEN.items()}
        kernel[grid(tile)](**args, **tile, **even)
        return
    tuner = _tuner(kernel, tuple(tiles), tuple(reset), bool(args.get("USE_TMA", False)))
    tuner.autotuner[grid](**args)


# --------------------------------------------------------------------------- TMA


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
    kernels = load_kernels()
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


def ensure_allocator() -> None:
    """Give Triton an allocator for device-side descriptors, unless one is set already."""
    import triton

    try:
        from triton.runtime import _allocation

        unset = isinstance(_allocation._allocator.get(), _allocation.NullAllocator)
    except (ImportError, AttributeError):  # another Triton's internals: set ours
        unset = True
    if unset:
        triton.set_allocator(_tma_scratch)
