"""benchmarks/flash_attention.py: the CPU dry run end to end, and the FLOP/JSON helpers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.flash import bench

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_writes_json(tmp_path):
    out = tmp_path / "flash_attention_dry.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "flash_attention.py"),
            "--dry-run",
            "--no-autotune",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    meta = data["meta"]
    assert meta["dry_run"] is True and meta["versions"]["torch"] and meta["date"]
    assert meta["autotune"] is False and "2.5x" in meta["flop_convention"]
    impls = {r["impl"] for r in data["results"]}
    assert impls == {"flash_attention", "sdpa_math"}
    for r in data["results"]:
        assert "error" not in r, r
        assert r["fwd_ms"] > 0 and r["bwd_ms"] > 0
        assert r["max_abs_err"] < 1e-5  # float32 through the interpreter vs the math path
    # Dry runs are never mistaken for recorded GPU results.
    assert bench.load_recorded(tmp_path) == []
    assert len(bench.load_recorded(tmp_path, include_dry_runs=True)) == 1


def test_without_gpu_the_real_run_refuses_politely():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "flash_attention.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "--dry-run" in proc.stderr


def test_flop_model_and_grid():
    # 4 B H N^2 d for the two matmuls; causal halves it; backward counts 2.5x.
    assert bench.attention_flops(1, 1, 10, 8, False) == 4 * 100 * 8
    assert bench.attention_flops(2, 3, 10, 8, True) == 2 * 3 * 4 * 100 * 8 / 2
    assert bench.attention_flops(1, 1, 10, 8, False, "bwd") == 2.5 * 3200
    grid = bench.gpu_grid()
    assert {g["N"] for g in grid} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {g["d"] for g in grid} == {64, 128}
    assert all(g["B"] * g["N"] == 16384 and g["H"] * g["d"] == 2048 for g in grid)


def test_speedups_and_plot(tmp_path):
    rows = [
        dict(
            impl=i,
            N=4096,
            d=128,
            dtype="bfloat16",
            causal=False,
            B=4,
            H=16,
            fwd_tflops=f,
            bwd_tflops=b,
        )
        for i, f, b in (("flash_attention", 300.0, 150.0), ("sdpa_flash", 400.0, 200.0))
    ]
    data = {"meta": {"gpu": "Test GPU", "date": "2026-01-01"}, "results": rows}
    s = bench.speedups(data)
    assert s == {"fwd": 0.75, "bwd": 0.75}
    assert bench.speedups(data, N=1024) is None
    import matplotlib

    matplotlib.use("Agg")
    ax = bench.plot_results(data)
    assert "Test GPU" in ax[0].figure._suptitle.get_text()
