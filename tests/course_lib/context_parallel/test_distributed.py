"""course_lib.context_parallel: the merge, the layouts, the formulas, and real process groups.

The first half tests pure functions (no processes). The second half starts real
``torch.distributed`` process groups (gloo on the CPU) with P = 2 and P = 4, checks ring
attention and Ulysses (forward and gradients, causal and not, three layouts) against
attention on one device, checks that the bytes each rank sent equal the formulas, and
that nothing outlives a launch: no child process, no listening port, no temporary folder.

Each spawned process imports torch (seconds on a 2-core machine), so one launch runs every
check for its P (``workers.run_all``); the P = 4 launch is marked ``slow`` (``make test``
runs it, ``make unit`` skips it).
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import psutil
import pytest
import torch
import torch.nn.functional as F

from course_lib.context_parallel import (
    LAYOUTS,
    WorkerError,
    all_to_all_head_to_seq,
    all_to_all_seq_to_head,
    block_attention,
    block_attention_backward,
    causal_mask_from_positions,
    count_tiles,
    launch,
    merge_attention,
    merge_many,
    ring_comm_bytes,
    ring_step,
    shard,
    shard_positions,
    simulate_ring_attention,
    ulysses_comm_bytes,
    unshard,
    visible_pairs,
    work_per_rank,
    workers,
)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --------------------------------------------------------------------------- the merge


def test_two_halves_merge_into_full_attention():
    q, k, v = _randn(2, 3, 10, 8, seed=1), _randn(2, 3, 16, 8, seed=2), _randn(2, 3, 16, 5)
    out_a, lse_a = block_attention(q, k[..., :7, :], v[..., :7, :])
    out_b, lse_b = block_attention(q, k[..., 7:, :], v[..., 7:, :])
    out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
    ref = F.scaled_dot_product_attention(q, k, v)
    ref_lse = torch.logsumexp(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(out, ref, atol=1e-13, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=1e-13, rtol=0)


def test_merge_is_order_free_and_matches_flash_reference():
    from course_lib.flash import flash_attention_reference

    q, k, v = _randn(1, 2, 12, 4, seed=3), _randn(1, 2, 20, 4, seed=4), _randn(1, 2, 20, 4)
    parts = [
        block_attention(q, k[..., i : i + 5, :], v[..., i : i + 5, :]) for i in range(0, 20, 5)
    ]
    ref_out, ref_lse = flash_attention_reference(q, k, v, block_size=(4, 5))
    for order in ([0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 1, 0]):
        out, lse = merge_many([parts[i][0] for i in order], [parts[i][1] for i in order])
        torch.testing.assert_close(out, ref_out, atol=1e-13, rtol=0)
        torch.testing.assert_close(lse, ref_lse.double(), atol=1e-13, rtol=0)


def test_a_fully_masked_part_changes_nothing_and_never_makes_nan():
    q, k, v = _randn(4, 3, seed=5), _randn(6, 3, seed=6), _randn(6, 2, seed=7)
    nothing = torch.zeros(4, 6, dtype=torch.bool)
    out_0, lse_0 = block_attention(q, k, v, mask=nothing)
    assert torch.equal(out_0, torch.zeros(4, 2, dtype=torch.float64))
    assert torch.isinf(lse_0).all() and (lse_0 < 0).all()
    out_1, lse_1 = block_attention(q, k, v)
    for merged in (
        merge_attention(out_0, lse_0, out_1, lse_1),
        merge_attention(out_1, lse_1, out_0, lse_0),
    ):
        torch.testing.assert_close(merged[0], out_1, atol=0, rtol=0)
        torch.testing.assert_close(merged[1], lse_1, atol=0, rtol=0)
    out, lse = merge_attention(out_0, lse_0, out_0, lse_0)  # nothing seen anywhere
    assert not out.isnan().any() and torch.equal(out, out_0) and torch.isinf(lse).all()


def test_merge_survives_huge_log_sum_exps():
    out_a, out_b = _randn(3, 4, seed=8), _randn(3, 4, seed=9)
    lse_a = torch.tensor([1000.0, -1000.0, 5.0], dtype=torch.float64)
    lse_b = lse_a + torch.tensor([0.0, 1.0, -800.0], dtype=torch.float64)
    out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
    w_b = torch.sigmoid(lse_b - lse_a)  # = e^{L_b} / (e^{L_a} + e^{L_b})
    torch.testing.assert_close(out, (1 - w_b)[:, None] * out_a + w_b[:, None] * out_b)
    torch.testing.assert_close(lse, torch.logaddexp(lse_a, lse_b))


def test_merge_names_mismatched_shapes():
    with pytest.raises(ValueError, match="trailing dimension of 1"):
        merge_attention(_randn(3, 4), _randn(3, 1), _randn(3, 4), _randn(3, 1))
    with pytest.raises(ValueError, match="same shapes"):
        merge_attention(_randn(3, 4), _randn(3), _randn(2, 4), _randn(2))


def test_ring_step_from_the_empty_state_is_block_attention():
    q, k, v = _randn(5, 4, seed=10), _randn(5, 4, seed=11), _randn(5, 4, seed=12)
    out, lse = ring_step(
        q,
        k,
        v,
        torch.zeros(5, 4, dtype=torch.float64),
        torch.full((5,), -math.inf, dtype=torch.float64),
    )
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-14, rtol=0)


def test_block_backward_with_the_global_lse_sums_to_autograd():
    """Per-block gradients, each computed with the *final* O and LSE, add up exactly."""
    P, N = 4, 16
    q, k, v, do = (_randn(1, 2, N, 4, seed=s) for s in (13, 14, 15, 16))
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
    ref.backward(do)
    out = ref.detach()
    lse = torch.logsumexp(
        (q @ k.transpose(-2, -1) / 2).masked_fill(
            ~causal_mask_from_positions(torch.arange(N), torch.arange(N)), -math.inf
        ),
        dim=-1,
    )
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for src in range(P):  # zigzag key blocks, all queries
        pos = shard_positions(N, P, src, "zigzag")
        mask = causal_mask_from_positions(torch.arange(N), pos)
        a, b, c = block_attention_backward(
            q, k[..., pos, :], v[..., pos, :], out, lse, do, mask=mask
        )
        dq += a
        dk[..., pos, :] += b
        dv[..., pos, :] += c
    for got, want in zip((dq, dk, dv), (qa.grad, ka.grad, va.grad)):
        torch.testing.assert_close(got, want, atol=1e-13, rtol=0)


# --------------------------------------------------------------------------- the layouts


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_positions_partition_the_sequence_and_unshard_inverts_shard(layout, world_size):
    N = 24
    pos = [shard_positions(N, world_size, r, layout) for r in range(world_size)]
    assert torch.equal(torch.sort(torch.cat(pos)).values, torch.arange(N))
    x = _randn(2, N, 3)
    parts = [shard(x, world_size, r, layout, dim=1) for r in range(world_size)]
    assert torch.equal(unshard(parts, layout, dim=1), x)


def test_zigzag_gives_rank_r_chunks_r_and_2P_minus_1_minus_r():
    assert shard_positions(16, 4, 0, "zigzag").tolist() == [0, 1, 14, 15]
    assert shard_positions(16, 4, 3, "zigzag").tolist() == [6, 7, 8, 9]
    assert shard_positions(12, 3, 1, "striped").tolist() == [1, 4, 7, 10]
    with pytest.raises(ValueError, match="2 \\* world_size chunks.*not divisible by 8"):
        shard_positions(12, 4, 0, "zigzag")
    with pytest.raises(ValueError, match="unknown layout"):
        shard_positions(12, 4, 0, "diagonal")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_simulated_ring_equals_one_device(layout, is_causal, world_size):
    q, k, v = _randn(2, 2, 24, 8, seed=17), _randn(2, 2, 24, 8, seed=18), _randn(2, 2, 24, 8)
    out, lse, tiles = simulate_ring_attention(
        q, k, v, world_size, is_causal=is_causal, layout=layout
    )
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, ref, atol=1e-13, rtol=0)
    assert len(tiles) == world_size and all(len(t) == world_size for t in tiles)


def test_plain_split_is_unbalanced_and_zigzag_is_not():
    P = 4
    steps = work_per_rank(64, P, "contiguous", tile=64 // P)  # one tile = one ring step
    assert steps == [1, 2, 3, 4]  # the last rank works P times as many steps as the first
    pairs = work_per_rank(64, P, "contiguous")  # single (query, key) pairs
    n = 64 // P  # rank 0: n(n+1)/2 pairs; rank P-1: (P-1) n^2 more; ratio -> 2P - 1
    assert pairs[-1] / pairs[0] == pytest.approx(1 + 2 * (P - 1) * n / (n + 1))
    for layout in ("zigzag",):
        assert len(set(work_per_rank(64, P, layout))) == 1
        assert len(set(work_per_rank(64, P, layout, tile=8))) == 1
    striped = work_per_rank(64, P, "striped")
    assert max(striped) / min(striped) < 1.1
    assert sum(pairs) == sum(striped) == 64 * 65 // 2  # the same triangle, split differently
    full = work_per_rank(64, P, "contiguous", is_causal=False, tile=4)
    assert full == [64] * 4


def test_counted_tiles_match_chapter_06_on_one_rank():
    from course_lib.checks.ch06 import causal_tiles_reference

    for n, tile in ((64, 16), (60, 8), (37, 5)):
        pos = torch.arange(n)
        assert count_tiles(pos, pos, tile=tile) == causal_tiles_reference(n, tile, tile)
    assert visible_pairs(torch.arange(5), torch.arange(5)) == 15


# --------------------------------------------------------------------------- Ulysses, formulas


def test_all_to_all_simulation_is_a_head_split_and_inverts():
    P, B, H, n, d = 4, 2, 8, 3, 5
    xs = [_randn(B, H, n, d, seed=r) for r in range(P)]
    ys = all_to_all_seq_to_head(xs)
    assert [tuple(y.shape) for y in ys] == [(B, H // P, P * n, d)] * P
    full = torch.cat(xs, dim=2)  # (B, H, N, d) every token, every head
    for j, y in enumerate(ys):
        assert torch.equal(y, full[:, j * 2 : (j + 1) * 2])
    back = all_to_all_head_to_seq(ys)
    assert all(torch.equal(a, b) for a, b in zip(back, xs))
    with pytest.raises(ValueError, match="H = 6 is not divisible by 4"):
        all_to_all_seq_to_head([_randn(1, 6, 2, 2)] * 4)


def test_communication_formulas():
    kw = dict(num_heads=8, head_dim=64, batch_size=2, bytes_per_element=2)
    N, P = 4096, 4
    shard_bytes = 2 * 8 * (N // P) * 64 * 2
    assert ring_comm_bytes(N, P, **kw) == 2 * (P - 1) * shard_bytes
    assert ring_comm_bytes(N, P, **kw, backward=True) == (
        2 * (P - 1) * shard_bytes + 2 * P * shard_bytes * 2
    )
    assert ulysses_comm_bytes(N, P, **kw) == 4 * shard_bytes * (P - 1) // P
    assert ulysses_comm_bytes(N, P, **kw, backward=True) == ulysses_comm_bytes(N, P, **kw)
    for P in (2, 4, 8):  # ring sends P/2 times more than Ulysses (H = H_kv)
        assert ring_comm_bytes(N, P, **kw) == P // 2 * ulysses_comm_bytes(N, P, **kw)
    assert ring_comm_bytes(N, 1, **kw) == ulysses_comm_bytes(N, 1, **kw) == 0
    gqa = dict(kw, num_kv_heads=2)  # K, V with 2 heads: the ring sends 4x less
    assert ring_comm_bytes(N, 2, **gqa) * 4 == ring_comm_bytes(N, 2, **kw)
    with pytest.raises(ValueError, match="divisible by world_size = 16"):
        ulysses_comm_bytes(N, 16, **kw)


def test_launch_refuses_functions_a_child_cannot_import():
    def local(rank, world_size):
        return rank

    with pytest.raises(ValueError, match="cannot import it"):
        launch(local, 2)
    with pytest.raises(ValueError, match="cannot import it"):
        launch(lambda rank, world_size: rank, 2)


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
