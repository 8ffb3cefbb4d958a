"""course_lib.context_parallel.workers: the experiments each rank runs.

They run here as rank 0 of a real gloo group of one process, and, for P = 2, as threads of
this process whose Comm passes tensors through queues (tests/support/context_parallel_lab.py);
real launches of 2 and 4 processes are in test_distributed.py.
"""

from __future__ import annotations

import os

import pytest
from context_parallel_lab import current_comm, one_process_group, run_ranks

from course_lib.context_parallel import (
    LAYOUTS,
    ring_comm_bytes,
    ulysses_comm_bytes,
    work_per_rank,
    workers,
)


@pytest.fixture
def group(tmp_path):
    with one_process_group(tmp_path):
        yield


def test_hello_on_one_rank(group):
    h = workers.hello(0, 1)
    assert h == dict(rank=0, world_size=1, pid=os.getpid(), backend="gloo", device="cpu",
                     sum_of_ranks=0.0, received_from=0, bytes_sent=0)  # fmt: skip


def test_run_all_runs_every_call_in_order(group):
    results = workers.run_all(0, 1, [(workers.hello,), (workers.compare_with_one_device,)])
    assert results[0]["rank"] == 0 and results[1]["rank"] == 0
    assert [r["method"] for r in results[1]["runs"]] == ["ring", "ring"]  # the default Config


def test_compare_with_one_device_on_one_rank(group):
    cfg = workers.Config(seq_len=12, num_heads=2, head_dim=4, methods=("ring", "ulysses"),
                         layouts=LAYOUTS, report_ports=True)  # fmt: skip
    res = workers.compare_with_one_device(0, 1, cfg)
    assert len(res["runs"]) == 2 * 2 * len(LAYOUTS)  # causal x methods x layouts
    for run in res["runs"]:
        assert max(run["errors"].values()) < 1e-12, run
        assert run["forward_bytes"] == run["backward_bytes"] == 0  # nothing to send
    assert all(isinstance(p, int) for p in res["ports"])
    with pytest.raises(ValueError, match="unknown method 'flash'"):
        workers.compare_with_one_device(0, 1, workers.Config(methods=("flash",)))


def test_compare_with_one_device_on_two_ranks(monkeypatch):
    """Errors, bytes and tiles as each of two ranks reports them."""
    monkeypatch.setattr(workers, "Comm", current_comm)
    cfg = workers.Config(seq_len=8, num_heads=2, head_dim=4, batch_size=2, tile=2,
                         methods=("ring", "ulysses"), layouts=("contiguous", "zigzag"))  # fmt: skip
    ranks = run_ranks(2, lambda rank, comm: workers.compare_with_one_device(rank, 2, cfg))
    kw = dict(num_heads=2, head_dim=4, batch_size=2, bytes_per_element=8)
    for res in ranks:
        for run in res["runs"]:
            assert max(run["errors"].values()) < 1e-12, run
            formula = ring_comm_bytes if run["method"] == "ring" else ulysses_comm_bytes
            assert run["forward_bytes"] == formula(8, 2, **kw)
            assert run["backward_bytes"] == formula(8, 2, **kw, backward=True)
            assert sum(run["bytes_by_op"].values()) == run["forward_bytes"] + run["backward_bytes"]
    for layout in ("contiguous", "zigzag"):
        ring = [next(r for r in res["runs"] if (r["method"], r["layout"], r["is_causal"])
                     == ("ring", layout, True)) for res in ranks]  # fmt: skip
        assert [sum(r["tiles_per_step"]) for r in ring] == work_per_rank(8, 2, layout, tile=2)
        assert [r["head_tiles"] for r in ring] == [2 * 2 * t for t in work_per_rank(8, 2, layout,
                                                                                     tile=2)]  # fmt: skip


def test_time_ring_reports_each_shard_length(group):
    rows = workers.time_ring(0, 1, [4, 8], num_heads=2, head_dim=4, repeats=1, warmup=0)
    assert [r["shard_len"] for r in rows] == [4, 8] and [r["seq_len"] for r in rows] == [4, 8]
    for r in rows:
        assert set(r) == {"rank", "shard_len", "seq_len", "overlap_s", "serial_s", "compute_s",
                          "comm_s", "bytes_per_forward"}  # fmt: skip
        assert r["bytes_per_forward"] == 0  # one rank: no block to pass on


def test_the_broken_program_fails_on_its_rank():
    with pytest.raises(ValueError, match="rank 1 fails on purpose"):
        workers.fail_on_rank(1, 2, bad_rank=1)


def test_listening_ports_are_numbers():
    ports = workers.listening_ports()
    assert isinstance(ports, list) and ports == sorted(set(ports))
    assert all(isinstance(p, int) and 0 < p < 65536 for p in ports)
