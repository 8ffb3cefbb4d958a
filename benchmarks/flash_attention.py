"""Benchmark course_lib's Triton FlashAttention against torch SDPA, each backend pinned.

On a CUDA GPU (the real run)::

    python benchmarks/flash_attention.py                 # full grid, N = 512 .. 16k
    python benchmarks/flash_attention.py --quick         # N in {1024, 4096} only
    python benchmarks/flash_attention.py --quick --no-autotune   # no candidate sweep

measures forward and backward TFLOP/s and peak memory of ``flash_attention`` and of torch's
SDPA with the flash, memory-efficient, math and (when present) cuDNN backends, for
d in {64, 128}, float16/bfloat16, causal and not, and writes
``benchmarks/results/flash_attention_<gpu>_<date>.json`` (GPU name, versions, date).
Chapter 06's notebook plots the newest such file. This is the long sweep (N = 512 .. 16k);
``benchmarks/gpu_check.py`` is the one command that checks the kernels on a GPU (compiled
tests, the issue's grid, grouped-query and decode shapes, the targets) in under 8 minutes.
The targets of the course: forward at least 0.9x SDPA's flash backend at N = 4096, d = 128,
bf16 (stretch 1.0x), backward 0.6x.

Without a GPU, ``--dry-run --out PATH`` runs the same code path on tiny sizes through
Triton's interpreter (no performance meaning: it proves the script works end to end).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib import env  # noqa: E402  (env.setup() must run before triton is imported)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny sizes on the CPU through Triton's interpreter"
    )
    parser.add_argument("--quick", action="store_true", help="GPU: N in {1024, 4096} only")
    parser.add_argument("--out", type=Path, default=None, help="output JSON path")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--no-autotune",
        action="store_true",
        help="flash_attention: first candidate config only (skips compiling "
        "and timing every candidate; faster start, maybe slower kernels)",
    )
    parser.add_argument(
        "--impls",
        nargs="*",
        default=None,
        help="subset of: flash_attention sdpa_flash sdpa_efficient sdpa_math sdpa_cudnn",
    )
    return parser.parse_args(argv)


def plan(args: argparse.Namespace) -> tuple[str, list[str], list[dict], int, int]:
    """What to measure: ``(device, impls, grid, repeats, warmup)``.

    A dry run: the CPU, ``flash_attention`` and ``sdpa_math`` only, and every N, d and causal
    flag once in four tiny points; on a GPU, ``bench.gpu_grid`` (``--quick``: two N)."""
    import torch

    from course_lib.flash import bench

    impls = args.impls or (["flash_attention"] + list(bench.sdpa_backends()))
    if args.dry_run:
        device = "cpu"
        impls = [i for i in impls if i in ("flash_attention", "sdpa_math")]
        # Every N, d and causal flag once, in four points (the interpreter is slow).
        grid = [
            dict(B=1, H=2, N=n, d=d, dtype=torch.float32, is_causal=c)
            for n, d, c in ((16, 16, False), (16, 32, True), (48, 16, True), (48, 32, False))
        ]
        repeats, warmup = args.repeats or 1, 0
    else:
        device = "cuda"
        grid = bench.gpu_grid(full=not args.quick)
        repeats, warmup = args.repeats or 10, 3
    return device, impls, grid, repeats, warmup


def run_metadata(args: argparse.Namespace, argv: list[str] | None) -> dict:
    """``bench.metadata`` (GPU, versions, date) plus the command, FLOP convention, autotuning."""
    from course_lib.flash import bench

    meta = bench.metadata(dry_run=args.dry_run)
    meta["command"] = " ".join(["benchmarks/flash_attention.py"] + (argv or sys.argv[1:]))
    meta["flop_convention"] = "fwd 4*B*H*N^2*d (x0.5 causal); bwd 2.5x fwd"
    meta["autotune"] = not args.no_autotune
    return meta


def measure(impl: str, cfg: dict, device: str, repeats: int, warmup: int) -> dict:
    """One implementation at one point (SDPA's math backend skipped where N x N won't fit)."""
    from course_lib.flash import bench

    if (
        impl == "sdpa_math"
        and device == "cuda"
        and not bench.math_is_feasible(cfg["B"], cfg["H"], cfg["N"])
    ):
        rec = dict(
            impl=impl,
            B=cfg["B"],
            H=cfg["H"],
            N=cfg["N"],
            d=cfg["d"],
            dtype=str(cfg["dtype"]).replace("torch.", ""),
            causal=cfg["is_causal"],
            error="skipped: N x N matrices too large",
        )
    else:
        rec = bench.bench_one(impl, **cfg, device=device, repeats=repeats, warmup=warmup)
    return rec


def result_line(impl: str, cfg: dict, rec: dict) -> str:
    """The printed line of one measurement: the point, then TFLOP/s, error and peak memory."""
    if "error" in rec:
        msg = rec["error"]
    else:
        mem = rec["peak_mem_mib"]
        msg = (
            f"fwd {rec['fwd_tflops']:8.3g} TFLOP/s  bwd {rec['bwd_tflops']:8.3g} "
            + (
                f"TFLOP/s  err {rec['max_abs_err']:.1e}"
                if rec["max_abs_err"] is not None
                else "TFLOP/s"
            )
            + (f"  peak {mem:8.1f} MiB" if mem is not None else "")
        )
    return (
        f"{impl:16s} N={cfg['N']:6d} d={cfg['d']:3d} {rec['dtype']:8s} "
        f"causal={int(cfg['is_causal'])}  {msg}"
    )


def default_out(meta: dict) -> Path:
    """``benchmarks/results/flash_attention_<gpu>_<date>.json`` (``cpu`` without a GPU)."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", meta.get("gpu") or "cpu").strip("-").lower()
    return ROOT / "benchmarks" / "results" / f"flash_attention_{slug}_{meta['date'][:10]}.json"


def print_speedups(results: list[dict]) -> None:
    """The headline ratios to SDPA's flash backend (N = 4096, d = 128, bf16), when measured."""
    from course_lib.flash import bench

    for causal in (False, True):
        s = bench.speedups({"results": results}, causal=causal)
        if s:
            print(
                f"N=4096 d=128 bf16 causal={causal}: forward {s['fwd']:.2f}x, backward "
                f"{s['bwd']:.2f}x SDPA flash (targets 0.9x / 0.6x)"
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:  # CPU tensors: the interpreter, even on a machine with a GPU
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.no_autotune:
        os.environ["COURSE_FLASH_AUTOTUNE"] = "0"
    env.setup(quiet=True, plots=False)

    import torch

    from course_lib.flash import bench

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print(
            "No CUDA GPU: nothing meaningful to measure. Use --dry-run --out PATH to check "
            "that the script works (tiny sizes, Triton's interpreter).",
            file=sys.stderr,
        )
        return 2
    device, impls, grid, repeats, warmup = plan(args)
    meta = run_metadata(args, argv)
    results = []
    for cfg in grid:
        for impl in impls:
            rec = measure(impl, cfg, device, repeats, warmup)
            results.append(rec)
            print(result_line(impl, cfg, rec), flush=True)

    if args.out is None:
        args.out = default_out(meta)
    path = bench.write_results(args.out, meta, results)
    print_speedups(results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
