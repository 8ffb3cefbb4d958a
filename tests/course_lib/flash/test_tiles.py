"""course_lib.flash.tiles: the launch configurations as data, and the rule that picks them.

No GPU is needed: kernel_config is asked for a CUDA device with the interpreter off, and
the architecture is given (sm_90 is the default without a GPU).
"""

from __future__ import annotations

import pytest
import torch

import course_lib.flash as flash
from course_lib.flash import tiles
from course_lib.flash.tiles import GPU_TILES, SMALL_TILES, Tile, gpu_tiles, shared_estimate

KINDS = {"fwd", "dkdv", "dkdv_atomic", "dq", "decode"}


def test_a_tile_reads_as_triton_launch_options():
    t = Tile(128, 64, 8, 3)
    assert dict(t) == {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    assert list(t) == ["BLOCK_M", "BLOCK_N", "num_warps", "num_stages"] and len(t) == 4
    assert t["BLOCK_N"] == 64 and {**t}["num_stages"] == 3
    with pytest.raises(KeyError):
        t["block_m"]  # the dataclass field is not a launch option
    assert Tile(16, 32) == Tile(16, 32, 4, 2)  # defaults: 4 warps, 2 stages
    with pytest.raises(AttributeError):
        t.block_m = 64  # frozen: a table entry cannot be changed by accident


def test_gpu_tiles_picks_the_row_by_architecture_and_head_dim():
    assert gpu_tiles(64) is GPU_TILES[(90, 64)]
    assert gpu_tiles(48, 100) is GPU_TILES[(90, 64)]  # newer than Hopper: sm_90's tiles
    assert gpu_tiles(65, 90) is GPU_TILES[(90, 128)]
    assert gpu_tiles(128, 86) is GPU_TILES[(80, 128)]  # an RTX 30xx: sm_80's
    assert all(set(row) == KINDS for row in GPU_TILES.values())
    assert set(SMALL_TILES) == KINDS


def test_shared_estimate_counts_resident_and_streamed_tiles():
    fwd = Tile(128, 64, 8, 3)  # d = 128: Q resident, K and V streamed over 3 stages
    assert shared_estimate("fwd", fwd, 128) == 2 * (128 * 128 + 3 * 2 * 64 * 128) + 1024
    assert shared_estimate("fwd", fwd, 100) == shared_estimate("fwd", fwd, 128)  # padded to 128
    assert shared_estimate("fwd", fwd, 128, elem_bytes=4) > shared_estimate("fwd", fwd, 128)
    dkdv = Tile(32, 128, 8, 2)  # K, V resident; Q, dO streamed; LSE and D per query row
    plain = 2 * (2 * 128 * 64 + 2 * 2 * 32 * 64) + 2 * 8 * 32 + 1024
    assert shared_estimate("dkdv", dkdv, 64) == plain
    # the atomic pass also stages K in the dQ product's layout, and dS^T
    assert shared_estimate("dkdv_atomic", dkdv, 64) == plain + 2 * (128 * 64 + 128 * 32)
    with pytest.raises(KeyError):
        shared_estimate("merge", fwd, 64)


def test_kernel_config_is_gpu_sized_on_cuda():
    for d in (64, 128):
        cfg = flash.kernel_config(d, "cuda", interpreted=False)
        assert set(cfg) == KINDS
        for kind in ("fwd", "dkdv", "dq"):
            assert len(cfg[kind]) > 1  # several candidates: autotuned, too-big ones discarded
            assert all(c["BLOCK_M"] >= 16 and c["BLOCK_N"] >= 16 for c in cfg[kind])  # tl.dot
        assert cfg["fwd"][0]["BLOCK_M"] == 128  # a tall query tile that stays on chip
        # 8 warps lay two warpgroups along the dK/dV pass's key tile: it needs 128 keys
        assert all(c["BLOCK_N"] >= 16 * c["num_warps"] for c in cfg["dkdv"])
    small = flash.kernel_config(64, "cpu", interpreted=True)
    assert all(len(v) == 1 and v[0]["BLOCK_M"] <= 64 for v in small.values())
    assert flash.kernel_config(64, "cpu", interpreted=False) == small  # CPU tensors: small


def test_autotuning_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("COURSE_FLASH_AUTOTUNE", "0")
    cfg = flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.bfloat16)
    assert all(len(v) == 1 for k, v in cfg.items() if k != "decode")  # decode: a menu by size
    assert [c["BLOCK_M"] for c in cfg["decode"]] == [16, 64, 128]
    assert cfg["fwd"][0] == gpu_tiles(128)["fwd"][0]


def test_kernel_config_float32_on_cuda_is_one_small_config():
    # float32 dots run in true float32 (no tensor cores): one small tile, no autotuning.
    cfg = flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.float32)
    assert all(len(v) == 1 and v[0]["BLOCK_M"] * v[0]["BLOCK_N"] <= 64 * 64 for v in cfg.values())
    assert len(flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.bfloat16)["fwd"]) > 1


def test_candidates_that_do_not_fit_in_shared_memory_are_pruned(monkeypatch):
    """A GPU with less shared memory gets only the tiles that fit; when none does, the
    smallest (last) one, and the compiler says what is wrong."""
    full = flash.kernel_config(128, "cuda", interpreted=False, arch=90)
    limit = shared_estimate("fwd", full["fwd"][-1], 128)  # room for the smallest forward tile
    monkeypatch.setattr(tiles, "shared_limit", lambda device, arch: limit)
    small = flash.kernel_config(128, "cuda", interpreted=False, arch=90)
    assert small["fwd"] == [t for t in full["fwd"] if shared_estimate("fwd", t, 128) <= limit]
    assert 0 < len(small["fwd"]) < len(full["fwd"])
    monkeypatch.setattr(tiles, "shared_limit", lambda device, arch: 1024)  # nothing fits
    tiny = flash.kernel_config(128, "cuda", interpreted=False, arch=90)
    assert all(tiny[k] == [gpu_tiles(128, 90)[k][-1]] for k in KINDS - {"decode"})


def test_autotune_candidates_differ_by_architecture_only_where_sm80_spills():
    """A candidate that is clean on sm_90 but spills on sm_80 is offered on Hopper only (the
    128-key dK/dV and 128 x 64 dQ tiles at d_h = 128); the A100 gets no candidate the H100
    lacks, except for the atomic dK/dV pass, which holds a third tile and gets smaller tiles
    on sm_80."""
    for d in (64, 128):
        h100 = flash.kernel_config(d, "cuda", interpreted=False, arch=90)
        a100 = flash.kernel_config(d, "cuda", interpreted=False, arch=80)
        for kind in ("fwd", "dkdv", "dq", "decode"):
            assert [c for c in h100[kind] if c in a100[kind]] == a100[kind], (d, kind)
        assert h100["fwd"][0] == a100["fwd"][0]
        assert h100["dkdv_atomic"] != a100["dkdv_atomic"]
    assert len(flash.kernel_config(128, "cuda", interpreted=False, arch=80)["dkdv"]) == 2
