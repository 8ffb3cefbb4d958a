"""course_lib.flash.decode: a few queries against a long key/value cache, the keys split
over programs and merged by their log-sum-exps (flash-decoding); forward only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from flash_lab import DEVICE, TOL, assert_close, ground_truth, make_inputs

from course_lib.flash import decode, flash_attention, flash_decode
from course_lib.flash.tiles import Tile

DECODE_CASES = [
    # B, H, H_kv, Nq, Nk, d, splits, mask
    (2, 8, 2, 1, 200, 32, 3, dict()),
    (1, 4, 4, 1, 64, 16, 1, dict(is_causal=True, causal_alignment="bottom_right")),
    (1, 8, 2, 4, 150, 64, 5, dict(is_causal=True, causal_alignment="bottom_right")),
    (1, 4, 1, 3, 97, 16, 4, dict(is_causal=True, causal_alignment="bottom_right", window=30)),
    (1, 2, 2, 5, 40, 16, 7, dict(is_causal=True, causal_alignment="bottom_right", window=2)),
    (1, 2, 1, 1, 33, 16, None, dict()),  # the default number of splits
    # 16 heads x 4 queries = 64 rows: the forward's tiles, not the transposed ones
    (1, 16, 1, 4, 90, 16, 2, dict(is_causal=True, causal_alignment="bottom_right")),
]


@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,splits,mask", DECODE_CASES)
def test_decode_matches_naive_and_the_main_kernel(B, H, h_kv, n_q, n_k, d, splits, mask):
    q, k, v, _ = make_inputs(B, H, n_q, n_k, d, torch.float32, DEVICE, h_kv=h_kv, seed=n_k)
    out, lse = flash_decode(q, k, v, num_splits=splits, return_lse=True, **mask)
    assert lse.shape == (B, H, n_q)
    (ref, *_), ref_lse = ground_truth(q, k, v, torch.zeros_like(q), **mask)
    assert_close(out, ref, TOL[torch.float32]["out"], "decode output")
    assert_close(lse, ref_lse, (2e-5, 1e-5), "decode lse")
    main = flash_attention(q, k, v, **mask)
    torch.testing.assert_close(out, main, atol=2e-5, rtol=1e-4)


def test_decode_float16_and_layout():
    q, k, v, _ = make_inputs(1, 4, 1, 100, 32, torch.float16, DEVICE, h_kv=2)
    out = flash_decode(q, k, v, num_splits=3)
    (ref, *_), _ = ground_truth(q, k, v, torch.zeros_like(q))
    assert out.dtype == torch.float16
    assert_close(out, ref, TOL[torch.float16]["out"], "decode fp16")
    out2 = flash_decode(*(x.transpose(1, 2) for x in (q, k, v)), num_splits=3, layout="bnhd")
    torch.testing.assert_close(out2, out.transpose(1, 2))


def test_a_split_that_sees_no_key_changes_nothing():
    """Bottom-right with a window of 2 over 60 keys: most splits see nothing (L_s = -inf,
    weight 0); more splits than key tiles are rounded down, never left empty."""
    q, k, v, _ = make_inputs(1, 2, 1, 60, 16, torch.float32, DEVICE)
    mask = dict(is_causal=True, causal_alignment="bottom_right", window=2)
    (ref, *_), _ = ground_truth(q, k, v, torch.zeros_like(q), **mask)
    for splits in (1, 2, 50):
        assert_close(flash_decode(q, k, v, num_splits=splits, **mask), ref, (2e-5, 1e-4), "out")


def test_decode_is_forward_only_and_says_so():
    q, k, v, _ = make_inputs(1, 2, 1, 40, 16, torch.float32, DEVICE)
    with pytest.raises(RuntimeError, match="forward-only"):
        flash_decode(q.requires_grad_(), k, v)
    with torch.no_grad():
        assert flash_decode(q, k, v).shape == (1, 2, 1, 16)
    big = torch.randn(1, 2, 65, 16, device=DEVICE)
    with pytest.raises(ValueError, match="at most 128"):
        flash_decode(big, k[:, :1], v[:, :1])  # G * Nq = 2 * 65 rows
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="num_splits"):
            flash_decode(q.detach(), k, v, num_splits=bad)
    with pytest.raises(ValueError, match="^flash_decode: "):
        flash_decode(q.detach()[0], k[0], v[0])  # the checks of every kernel call


def test_decode_picks_the_smallest_row_tile_that_holds_the_packed_queries(monkeypatch):
    """The menu is by size: the first tile whose block_m holds G * Nq rows, the last when
    none does (its rows are then widened to the next power of two)."""
    menu = [Tile(16, 32), Tile(64, 32), Tile(128, 16)]
    monkeypatch.setattr(decode, "kernel_config", lambda *a, **kw: {"decode": menu})
    seen = []
    real = decode.launch_decode

    def spy(q, k, v, mask, tile, splits):
        seen.append((tile.block_m, splits))
        return real(q, k, v, mask, tile, splits)

    monkeypatch.setattr(decode, "launch_decode", spy)
    q, k, v, _ = make_inputs(1, 16, 4, 40, 16, torch.float32, DEVICE, h_kv=1)  # 64 rows
    (ref, *_), _ = ground_truth(q, k, v, torch.zeros_like(q))
    assert_close(flash_decode(q, k, v, num_splits=2), ref, (2e-5, 1e-4), "64 rows")
    assert_close(flash_decode(q[:, :3], k, v), ref[:, :3], (2e-5, 1e-4), "12 rows")
    assert seen == [(64, 2), (16, 2)]  # default here: a split per key tile (40 keys: 2)


def test_decode_splits_fill_the_gpu_not_more():
    assert decode.decode_splits(8, 32768, 64, "cpu") == 4  # interpreter: a few
    assert decode.decode_splits(8, 10, 64, "cpu") == 1
    # on a GPU: two programs per SM, at least 4 key tiles each, never more than the tiles
    assert decode.decode_splits(8, 32768, 64, "cuda", num_sms=132) == 33  # ceil(264 / 8)
    assert decode.decode_splits(1, 32768, 64, "cuda", num_sms=132) == 128  # 512 tiles / 4
    assert decode.decode_splits(512, 32768, 64, "cuda", num_sms=132) == 1
    assert decode.decode_splits(1, 100, 64, "cuda", num_sms=132) == 1  # 2 tiles: one split


# --------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,splits,mask", DECODE_CASES)
def test_decode_on_gpu(B, H, h_kv, n_q, n_k, d, splits, mask):
    q, k, v, _ = make_inputs(B, H, n_q, n_k, d, torch.float32, "cuda", h_kv=h_kv, seed=n_k)
    out = flash_decode(q, k, v, num_splits=splits, **mask)
    (ref, *_), _ = ground_truth(q, k, v, torch.zeros_like(q), **mask)
    assert_close(out, ref, TOL[torch.float32]["out"], "decode output")


@pytest.mark.gpu
def test_decode_long_cache_bf16_on_gpu():
    """Nq = 1 against a 32k cache with GQA (the benchmark's decode shape), default splits."""
    q, k, v, _ = make_inputs(2, 32, 1, 32768, 128, torch.bfloat16, "cuda", h_kv=8)
    out = flash_decode(q, k, v)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    assert (out.float() - ref).abs().max().item() < 2e-2
