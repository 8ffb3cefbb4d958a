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
    # decode: one query against N keys, causal or not the same work
    assert bench.attention_flops(1, 1, 10, 8, True, n_q=1) == 4 * 10 * 8
    check = bench.gpu_check_grid()
    assert {g["N"] for g in check} == {1024, 4096, 16384} and len(check) == 24
    assert all(g["B"] * g["N"] == 16384 and g["H"] * g["d"] == 2048 for g in check)
    assert all(s["H"] == 32 and s["h_kv"] == 8 for s in bench.gqa_shapes() + bench.decode_shapes())
    assert any(s["N"] == 32768 and s["n_q"] == 1 and s["B"] == 1 for s in bench.decode_shapes())
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


def _rows(ours_fwd, ours_bwd, theirs_fwd, theirs_bwd, ours_dec_ms, theirs_dec_ms):
    train = [
        dict(impl=i, kind="train", N=4096, d=128, dtype="bfloat16", causal=False, B=4, H=16,
             fwd_tflops=f, bwd_tflops=b)
        for i, f, b in (("flash_attention", ours_fwd, ours_bwd), ("sdpa_flash", theirs_fwd, theirs_bwd))
    ]  # fmt: skip
    dec = [
        dict(impl=i, kind="decode", N=32768, B=1, fwd_ms=ms)
        for i, ms in (("flash_attention", ours_dec_ms), ("sdpa_flash", theirs_dec_ms),
                      ("sdpa_auto", theirs_dec_ms * 1.5))
    ]  # fmt: skip
    return {"meta": {}, "results": train + dec}


def test_targets_are_judged_on_the_headline_shapes():
    met = bench.check_targets(_rows(360.0, 150.0, 400.0, 240.0, 0.05, 0.06))
    assert [t["met"] for t in met] == [True, True, True]
    assert abs(met[0]["measured"] - 0.9) < 1e-12 and abs(met[2]["measured"] - 1.2) < 1e-12
    missed = bench.check_targets(_rows(300.0, 100.0, 400.0, 240.0, 0.08, 0.06))
    assert [t["met"] for t in missed] == [False, False, False]
    assert bench.decode_speedup(_rows(1, 1, 1, 1, 0.05, 0.06))["fastest"] == "sdpa_flash"
    none = bench.check_targets({"meta": {}, "results": []})
    assert all(t["measured"] is None and t["met"] is None for t in none)


def test_gpu_check_dry_run_end_to_end(tmp_path):
    """benchmarks/gpu_check.py --dry-run: tests, benchmark (training, GQA and decode shapes,
    every SDPA backend torch has, errors recorded not raised), targets, JSON."""
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for step in ("1. correctness", "2. speed and memory", "3. targets", "wrote"):
        assert step in proc.stdout
    data = json.loads(out.read_text())
    meta = data["meta"]
    assert meta["dry_run"] is True and meta["versions"]["torch"] and meta["date"]
    assert meta["tests"]["exit_code"] == 0 and "passed" in meta["tests"]["runs"][0]["summary"]
    assert {t["target"] for t in meta["targets"]} == set(bench.TARGETS)
    kinds = {(r["impl"], r["kind"]) for r in data["results"]}
    assert {("flash_attention", k) for k in ("train", "gqa", "decode")} <= kinds
    assert {r["impl"] for r in data["results"]} >= {"flash_attention", "sdpa_math", "sdpa_auto"}
    ours = [r for r in data["results"] if r["impl"] == "flash_attention"]
    assert all("error" not in r and r["max_abs_err"] < 1e-5 for r in ours), ours
    assert all("kv_gb_per_s" in r for r in ours if r["kind"] == "decode")
    assert all("bwd_tflops" in r for r in ours if r["kind"] != "decode")
    assert bench.load_recorded(tmp_path) == []  # a dry run is never taken for GPU results


def test_gpu_check_without_a_gpu_refuses_politely():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--skip-tests"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "--dry-run" in proc.stderr
