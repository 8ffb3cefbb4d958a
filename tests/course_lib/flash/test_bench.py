"""course_lib.flash.bench: one benchmark point measured on the CPU (tiny shapes), the records
it writes and reads, and what it reports about the autotuner.

The FLOP model, the benchmark grids, the speed-ups, the targets and the plot are tested with
the scripts that use them (tests/benchmarks/test_benchmark_flash.py); nothing here asserts
on a time.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from course_lib.flash import bench, launch


def test_default_results_dir_is_found_from_the_checkout_or_a_notebook_folder(tmp_path, monkeypatch):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    for here in (tmp_path, tmp_path / "notebooks"):
        monkeypatch.chdir(here)
        assert bench.default_results_dir() == tmp_path / "benchmarks" / "results"
    elsewhere = tmp_path / "notebooks" / "deeper"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # two levels down: not searched, a path under here
    assert bench.default_results_dir() == elsewhere / "benchmarks" / "results"


def test_sdpa_backends_and_implementations_by_name():
    backends = bench.sdpa_backends()
    assert {"sdpa_flash", "sdpa_efficient", "sdpa_math"} <= set(backends)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 3, 16, generator=g)  # a decode step: 3 new queries
    k, v = (torch.randn(1, 2, 10, 16, generator=g) for _ in "kv")  # GQA: 2 key/value heads
    ref = bench.make_impl("sdpa_math")(q, k, v, True)  # bottom-right causal, enable_gqa
    allowed = torch.ones(3, 10, dtype=torch.bool).tril(10 - 3)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, enable_gqa=True
    )
    torch.testing.assert_close(ref, want)
    torch.testing.assert_close(bench.make_impl("sdpa_auto")(q, k, v, True), want)
    ours = bench.make_impl("flash_attention", decode=True)(q, k, v, True)  # flash_decode
    torch.testing.assert_close(ours, want, atol=1e-5, rtol=1e-4)
    with pytest.raises(KeyError):
        bench.make_impl("sdpa_nope")


def test_bench_one_records_a_training_point():
    rec = bench.bench_one("sdpa_math", 1, 2, 24, 16, torch.float32, True, device="cpu",
                          repeats=1, warmup=0)  # fmt: skip
    assert "error" not in rec, rec
    assert {k: rec[k] for k in ("impl", "kind", "B", "H", "H_kv", "N", "N_q", "d", "dtype",
            "causal")} == dict(impl="sdpa_math", kind="train", B=1, H=2, H_kv=2, N=24, N_q=24,
                               d=16, dtype="float32", causal=True)  # fmt: skip
    for key in ("fwd_ms", "fwd_tflops", "bwd_ms", "bwd_tflops"):
        assert math.isfinite(rec[key]) and rec[key] > 0, key
    # the throughput is the FLOP model over the time, forward and backward
    flops = bench.attention_flops(1, 2, 24, 16, True)
    assert rec["fwd_tflops"] == pytest.approx(flops / rec["fwd_ms"] * 1e-9)
    assert rec["max_abs_err"] < 1e-6 and rec["peak_mem_mib"] is None  # no CUDA: no memory


def test_bench_one_records_a_decode_point_with_our_kernel():
    rec = bench.bench_one("flash_attention", 1, 4, 64, 16, torch.float32, False, device="cpu",
                          repeats=1, warmup=0, h_kv=2, n_q=1, kind="decode")  # fmt: skip
    assert "error" not in rec, rec
    assert (rec["kind"], rec["N_q"], rec["H_kv"]) == ("decode", 1, 2)
    assert "bwd_ms" not in rec  # decoding is forward only
    kv_bytes = 2 * 1 * 2 * 64 * 16 * 4  # K and V read once
    assert rec["kv_gb_per_s"] == pytest.approx(kv_bytes / rec["fwd_ms"] * 1e-6)
    assert rec["max_abs_err"] < 1e-5 and isinstance(rec["configs"], dict)


def test_bench_one_never_raises():
    rec = bench.bench_one("flash_attention", 1, 1, 16, 16, torch.bfloat16, False, device="cpu",
                          repeats=1, warmup=0)  # fmt: skip
    assert rec["error"].startswith("TypeError") and "bfloat16" in rec["error"]
    assert "fwd_ms" not in rec
    assert bench.bench_one("sdpa_nope", 1, 1, 8, 16, torch.float32, False, device="cpu",
                           repeats=1, warmup=0)["error"].startswith("KeyError")  # fmt: skip


def test_math_is_feasible_counts_the_score_matrices():
    # 4 matrices of Nq x N, in 4 bytes at least
    assert bench.math_is_feasible(1, 1, 1024, 2, budget_bytes=4 * 1024 * 1024 * 4)
    assert not bench.math_is_feasible(1, 1, 1024, 2, budget_bytes=4 * 1024 * 1024 * 4 - 1)
    assert bench.math_is_feasible(1, 1, 1024, 8, budget_bytes=4 * 1024 * 1024 * 8)
    assert bench.math_is_feasible(2, 8, 2**20, n_q=1, budget_bytes=4 * 16 * 2**20 * 4)
    assert not bench.math_is_feasible(16, 32, 16384)  # no GPU: a 1 GiB budget


def test_autotuned_configs_name_what_each_tuner_chose(monkeypatch):
    tuners = [
        SimpleNamespace(name="fwd_kernel", best_config="BLOCK_M: 128, BLOCK_N: 64"),
        SimpleNamespace(name="bwd_dq_kernel", best_config=None),  # not launched yet
    ]
    monkeypatch.setattr(launch, "autotuners", lambda: tuners)
    assert bench.autotuned_configs() == {"fwd_kernel": "BLOCK_M: 128, BLOCK_N: 64"}


def test_metadata_says_where_and_with_what_it_ran():
    meta = bench.metadata(dry_run=True)
    assert meta["dry_run"] is True and meta["date"].endswith("UTC")
    assert meta["versions"]["torch"] == torch.__version__
    assert meta["triton_mode"] in ("interpreter", "compiled", "unavailable")
    if not torch.cuda.is_available():
        assert meta["gpu"] is None and meta["cpu"]


def test_written_results_are_read_back_newest_first_and_dry_runs_apart(tmp_path):
    rows = [dict(impl="sdpa_math", N=8)]
    old = bench.write_results(tmp_path / "flash_attention_a.json",
                              dict(date="2026-01-01 10:00 UTC", dry_run=False), rows)  # fmt: skip
    new = bench.write_results(tmp_path / "flash_attention_b.json",
                              dict(date="2026-02-01 10:00 UTC", dry_run=False), rows)  # fmt: skip
    bench.write_results(tmp_path / "flash_attention_dry.json", dict(date="2026-03-01", dry_run=True),
                        rows)  # fmt: skip
    (tmp_path / "flash_attention_broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"meta": {}, "results": []}))
    assert json.loads(old.read_text()) == {"meta": dict(date="2026-01-01 10:00 UTC",
                                                        dry_run=False), "results": rows}  # fmt: skip
    found = bench.load_recorded(tmp_path)
    assert [p.name for p, _ in found] == [new.name, old.name]
    assert found[0][1]["results"] == rows
    with_dry = bench.load_recorded(tmp_path, include_dry_runs=True)
    assert [p.name for p, _ in with_dry][0] == "flash_attention_dry.json"
