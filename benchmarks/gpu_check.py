"""One script that checks chapter 06's FlashAttention on a GPU and records what it measured.

On a fresh machine with a CUDA GPU and a CUDA build of PyTorch (which brings Triton)::

    python benchmarks/gpu_check.py --install     # installs numpy and pytest if missing, then runs

1. **Correctness, compiled**: the GPU tests of ``tests/course_lib/flash/`` (the forward, the
   backward, decoding, and the forward's TMA path on sm_90) and
   ``tests/course_lib/checks/test_ch06.py`` (``pytest -m gpu``, first kernel configuration only).
2. **Speed, memory and agreement at every point**: ``flash_attention`` (deterministic
   backward, and ``deterministic=False``, the atomic-dQ one) against every SDPA backend torch
   has, for N in {1k, 4k, 16k}, d in {64, 128}, bf16 and fp16, causal or not, forward and
   backward; grouped-query shapes; decode shapes (one query against a 4k or 32k cache) for
   ``flash_decode``. Inputs are drawn once per point, on the GPU. Each implementation is
   timed with ``triton.testing.do_bench`` end to end (the Python call: wrappers,
   validation, launches) and kernel-only (the same call replayed as a CUDA graph, no host
   work); the output *and* the gradients are compared with SDPA's flash backend on the same
   inputs and a mismatch is marked. Printed beside each measurement: the prediction of
   ``benchmarks/flash_prediction.py`` (``results/flash_prediction.json``), made from the
   compiled code before any GPU run.
3. **The targets** (H100/H200, N = 4096, d = 128, bf16): forward >= 1.0x SDPA flash
   (non-causal and causal), backward >= 0.7x, decode >= 1.0x the fastest SDPA backend at
   Nq = 1, Nk = 32k; each printed as met or not.
4. **The real model decoding** (``benchmarks/gpu_decode.py``): SmolLM2-135M-Instruct
   (``make model``) in the course's GPT, float16 and bfloat16, its attention by the Triton
   kernels (the decode kernel per new token), by SDPA and by the course's own arithmetic,
   interleaved rounds, with the GPU's rooflines: the fields of ``results/real_models.json``.
   Skipped, saying why, without the model file or when the budget is spent.
5. **A record**, written after every point (a run stopped at any time keeps what it
   measured): ``benchmarks/results/flash_attention_<gpu>_<date>.json`` with the GPU, driver,
   clocks and power limit, the versions, the git commit, which implementation SDPA's flash
   backend is, and per point the configuration each kernel ran with.

It refuses to run (exit 2, with the reason) under Triton's interpreter (``TRITON_INTERPRET``
set) or without a CUDA GPU. Autotuning compiles every candidate configuration; the compile
time of each kernel was measured ahead of time on a CPU
(``results/flash_aot_registers.json``) and the script prints the budget it implies before it
starts. It autotunes the headline shapes (d = 128, bf16) and runs the first configuration
elsewhere (``--autotune all|headline|none``); ``--budget-s`` (450 s) caps the whole run.

``--dry-run`` runs the same steps end to end on tiny shapes through Triton's interpreter on
the CPU (float32, CPU timers, no kernel-only time, no claims) and writes its JSON to
``test-output/`` unless ``--out`` says otherwise: the test suite runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPU_TESTS = [
    ["tests/course_lib/flash", "-m", "gpu"],  # with the TMA forward (COURSE_FLASH_TMA=1), sm_90
    ["tests/course_lib/checks/test_ch06.py", "-k", "triton"],
]
DRY_RUN_TESTS = [
    [
        "tests/course_lib/flash/test_forward.py",
        "tests/course_lib/flash/test_decode.py",
        "-k",
        "test_kernel_lse_and_causality or test_decode_float16_and_layout",
    ]
]
NEEDS = ("numpy", "pytest")  # beyond torch and triton; pytest only for step 1
PREDICTION = ROOT / "benchmarks" / "results" / "flash_prediction.json"
AOT_TABLE = ROOT / "benchmarks" / "results" / "flash_aot_registers.json"
# |ours - SDPA flash| / max|SDPA flash| beyond which a point is marked as a mismatch
MISMATCH = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 1e-4}


# --------------------------------------------------------------------------- before starting


def refusal(dry_run: bool) -> str | None:
    """Why this machine cannot run the real check (None: it can). Nothing imported yet."""
    if dry_run:
        return None
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return (
            "TRITON_INTERPRET is set: the kernels would run in Triton's CPU interpreter on "
            "CUDA tensors (hours, and no speed to measure). Unset it: "
            "`env -u TRITON_INTERPRET python benchmarks/gpu_check.py`. (`--dry-run` checks "
            "the script itself on a CPU.)"
        )
    import torch

    if not torch.cuda.is_available():
        build = "a CPU-only build of PyTorch" if torch.version.cuda is None else "no CUDA device"
        return (
            f"No CUDA GPU here ({build}): nothing to measure. Run it on a machine with an "
            "NVIDIA GPU and CUDA PyTorch; `--dry-run` checks that the script works (tiny "
            "shapes through Triton's interpreter)."
        )
    return None


def missing_packages() -> list[str]:
    return [m for m in NEEDS if importlib.util.find_spec(m) is None]


def install(packages: list[str]) -> int:
    """``pip install`` what a bare machine lacks (into this interpreter's environment)."""
    if not packages:
        return 0
    print(f"$ pip install {' '.join(packages)}", flush=True)
    return subprocess.call([sys.executable, "-m", "pip", "install", "-q", *packages])


def machine() -> dict:
    """Driver, clocks and power limit (nvidia-smi), the git commit, SDPA's flash implementation."""
    info: dict = {}
    fields = ("driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit",
              "power.max_limit", "temperature.gpu", "persistence_mode")  # fmt: skip
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip().splitlines()  # fmt: skip
        info["nvidia_smi"] = dict(zip(fields, (x.strip() for x in out[0].split(","))))
    except (OSError, IndexError, subprocess.TimeoutExpired) as err:
        info["nvidia_smi"] = f"unavailable: {type(err).__name__}"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=20).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=20).stdout  # fmt: skip
        info["git_commit"] = commit + ("+dirty" if dirty.strip() else "") if commit else None
    except (OSError, subprocess.TimeoutExpired):
        info["git_commit"] = None
    info["sdpa_flash_impl"] = sdpa_flash_impl()
    return info


def sdpa_flash_impl() -> str:
    """Which kernels torch SDPA's flash backend runs (``torch.nn.attention`` can swap in FA3)."""
    try:
        import torch.nn.attention as attn
    except ImportError:  # pragma: no cover
        return "unknown"
    parts = []
    current = getattr(attn, "current_flash_attention_impl", None)
    if current is not None:
        try:
            parts.append(f"impl={current() or 'default (FA2, built into torch)'}")
        except Exception as err:  # pragma: no cover - API differences
            parts.append(f"impl=? ({type(err).__name__})")
    version = getattr(attn, "_get_flash_version", None)
    if version is not None:
        try:
            parts.append(f"version={version()}")
        except Exception:  # pragma: no cover
            pass
    return ", ".join(parts) or "default (FA2, built into torch)"


def compile_budget(arch: int, autotune: str) -> dict:
    """Seconds the run's compilations take, from the compile times measured ahead of time.

    ``all``: every candidate of every kernel; ``headline``: every candidate at d_h = 128 (the
    autotuned shapes), the first configuration at d_h = 64; ``none``: first configurations.
    """
    if not AOT_TABLE.exists():
        return dict(seconds=None, kernels=0, note="no AOT table")
    from course_lib.flash import kernel_config

    def first(kind, d):
        c = kernel_config(d, "cuda", interpreted=False, arch=arch).get(kind, [{}])[0]
        return tuple(c.get(k) for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"))

    def needed(r):
        if r["kind"] in ("preprocess", "merge") or autotune == "all":
            return True
        if autotune == "headline" and r["head_dim"] == 128:
            return True
        return first(r["kind"], r["head_dim"]) == (
            r["BLOCK_M"], r["BLOCK_N"], r["num_warps"], r["num_stages"]
        )  # fmt: skip

    rows = [r for r in json.loads(AOT_TABLE.read_text())["rows"] if r["arch"] == arch]
    plain = [r for r in rows if not r["window"] and r["groups"] == 1 and needed(r)]
    if any("compile_seconds" not in r for r in plain):
        return dict(seconds=None, kernels=len(plain), note="the AOT table has no compile times")
    tma_table = AOT_TABLE.with_name("flash_aot_tma.json")  # the TMA forward, headline only
    tma = []
    if arch >= 90 and tma_table.exists():
        tma = [r for r in json.loads(tma_table.read_text())["rows"]
               if r["head_dim"] == 128 and not r["window"] and r["groups"] == 1
               and (autotune != "none" or needed(r))]  # fmt: skip
    seconds = sum(r.get("compile_seconds", 0.0) for r in plain + tma)
    return dict(seconds=round(seconds, 1), kernels=len(plain) + len(tma),
                note="CPU compile times of the plain and causal variants (AOT tables: pointer "
                "path, and the TMA forward at d_h = 128), one dtype; the GPU run compiles bf16 "
                "and fp16 and the GQA/ragged variants too")  # fmt: skip


# --------------------------------------------------------------------------- measuring


def run_tests(dry_run: bool, timeout_s: float) -> dict:
    """Step 1: pytest in subprocesses (first kernel configuration only: no autotuning)."""
    if importlib.util.find_spec("pytest") is None:
        print("   pytest is not installed: step 1 skipped (`--install` installs it)")
        return dict(runs=[], exit_code=0, skipped="pytest not installed")
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


def _timers(cuda: bool, repeats: int):
    """``(end_to_end_ms, kernel_only_ms)``: do_bench and a CUDA-graph replay (None on a CPU)."""
    if not cuda:
        from course_lib.timing import best_time

        def e2e(fn):
            return 1e3 * best_time(fn, repeats, warmup=0, statistic="median", device="cpu")

        return e2e, lambda fn: None
    import triton.testing as tt

    def e2e(fn):
        return float(tt.do_bench(fn, warmup=10, rep=60, return_mode="median"))

    def kernel_only(fn):
        try:
            return float(tt.do_bench_cudagraph(fn, rep=60, return_mode="median"))
        except Exception:  # not capturable (e.g. a host synchronisation inside): say so
            return None

    return e2e, kernel_only


def _hopper() -> bool:
    from course_lib.flash.launch import device_arch

    return device_arch("cuda") >= 90


@contextlib.contextmanager
def _tma(setting: str):
    """``COURSE_FLASH_TMA=setting`` for the calls inside (the forward reads it per launch)."""
    from course_lib.flash.launch import TMA_ENV

    saved = os.environ.get(TMA_ENV)
    os.environ[TMA_ENV] = setting
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(TMA_ENV, None)
        else:
            os.environ[TMA_ENV] = saved


def _impl(name: str, decode: bool):
    """``fn(q, k, v, causal)`` for our two backward modes, the TMA forward, or an SDPA backend.

    ``flash_attention_tma``: the forward through tensor descriptors (``COURSE_FLASH_TMA=1``
    on the GPU; ``force`` in a dry run, where the interpreter emulates them), the
    deterministic backward (which has no TMA path)."""
    from course_lib.flash import bench, flash_attention

    if name == "flash_attention_atomic_dq":
        return lambda q, k, v, c: flash_attention(q, k, v, is_causal=c, layout="bhnd",
                                                  deterministic=False)  # fmt: skip
    if name == "flash_attention_tma":
        import torch

        setting = "1" if torch.cuda.is_available() else "force"

        def with_tma(q, k, v, c):
            with _tma(setting):
                return flash_attention(q, k, v, is_causal=c, layout="bhnd")

        return with_tma
    return bench.make_impl(name, decode=decode)


def _errors(got, ref) -> float:
    """max |got - ref| / max |ref| (0 for an all-zero reference)."""
    scale = float(ref.detach().abs().max()) or 1.0
    return float((got.detach().float() - ref.detach().float()).abs().max()) / scale


def _dims(point: dict) -> tuple:
    """``(B, H, H_kv, N, N_q, d, dtype, is_causal)`` of a point: N is the keys' length; H_kv
    and N_q are H and N unless the point gives them (grouped-query and decode shapes)."""
    B, H, N, d, dtype = point["B"], point["H"], point["N"], point["d"], point["dtype"]
    h_kv, n_q, causal = point.get("h_kv", H), point.get("n_q", N), point["is_causal"]
    return B, H, h_kv, N, n_q, d, dtype, causal


def _inputs(point: dict, device: str) -> tuple:
    """``(q, k, v, do)``, drawn once per point on ``device`` from a generator seeded with 0."""
    import torch

    B, H, h_kv, N, n_q, d, dtype, _ = _dims(point)
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(B, H, n_q, d, generator=g, device=device, dtype=dtype)  # (B, H, Nq, d)
    k = torch.randn(B, h_kv, N, d, generator=g, device=device, dtype=dtype)  # (B, H_kv, Nk, d)
    v = torch.randn(B, h_kv, N, d, generator=g, device=device, dtype=dtype)  # (B, H_kv, Nk, d)
    do = torch.randn(B, H, n_q, d, generator=g, device=device, dtype=dtype)  # (B, H, Nq, d)
    return q, k, v, do


def _shape(point: dict) -> dict:
    """The fields that say where a record was measured (every record of the point has them)."""
    B, H, h_kv, N, n_q, d, dtype, causal = _dims(point)
    kind = point.get("kind", "train")
    return dict(kind=kind, B=B, H=H, H_kv=h_kv, N=N, N_q=n_q, d=d,
                dtype=str(dtype).replace("torch.", ""), causal=bool(causal))  # fmt: skip


def measure_point(point: dict, impls: list[str], device: str, repeats: int, tune: bool) -> list:
    """Every implementation at one point, on the same inputs: times, memory, agreement."""
    import torch

    from course_lib.flash import bench

    decode = point.get("kind", "train") == "decode"
    B, H, _, N, n_q, _, _, causal = _dims(point)
    cuda = device == "cuda"
    timers = _timers(cuda, repeats)  # (end_to_end_ms, kernel_only_ms)
    q, k, v, do = _inputs(point, device)
    backward = not decode
    shape = _shape(point)
    group, reference = [], None
    order = ["sdpa_flash"] + [i for i in impls if i != "sdpa_flash"]  # the reference first
    for name in order:
        if name not in impls:
            continue
        rec = dict(impl=name, **shape)
        if decode and name in ("flash_attention_atomic_dq", "flash_attention_tma"):
            continue
        if name == "flash_attention_tma":  # the path it takes, not the one asked for
            from course_lib.flash.forward import uses_tma

            with _tma("1" if cuda else "force"):
                rec["tma_used"] = uses_tma(q, k, v)
        if name == "sdpa_math" and cuda and not bench.math_is_feasible(B, H, N, n_q=n_q):
            group.append(dict(rec, error="skipped: N x N matrices too large"))
            continue
        try:
            fn = _impl(name, decode)
            xs = [x.detach().requires_grad_(backward) for x in (q, k, v)]
            reference = _agreement(rec, fn, xs, do, causal, backward, reference)
            fwd = _time_forward(rec, fn, xs, point, timers)
            if backward:
                _time_backward(rec, fn, xs, do, fwd, point, timers)
            if name.startswith("flash_attention"):
                rec["configs"] = configs_for(point, tune)
            if cuda:
                _peak_memory(rec, fn, xs, do, causal, backward)
        except torch.cuda.OutOfMemoryError:
            rec["error"] = "out of memory"
        except Exception as err:  # an unsupported backend/dtype/size: record, keep going
            rec["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        finally:
            if cuda:
                torch.cuda.empty_cache()
        group.append(rec)
    _ratios_to_sdpa_flash(group)
    return group


def _agreement(rec: dict, fn, xs: list, do, causal: bool, backward: bool, reference):
    """One call of ``fn`` (and its backward into ``xs``' gradients); its output and gradients
    compared with ``reference``, SDPA flash's on the same inputs, into ``rec``. The reference
    is None until ``sdpa_flash`` (measured first) runs: returns it, set by that call."""
    import torch

    with torch.set_grad_enabled(backward):
        out = fn(*xs, causal)  # (B, H, Nq, d)
        if backward:
            out.backward(do)
    got = [out.detach()] + ([x.grad for x in xs] if backward else [])
    if reference is None and rec["impl"] == "sdpa_flash":
        reference = got
    elif reference is not None:
        errs = [_errors(a, b) for a, b in zip(got, reference)]
        rec["err_vs_sdpa_flash"] = dict(zip(("out", "dq", "dk", "dv"), errs))
        rec["mismatch"] = max(errs) > MISMATCH[rec["dtype"]]
    del out, got
    return reference


def _time_forward(rec: dict, fn, xs: list, point: dict, timers: tuple):
    """The forward (no autograd), end to end and kernel-only, into ``rec``: ms and TFLOP/s,
    and the K/V bandwidth at a decode point. Returns the timed call, ``fwd()``."""
    import torch

    from course_lib.flash import bench

    B, H, h_kv, N, n_q, d, dtype, causal = _dims(point)
    decode = point.get("kind", "train") == "decode"
    e2e, kernel_only = timers
    flops = bench.attention_flops(B, H, N, d, causal, "fwd", n_q=n_q)

    def fwd(fn=fn, xs=xs):
        return fn(*xs, causal)

    with torch.no_grad():
        rec["fwd_ms"] = e2e(fwd)
        rec["fwd_kernel_ms"] = kernel_only(fwd)
    rec["fwd_tflops"] = flops / rec["fwd_ms"] * 1e-9
    if rec["fwd_kernel_ms"]:
        rec["fwd_kernel_tflops"] = flops / rec["fwd_kernel_ms"] * 1e-9
    if decode:
        kv_bytes = 2 * B * h_kv * N * d * torch.finfo(dtype).bits // 8
        rec["kv_gb_per_s"] = kv_bytes / rec["fwd_ms"] * 1e-6
    return fwd


def _time_backward(rec: dict, fn, xs: list, do, fwd, point: dict, timers: tuple) -> None:
    """The backward into ``rec``: forward+backward minus the training forward (``fwd`` with
    autograd on, which saves what backward needs), end to end and kernel-only."""
    import torch

    from course_lib.flash import bench

    B, H, _, N, n_q, d, _, causal = _dims(point)
    e2e, kernel_only = timers

    def fwd_bwd(fn=fn, xs=xs):
        for x in xs:
            x.grad = None
        fn(*xs, causal).backward(do)

    total = e2e(fwd_bwd)
    with torch.enable_grad():
        fwd_train = e2e(fwd)  # the training forward saves what backward needs
    rec["bwd_ms"] = max(total - fwd_train, 1e-6)
    rec["bwd_tflops"] = (
        bench.attention_flops(B, H, N, d, causal, "bwd", n_q=n_q) / rec["bwd_ms"] * 1e-9
    )
    graph_total = kernel_only(fwd_bwd)
    if graph_total and rec["fwd_kernel_ms"]:
        rec["bwd_kernel_ms"] = max(graph_total - rec["fwd_kernel_ms"], 1e-6)


def _peak_memory(rec: dict, fn, xs: list, do, causal: bool, backward: bool) -> None:
    """GPU memory one call (and its backward) allocates beyond what is already held, in MiB."""
    import torch

    for x in xs:
        x.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.set_grad_enabled(backward):
        out = fn(*xs, causal)
        if backward:
            out.backward(do)
    del out
    torch.cuda.synchronize()
    rec["peak_mem_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20


def _ratios_to_sdpa_flash(group: list[dict]) -> None:
    """``ratio_fwd`` / ``ratio_bwd``: each record's TFLOP/s over SDPA flash's at the point."""
    for r in group:  # ratios to SDPA flash
        base = next((x for x in group if x["impl"] == "sdpa_flash" and "error" not in x), None)
        for m in ("fwd", "bwd"):
            if base and "error" not in r and f"{m}_tflops" in r and f"{m}_tflops" in base:
                r[f"ratio_{m}"] = r[f"{m}_tflops"] / base[f"{m}_tflops"]


def configs_for(point: dict, tune: bool) -> dict:
    """The configuration each of our kernels ran with *at this point* (not the last tuned)."""
    import triton

    from course_lib.flash import kernel_config
    from course_lib.flash.launch import autotuners

    n_q, n_k = point.get("n_q", point["N"]), point["N"]
    first = {k: v[0] for k, v in kernel_config(point["d"], "cuda", dtype=point["dtype"]).items()}
    if point.get("kind") == "decode":
        return {"decode": "menu by rows (first that holds G*Nq)", "tuned": False}
    out = {}
    key = dict(NQ_BUCKET=triton.next_power_of_2(n_q), NK_BUCKET=triton.next_power_of_2(n_k),
               HEAD_DIM=point["d"], IS_CAUSAL=bool(point["is_causal"]), HAS_WINDOW=False)  # fmt: skip
    for tuner in autotuners() if tune else ():
        chosen = tuner.chosen(**key)
        if chosen is not None:
            out[tuner.name] = str(chosen)
    for kind in ("fwd", "dkdv", "dq"):
        out.setdefault(f"{kind} (first)", str(dict(first[kind])))
    out["tuned"] = bool(tune)
    return out


# --------------------------------------------------------------------------- predictions


def load_prediction() -> list[dict]:
    if not PREDICTION.exists():
        return []
    return json.loads(PREDICTION.read_text()).get("points", [])


def predicted(rec: dict, predictions: list[dict]) -> dict | None:
    """The prediction for a measured record, matched on the shape (ours only)."""
    mode = "atomic_dq" if rec["impl"] == "flash_attention_atomic_dq" else "deterministic"
    for p in predictions:
        s = p["shape"]
        if (s["kind"], s["B"], s["H"], s["H_kv"], s["N"], s["N_q"], s["d"], s["causal"]) == (
            rec["kind"], rec["B"], rec["H"], rec["H_kv"], rec["N"], rec["N_q"], rec["d"],
            rec["causal"],
        ) and rec["dtype"] == s.get("dtype", "bfloat16") and p.get("backward", mode) == mode:  # fmt: skip
            return p
    return None


def _line(rec: dict, pred: dict | None) -> str:
    shape = (
        f"B={rec['B']:2d} H={rec['H']:2d}/{rec['H_kv']:<2d} Nq={rec['N_q']:5d} Nk={rec['N']:5d} "
        f"d={rec['d']:3d} {rec['dtype']:8s} causal={int(rec['causal'])}"
    )
    if "error" in rec:
        return f"{rec['impl']:25s} {shape}  {rec['error']}"
    parts = [f"fwd {rec['fwd_tflops']:6.1f}"]
    if rec.get("fwd_kernel_tflops"):
        parts.append(f"(kernel {rec['fwd_kernel_tflops']:6.1f})")
    if "bwd_tflops" in rec:
        parts.append(f"bwd {rec['bwd_tflops']:6.1f} TFLOP/s")
    if "kv_gb_per_s" in rec:
        kernel = f", kernel {rec['fwd_kernel_ms'] * 1e3:.1f}" if rec.get("fwd_kernel_ms") else ""
        parts.append(f"{rec['fwd_ms'] * 1e3:7.1f} us{kernel}, K/V {rec['kv_gb_per_s']:6.0f} GB/s")
    for key, what in (("ratio_fwd", "fwd"), ("ratio_bwd", "bwd")):
        if rec.get(key) is not None:
            parts.append(f"{what} {rec[key]:.2f}x")
    if pred is not None:
        p = pred["predicted"]
        guess = [f"{m} {p[m + '_tflops']:.0f}" for m in ("fwd", "bwd") if p.get(m + "_tflops")]
        if p.get("fwd_us") and rec["kind"] == "decode":
            guess = [f"{p['fwd_us']:.1f} us"]
        parts.append("predicted " + ", ".join(guess))
    if "err_vs_sdpa_flash" in rec:
        worst = max(rec["err_vs_sdpa_flash"].values())
        parts.append(f"err {worst:.1e}" + (" MISMATCH" if rec["mismatch"] else ""))
    return f"{rec['impl']:25s} {shape}  " + "  ".join(parts)


# --------------------------------------------------------------------------- the run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--install", action="store_true", help="pip install numpy, pytest")
    parser.add_argument("--out", type=Path, default=None, help="output JSON path")
    parser.add_argument("--budget-s", type=float, default=450.0, help="wall-time cap")
    parser.add_argument("--tests-timeout-s", type=float, default=180.0)
    parser.add_argument("--skip-tests", action="store_true", help="benchmark only")
    parser.add_argument("--autotune", choices=("all", "headline", "none"), default="headline")
    parser.add_argument("--repeats", type=int, default=None)
    return parser.parse_args(argv)


def preflight(args: argparse.Namespace) -> int | None:
    """Exit code 2, the reason on stderr, when the run cannot start here (None: it can);
    ``--install`` first installs what is missing."""
    reason = refusal(args.dry_run)
    if reason:
        print(reason, file=sys.stderr)
        return 2
    missing = missing_packages()
    if missing and args.install and install(missing) != 0:
        print(f"pip could not install {missing}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("numpy") is None:
        print("numpy is needed (course_lib uses it): rerun with --install", file=sys.stderr)
        return 2
    return None


def run_metadata(args: argparse.Namespace, argv: list[str] | None, cuda: bool) -> dict:
    """What the record says about the run: ``bench.metadata``, the command, the conventions,
    the machine, the GPU's properties, and the compile budget."""
    import torch

    from course_lib.flash import bench

    meta = bench.metadata(dry_run=args.dry_run)
    meta["command"] = " ".join(
        ["benchmarks/gpu_check.py"] + (sys.argv[1:] if argv is None else argv)
    )
    meta["flop_convention"] = "fwd 4*B*H*Nq*Nk*d (x0.5 causal when Nq = Nk); bwd 2.5x fwd"
    meta["timing"] = (
        "triton.testing.do_bench, median: end to end (the Python call) and kernel-only "
        "(do_bench_cudagraph: the call replayed as a CUDA graph); bwd = fwd+bwd - fwd"
        if cuda
        else "CPU timer (dry run): no kernel-only time"
    )
    meta["autotune"] = args.autotune
    meta["mismatch_threshold"] = MISMATCH
    meta.update(machine())
    arch = 90
    if cuda:
        props = torch.cuda.get_device_properties(0)
        meta["sm_count"] = props.multi_processor_count
        major, minor = torch.cuda.get_device_capability(0)
        arch = 10 * major + minor
        meta["capability"] = f"{major}.{minor}"
        meta["memory_gib"] = round(props.total_memory / 2**30, 1)
    meta["compile_budget"] = compile_budget(arch, args.autotune)
    return meta


def print_header(meta: dict, budget_s: float) -> None:
    """The machine and versions, and the compile time the AOT tables predict."""
    print(f"{meta.get('gpu') or 'CPU (dry run)'}; torch {meta['versions']['torch']}, "
          f"triton {meta['versions']['triton']}; SDPA flash: {meta['sdpa_flash_impl']}; "
          f"commit {meta['git_commit']}; {meta['date']}", flush=True)  # fmt: skip
    cb = meta["compile_budget"]
    if cb["seconds"] is not None:
        print(f"compilation measured ahead of time: {cb['seconds']:.0f} s for {cb['kernels']} "
              f"kernels on a CPU ({cb['note']})")  # fmt: skip
        if cb["seconds"] > 0.5 * budget_s:
            print(f"  over half of --budget-s {budget_s:.0f}: if the run runs out of time, "
                  "rerun with --autotune none (first configurations only)")  # fmt: skip


def default_out(dry_run: bool, meta: dict) -> Path:
    """``test-output/gpu_check_dry_run.json`` for a dry run, else
    ``benchmarks/results/flash_attention_<gpu>_<date>.json``."""
    if dry_run:
        return ROOT / "test-output" / "gpu_check_dry_run.json"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", meta.get("gpu") or "gpu").strip("-").lower()
    name = f"flash_attention_{slug}_{meta['date'][:10]}.json"
    return ROOT / "benchmarks" / "results" / name


def plan(args: argparse.Namespace, cuda: bool) -> tuple:
    """``(device, repeats, points, headline, tma_points)``: the points in the order measured
    (headline shapes, d = 128 bf16, first, then decode, grouped-query, the rest), the headline
    ones, and those where the TMA forward runs too."""
    import torch

    from course_lib.flash import bench

    if args.dry_run:
        device, repeats = "cpu", args.repeats or 1
        f32 = torch.float32
        train = [dict(B=1, H=2, N=n, d=16, dtype=f32, is_causal=c)
                 for n in (16, 32) for c in (False, True)]  # fmt: skip
        gqa = [dict(B=1, H=4, h_kv=2, N=32, d=16, dtype=f32, is_causal=True, kind="gqa")]
        dec = [dict(B=1, H=4, h_kv=2, N=64, n_q=1, d=16, dtype=f32, is_causal=False, kind="decode")]
    else:
        device, repeats = "cuda", args.repeats or 10
        train, gqa, dec = bench.gpu_check_grid(), bench.gqa_shapes(), bench.decode_shapes()
    headline = [p for p in train if p["d"] == 128 and p["dtype"] == torch.bfloat16]
    points = headline + dec + gqa + [p for p in train if p not in headline]
    # the TMA forward: on Hopper or newer (a dry run: one point, emulated)
    tma_points = train[:1] if not cuda else headline if _hopper() else []
    return device, repeats, points, headline, tma_points


def run_benchmark(
    args: argparse.Namespace, cuda: bool, started: float, results: list, record
) -> int:
    """Step 2: measure and print every point of the plan into ``results``, ``record()`` after
    each; returns how many points the time budget left out."""
    from course_lib.flash import bench

    impls = ["flash_attention", "flash_attention_atomic_dq", *bench.sdpa_backends(), "sdpa_auto"]
    device, repeats, points, headline, tma_points = plan(args, cuda)
    predictions = load_prediction()
    skipped = 0
    for point in points:
        if cuda and time.perf_counter() - started > args.budget_s - 20:
            skipped += 1
            continue
        tune = args.autotune == "all" or (args.autotune == "headline" and point in headline)
        os.environ["COURSE_FLASH_AUTOTUNE"] = "1" if tune else "0"
        # the TMA forward at the headline shapes only (its compilations cost budget)
        here = impls + ["flash_attention_tma"] if point in tma_points else impls
        group = measure_point(point, here, device, repeats, tune)
        for rec in group:
            rec["autotuned"] = tune if rec["impl"].startswith("flash_attention") else None
            pred = predicted(rec, predictions) if rec["impl"].startswith("flash") else None
            if pred is not None:
                rec["predicted"] = pred["predicted"]
            print(_line(rec, pred), flush=True)
        results.extend(group)
        record()  # after every point
    return skipped


def report_targets(meta: dict, results: list[dict], dry_run: bool) -> list[dict]:
    """Step 3: each target, met or not, and the mismatches, printed and put in ``meta``;
    returns the records that disagree with SDPA flash."""
    from course_lib.flash import bench

    print("\n== 3. targets (H100/H200) ==")
    meta["targets"] = bench.check_targets({"meta": meta, "results": results})
    for t in meta["targets"]:
        value = "not measured" if t["measured"] is None else f"{t['measured']:.2f}x"
        verdict = "" if t["met"] is None else ("met" if t["met"] else "NOT met")
        print(f"{t['target']}: goal {t['goal']:.1f}x, measured {value} {verdict}")
    mismatches = [r for r in results if r.get("mismatch")]
    meta["mismatches"] = len(mismatches)
    print(f"{len(mismatches)} measurement(s) disagree with SDPA flash beyond {MISMATCH}")
    if dry_run:
        print("(dry run: tiny shapes on a CPU; these ratios mean nothing)")
    return mismatches


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    code = preflight(args)
    if code is not None:
        return code
    if args.dry_run:  # CPU tensors: the interpreter, even on a machine with a GPU
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from course_lib import env

    env.setup(quiet=True, plots=False)
    from course_lib.flash import bench

    cuda = not args.dry_run
    started = time.perf_counter()
    meta = run_metadata(args, argv, cuda)
    print_header(meta, args.budget_s)
    if args.out is None:
        args.out = default_out(args.dry_run, meta)
    results: list[dict] = []

    def record() -> None:
        meta["seconds"] = round(time.perf_counter() - started, 1)
        bench.write_results(args.out, meta, results)

    print("\n== 1. correctness, compiled ==" if cuda else "\n== 1. correctness (dry run) ==")
    meta["tests"] = (
        {"skipped": True} if args.skip_tests else run_tests(args.dry_run, args.tests_timeout_s)
    )
    record()

    print("\n== 2. speed, memory and agreement with SDPA flash ==", flush=True)
    skipped = run_benchmark(args, cuda, started, results, record)
    if skipped:
        print(f"(time budget of {args.budget_s:.0f} s reached: {skipped} points skipped)")
    meta["skipped_for_budget"] = skipped

    mismatches = report_targets(meta, results, args.dry_run)
    record()

    print("\n== 4. the real model decoding (course, SDPA and Triton attention) ==", flush=True)
    if cuda and time.perf_counter() - started > args.budget_s - 90:
        meta["real_model_decode"] = {"skipped": "the time budget was spent"}
    else:
        import gpu_decode

        meta["real_model_decode"] = gpu_decode.run(args.dry_run)
    record()
    print(f"\nwrote {args.out} ({meta['seconds']:.0f} s in all)")
    failed = meta["tests"].get("exit_code", 0) != 0 or mismatches
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
