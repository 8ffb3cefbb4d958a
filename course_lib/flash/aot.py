r"""Compile the FlashAttention kernels for a GPU on a machine without one.

Triton's CPU interpreter runs the kernels as numpy code: it accepts things the real compiler
rejects (a ``tl.dot`` narrower than 16, a Python ``if`` on a tensor) and ignores what only
compiled code does (TF32 rounding of float32 ``tl.dot``, int32 offset overflow, shared-memory
limits). This module sends the same kernels through Triton's GPU compiler ahead of time,
for a chosen target (``sm_90`` = H100/H200 by default): source → Triton IR → TritonGPU IR →
LLVM IR → PTX → cubin (``ptxas`` ships with the Triton wheel). No GPU, no CUDA driver.

It reports, per kernel and configuration, the shared memory the compiled kernel needs and
whether its loads were software-pipelined (``cp.async`` copies in the TritonGPU IR), which
is what ``num_stages`` asks for on Ampere/Hopper.

Run it *without* ``TRITON_INTERPRET`` (Triton reads the variable when first imported)::

    env -u TRITON_INTERPRET python -m course_lib.flash.aot            # a quick set
    env -u TRITON_INTERPRET python -m course_lib.flash.aot --all      # every autotune config

Specialisation: the runtime compiles separate variants for pointers and integers divisible
by 16; we compile the common one (all pointers, strides and sequence lengths divisible by
16), and with ``--ragged`` the variant for sequence lengths that are not.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
KINDS = ("fwd", "dkdv", "dq", "preprocess")
_KERNEL = {
    "fwd": "_fwd_kernel",
    "dkdv": "_bwd_dkdv_kernel",
    "dq": "_bwd_dq_kernel",
    "preprocess": "_bwd_preprocess_kernel",
}


def _kernels():
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
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


def compile_kernel(
    kind: str,
    dtype: str = "bfloat16",
    head_dim: int = 128,
    is_causal: bool = False,
    config: dict | None = None,
    *,
    arch: int = 90,
    ragged: bool = False,
) -> dict:
    """Compile one kernel for ``sm_<arch>``; returns shared memory, pipelining and timing.

    ``config`` is one of :func:`course_lib.flash.kernel_config`'s entries (the first GPU
    candidate by default). Raises whatever Triton's compiler raises on an error.
    """
    kernels = _kernels()  # before anything else imports triton
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import _dot_precision, kernel_config

    fn = getattr(kernels, _KERNEL[kind])
    if config is None:
        config = kernel_config(head_dim, "cuda", interpreted=False, dtype=getattr(torch, dtype))[
            "fwd" if kind == "preprocess" else kind
        ][0]
    const = dict(HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)))
    if kind == "preprocess":
        const["BLOCK_M"] = 64
        warps, stages = 4, 2
    else:
        const.update(
            BLOCK_M=config["BLOCK_M"],
            BLOCK_N=config["BLOCK_N"],
            IS_CAUSAL=bool(is_causal),
            DOT_PRECISION=_dot_precision(getattr(torch, dtype)),
        )
        warps, stages = config["num_warps"], config["num_stages"]
    elem = TYPES[dtype]
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in const:
            signature[name] = "constexpr"
            continue
        if name in ("LSE", "DELTA"):
            signature[name] = "*fp32"
        elif name in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV"):  # tensor pointers
            signature[name] = "*" + elem
        elif name in ("qk_scale", "sm_scale"):
            signature[name] = "fp32"
        else:  # strides and sequence lengths
            signature[name] = "i32"
        divisible = not (ragged and name in ("N_Q", "N_K")) and signature[name] != "fp32"
        if divisible:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(
        fn,
        signature,
        constexprs={(fn.arg_names.index(k),): v for k, v in const.items()},
        attrs=attrs,
    )
    t0 = time.perf_counter()
    compiled = triton.compile(
        src, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=warps, num_stages=stages)
    )
    ttgir = compiled.asm["ttgir"]
    return dict(
        kind=kind,
        dtype=dtype,
        head_dim=head_dim,
        causal=bool(is_causal),
        arch=arch,
        num_warps=warps,
        num_stages=stages,
        BLOCK_M=const["BLOCK_M"],
        BLOCK_N=const.get("BLOCK_N"),
        shared_bytes=int(compiled.metadata.shared),
        pipelined="async_copy_global_to_local" in ttgir or "async_tma" in ttgir,
        tensor_cores=("warp_group_dot" in ttgir or "nvidia_mma" in ttgir),
        seconds=time.perf_counter() - t0,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x10 (90: H100)")
    parser.add_argument("--all", action="store_true", help="every autotune candidate config")
    parser.add_argument(
        "--ragged", action="store_true", help="sequence lengths not divisible by 16"
    )
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    parser.add_argument("--head-dims", default="64,128")
    args = parser.parse_args(argv)

    _kernels()  # before anything else imports triton
    import torch

    from . import kernel_config

    failures = 0
    for dtype in args.dtypes.split(","):
        for d in (int(x) for x in args.head_dims.split(",")):
            cands = kernel_config(d, "cuda", interpreted=False, dtype=getattr(torch, dtype))
            for causal in (False, True):
                for kind in KINDS:
                    if kind == "preprocess" and causal:
                        continue
                    configs = (
                        [None]
                        if kind == "preprocess"
                        else (cands[kind] if args.all else cands[kind][:1])
                    )
                    for cfg in configs:
                        try:
                            r = compile_kernel(
                                kind, dtype, d, causal, cfg, arch=args.arch, ragged=args.ragged
                            )
                        except Exception as err:  # report and continue
                            failures += 1
                            print(
                                f"FAIL {kind:10s} {dtype:8s} d={d:3d} causal={causal:d} "
                                f"{cfg}: {type(err).__name__}: {str(err)[:2000]}",
                                flush=True,
                            )
                            continue
                        print(
                            f"ok   {kind:10s} {dtype:8s} d={d:3d} causal={causal:d} "
                            f"M={r['BLOCK_M']} N={r['BLOCK_N']} warps={r['num_warps']} "
                            f"stages={r['num_stages']}: shared {r['shared_bytes'] / 1024:6.1f}"
                            f" KiB, pipelined={r['pipelined']}, tensor cores="
                            f"{r['tensor_cores']} ({r['seconds']:.1f} s)",
                            flush=True,
                        )
    print("all compiled" if failures == 0 else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
