"""course_lib.context_parallel.processes: choosing a backend, joining and leaving a process
group, what each spawned rank runs and reports, and stopping the ranks.

Everything here runs in the test's own process (a gloo group of one process at most);
launches of real processes, with their clean teardown, are in test_distributed.py.
"""

from __future__ import annotations

import os
import pickle
import sys
from multiprocessing import Pipe

import pytest
import torch
import torch.distributed as dist

from course_lib.context_parallel import (
    device,
    init_from_env,
    init_process_group,
    launch,
    pick_backend,
    processes,
    teardown,
)


def test_pick_backend_wants_a_gpu_per_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    assert pick_backend(2) == "nccl"
    assert pick_backend(3) == "gloo"  # NCCL cannot put two ranks on one GPU
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    assert pick_backend(1) == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    assert pick_backend(1) == "gloo"


def test_outside_a_group_the_device_is_the_cpu_and_teardown_is_harmless():
    assert not dist.is_initialized()
    assert device() == torch.device("cpu")
    teardown()  # nothing to leave
    assert not dist.is_initialized()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux names its loopback lo")
def test_joining_on_one_machine_talks_over_the_loopback(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "unset")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    dev = init_process_group(0, 1, init_method=(tmp_path / "rv").as_uri(), backend="gloo",
                             single_machine=True)  # fmt: skip
    try:
        assert dev == torch.device("cpu") and dist.get_backend() == "gloo"
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
        assert os.environ["GLOO_SOCKET_IFNAME"].startswith("lo")
    finally:
        teardown()
    assert not dist.is_initialized()


def test_a_chosen_network_interface_is_kept(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **kw: calls.append((a, kw)))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    init_process_group(0, 2, init_method="file:///x", backend="gloo", single_machine=True)
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7"
    [(args, kw)] = calls
    assert args == ("gloo",) and kw["rank"] == 0 and kw["world_size"] == 2
    assert kw["init_method"] == "file:///x" and kw["timeout"].total_seconds() == 120


def test_init_from_env_reads_what_torchrun_sets(monkeypatch):
    seen = {}

    def fake_init(rank, world_size, **kw):
        seen.update(kw, rank=rank, world_size=world_size)
        return torch.device("cpu")

    monkeypatch.setattr(processes, "init_process_group", fake_init)
    monkeypatch.setattr(processes, "pick_backend", lambda n: f"backend for {n}")
    for name, value in dict(RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4").items():
        monkeypatch.setenv(name, value)
    assert init_from_env() == (3, 8, torch.device("cpu"))
    assert seen == dict(rank=3, world_size=8, init_method="env://", backend="backend for 4",
                        timeout_s=600.0, local_rank=1)  # fmt: skip
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    init_from_env(backend="gloo", timeout_s=5)
    assert seen["local_rank"] == 3 and seen["backend"] == "gloo" and seen["timeout_s"] == 5


def test_launch_refuses_functions_a_child_cannot_import():
    def local(rank, world_size):
        return rank

    with pytest.raises(ValueError, match="cannot import it"):
        launch(local, 2)
    with pytest.raises(ValueError, match="cannot import it"):
        launch(lambda rank, world_size: rank, 2)
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        launch(_square_of_rank, 0)


def _square_of_rank(rank, world_size, offset):
    return {"value": (rank + offset) ** 2, "world_size": world_size}


def _fails(rank, world_size):
    raise KeyError("no such thing")


def _run_worker(fn, init_file, args=()):
    reader, writer = Pipe(duplex=False)
    processes._worker(fn, 0, 1, str(init_file), "gloo", writer, args, 1)
    report = pickle.loads(reader.recv_bytes())
    reader.close()
    return report


def test_a_worker_joins_runs_reports_and_leaves(tmp_path, monkeypatch):
    """What each spawned process runs, here in this process as rank 0 of 1: the result
    goes back pickled; a failure goes back with its traceback; the group is left."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # restored afterwards
    threads = torch.get_num_threads()
    ok, payload = _run_worker(_square_of_rank, tmp_path / "first", (2,))
    assert ok and pickle.loads(payload) == {"value": 4, "world_size": 1}
    assert not dist.is_initialized()
    ok, payload = _run_worker(_fails, tmp_path / "second")
    assert not ok and b"KeyError: 'no such thing'" in payload and b"Traceback" in payload
    assert not dist.is_initialized()
    torch.set_num_threads(threads)


class _Stubborn:
    """A process that ignores SIGTERM (is_alive until killed)."""

    def __init__(self, obeys_terminate):
        self.alive, self.obeys, self.log = True, obeys_terminate, []

    def is_alive(self):
        return self.alive

    def terminate(self):
        self.log.append("terminate")
        self.alive = not self.obeys

    def kill(self):
        self.log.append("kill")
        self.alive = False

    def join(self, timeout=None):
        self.log.append("join")


def test_stop_terminates_then_kills_what_is_left():
    polite, stubborn, done = _Stubborn(True), _Stubborn(False), _Stubborn(True)
    done.alive = False
    processes._stop([polite, stubborn, done])
    assert polite.log == ["terminate", "join"]
    assert stubborn.log == ["terminate", "join", "kill", "join"]
    assert done.log == ["join"] and not any(p.alive for p in (polite, stubborn, done))
