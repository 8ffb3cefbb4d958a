r"""Compile the FlashAttention kernels for a GPU on a machine without one; report registers.

Triton's CPU interpreter runs the kernels as numpy code: it accepts things the real compiler
rejects (a ``tl.dot`` narrower than 16, a Python ``if`` on a tensor) and ignores what only
compiled code does (TF32 rounding of float32 ``tl.dot``, int32 offset overflow, shared-memory
limits, registers). This module sends the same kernels through Triton's GPU compiler ahead of
time, for a chosen target (``sm_90`` = H100/H200, ``sm_80`` = A100): source → Triton IR →
TritonGPU IR → LLVM IR → PTX → cubin (``ptxas`` ships with the Triton wheel). No GPU, no
CUDA driver.

It reports, per kernel and configuration, the **registers** per thread and the bytes
**spilled** to local memory (from ``ptxas -v``), the shared memory the kernel needs (against
:data:`SHARED_LIMIT`), whether its loads were software-pipelined (``cp.async`` copies in the
TritonGPU IR, what ``num_stages`` asks for), the tensor-core instructions counted by kind
and shape (``wgmma`` and ``mma.sync``, :func:`codegen`), the warp layout of every dot and
whether it duplicates a warpgroup, and the compile time from an empty cache
(``compile_seconds``). :func:`problems` names what is wrong. A spill means a tile
that does not fit the 255 registers a thread may hold is kept in local memory (cached
DRAM) instead: every step of the loop then pays memory traffic the algorithm was designed
to avoid. ``tests/course_lib/flash/test_aot.py`` fails if any recorded configuration has a problem.

Run it *without* ``TRITON_INTERPRET`` (Triton reads the variable when the kernels are
first decorated)::

    env -u TRITON_INTERPRET python -m course_lib.flash.aot              # defaults, sm_90 + sm_80
    env -u TRITON_INTERPRET python -m course_lib.flash.aot --all        # every autotune config
    env -u TRITON_INTERPRET python -m course_lib.flash.aot --all \
        --variants plain,causal,gqa_window_ragged --json benchmarks/results/flash_aot_registers.json
    env -u TRITON_INTERPRET python -m course_lib.flash.aot --all --tma --arch 90 \
        --variants plain,causal,gqa_window_ragged --json benchmarks/results/flash_aot_tma.json

The third command writes the table that chapter 06 shows and a test checks against the
current configurations (rerun it when they change); the last one, the same for the forward
kernel's tensor-descriptor (TMA) path on sm_90 (``COURSE_FLASH_TMA``).

Specialisation: the runtime compiles separate variants for integers equal to 1 and for
pointers and integers divisible by 16; we compile the common one (all strides and sequence
lengths divisible by 16, one key/value head per query head), and, as the variant
``gqa_window_ragged``, the heaviest: grouped heads, a window, lengths not divisible by 16.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .launch import SHARED_LIMIT  # bytes of shared memory one block may use

TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
KINDS = ("fwd", "dkdv", "dkdv_atomic", "dq", "decode", "preprocess", "merge")
_ELEM_PTRS = {"Q", "K", "V", "O", "DO", "DQ", "DK", "DV"}
_FP32_PTRS = {"LSE", "DELTA", "O_PART", "LSE_PART", "DQ_ACC"}
_FLOATS = {"qk_scale", "sm_scale"}
_NOT_DIVISIBLE = {"H", "NUM_SPLITS"}  # counts that are rarely multiples of 16
ARCHS = (90, 80)

# The tensor-core layouts of the TritonGPU IR and the dots that use them.
_MMA_LAYOUT = re.compile(
    r"^#(mma\d*) = #ttg\.nvidia_mma<\{versionMajor = (\d+), versionMinor = \d+, "
    r"warpsPerCTA = \[(\d+), (\d+)\], instrShape = \[(\d+), (\d+)",
    re.M,
)
_DOT = re.compile(r"= (?:ttng\.warp_group_dot|tt\.dot) [^\n]*-> tensor<(\d+)x(\d+)xf32, #(mma\d*)>")
_WGMMA = re.compile(r"\bwgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)")
_MMA_SYNC = re.compile(r"\bmma\.sync\.aligned\.(m\d+n\d+k\d+)")
# Hopper's copy engine (TMA): a tile from global to shared memory, and back, by descriptor.
_TMA_LOAD = re.compile(r"\bcp\.async\.bulk\.tensor\.\dd\.shared::(?:cta|cluster)\.global\b")
_TMA_STORE = re.compile(r"\bcp\.async\.bulk\.tensor\.\dd\.global\.shared::cta\b")


def _kernels():
    """The kernels package, imported in compiled mode (refuses the interpreter)."""
    from ..env import triton_interpreter_on

    if triton_interpreter_on():
        raise RuntimeError(
            "course_lib.flash.aot compiles for a GPU: run it without "
            "TRITON_INTERPRET (e.g. `env -u TRITON_INTERPRET python -m "
            "course_lib.flash.aot`)"
        )
    import triton  # noqa: F401  (imported first: course_lib must not switch the interpreter on)

    kernels = importlib.import_module("course_lib.flash.kernels")
    if kernels.is_interpreted():
        raise RuntimeError("course_lib.flash.kernels was imported in interpreter mode")
    return kernels


def kernel_of(kind: str):
    """The ``@triton.jit`` kernel of ``kind`` (one of :data:`KINDS`), compiled mode."""
    _kernels()
    from .kernels.backward import _bwd_dkdv_kernel, _bwd_dq_kernel, _bwd_preprocess_kernel
    from .kernels.decode import _decode_kernel, _decode_merge_kernel
    from .kernels.forward import _fwd_kernel

    return {
        "fwd": _fwd_kernel,
        "dkdv": _bwd_dkdv_kernel,
        "dkdv_atomic": _bwd_dkdv_kernel,  # with ATOMIC_DQ: the deterministic=False backward
        "dq": _bwd_dq_kernel,
        "decode": _decode_kernel,
        "preprocess": _bwd_preprocess_kernel,
        "merge": _decode_merge_kernel,
    }[kind]


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself uses for ``arch`` (newer Tritons pick one per architecture)."""
    import triton

    try:
        from triton.backends.nvidia.compiler import get_ptxas

        try:
            tool = get_ptxas(arch)
        except TypeError:  # older Tritons: one ptxas for every target
            tool = get_ptxas()
        path = getattr(tool, "path", None) or (tool[0] if isinstance(tool, tuple) else None)
        if path:
            return str(path)
    except Exception:  # pragma: no cover - layout of other Triton versions
        pass
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if bundled.exists():
        return str(bundled)
    found = shutil.which("ptxas")
    if found is None:
        raise FileNotFoundError("ptxas not found: this Triton wheel ships none")
    return found


def ptxas_usage(ptx: str, arch: int) -> dict:
    """Registers, spill stores/loads and stack frame of a PTX kernel, from ``ptxas -v``.

    The same flags as Triton's own call of ptxas (``-lineinfo --regAllocOptLevel=2``), for
    ``sm_90a`` (Hopper's tensor-core instructions) or ``sm_<arch>``.
    """
    gpu = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        proc = subprocess.run(
            [_ptxas(arch), "-lineinfo", "-v", "--regAllocOptLevel=2", f"--gpu-name={gpu}", str(src)]
            + ["-o", str(Path(tmp) / "kernel.cubin")],
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed: {proc.stderr[-2000:]}")
    log = proc.stderr + proc.stdout

    def grab(pattern: str) -> int:
        m = re.search(pattern, log)
        return int(m.group(1)) if m else 0

    return dict(
        registers=grab(r"Used (\d+) registers"),
        spill_stores=grab(r"(\d+) bytes spill stores"),
        spill_loads=grab(r"(\d+) bytes spill loads"),
        stack_bytes=grab(r"(\d+) bytes stack frame"),
    )


def codegen(ttgir: str, ptx: str) -> dict:
    r"""What the compiled code does with its tensor cores: instruction kinds and warp layouts.

    From the PTX, the tensor-core instructions counted **by kind and shape**: Hopper's
    asynchronous warpgroup MMA (``wgmma.mma_async ... m64nNk16``: four warps, 64 rows) and
    Ampere's warp-level ``mma.sync ... m16n8k16`` (which an sm_90 kernel falls back to when a
    tile is too small for a warpgroup). From the TritonGPU IR, every ``tl.dot`` with the
    result tile ``M x N`` and the layout that spreads it over the warps, ``warpsPerCTA =
    [w_M, w_N]``: each warp holds 16 rows of an MMA tile, so a dot whose :math:`16\,w_M`
    exceeds :math:`M` (or whose :math:`w_N \cdot n_{instr}` exceeds :math:`N`) has warps that
    hold *copies* of the same rows — a *duplicated* warpgroup, which computes the dot
    :math:`16 w_M / M` times over. ``tma_loads`` and ``tma_stores`` count the tensor
    copies of Hopper's TMA (``cp.async.bulk.tensor``) in the PTX: tiles moved by descriptor.
    """
    layouts: dict[str, dict[str, Any]] = {
        m[1]: dict(version=int(m[2]), warps=(int(m[3]), int(m[4])), instr=(int(m[5]), int(m[6])))
        for m in _MMA_LAYOUT.finditer(ttgir)
    }
    dots = []
    for m in _DOT.finditer(ttgir):
        rows, cols, name = int(m[1]), int(m[2]), m[3]
        lay = layouts[name]
        w_m, w_n = lay["warps"]
        copies = max(1, 16 * w_m // rows) * max(1, w_n * lay["instr"][1] // cols)
        dots.append(dict(M=rows, N=cols, mma=lay["version"], warps=[w_m, w_n], copies=copies))
    return dict(
        tma_loads=len(_TMA_LOAD.findall(ptx)),
        tma_stores=len(_TMA_STORE.findall(ptx)),
        wgmma=dict(sorted(Counter(_WGMMA.findall(ptx)).items())),
        mma_sync=dict(sorted(Counter(_MMA_SYNC.findall(ptx)).items())),
        dots=dots,
        duplicated_dots=sum(d["copies"] > 1 for d in dots),
    )


def wgmma_possible(row: dict) -> bool:
    """Whether every dot of a kernel's tile can be a Hopper warpgroup MMA (64 rows, 4 warps)."""
    return (
        row["arch"] >= 90 and row["num_warps"] % 4 == 0 and all(d["M"] >= 64 for d in row["dots"])
    )


def problems(row: dict) -> list[str]:
    """What is wrong with one compiled kernel (an empty list when nothing is)."""
    out = []
    if row.get("spill_stores") or row.get("spill_loads"):
        out.append(f"spills {row['spill_stores']} B stored, {row['spill_loads']} B loaded")
    if row["shared_bytes"] > SHARED_LIMIT[row["arch"]]:
        out.append(f"shared memory {row['shared_bytes']} B > {SHARED_LIMIT[row['arch']]} B")
    if row["duplicated_dots"]:
        dup = [f"{d['M']}x{d['N']} on warps {d['warps']}" for d in row["dots"] if d["copies"] > 1]
        out.append(f"duplicated warpgroups: {', '.join(dup)}")
    if row["dots"] and wgmma_possible(row) and (row["mma_sync"] or not row["wgmma"]):
        out.append(f"mma.sync {row['mma_sync']} where the tile allows wgmma")
    if row.get("tma") and not row.get("tma_loads"):
        out.append("compiled with tma=True but no TMA copy (cp.async.bulk.tensor) in the PTX")
    return out


def _constexprs(kind, config, dtype, head_dim, is_causal, window, ragged, tma, arch) -> dict:
    """The compile-time arguments of one kernel, as its launcher sets them."""
    import torch

    from .launch import head_dim_args

    const = head_dim_args(head_dim, getattr(torch, dtype))
    if kind in ("preprocess", "merge"):  # no tiles of keys, no mask, no dots
        block = dict(BLOCK_M=64) if kind == "preprocess" else dict(BLOCK_S=64)
        return dict(HEAD_DIM=head_dim, BLOCK_D=const["BLOCK_D"], **block)
    const.update(
        BLOCK_N=config["BLOCK_N"],
        IS_CAUSAL=bool(is_causal),
        HAS_WINDOW=bool(window),
        EVEN_N=not ragged,
    )
    if kind == "decode":
        const["BLOCK_R"] = config["BLOCK_M"]
    else:
        const.update(BLOCK_M=config["BLOCK_M"], EVEN_M=not ragged)
    if kind in ("dkdv", "dkdv_atomic"):
        const["ATOMIC_DQ"] = kind == "dkdv_atomic"
        const["DQ_TRANSPOSED"] = arch >= 90  # as the host launches it (backward.py)
    if kind == "fwd":
        const["USE_TMA"] = bool(tma)
    elif tma:
        raise ValueError(f"tensor descriptors (tma=True): the forward kernel only, not {kind}")
    return const


def _signature(fn, const: dict, dtype: str, ragged: bool, groups: int, ones) -> tuple:
    """Triton's signature of ``fn`` (pointer and scalar types) and the divisibility hints
    that the runtime would give arguments divisible by 16 (every stride and length, except
    ragged lengths and the counts in ``_NOT_DIVISIBLE``)."""
    const = dict(const)
    if groups == 1 and "NUM_GROUPS" in fn.arg_names:
        const["NUM_GROUPS"] = 1  # what the runtime does with an int argument equal to 1
    for name in ones:  # other int arguments equal to 1 (N_Q = 1 when decoding one token)
        const[name] = 1
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in const:
            signature[name] = "constexpr"
        elif name in _FP32_PTRS:
            signature[name] = "*fp32"
        elif name in _ELEM_PTRS:
            signature[name] = "*" + TYPES[dtype]
        elif name in _FLOATS:
            signature[name] = "fp32"
        else:  # strides, lengths, counts
            signature[name] = "i32"
        divisible = signature[name] not in ("fp32", "constexpr") and name not in _NOT_DIVISIBLE
        if divisible and name != "NUM_GROUPS" and not (ragged and name in ("N_Q", "N_K")):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, attrs, const


def _compile_from_empty_cache(src, arch: int, warps: int, stages: int):
    """``triton.compile`` for ``sm_<arch>`` in an empty cache: the compiled kernel and the
    seconds it took (a real compilation, never a cache hit)."""
    import triton
    from triton.backends.compiler import GPUTarget

    with tempfile.TemporaryDirectory() as cache:
        saved = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            t0 = time.perf_counter()
            compiled = triton.compile(
                src,
                target=GPUTarget("cuda", arch, 32),
                options=dict(num_warps=warps, num_stages=stages),
            )
            return compiled, time.perf_counter() - t0
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved


def compile_kernel(
    kind: str,
    dtype: str = "bfloat16",
    head_dim: int = 128,
    is_causal: bool = False,
    config: Mapping | None = None,
    *,
    arch: int = 90,
    ragged: bool = False,
    window: bool = False,
    groups: int = 1,
    registers: bool = True,
    ones: tuple[str, ...] = (),
    tma: bool = False,
) -> dict:
    """Compile one kernel for ``sm_<arch>``; returns registers, spills, shared memory, timing.

    ``config`` is one of :func:`course_lib.flash.kernel_config`'s tiles (the first GPU
    candidate by default). ``groups`` > 1 compiles the grouped-query variant (the runtime
    specialises ``NUM_GROUPS == 1`` as a constant, and any other integer argument named in
    ``ones``). ``tma=True`` compiles the forward's tensor-descriptor path (``USE_TMA``; sm_90
    and newer). Raises whatever Triton's compiler raises on an error.
    """
    fn = kernel_of(kind)  # before anything else imports triton
    import torch
    from triton.compiler import ASTSource

    from .tiles import kernel_config

    if config is None and kind not in ("preprocess", "merge"):
        cands = kernel_config(
            head_dim, "cuda", interpreted=False, dtype=getattr(torch, dtype), arch=arch
        )
        config = cands[kind][0]
    # the two small kernels launch with Triton's defaults: 4 warps, 2 stages
    warps, stages = (4, 2) if config is None else (config["num_warps"], config["num_stages"])
    const = _constexprs(kind, config, dtype, head_dim, is_causal, window, ragged, tma, arch)
    signature, attrs, const = _signature(fn, const, dtype, ragged, groups, ones)
    src = ASTSource(
        fn,
        signature,
        constexprs={(fn.arg_names.index(k),): v for k, v in const.items()},
        attrs=attrs,
    )
    compiled, seconds = _compile_from_empty_cache(src, arch, warps, stages)
    ttgir = compiled.asm["ttgir"]
    report = dict(
        kind=kind,
        dtype=dtype,
        head_dim=head_dim,
        causal=bool(is_causal),
        window=bool(window),
        groups=groups,
        ragged=bool(ragged),
        ones=list(ones),
        tma=bool(tma),
        arch=arch,
        num_warps=warps,
        num_stages=stages,
        BLOCK_M=const.get("BLOCK_M", const.get("BLOCK_R")),
        BLOCK_N=const.get("BLOCK_N"),
        shared_bytes=int(compiled.metadata.shared),
        pipelined="async_copy_global_to_local" in ttgir or "async_tma" in ttgir,
        compile_seconds=round(seconds, 2),
        **codegen(ttgir, compiled.asm["ptx"]),
    )
    if registers:
        report.update(ptxas_usage(compiled.asm["ptx"], arch))
    return report


# The variants the runtime compiles for one configuration: the flags a launch sets from
# its shapes. "gqa_window_ragged" is the heaviest: grouped heads, a window and lengths that
# are not multiples of 16 all at once.
VARIANTS: dict[str, dict[str, bool | int]] = {
    "plain": dict(is_causal=False),
    "causal": dict(is_causal=True),
    "gqa_window_ragged": dict(is_causal=True, window=True, ragged=True, groups=2),
}


def default_jobs(
    *,
    archs=ARCHS,
    dtypes=("bfloat16",),
    head_dims=(64, 128),
    every_config: bool = True,
    variants=("plain", "causal"),
    kinds=("fwd", "dkdv", "dkdv_atomic", "dq", "decode"),
) -> list[dict]:
    """The compilations that cover every default configuration (arguments of :func:`compile_kernel`).

    Every autotune candidate of each kernel in ``kinds`` (only the first with
    ``every_config=False``), in each of ``variants`` (:data:`VARIANTS`), for each
    architecture, dtype and head dimension; the two small kernels once per (arch, dtype,
    head dimension). float16 uses the same registers as bfloat16 (same tile shapes, same
    instructions), so the default is bfloat16 only.
    """
    import torch

    from .tiles import kernel_config

    jobs = []
    for arch in archs:
        for dtype in dtypes:
            for d in head_dims:
                cands = kernel_config(
                    d, "cuda", interpreted=False, dtype=getattr(torch, dtype), arch=arch
                )
                for kind in kinds:
                    for cfg in cands[kind][: None if every_config else 1]:
                        for variant in variants:
                            jobs.append(
                                dict(kind=kind, dtype=dtype, head_dim=d, config=cfg, arch=arch,
                                     **VARIANTS[variant])
                            )  # fmt: skip
                for kind in ("preprocess", "merge"):
                    jobs.append(
                        dict(kind=kind, dtype=dtype, head_dim=d, is_causal=False, config=None,
                             arch=arch)
                    )  # fmt: skip
    return jobs


def variant_of(row: dict) -> str:
    """The name in :data:`VARIANTS` of a report row (or job)."""
    if row.get("window") and row.get("groups", 1) > 1:
        return "gqa_window_ragged"
    return "causal" if row.get("causal", row.get("is_causal")) else "plain"


def format_row(r: dict) -> str:
    spill = r.get("spill_stores", 0) + r.get("spill_loads", 0)
    return (
        f"sm_{r['arch']} {r['kind']:10s} {r['dtype']:8s} d={r['head_dim']:3d} "
        f"{variant_of(r):17s} M={r['BLOCK_M']!s:>3} N={r['BLOCK_N']!s:>4} "
        f"warps={r['num_warps']} stages={r['num_stages']}: {r.get('registers', '?'):>3} regs, "
        f"spills {spill:4d} B, shared {r['shared_bytes'] / 1024:6.1f} KiB, "
        f"pipelined={r['pipelined']!s:5}, wgmma {sum(r['wgmma'].values()):4d}, "
        f"mma.sync {sum(r['mma_sync'].values()):4d}, duplicated dots {r['duplicated_dots']} "
        + (f"TMA {r['tma_loads']} loads {r['tma_stores']} stores " if r.get("tma") else "")
        + f"({r['compile_seconds']:.1f} s to compile)"
    )


def _meta(argv) -> dict:
    import datetime
    import platform

    import triton

    return dict(
        what="registers, spills (ptxas -v), shared memory, tensor-core instructions by kind "
        "(PTX) and warp layout of every dot (TritonGPU IR) per kernel and configuration",
        command="python -m course_lib.flash.aot "
        + " ".join(sys.argv[1:] if argv is None else argv),
        triton=triton.__version__,
        python=platform.python_version(),
        date=datetime.date.today().isoformat(),
        note="compiled ahead of time without a GPU; float16 uses the registers of bfloat16; "
        "compile_seconds: one compilation from an empty cache on this machine's CPU",
        cpu=platform.processor() or platform.machine(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--arch",
        default=",".join(str(a) for a in ARCHS),
        help="compute capabilities x10, comma-separated (90: H100/H200, 80: A100)",
    )
    parser.add_argument("--all", action="store_true", help="every autotune candidate config")
    parser.add_argument(
        "--variants",
        default="plain,causal",
        help=f"comma-separated, of {', '.join(VARIANTS)} (the recorded table has all three)",
    )
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument(
        "--kinds", default="fwd,dkdv,dkdv_atomic,dq,decode", help="kernels (comma-separated)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument(
        "--tma", action="store_true", help="the forward's tensor-descriptor path (sm_90+ only)"
    )
    args = parser.parse_args(argv)

    _kernels()  # before anything else imports triton
    jobs = default_jobs(
        archs=tuple(int(a) for a in args.arch.split(",")),
        dtypes=tuple(args.dtypes.split(",")),
        head_dims=tuple(int(x) for x in args.head_dims.split(",")),
        every_config=args.all,
        variants=tuple(args.variants.split(",")),
        kinds=tuple(args.kinds.split(",")),
    )
    if args.tma:
        jobs = [dict(j, tma=True) for j in jobs if j["kind"] == "fwd" and j["arch"] >= 90]
    failures, bad, rows = 0, 0, []
    for job in jobs:
        try:
            r = compile_kernel(**job)
        except Exception as err:  # report and continue
            failures += 1
            print(
                f"FAIL sm_{job['arch']} {job['kind']:10s} {job['dtype']:8s} d={job['head_dim']:3d} "
                f"{variant_of(job)} {job['config']}: {type(err).__name__}: "
                f"{str(err)[:2000]}",
                flush=True,
            )
            continue
        rows.append(r)
        wrong = problems(r)
        bad += bool(wrong)
        print(("BAD   " if wrong else "ok    ") + format_row(r), flush=True)
        for w in wrong:
            print("      " + w, flush=True)
        if args.json:  # after every kernel: a stopped run keeps what it compiled
            args.json.write_text(json.dumps({"meta": _meta(argv), "rows": rows}, indent=1) + "\n")
    print(
        "all compiled: no spill, no duplicated warpgroup, wgmma wherever the tile allows"
        if not failures and not bad
        else f"{failures} failed to compile, {bad} with problems"
    )
    return 1 if failures or bad else 0


if __name__ == "__main__":
    sys.exit(main())
