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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from ..timing import best_time

if TYPE_CHECKING:
    from torch.nn.attention import SDPBackend

RESULTS_GLOB = "flash_attention_*.json"


def default_results_dir() -> Path:
    """``benchmarks/results`` of the course checkout the current directory is in.

    A notebook runs in ``notebooks/``, a script in the checkout's root: both find it. (Never
    found from where the package is installed: a wheel lives far from any checkout.)
    """
    here = Path.cwd()
    for base in (here, *here.parents[:1]):
        if (base / "benchmarks" / "results").is_dir():
            return base / "benchmarks" / "results"
    return here / "benchmarks" / "results"


def attention_flops(
    B: int, H: int, N: int, d: int, is_causal: bool, mode: str = "fwd", *, n_q: int | None = None
) -> float:
    r"""FLOPs of attention: :math:`4BHN_qN_kd` forward (halved when causal with
    :math:`N_q = N_k`), 2.5x that backward. ``N`` keys; ``n_q`` queries (default ``N``)."""
    n_q = N if n_q is None else n_q
    half = is_causal and n_q == N
    fwd = 4.0 * B * H * n_q * N * d * (0.5 if half else 1.0)
    return {"fwd": fwd, "bwd": 2.5 * fwd, "fwd_bwd": 3.5 * fwd}[mode]


def sdpa_backends() -> dict[str, SDPBackend]:
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


def make_impl(name: str, *, decode: bool = False) -> Callable:
    """``fn(q, k, v, is_causal)`` for ``"flash_attention"`` (ours), an ``"sdpa_*"`` backend
    pinned, or ``"sdpa_auto"`` (torch's own choice of backend).

    k and v may have fewer heads than q (grouped-query attention: ours reads them directly,
    SDPA gets ``enable_gqa=True``). ``decode=True``: ours is :func:`~course_lib.flash.flash_decode`
    (the split-key kernel for a few queries against a long cache), forward only; causal
    masks are then aligned bottom-right (the new queries are the last ones).
    """
    if name == "flash_attention":
        from . import flash_attention, flash_decode

        if decode:
            return lambda q, k, v, c: flash_decode(
                q, k, v, is_causal=c, causal_alignment="bottom_right", layout="bhnd"
            )
        return lambda q, k, v, c: flash_attention(q, k, v, is_causal=c, layout="bhnd")
    import contextlib

    backend = None if name == "sdpa_auto" else sdpa_backends()[name]

    def run(q, k, v, c):
        from torch.nn.attention import sdpa_kernel

        gqa: dict[str, Any] = dict(enable_gqa=True) if q.shape[1] != k.shape[1] else {}
        pinned = contextlib.nullcontext() if backend is None else sdpa_kernel([backend])
        with pinned:
            if c and q.shape[2] != k.shape[2]:  # bottom-right causal, as a KV cache needs
                from torch.nn.attention.bias import causal_lower_right

                bias = causal_lower_right(q.shape[2], k.shape[2])
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, **gqa)
            return F.scaled_dot_product_attention(q, k, v, is_causal=c, **gqa)

    return run


def _time_ms(fn: Callable[[], object], device: str, repeats: int, warmup: int) -> float:
    """Median time of ``fn()`` in milliseconds (CUDA events on a GPU): :func:`best_time`."""
    return 1e3 * best_time(fn, repeats, warmup=warmup, statistic="median", device=device)


def _bench_inputs(B, H, h_kv, n_q, N, d, dtype, device, backward: bool):
    """Seeded q, k, v and dO for one point (q, k, v require grad for a backward)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(B, H, n_q, d, generator=g).to(device, dtype)  # (B, H, Nq, d)
    k, v = (torch.randn(B, h_kv, N, d, generator=g).to(device, dtype) for _ in range(2))
    do = torch.randn(B, H, n_q, d, generator=g).to(device, dtype)  # (B, H, Nq, d)
    if backward:
        for x in (q, k, v):
            x.requires_grad_()
    return q, k, v, do


def _max_abs_err(out, q, k, v, is_causal: bool) -> float | None:
    """``max |out - attention|`` against the math backend in float32, where it fits easily
    (4 GiB of scores); None where it does not. Causal masks aligned bottom-right (the same
    as top-left when Nq = Nk)."""
    (B, H, n_q, _), (h_kv, N) = q.shape, k.shape[1:3]
    if not math_is_feasible(B, H, N, 4, budget_bytes=2**32, n_q=n_q):
        return None
    kr, vr = (x.detach().float().repeat_interleave(H // h_kv, dim=1) for x in (k, v))
    allowed = None
    if is_causal:
        allowed = torch.ones(n_q, N, dtype=torch.bool, device=q.device).tril(N - n_q)
    ref = F.scaled_dot_product_attention(q.detach().float(), kr, vr, attn_mask=allowed)
    return float((out.detach().float() - ref).abs().max())


def _peak_mem_mib(fn, q, k, v, do, is_causal: bool, backward: bool) -> float:
    """Peak CUDA memory (MiB) of one call (and its backward), beyond what was allocated."""
    q.grad = k.grad = v.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.set_grad_enabled(backward):
        out = fn(q, k, v, is_causal)
        if backward:
            out.backward(do)
    del out
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def _measure(rec: dict, impl: str, shape: dict, device: str, repeats: int, warmup: int) -> None:
    """Fill ``rec`` with one implementation's error, times, throughput and memory at ``shape``."""
    B, H, h_kv, N, n_q, d = (shape[k] for k in ("B", "H", "h_kv", "N", "n_q", "d"))
    is_causal, decode, backward = shape["is_causal"], shape["decode"], shape["backward"]
    fn = make_impl(impl, decode=decode)
    q, k, v, do = _bench_inputs(B, H, h_kv, n_q, N, d, shape["dtype"], device, backward)
    with torch.set_grad_enabled(backward):
        out = fn(q, k, v, is_causal)  # (B, H, Nq, d)
    rec["max_abs_err"] = _max_abs_err(out, q, k, v, is_causal)
    del out
    with torch.set_grad_enabled(backward):  # a training forward saves what backward needs
        fwd_ms = _time_ms(lambda: fn(q, k, v, is_causal), device, repeats, warmup)
    flops = attention_flops(B, H, N, d, is_causal, "fwd", n_q=n_q)
    rec.update(fwd_ms=fwd_ms, fwd_tflops=flops / fwd_ms * 1e-9)
    if decode:
        kv_bytes = 2 * B * h_kv * N * d * torch.finfo(shape["dtype"]).bits // 8
        rec["kv_gb_per_s"] = kv_bytes / fwd_ms * 1e-6
    if backward:

        def fwd_bwd():
            q.grad = k.grad = v.grad = None
            fn(q, k, v, is_causal).backward(do)

        bwd_ms = max(_time_ms(fwd_bwd, device, repeats, warmup) - fwd_ms, 1e-6)
        bwd_flops = attention_flops(B, H, N, d, is_causal, "bwd", n_q=n_q)
        rec.update(bwd_ms=bwd_ms, bwd_tflops=bwd_flops / bwd_ms * 1e-9)
    if impl == "flash_attention":
        rec["configs"] = autotuned_configs()  # what the autotuner chose at this size
    cuda = device == "cuda"
    rec["peak_mem_mib"] = _peak_mem_mib(fn, q, k, v, do, is_causal, backward) if cuda else None


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
    *,
    h_kv: int | None = None,
    n_q: int | None = None,
    backward: bool = True,
    kind: str = "train",
) -> dict:
    """Time forward (and backward) of one implementation at one size; never raises.

    ``N`` keys (and queries, unless ``n_q`` is given: a decode step, forward only, through
    :func:`~course_lib.flash.flash_decode` for ours); ``h_kv`` key/value heads (grouped-query
    attention when fewer than ``H``). Returns a record with ``fwd_ms``, ``fwd_tflops``,
    ``bwd_ms``, ``bwd_tflops`` (training shapes), ``kv_gb_per_s`` (decode: bytes of K and V
    read per second), ``peak_mem_mib`` (CUDA only: peak allocated during the timed call(s),
    beyond the inputs) and ``max_abs_err`` against the math backend in float32; or ``error``.
    """
    decode = n_q is not None
    shape = dict(B=B, H=H, h_kv=H if h_kv is None else h_kv, N=N, n_q=N if n_q is None else n_q,
                 d=d, dtype=dtype, is_causal=is_causal, decode=decode,
                 backward=backward and not decode)  # fmt: skip
    rec = dict(impl=impl, kind=kind, B=B, H=H, H_kv=shape["h_kv"], N=N, N_q=shape["n_q"], d=d,
               dtype=str(dtype).replace("torch.", ""), causal=bool(is_causal))  # fmt: skip
    try:
        _measure(rec, impl, shape, device, repeats, warmup)
    except torch.cuda.OutOfMemoryError:
        rec["error"] = "out of memory"
    except Exception as err:  # an unsupported backend/dtype/size: record, keep going
        rec["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    finally:
        if device == "cuda":
            torch.cuda.empty_cache()
    return rec


def autotuned_configs() -> dict[str, str]:
    """The block sizes / warps / stages that Triton's autotuner last chose, per kernel
    (:func:`course_lib.flash.launch.autotuners`)."""
    from .launch import autotuners

    return {t.name: str(t.best_config) for t in autotuners() if t.best_config is not None}


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


def load_recorded(results_dir: str | Path | None = None, *, include_dry_runs: bool = False):
    """Recorded results files ``[(path, data), ...]``, newest first; GPU runs only by default.

    ``results_dir`` defaults to :func:`default_results_dir`.
    """
    results_dir = default_results_dir() if results_dir is None else Path(results_dir)
    found = []
    for p in sorted(results_dir.glob(RESULTS_GLOB)):
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
        if r["d"] == d
        and r["dtype"] == dtype
        and r["causal"] == causal
        and r.get("kind", "train") == "train"
        and "error" not in r
        and "bwd_tflops" in r
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
    ours: str = "flash_attention",
) -> dict | None:
    """``{"fwd": ours/theirs, "bwd": ours/theirs}`` in TFLOP/s at one size, or None."""

    def find(impl):
        for r in data["results"]:
            if r.get("kind", "train") != "train":
                continue
            if (r["impl"], r["N"], r["d"], r["dtype"], r["causal"]) == (impl, N, d, dtype, causal):
                return None if "error" in r else r
        return None

    mine, theirs = find(ours), find(against)
    if mine is None or theirs is None:
        return None
    return {m: mine[f"{m}_tflops"] / theirs[f"{m}_tflops"] for m in ("fwd", "bwd")}


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


def gpu_check_grid() -> list[dict]:
    """The training shapes of ``benchmarks/gpu_check.py``: N in {1k, 4k, 16k}, d in {64, 128},
    bfloat16 and float16, causal or not; 16k tokens x 2048 features per point as in the
    FlashAttention papers (B*N = 16384, H*d = 2048)."""
    out = []
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            for causal in (False, True):
                for n in (1024, 4096, 16384):
                    out.append(
                        dict(B=16384 // n, H=2048 // d, N=n, d=d, dtype=dtype, is_causal=causal)
                    )
    return out


def gqa_shapes() -> list[dict]:
    """Grouped-query attention as Llama 3 8B has it (32 query heads, 8 key/value heads, d = 128),
    causal, bfloat16, forward and backward."""
    return [
        dict(B=4, H=32, h_kv=8, N=4096, d=128, dtype=torch.bfloat16, is_causal=True, kind="gqa"),
        dict(B=1, H=32, h_kv=8, N=16384, d=128, dtype=torch.bfloat16, is_causal=True, kind="gqa"),
    ]


def decode_shapes() -> list[dict]:
    """One new query against a KV cache (Llama-3-8B-like heads, bfloat16), forward only:
    batch 1 and 8 at a 32k cache, batch 8 at a 4k one."""
    return [
        dict(
            B=batch,
            H=32,
            h_kv=8,
            N=n_cache,
            n_q=1,
            d=128,
            dtype=torch.bfloat16,
            is_causal=False,
            kind="decode",
        )
        for batch, n_cache in ((1, 32768), (8, 32768), (8, 4096))
    ]


# What chapter 06's kernel aims for on an H100/H200 (issue 27), as ratios of speed.
TARGETS = {
    "forward vs SDPA flash (N=4096, d=128, bf16, non-causal)": ("fwd", 1.0),
    "forward vs SDPA flash (N=4096, d=128, bf16, causal)": ("fwd_causal", 1.0),
    "backward vs SDPA flash (N=4096, d=128, bf16, non-causal)": ("bwd", 0.7),
    "backward, deterministic=False, vs SDPA flash (same shape)": ("bwd_atomic", 0.7),
    "decode vs fastest SDPA backend (Nq=1, Nk=32k, B=1, GQA 32/8, d=128, bf16)": ("decode", 1.0),
}


def decode_speedup(data: dict, *, N: int = 32768, B: int = 1) -> dict | None:
    """Decode time of the fastest SDPA backend (and of torch's own choice) over ours."""
    rows = [
        r
        for r in data["results"]
        if r.get("kind") == "decode" and r["N"] == N and r["B"] == B and "error" not in r
    ]
    ours = [r for r in rows if r["impl"] == "flash_attention"]
    theirs = [r for r in rows if r["impl"].startswith("sdpa")]
    if not ours or not theirs:
        return None
    best = min(theirs, key=lambda r: r["fwd_ms"])
    out = {"vs_fastest": best["fwd_ms"] / ours[0]["fwd_ms"], "fastest": best["impl"]}
    auto = [r for r in theirs if r["impl"] == "sdpa_auto"]
    if auto:
        out["vs_sdpa_auto"] = auto[0]["fwd_ms"] / ours[0]["fwd_ms"]
    return out


def check_targets(data: dict) -> list[dict]:
    """Each target of :data:`TARGETS` with the measured ratio (None if not measured) and met."""
    train = speedups(data, N=4096, d=128, dtype="bfloat16", causal=False) or {}
    causal = speedups(data, N=4096, d=128, dtype="bfloat16", causal=True) or {}
    atomic = speedups(data, N=4096, d=128, dtype="bfloat16", ours="flash_attention_atomic_dq")
    measured = dict(
        train,
        fwd_causal=causal.get("fwd"),
        bwd_atomic=(atomic or {}).get("bwd"),
        decode=(decode_speedup(data) or {}).get("vs_fastest"),
    )
    out = []
    for name, (what, goal) in TARGETS.items():
        value = measured.get(what)
        out.append(
            dict(
                target=name, goal=goal, measured=value, met=None if value is None else value >= goal
            )
        )
    return out


def math_is_feasible(
    B: int,
    H: int,
    N: int,
    dtype_bytes: int = 2,
    budget_bytes: float | None = None,
    *,
    n_q: int | None = None,
) -> bool:
    """Whether the math backend's Nq x N matrices (scores, weights, their gradients) fit."""
    if budget_bytes is None:
        budget_bytes = (
            0.5 * torch.cuda.get_device_properties(0).total_memory
            if torch.cuda.is_available()
            else 2**30
        )
    return 4 * B * H * (N if n_q is None else n_q) * N * max(dtype_bytes, 4) <= budget_bytes


__all__ = [
    "TARGETS",
    "attention_flops",
    "autotuned_configs",
    "bench_one",
    "check_targets",
    "decode_shapes",
    "decode_speedup",
    "default_results_dir",
    "gpu_check_grid",
    "gpu_grid",
    "gqa_shapes",
    "load_recorded",
    "make_impl",
    "math_is_feasible",
    "metadata",
    "plot_results",
    "sdpa_backends",
    "speedups",
    "write_results",
]
