"""One script that checks chapter 06's FlashAttention on a GPU, in under 8 minutes.

On a machine with a CUDA GPU (PyTorch with CUDA, Triton 3.x, ``TRITON_INTERPRET`` unset)::

    python benchmarks/gpu_check.py

1. **Correctness, compiled**: the GPU tests of ``tests/test_flash.py`` and
   ``tests/test_checks_ch06.py`` (``pytest -m gpu``, first kernel configuration only) —
   forward and backward against SDPA in fp16/bf16/fp32, grouped-query attention,
   bottom-right causal alignment, sliding windows, the decode path, int64 offsets.
2. **Speed and memory** of ``flash_attention`` against every SDPA backend torch has (flash,
   efficient, cuDNN, math), for N in {1k, 4k, 16k}, d in {64, 128}, bfloat16 and float16,
   causal or not, forward and backward; grouped-query shapes (32 query heads, 8 key/value
   heads); and decode shapes (one query against a 4k or 32k cache) for ``flash_decode``.
   Prints TFLOP/s, the ratio to SDPA's flash backend and the peak memory.
3. **The targets** (H100/H200, N = 4096, d = 128, bf16): forward >= 0.9x SDPA flash, backward
   >= 0.6x, decode >= 1.0x the fastest SDPA backend at Nq = 1, Nk = 32k; each printed as
   met or not, with the measured ratio.
4. **A record**: ``benchmarks/results/flash_attention_<gpu>_<date>.json`` with the GPU, the
   versions, the date, every measurement and the verdicts. Chapter 06 plots the newest one.

Autotuning compiles every candidate configuration, which is what takes the time on a fresh
machine; it runs for the headline shapes (d = 128, bf16) and the first configuration serves
the rest (``--autotune all|headline|none``). ``--budget-s`` (default 450 s) caps the whole
run: the tests get at most ``--tests-timeout-s`` (240 s), the benchmark measures the headline
and decode shapes first and records what the budget leaves out as skipped; the JSON is
written anyway. Expected: about 7 minutes on an H100 or H200, most of it compilation.

Without a GPU, ``--dry-run`` runs the same steps end to end on tiny shapes through Triton's
interpreter (a couple of CPU tests, float32, no timing claims) and writes its JSON to
``test-output/`` unless ``--out`` says otherwise: the check that this script works, used by
the test suite.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib import env  # noqa: E402  (env.setup() must run before triton is imported)

# The compiled tests: every GPU-marked test of the kernels, and chapter 06's Triton exercise
# checks (which run compiled when Triton compiles). The dry run picks two CPU tests.
GPU_TESTS = [
    ["tests/test_flash.py", "-m", "gpu"],
    ["tests/test_checks_ch06.py", "-k", "triton"],
]
DRY_RUN_TESTS = [
    ["tests/test_flash.py", "-k", "test_kernel_lse_and_causality or test_decode_float16_and_layout"]
]


def run_tests(dry_run: bool, timeout_s: float) -> dict:
    """Step 1: pytest in subprocesses (first kernel configuration only: no autotuning)."""
    environ = dict(os.environ, COURSE_FLASH_AUTOTUNE="0")
    if not dry_run:
        environ.pop("TRITON_INTERPRET", None)
    t0, runs = time.perf_counter(), []
    for args in DRY_RUN_TESTS if dry_run else GPU_TESTS:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
        print("$ pytest " + " ".join(repr(a) if " " in a else a for a in args), flush=True)
        left = max(10.0, timeout_s - (time.perf_counter() - t0))
        try:
            proc = subprocess.run(
                cmd, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=left
            )
            out, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as err:
            partial = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
            out, code = partial + f"\n(timed out after {left:.0f} s)", -1
        lines = [ln for ln in out.strip().splitlines() if ln.strip()]
        summary = next((ln for ln in reversed(lines) if re.search(r"passed|failed|error", ln)), "")
        if code != 0:
            print("\n".join(lines[-40:]))
        print(f"   {summary or 'no summary'} (exit {code})", flush=True)
        runs.append(dict(args=args, exit_code=code, summary=summary))
    worst = next((r["exit_code"] for r in runs if r["exit_code"] != 0), 0)
    return dict(runs=runs, exit_code=worst, seconds=round(time.perf_counter() - t0, 1))


def _line(rec: dict) -> str:
    shape = (
        f"B={rec['B']:2d} H={rec['H']:2d}/{rec['H_kv']:<2d} Nq={rec['N_q']:5d} Nk={rec['N']:5d} "
        f"d={rec['d']:3d} {rec['dtype']:8s} causal={int(rec['causal'])}"
    )
    if "error" in rec:
        return f"{rec['impl']:16s} {shape}  {rec['error']}"
    parts = [f"fwd {rec['fwd_tflops']:7.1f} TFLOP/s"]
    if "bwd_tflops" in rec:
        parts.append(f"bwd {rec['bwd_tflops']:7.1f} TFLOP/s")
    if "kv_gb_per_s" in rec:
        parts.append(f"{rec['fwd_ms'] * 1e3:8.1f} us, K/V read {rec['kv_gb_per_s']:7.0f} GB/s")
    for key, what in (("ratio_fwd", "fwd"), ("ratio_bwd", "bwd")):
        if rec.get(key) is not None:
            parts.append(f"{what} {rec[key]:.2f}x flash")
    if rec.get("peak_mem_mib") is not None:
        parts.append(f"peak {rec['peak_mem_mib']:8.1f} MiB")
    if rec.get("max_abs_err") is not None:
        parts.append(f"err {rec['max_abs_err']:.1e}")
    return f"{rec['impl']:16s} {shape}  " + "  ".join(parts)


def _with_ratios(group: list[dict]) -> None:
    """Ratios of each implementation's TFLOP/s to SDPA flash's at the same point."""
    base = next((r for r in group if r["impl"] == "sdpa_flash" and "error" not in r), None)
    for r in group:
        if base is None or "error" in r:
            continue
        for m in ("fwd", "bwd"):
            if f"{m}_tflops" in r and f"{m}_tflops" in base:
                r[f"ratio_{m}"] = r[f"{m}_tflops"] / base[f"{m}_tflops"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on the CPU (interpreter)"
    )
    parser.add_argument("--out", type=Path, default=None, help="output JSON path")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=450.0,
        help="wall-time cap of the whole run (tests included)",
    )
    parser.add_argument("--tests-timeout-s", type=float, default=240.0)
    parser.add_argument("--skip-tests", action="store_true", help="benchmark only")
    parser.add_argument("--autotune", choices=("all", "headline", "none"), default="headline")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)

    if args.dry_run:  # CPU tensors: the interpreter, even on a machine with a GPU
        os.environ.setdefault("TRITON_INTERPRET", "1")
    env.setup(quiet=True, plots=False)
    import torch

    from course_lib.flash import bench

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print(
            "No CUDA GPU here: nothing to measure. `--dry-run` checks that the script works "
            "(tiny shapes through Triton's interpreter).",
            file=sys.stderr,
        )
        return 2
    started = time.perf_counter()
    meta = bench.metadata(dry_run=args.dry_run)
    meta["command"] = " ".join(
        ["benchmarks/gpu_check.py"] + (argv if argv is not None else sys.argv[1:])
    )
    meta["flop_convention"] = "fwd 4*B*H*Nq*Nk*d (x0.5 causal when Nq = Nk); bwd 2.5x fwd"
    meta["autotune"] = args.autotune
    if cuda:
        props = torch.cuda.get_device_properties(0)
        meta["sm_count"] = props.multi_processor_count
        meta["capability"] = ".".join(str(x) for x in torch.cuda.get_device_capability(0))
        meta["memory_gib"] = round(props.total_memory / 2**30, 1)
    print(f"{meta.get('gpu') or 'CPU (dry run)'}; torch {meta['versions']['torch']}, "
          f"triton {meta['versions']['triton']}; {meta['date']}", flush=True)  # fmt: skip

    # 1. correctness
    print("\n== 1. correctness, compiled ==" if cuda else "\n== 1. correctness (dry run) ==")
    meta["tests"] = (
        {"skipped": True} if args.skip_tests else run_tests(args.dry_run, args.tests_timeout_s)
    )

    # 2. speed and memory
    print("\n== 2. speed and memory ==", flush=True)
    impls = ["flash_attention", *bench.sdpa_backends(), "sdpa_auto"]
    if args.dry_run:
        device, repeats, warmup = "cpu", args.repeats or 1, 0
        f32 = torch.float32
        train = [
            dict(B=1, H=2, N=n, d=16, dtype=f32, is_causal=c)
            for n in (16, 32)
            for c in (False, True)
        ]
        gqa = [dict(B=1, H=4, h_kv=2, N=32, d=16, dtype=f32, is_causal=True, kind="gqa")]
        dec = [dict(B=1, H=4, h_kv=2, N=64, n_q=1, d=16, dtype=f32, is_causal=False, kind="decode")]
    else:
        device, repeats, warmup = "cuda", args.repeats or 10, 3
        train, gqa, dec = bench.gpu_check_grid(), bench.gqa_shapes(), bench.decode_shapes()
    headline = [p for p in train if p["d"] == 128 and p["dtype"] == torch.bfloat16]
    # the headline shapes first: the targets are measured even if the budget runs out
    points = headline + dec + gqa + [p for p in train if p not in headline]
    results, skipped = [], 0
    for point in points:
        group = []
        tune = args.autotune == "all" or (args.autotune == "headline" and point in headline)
        os.environ["COURSE_FLASH_AUTOTUNE"] = "1" if tune else "0"
        for impl in impls:
            kind = point.get("kind", "train")
            rec_shape = dict(point)
            rec_shape.pop("kind", None)
            if time.perf_counter() - started > args.budget_s - 15 and not args.dry_run:
                skipped += 1
                continue
            n_q = point.get("n_q", point["N"])
            if (
                impl == "sdpa_math"
                and cuda
                and not bench.math_is_feasible(point["B"], point["H"], point["N"], n_q=n_q)
            ):
                rec = dict(impl=impl, kind=kind, B=point["B"], H=point["H"], H_kv=point.get("h_kv", point["H"]),
                           N=point["N"], N_q=n_q, d=point["d"], dtype=str(point["dtype"]).replace("torch.", ""),
                           causal=point["is_causal"], error="skipped: N x N matrices too large")  # fmt: skip
            else:
                rec = bench.bench_one(
                    impl, **rec_shape, kind=kind, device=device, repeats=repeats, warmup=warmup
                )
            rec["autotuned"] = tune if impl == "flash_attention" else None
            group.append(rec)
        _with_ratios(group)
        for rec in group:
            print(_line(rec), flush=True)
        results.extend(group)
    if skipped:
        print(f"(time budget of {args.budget_s:.0f} s reached: {skipped} measurements skipped)")
    meta["skipped_for_budget"] = skipped

    # 3. targets
    data = {"meta": meta, "results": results}
    print("\n== 3. targets (H100/H200) ==")
    meta["targets"] = bench.check_targets(data)
    for t in meta["targets"]:
        value = "not measured" if t["measured"] is None else f"{t['measured']:.2f}x"
        verdict = "" if t["met"] is None else ("met" if t["met"] else "NOT met")
        print(f"{t['target']}: goal {t['goal']:.1f}x, measured {value} {verdict}")
    if args.dry_run:
        print("(dry run: tiny shapes on a CPU; these ratios mean nothing)")

    # 4. record
    meta["seconds"] = round(time.perf_counter() - started, 1)
    if args.out is None:
        if args.dry_run:
            args.out = ROOT / "test-output" / "gpu_check_dry_run.json"
        else:
            slug = re.sub(r"[^A-Za-z0-9]+", "-", meta.get("gpu") or "gpu").strip("-").lower()
            args.out = (
                ROOT / "benchmarks" / "results" / f"flash_attention_{slug}_{meta['date'][:10]}.json"
            )
    path = bench.write_results(args.out, meta, results)
    print(f"\nwrote {path} ({meta['seconds']:.0f} s in all)")
    return 0 if meta["tests"].get("exit_code", 0) == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
