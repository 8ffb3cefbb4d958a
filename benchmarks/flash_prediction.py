r"""Predict the kernels' speed on an H100/H200 from their compiled code, before any GPU run.

A roofline-style model, one kernel at a time, with every input either read from the code
compiled ahead of time (``results/flash_aot_registers.json``: warps, registers, shared
memory, tensor-core instructions by kind, duplicated warpgroups) or a published hardware
figure, and every assumption a named constant below:

* **Work.** The tile matmuls each pass executes (forward 2, dK/dV 4, dQ 3; the atomic
  dK/dV pass 5), :math:`2\,M N K` FLOPs each over the tiles a program visits (half the key
  tiles when causal), times the duplication factor of the dot's warp layout (a duplicated
  warpgroup computes its rows twice). One ``exp2`` per score element per pass on the
  special-function units, and a few FP32 instructions per score element on the CUDA cores.
* **Rates.** Dense BF16 tensor peak 989 TFLOP/s (132 SMs, 1830 MHz); ``mma.sync`` on Hopper
  reaches about :data:`MMA_SYNC_EFF` of it; 16 ``exp2`` and 128 FP32 lanes per SM per clock;
  HBM 3.35 TB/s (H100 SXM) or 4.8 TB/s (H200).
* **Occupancy and waves.** Programs per SM from registers (64K per SM), shared memory
  (228 KiB per SM) and threads; the grid runs in waves of ``132 x programs_per_SM``, the last
  one partly empty.
* **Overlap.** A Triton kernel without warp specialisation overlaps the softmax (exp2,
  FP32) with the matmuls of other warps only in part: :data:`OVERLAP_PER_WARPGROUP` of it
  for each other warpgroup resident on the SM, at most :data:`OVERLAP_MAX`.
  The tensor cores themselves run at :data:`PIPE_EFF` of peak (address arithmetic, waits).
* **Memory.** Compulsory traffic only (Q, K, V, O, dO, dQ, dK, dV, LSE once each: the
  re-reads of K and V hit the 50 MB L2), plus the atomic dQ additions at
  :data:`ATOMICS_PER_S`; a kernel takes the longer of compute and memory.

Decode is memory-bound: the K/V cache read at :data:`DECODE_BW_EFF` of the HBM bandwidth,
plus two kernel launches. Host work (the Python call) is not modelled: ``gpu_check.py``
reports kernel-only time beside end-to-end time for that reason.

    python benchmarks/flash_prediction.py      # writes results/flash_prediction.json

The constants are estimates, not measurements; the point of the file is that the GPU run
can be held against numbers written down before it, and the model corrected where it is
wrong. ``tests/benchmarks/test_benchmark_flash.py`` checks the model's arithmetic and that the
recorded prediction is the one this script makes from the recorded AOT table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# Hardware (NVIDIA H100 SXM5 datasheet and Hopper whitepaper; H200: the same SMs, faster HBM)
SMS = 132
CLOCK_HZ = 1.83e9
TENSOR_PEAK = 989.4e12  # dense BF16/FP16 FLOP/s with wgmma = 132 SMs x 4096 FLOP/clock x clock
SFU_PER_SM_CLK = 16  # exp2 (MUFU.EX2) per SM per clock
FP32_PER_SM_CLK = 128  # FP32 lanes per SM per clock
REGS_PER_SM = 65536
SMEM_PER_SM = 228 * 1024
THREADS_PER_SM = 2048
HBM = {"H100 SXM": 3.35e12, "H200": 4.8e12}

# Assumptions (estimates, to be corrected by the GPU run)
MMA_SYNC_EFF = 0.62  # mma.sync on Hopper as a share of wgmma's peak
PIPE_EFF = 0.75  # tensor cores busy while a non-warp-specialised Triton loop issues its dots
OVERLAP_PER_WARPGROUP = 0.25  # softmax hidden behind the matmuls of each other warpgroup on the SM
OVERLAP_MAX = 0.5  # ... at most (no warp specialisation, no ping-pong schedule)
FP32_OPS = {"fwd": 4, "dkdv": 5, "dkdv_atomic": 6, "dq": 4}  # per score element and pass
DOTS = {"fwd": 2, "dkdv": 4, "dkdv_atomic": 5, "dq": 3}  # tile matmuls per tile
LAUNCH_S = 3e-6  # one kernel launch, seen from the GPU (back-to-back launches)
ATOMICS_PER_S = 1.0e12  # float32 atomic additions the L2 absorbs per second (red.global.add)
DECODE_BW_EFF = 0.80  # share of the HBM bandwidth a split-K decode sustains


def programs_per_sm(row: dict) -> int:
    """Programs of a kernel one SM holds at once: registers, shared memory, threads."""
    threads = 32 * row["num_warps"]
    regs = math.ceil(row["registers"] / 8) * 8 * threads  # allocated per warp, 8 at a time
    by_regs = REGS_PER_SM // regs
    by_smem = SMEM_PER_SM // (row["shared_bytes"] + 1024)  # 1 KiB reserved per block
    by_threads = THREADS_PER_SM // threads
    return max(0, min(by_regs, by_smem, by_threads, 32))


def duplication(row: dict) -> float:
    """Executed over useful tensor work: the mean copies of the kernel's dots."""
    dots = row.get("dots") or []
    work = [d["M"] * d["N"] for d in dots]
    return sum(w * d["copies"] for w, d in zip(work, dots)) / sum(work) if work else 1.0


def tensor_efficiency(row: dict) -> float:
    """The tensor cores' rate as a share of peak, weighted by the instructions' work."""

    def flops(shape: str) -> int:  # m64n128k16 -> 64 * 128 * 16
        m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
        return m * n * k

    wg = sum(c * flops(s) for s, c in row.get("wgmma", {}).items())
    ms = sum(c * flops(s) for s, c in row.get("mma_sync", {}).items())
    return (wg + MMA_SYNC_EFF * ms) / (wg + ms) if wg + ms else MMA_SYNC_EFF


def kernel_time(kind: str, row: dict, shape: dict, hbm: float) -> dict:
    """Predicted seconds of one pass (``fwd``, ``dkdv``, ``dkdv_atomic``, ``dq``) at ``shape``."""
    B, H, h_kv, n, n_q, d = (shape[k] for k in ("B", "H", "H_kv", "N", "N_q", "d"))
    causal = shape["causal"]
    frac = 0.5 if causal and n_q == n else 1.0  # the share of score tiles visited
    scores = B * H * n_q * n * frac  # score elements per pass
    useful = DOTS[kind] * 2 * scores * d
    executed = useful * duplication(row)
    rows_of_program = row["BLOCK_N"] if kind.startswith("dkdv") else row["BLOCK_M"]
    heads = B * (h_kv if kind.startswith("dkdv") else H)
    programs = heads * math.ceil((n if kind.startswith("dkdv") else n_q) / rows_of_program)
    per_sm = programs_per_sm(row)
    slots = SMS * max(per_sm, 1)
    waves = math.ceil(programs / slots)
    wave_eff = programs / (waves * slots)
    t_tensor = executed / (TENSOR_PEAK * tensor_efficiency(row) * PIPE_EFF)
    t_sfu = scores / (SMS * SFU_PER_SM_CLK * CLOCK_HZ)
    t_fp32 = FP32_OPS[kind] * scores / (SMS * FP32_PER_SM_CLK * CLOCK_HZ)
    warpgroups = max(per_sm, 1) * max(row["num_warps"] // 4, 1)
    overlap = min(OVERLAP_MAX, OVERLAP_PER_WARPGROUP * (warpgroups - 1))
    t_compute = (t_tensor + (1 - overlap) * (t_sfu + t_fp32)) / wave_eff
    elems = {"fwd": 2 * H * n_q + 2 * h_kv * n, "dq": 4 * H * n_q + 2 * h_kv * n,
             "dkdv": 2 * H * n_q + 4 * h_kv * n}[kind.removesuffix("_atomic")]  # fmt: skip
    bytes_ = 2 * B * elems * d + (8 * B * H * n_q * d if kind == "dkdv_atomic" else 0)
    # the atomic dQ: every key tile adds its (query rows x d) share of dQ
    atomics = (n / row["BLOCK_N"]) * B * H * n_q * d * frac if kind == "dkdv_atomic" else 0.0
    t_mem = bytes_ / hbm + atomics / ATOMICS_PER_S
    t = max(t_compute, t_mem) + LAUNCH_S
    return dict(
        seconds=t, programs=programs, programs_per_sm=per_sm, waves=waves, overlap=overlap,
        wave_efficiency=round(wave_eff, 3), duplication=round(duplication(row), 3),
        tensor_efficiency=round(tensor_efficiency(row), 3), tensor_s=t_tensor, exp2_s=t_sfu,
        fp32_s=t_fp32, memory_s=t_mem, bound="memory" if t_mem > t_compute else "compute",
        config={k: row[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")},
    )  # fmt: skip


def _rows(table: dict, arch: int = 90) -> dict:
    """``{(kind, head_dim, variant): [rows]}`` of the AOT table for ``arch``."""
    out: dict = {}
    for r in table["rows"]:
        if r["arch"] != arch:
            continue
        variant = "gqa" if r["groups"] > 1 else ("causal" if r["causal"] else "plain")
        out.setdefault((r["kind"], r["head_dim"], variant), []).append(r)
    return out


def best(kind: str, rows: dict, shape: dict, hbm: float) -> dict:
    """The fastest predicted candidate (what the autotuner should pick) and the default's time."""
    variant = "causal" if shape["causal"] else "plain"
    cands = rows.get((kind, shape["d"], variant)) or []
    if not cands:
        raise KeyError(f"no AOT rows for {kind} d={shape['d']} {variant}: rerun the AOT table")
    timed = [kernel_time(kind, r, shape, hbm) for r in cands]
    choice = min(timed, key=lambda t: t["seconds"])
    return dict(choice, default_seconds=timed[0]["seconds"], candidates=len(timed))


def predict_train(rows: dict, shape: dict, hbm: float) -> list[dict]:
    """Forward and backward (both modes) TFLOP/s at a training shape."""
    from_flops = 4.0 * shape["B"] * shape["H"] * shape["N_q"] * shape["N"] * shape["d"]
    fwd_flops = from_flops * (0.5 if shape["causal"] and shape["N_q"] == shape["N"] else 1.0)
    fwd = best("fwd", rows, shape, hbm)
    # the preprocess (D = rowsum(dO o O)): reads O and dO once, memory-bound
    pre = 2 * 2 * shape["B"] * shape["H"] * shape["N_q"] * shape["d"] / hbm + LAUNCH_S
    out = []
    for mode, kinds in (("deterministic", ("dkdv", "dq")), ("atomic_dq", ("dkdv_atomic",))):
        parts = {k: best(k, rows, shape, hbm) for k in kinds}
        convert = (
            0.0
            if mode == "deterministic"
            else (6 * shape["B"] * shape["H"] * shape["N_q"] * shape["d"] / hbm + LAUNCH_S)
        )  # the fp32 dQ buffer: zeroed, then read and written as bf16
        t_bwd = pre + convert + sum(p["seconds"] for p in parts.values())
        out.append(dict(
            shape=shape, backward=mode,
            predicted=dict(fwd_tflops=fwd_flops / fwd["seconds"] * 1e-12,
                           bwd_tflops=2.5 * fwd_flops / t_bwd * 1e-12,
                           fwd_ms=fwd["seconds"] * 1e3, bwd_ms=t_bwd * 1e3),
            kernels=dict(fwd=fwd, **parts),
        ))  # fmt: skip
    return out


def predict_decode(rows: dict, shape: dict, hbm: float) -> dict:
    """Decode: the cache read once at a share of the bandwidth, plus the merge kernel."""
    kv = 2 * 2 * shape["B"] * shape["H_kv"] * shape["N"] * shape["d"]  # K and V, bf16
    t = kv / (hbm * DECODE_BW_EFF) + 2 * LAUNCH_S
    flops = 4.0 * shape["B"] * shape["H"] * shape["N_q"] * shape["N"] * shape["d"]
    return dict(
        shape=shape,
        predicted=dict(fwd_us=t * 1e6, fwd_tflops=flops / t * 1e-12, kv_gb_per_s=kv / t * 1e-9),
        kernels=dict(decode=dict(bound="memory", kv_bytes=kv)),
    )


def headline_shapes() -> tuple[list[dict], list[dict]]:
    """The shapes gpu_check.py measures first (same keys as its records)."""
    train = [
        dict(kind="train", B=4, H=16, H_kv=16, N=4096, N_q=4096, d=128, dtype="bfloat16",
             causal=c)
        for c in (False, True)
    ] + [
        dict(kind="train", B=1, H=16, H_kv=16, N=16384, N_q=16384, d=128, dtype="bfloat16",
             causal=c)
        for c in (False, True)
    ] + [dict(kind="gqa", B=4, H=32, H_kv=8, N=4096, N_q=4096, d=128, dtype="bfloat16",
              causal=True)]  # fmt: skip
    decode = [
        dict(kind="decode", B=b, H=32, H_kv=8, N=n, N_q=1, d=128, dtype="bfloat16", causal=False)
        for b, n in ((1, 32768), (8, 32768), (8, 4096))
    ]
    return train, decode


def predict(table: dict, gpu: str = "H100 SXM") -> dict:
    rows = _rows(table)
    hbm = HBM[gpu]
    train, decode = headline_shapes()
    points = [p for s in train for p in predict_train(rows, s, hbm)]
    points += [predict_decode(rows, s, hbm) for s in decode]
    constants = {k: v for k, v in globals().items() if k.isupper() and k not in ("ROOT", "RESULTS")}
    return dict(
        meta=dict(
            what="predicted speed of course_lib.flash on an H100/H200 from the AOT table",
            gpu=gpu, triton=table["meta"].get("triton"), aot_table_date=table["meta"].get("date"),
            date=datetime.date.today().isoformat(), constants=constants,
            command="python benchmarks/flash_prediction.py",
        ),
        points=points,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=RESULTS / "flash_aot_registers.json")
    parser.add_argument("--gpu", choices=tuple(HBM), default="H100 SXM")
    parser.add_argument("--out", type=Path, default=RESULTS / "flash_prediction.json")
    args = parser.parse_args(argv)
    data = predict(json.loads(args.table.read_text()), args.gpu)
    for p in data["points"]:
        s, got = p["shape"], p["predicted"]
        what = (f"decode {got['fwd_us']:.1f} us ({got['kv_gb_per_s']:.0f} GB/s)" if s["kind"] ==
                "decode" else f"fwd {got['fwd_tflops']:.0f}, bwd ({p['backward']}) "
                f"{got['bwd_tflops']:.0f} TFLOP/s")  # fmt: skip
        print(f"{s['kind']:6s} B={s['B']} H={s['H']}/{s['H_kv']} N={s['N']} Nq={s['N_q']} "
              f"d={s['d']} causal={int(s['causal'])}: {what}")  # fmt: skip
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
