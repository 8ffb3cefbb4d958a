"""course_lib.context_parallel across real processes: launch, the process group, ring
attention and Ulysses together.

Starts real ``torch.distributed`` process groups (gloo on the CPU) with P = 2 and P = 4,
checks ring attention and Ulysses (forward and gradients, causal and not, three layouts)
against attention on one device, checks that the bytes each rank sent equal the formulas,
and that nothing outlives a launch, a failing rank or a timeout: no child process, no
listening port, no temporary folder. (Each module's unit tests are in its own file; these
are the runs that cross them.)

Each spawned process imports torch (seconds on a 2-core machine), so one launch runs every
check for its P (``workers.run_all``); the P = 4 launch is marked ``slow`` (``make test``
runs it, ``make unit`` skips it).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psutil
import pytest

from course_lib.context_parallel import (
    LAYOUTS,
    WorkerError,
    launch,
    ring_comm_bytes,
    ulysses_comm_bytes,
    work_per_rank,
    workers,
)

# --------------------------------------------------------------------------- process groups


def _is_resource_tracker(proc: psutil.Process) -> bool:
    """Python's multiprocessing starts one helper per interpreter on the first spawn, and it
    lives as long as this process: it is not something a launch leaked."""
    try:
        return "resource_tracker" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if not _is_resource_tracker(p)}


def _still_listening(ports: dict[int, int]) -> set[int]:
    """Which of the ranks' ports (port -> rank pid) are still listening, and not by a
    process that merely reused the number (a listener we cannot attribute counts too)."""
    return {
        c.laddr.port
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
        and c.laddr.port in ports
        and (c.pid is None or c.pid == ports[c.laddr.port])
    }


def _temp_folders() -> set[str]:
    """launch's rendezvous folders, named after the launching process."""
    return {p.name for p in Path(tempfile.gettempdir()).glob(f"course_cp_{os.getpid()}_*")}


@pytest.fixture
def clean_teardown():
    """Fails the test if a launch leaves a child process, an open port or a temp folder."""
    before_children = _children()
    ports_seen: dict[int, int] = {}  # port -> pid of the rank that listened on it
    yield ports_seen
    assert _children() - before_children == set(), "a launched process outlived the launch"
    assert _temp_folders() == set(), "the rendezvous folder was not removed"
    still = _still_listening(ports_seen)
    assert not still, f"ports {sorted(still)} the ranks listened on are still open"
    mine = [
        c for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    ]
    assert not mine, f"the launching process itself listens: {mine}"


def _check_everything(world_size: int, ports_seen: dict[int, int]) -> None:
    H = 4
    cfg = workers.Config(
        seq_len=8 * world_size,
        num_heads=H,
        head_dim=4,
        batch_size=2,
        tile=2,
        methods=("ring", "ulysses"),
        layouts=LAYOUTS,
        report_ports=True,
    )
    p2p = workers.Config(
        seq_len=4 * world_size,
        num_heads=H,
        head_dim=4,
        methods=("ulysses",),
        causal=(True,),
        all_to_all_impl="p2p",
    )
    results = launch(
        workers.run_all,
        world_size,
        [
            (workers.hello,),
            (workers.compare_with_one_device, cfg),
            (workers.compare_with_one_device, p2p),
        ],
        timeout=240,
    )
    hellos, checks, p2p_checks = zip(*results)

    # the process group: distinct processes, an all-reduce, a ring shift
    assert [h["rank"] for h in hellos] == list(range(world_size))
    assert len({h["pid"] for h in hellos}) == world_size
    assert all(
        h["backend"] == "gloo" and h["sum_of_ranks"] == world_size * (world_size - 1) / 2
        for h in hellos
    )
    assert [h["received_from"] for h in hellos] == [(r - 1) % world_size for r in range(world_size)]
    for res in checks:
        ports_seen.update(dict.fromkeys(res["ports"], res["pid"]))
    assert ports_seen, "the ranks reported no listening ports: the port check would be empty"

    expected_runs = 2 * 2 * len(LAYOUTS)  # methods x causal x layouts
    assert all(len(res["runs"]) == expected_runs for res in checks)
    for config, group in ((cfg, checks), (p2p, p2p_checks)):
        kw = dict(num_heads=H, head_dim=4, batch_size=config.batch_size, bytes_per_element=8)
        for res in group:
            for run in res["runs"]:
                where = (
                    f"rank {res['rank']}: {run['method']} {run['layout']} "
                    f"causal={run['is_causal']} all_to_all={config.all_to_all_impl}"
                )
                # the output and every gradient equal attention on one device
                assert max(run["errors"].values()) < 1e-12, (where, run["errors"])
                # the bytes sent equal the formulas, forward and backward
                formula = ring_comm_bytes if run["method"] == "ring" else ulysses_comm_bytes
                assert run["forward_bytes"] == formula(config.seq_len, world_size, **kw), where
                assert run["backward_bytes"] == formula(
                    config.seq_len, world_size, **kw, backward=True
                ), where

    def ring_tiles(res, layout):
        return next(
            r["tiles_per_step"]
            for r in res["runs"]
            if r["method"] == "ring" and r["layout"] == layout and r["is_causal"]
        )

    # the tiles each rank counted during its causal ring pass equal the analytic count ...
    for layout in LAYOUTS:
        assert [sum(ring_tiles(res, layout)) for res in checks] == work_per_rank(
            cfg.seq_len, world_size, layout, tile=cfg.tile
        )
    # ... and with the plain split, rank r has work in r + 1 of its P steps
    assert [sum(t > 0 for t in ring_tiles(res, "contiguous")) for res in checks] == list(
        range(1, world_size + 1)
    )


@pytest.mark.slow
def test_two_ranks_equal_one_device_and_tear_down_cleanly(clean_teardown):
    _check_everything(2, clean_teardown)


@pytest.mark.slow
def test_four_ranks_equal_one_device_and_tear_down_cleanly(clean_teardown):
    _check_everything(4, clean_teardown)


@pytest.mark.slow
def test_a_failing_rank_is_reported_and_the_waiting_ones_are_stopped(clean_teardown):
    with pytest.raises(WorkerError, match=r"(?s)rank 1 of 2 failed.*fails on purpose"):
        launch(workers.fail_on_rank, 2, 1, timeout=240)


@pytest.mark.slow
def test_a_timeout_stops_every_process(clean_teardown):
    """0.5 s is shorter than starting Python and importing torch: the launch times out
    while the children are still starting, and they are stopped."""
    with pytest.raises(TimeoutError, match="did not finish within 0.5 s"):
        launch(workers.hello, 2, timeout=0.5)
