"""benchmarks/context_parallel_overlap.py: skips cleanly without GPUs; the CPU smoke run
goes through the whole script (two gloo processes) and writes well-formed JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script():
    return load_script("benchmarks/context_parallel_overlap.py")


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine can run the benchmark")
def test_without_two_gpus_it_skips_and_writes_nothing(capsys):
    script = _script()
    before = set(script.RESULTS_DIR.glob("context_parallel_overlap_*.json"))
    assert script.main([]) == 0
    assert "skipping (nothing written)" in capsys.readouterr().out
    assert set(script.RESULTS_DIR.glob("context_parallel_overlap_*.json")) == before


@pytest.mark.slow
def test_cpu_smoke_run_writes_json(tmp_path, capsys):
    from course_lib.context_parallel import ring_comm_bytes

    out = tmp_path / "overlap.json"
    assert _script().main(["--cpu-smoke", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["meta"]["cpu_smoke"] is True and data["meta"]["backend"] == "gloo"
    assert [r["shard_len"] for r in data["results"]] == [8, 16]
    for r in data["results"]:
        assert all(r[k] > 0 for k in ("overlap_s", "serial_s", "compute_s", "comm_s"))
        assert r["bytes_per_forward"] == ring_comm_bytes(r["seq_len"], 2, num_heads=2, head_dim=8)
    assert "hidden" in capsys.readouterr().out
