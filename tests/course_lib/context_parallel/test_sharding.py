"""course_lib.context_parallel.sharding: which tokens each rank holds (contiguous, zigzag,
striped), and the causal work that gives each rank, counted in tiles."""

from __future__ import annotations

import pytest
import torch

from course_lib.context_parallel import (
    LAYOUTS,
    count_tiles,
    shard,
    shard_positions,
    unshard,
    visible_pairs,
    work_per_rank,
)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_positions_partition_the_sequence_and_unshard_inverts_shard(layout, world_size):
    N = 24
    pos = [shard_positions(N, world_size, r, layout) for r in range(world_size)]
    assert torch.equal(torch.sort(torch.cat(pos)).values, torch.arange(N))
    assert all(len(p) == N // world_size for p in pos)
    x = torch.randn(2, N, 3, generator=torch.Generator().manual_seed(0))
    parts = [shard(x, world_size, r, layout, dim=1) for r in range(world_size)]
    assert all(torch.equal(part, x[:, p]) for part, p in zip(parts, pos))
    assert torch.equal(unshard(parts, layout, dim=1), x)


def test_zigzag_gives_rank_r_chunks_r_and_2P_minus_1_minus_r():
    assert shard_positions(16, 4, 0, "zigzag").tolist() == [0, 1, 14, 15]
    assert shard_positions(16, 4, 3, "zigzag").tolist() == [6, 7, 8, 9]
    assert shard_positions(12, 3, 1, "striped").tolist() == [1, 4, 7, 10]
    assert shard_positions(12, 3, 2).tolist() == [8, 9, 10, 11]  # contiguous by default
    with pytest.raises(ValueError, match="2 \\* world_size chunks.*not divisible by 8"):
        shard_positions(12, 4, 0, "zigzag")
    with pytest.raises(ValueError, match="world_size shards.*not divisible by 5"):
        shard_positions(12, 5, 0)
    with pytest.raises(ValueError, match="unknown layout"):
        shard_positions(12, 4, 0, "diagonal")
    with pytest.raises(ValueError, match="rank must be in 0..3"):
        shard_positions(16, 4, 4)
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        work_per_rank(16, 0)


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
    assert visible_pairs(torch.arange(5), torch.arange(3), is_causal=False) == 15


def test_tiles_follow_the_local_order_and_the_edges():
    """Tiles are cut in the order the rank holds its tokens; ragged edge tiles count too."""
    zig = shard_positions(8, 2, 0, "zigzag")  # [0, 1, 6, 7]
    assert count_tiles(zig, zig, tile=2) == 3  # (0-1, 0-1), (6-7, 0-1), (6-7, 6-7)
    assert count_tiles(torch.arange(5), torch.arange(7), tile=2, is_causal=False) == 3 * 4
    assert count_tiles(torch.arange(3), torch.arange(10, 13), tile=1) == 0  # all in the future
    with pytest.raises(ValueError, match="tile must be a positive"):
        count_tiles(zig, zig, tile=0)
