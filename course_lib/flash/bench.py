r"""Benchmarking FlashAttention against torch's SDPA backends: timing, FLOPs, memory, JSON.

Used by ``benchmarks/flash_attention.py`` (the command line) and by chapter 06's notebook
(a live benchmark on a GPU, or a plot of recorded results without one).

FLOP counts follow the convention of the FlashAttention papers: the forward does two
matmuls, :math:`QK^\top` and :math:`PV`, each :math:`2 N^2 d` FLOPs per head, so
:math:`4 B H N^2 d` in all (half of it with a causal mask); the backward does five
(recomputing :math:`S`, then :math:`dV`, :math:`dP`, :math:`dQ`, :math:`dK`), counted as
2.5x the forward. Softmax exponentials are not counted.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RESULTS_GLOB = "flash_attention_*.json"


def attention_flops(B: int, H: int, N: int, d: int, is_causal: bool, mode: str = "fwd") -> float:
    r"""FLOPs of attention: :math:`4BHN^2d` forward (halved when causal), 2.5x that backward."""
    fwd = 4.0 * B * H * N * N * d * (0.5 if is_causal else 1.0)
    return {"fwd": fwd, "bwd": 2.5 * fwd, "fwd_bwd": 3.5 * fwd}[mode]


def sdpa_backends() -> dict[str, object]:
    """torch SDPA backends that this torch knows about, by name (cuDNN only when present)."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:  # pragma: no cover - torch < 2.3
        return {}
    names = {
        "sdpa_flash": "FLASH_ATTENTION",
        "sdpa_efficient": "EFFICIENT_ATTENTION",
        "sdpa_math": "MATH",
        "sdpa_cudnn": "CUDNN_ATTENTION",
    }
    return {k: getattr(SDPBackend, v) for k, v in names.items() if hasattr(SDPBackend, v)}


def make_impl(name: str) -> Callable:
    """``fn(q, k, v, is_causal)`` for ``"flash_attention"`` (ours) or an ``"sdpa_*"`` backend."""
    if name == "flash_attention":
        from . import flash_attention

        return lambda q, k, v, c: flash_attention(q, k, v, is_causal=c)
    backend = sdpa_backends()[name]

    def run(q, k, v, c):
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=c)

    return run


def _time_ms(fn: Callable[[], object], device: str, repeats: int, warmup: int) -> float:
    """Median wall time of ``fn()`` in milliseconds (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    times.sort()
    return times[len(times) // 2]


def bench_one(
    impl: str,
    B: int,
    H: int,
    N: int,
    d: int,
    dtype: torch.dtype,
    is_causal: bool,
    device: str = "cuda",
    repeats: int = 10,
    warmup: int = 3,
) -> dict:
    """Time forward and backward of one implementation at one size; never raises.

    Returns a record with ``fwd_ms``, ``bwd_ms``, ``fwd_tflops``, ``bwd_tflops``,
    ``peak_mem_mib`` (CUDA only: peak allocated during forward+backward, beyond the
    inputs) and ``max_abs_err`` against the math backend in float32; or ``error``.
    """
    rec = dict(
        impl=impl,
        B=B,
        H=H,
        N=N,
        d=d,
        dtype=str(dtype).replace("torch.", ""),
        causal=bool(is_causal),
    )
    try:
        fn = make_impl(impl)
        g = torch.Generator(device="cpu").manual_seed(0)
        q, k, v, do = (
            torch.randn(B, H, N, d, generator=g).to(device, dtype) for _ in range(4)
        )  # (B, H, N, d)
        for x in (q, k, v):
            x.requires_grad_()
        out = fn(q, k, v, is_causal)  # (B, H, N, d)
        rec["max_abs_err"] = None  # checked only where the float32 reference fits easily
        if math_is_feasible(B, H, N, 4, budget_bytes=2**32):
            ref = F.scaled_dot_product_attention(
                q.detach().float(), k.detach().float(), v.detach().float(), is_causal=is_causal
            )
            rec["max_abs_err"] = float((out.detach().float() - ref).abs().max())
            del ref
        del out
        fwd_ms = _time_ms(lambda: fn(q, k, v, is_causal), device, repeats, warmup)

        def fwd_bwd():
            q.grad = k.grad = v.grad = None
            fn(q, k, v, is_causal).backward(do)

        total_ms = _time_ms(fwd_bwd, device, repeats, warmup)
        bwd_ms = max(total_ms - fwd_ms, 1e-6)
        rec.update(
            fwd_ms=fwd_ms,
            bwd_ms=bwd_ms,
            fwd_tflops=attention_flops(B, H, N, d, is_causal, "fwd") / fwd_ms * 1e-9,
            bwd_tflops=attention_flops(B, H, N, d, is_causal, "bwd") / bwd_ms * 1e-9,
        )
        if impl == "flash_attention":
            rec["configs"] = autotuned_configs()  # what the autotuner chose at this size
        if device == "cuda":
            q.grad = k.grad = v.grad = None
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fn(q, k, v, is_causal).backward(do)
            torch.cuda.synchronize()
            rec["peak_mem_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        else:
            rec["peak_mem_mib"] = None
    except torch.cuda.OutOfMemoryError:
        rec["error"] = "out of memory"
    except Exception as err:  # an unsupported backend/dtype/size: record, keep going
        rec["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    finally:
        if device == "cuda":
            torch.cuda.empty_cache()
    return rec


def autotuned_configs() -> dict[str, str]:
    """The block sizes / warps / stages that Triton's autotuner last chose, per kernel."""
    from . import _autotuned

    return {
        key[0].strip("_"): str(tuner.best_config)
        for key, tuner in _autotuned.items()
        if getattr(tuner, "best_config", None) is not None
    }


def metadata(dry_run: bool) -> dict:
    """GPU name, library versions and date for a results file."""
    from ..env import versions

    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "dry_run": bool(dry_run),
        "platform": f"{platform.system()} {platform.machine()}",
        "versions": versions(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    else:
        info["gpu"] = None
        info["cpu"] = platform.processor() or platform.machine()
    from . import triton_mode

    info["triton_mode"] = triton_mode()
    return info


def write_results(path: str | Path, meta: dict, results: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    return path


def load_recorded(results_dir: str | Path = RESULTS_DIR, *, include_dry_runs: bool = False):
    """Recorded results files ``[(path, data), ...]``, newest first; GPU runs only by default."""
    found = []
    for p in sorted(Path(results_dir).glob(RESULTS_GLOB)):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if data.get("meta", {}).get("dry_run") and not include_dry_runs:
            continue
        found.append((p, data))
    found.sort(key=lambda t: t[1].get("meta", {}).get("date", ""), reverse=True)
    return found


def plot_results(
    data: dict, *, d: int = 128, dtype: str = "bfloat16", causal: bool = False, ax=None
):
    """TFLOP/s vs N for every implementation in one results file (forward and backward)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    rows = [
        r
        for r in data["results"]
        if r["d"] == d and r["dtype"] == dtype and r["causal"] == causal and "error" not in r
    ]
    for impl in sorted({r["impl"] for r in rows}):
        pts = sorted((r["N"], r["fwd_tflops"], r["bwd_tflops"]) for r in rows if r["impl"] == impl)
        style = dict(marker="o", lw=2.5 if impl == "flash_attention" else 1.2, label=impl)
        ax[0].plot([p[0] for p in pts], [p[1] for p in pts], **style)
        ax[1].plot([p[0] for p in pts], [p[2] for p in pts], **style)
    meta = data["meta"]
    for a, what in zip(ax, ("forward", "backward")):
        a.set_xscale("log", base=2)
        a.set_xlabel("sequence length N")
        a.set_title(f"{what}: d={d}, {dtype}, {'causal' if causal else 'non-causal'}", fontsize=10)
    ax[0].set_ylabel("TFLOP/s")
    ax[1].legend(fontsize=8)
    ax[0].figure.suptitle(f"{meta.get('gpu') or 'CPU'} — recorded {meta.get('date')}", fontsize=10)
    return ax


def speedups(
    data: dict,
    *,
    N: int = 4096,
    d: int = 128,
    dtype: str = "bfloat16",
    causal: bool = False,
    against: str = "sdpa_flash",
) -> dict | None:
    """``{"fwd": ours/theirs, "bwd": ours/theirs}`` in TFLOP/s at one size, or None."""

    def find(impl):
        for r in data["results"]:
            if (r["impl"], r["N"], r["d"], r["dtype"], r["causal"]) == (impl, N, d, dtype, causal):
                return None if "error" in r else r
        return None

    ours, theirs = find("flash_attention"), find(against)
    if ours is None or theirs is None:
        return None
    return {m: ours[f"{m}_tflops"] / theirs[f"{m}_tflops"] for m in ("fwd", "bwd")}


def gpu_grid(full: bool = True) -> list[dict]:
    """The benchmark's sizes: N 512..16k, d 64/128, fp16/bf16, causal and not.

    Batch x heads shrink as N grows so every point holds 16k tokens x 2048 features
    (the FlashAttention papers' set-up): B*N = 16384 and H*d = 2048.
    """
    ns = [512, 1024, 2048, 4096, 8192, 16384] if full else [1024, 4096]
    out = []
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            for causal in (False, True):
                for n in ns:
                    out.append(
                        dict(
                            B=max(1, 16384 // n),
                            H=2048 // d,
                            N=n,
                            d=d,
                            dtype=dtype,
                            is_causal=causal,
                        )
                    )
    return out


def math_is_feasible(
    B: int, H: int, N: int, dtype_bytes: int = 2, budget_bytes: float | None = None
) -> bool:
    """Whether the math backend's N x N matrices (scores, weights, their gradients) fit."""
    if budget_bytes is None:
        budget_bytes = (
            0.5 * torch.cuda.get_device_properties(0).total_memory
            if torch.cuda.is_available()
            else 2**30
        )
    return 4 * B * H * N * N * max(dtype_bytes, 4) <= budget_bytes


__all__ = [
    "attention_flops",
    "autotuned_configs",
    "bench_one",
    "gpu_grid",
    "load_recorded",
    "make_impl",
    "math_is_feasible",
    "metadata",
    "plot_results",
    "sdpa_backends",
    "speedups",
    "write_results",
    "RESULTS_DIR",
]
