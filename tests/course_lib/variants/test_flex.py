"""Unit tests of course_lib.variants.flex: mod_attention (the course's reference), PyTorch's
FlexAttention where this PyTorch has it (2.5+; eager on the CPU), and the tile maps.

Every mask is checked against attention with the explicit boolean mask
(course_lib.attention.scaled_dot_product_attention); the masks themselves against masks
built by hand in test_mask_mods.py.
"""

from __future__ import annotations

import matplotlib
import pytest
import torch

from course_lib.attention import causal_mask, scaled_dot_product_attention
from course_lib.variants import flex as FX
from course_lib.variants import mask_mods as M
from course_lib.variants import score_mods as S
from course_lib.variants.alibi import alibi_slopes

matplotlib.use("Agg")

needs_flex = pytest.mark.skipif(not FX.flex_available(), reason=FX.FLEX_MISSING)
DT = torch.float64
B, H, N, D = 2, 3, 24, 8


def _qkv(seed=0, n_q=N, n_k=N):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, n_q, D, generator=g, dtype=DT),
        torch.randn(B, H, n_k, D, generator=g, dtype=DT),
        torch.randn(B, H, n_k, D, generator=g, dtype=DT),
    )


DOC_IDS = torch.stack([M.document_ids([5, 12, 7]), M.document_ids([10, 9], N)])  # (B, N)
MASK_MODS = [
    ("causal", M.causal),
    ("sliding window 5", M.sliding_window(5)),
    ("padding", M.padding([17, 24])),
    ("document & causal", M.and_masks(M.causal, M.document(DOC_IDS))),
    ("prefix-LM", M.prefix_lm([6, 0])),
    ("causal | padding", M.or_masks(M.causal, M.padding([3, 24]))),
]

# --------------------------------------------------------------------------- mod_attention


@pytest.mark.parametrize("name, mask_mod", MASK_MODS, ids=[v[0] for v in MASK_MODS])
def test_mod_attention_equals_explicit_mask_attention(name, mask_mod):
    q, k, v = _qkv()
    explicit = M.materialize(mask_mod, B, H, N)  # equal to the masks built by hand: test_mask_mods
    out, w = FX.mod_attention(q, k, v, mask_mod=mask_mod)
    ref, ref_w = scaled_dot_product_attention(q, k, v, explicit)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)


def test_mod_attention_scales_then_modifies_then_masks():
    """The order FlexAttention uses: a score_mod sees the scaled score, and a masked entry
    stays out whatever the score_mod makes of it."""
    q, k, v = _qkv(9)
    seen = []

    def record_then_boost(score, b, h, q_idx, kv_idx):
        seen.append(score.clone())
        return score + 1e3 * (kv_idx > q_idx)  # huge scores on the future keys only

    out, w = FX.mod_attention(q, k, v, score_mod=record_then_boost, mask_mod=M.causal, scale=0.3)
    torch.testing.assert_close(seen[0], (q @ k.transpose(-2, -1)) * 0.3)
    ref, ref_w = scaled_dot_product_attention(q * 0.3 * D**0.5, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    assert w.shape == (B, H, N, N) and (w.masked_select(~causal_mask(N)) == 0).all()


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = _qkv(6)
    out, w = FX.mod_attention(q, k, v, mask_mod=M.padding([0, 5]))
    assert torch.isfinite(out).all()
    assert out[0].abs().max() == 0 and w[0].abs().max() == 0


def test_mod_attention_checks_its_inputs():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"expected q of shape \[B, H, N, d\]"):
        FX.mod_attention(q[0], k, v)
    with pytest.raises(ValueError, match="expected v of shape"):
        FX.mod_attention(q, k, v.numpy())


# --------------------------------------------------------------------------- FlexAttention


@needs_flex
@pytest.mark.parametrize("name, mask_mod", MASK_MODS, ids=[v[0] for v in MASK_MODS])
def test_flex_attention_equals_explicit_mask_attention(name, mask_mod):
    q, k, v = _qkv(1)
    explicit = M.materialize(mask_mod, B, H, N)
    ref, _ = scaled_dot_product_attention(q, k, v, explicit)
    out = FX.flex_attention(q, k, v, mask_mod=mask_mod, block_m=8, block_n=8)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)


@needs_flex
@pytest.mark.parametrize("which", ["alibi", "soft_cap"])
def test_flex_score_mods_equal_mod_attention(which):
    q, k, v = _qkv(5)
    mod = S.alibi(alibi_slopes(H, dtype=DT)) if which == "alibi" else S.soft_cap(0.7)
    ref, _ = FX.mod_attention(q, k, v, score_mod=mod, mask_mod=M.causal)
    out = FX.flex_attention(q, k, v, score_mod=mod, mask_mod=M.causal, block_m=8)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)


@needs_flex
def test_flex_attention_takes_a_prebuilt_block_mask_but_not_both():
    q, k, v = _qkv(7)
    mod = M.sliding_window(5)
    bm = FX.block_mask(mod, None, None, N, block_m=8)  # one tile map for every sequence, head
    ref, _ = FX.mod_attention(q, k, v, mask_mod=mod)
    torch.testing.assert_close(FX.flex_attention(q, k, v, block_mask=bm), ref, atol=1e-10, rtol=0)
    with pytest.raises(ValueError, match="not both"):
        FX.flex_attention(q, k, v, mask_mod=mod, block_mask=bm)


def test_without_flex_the_wrappers_say_what_is_missing(monkeypatch):
    monkeypatch.setattr(FX, "flex_available", lambda: False)
    q, k, v = _qkv(8)
    with pytest.raises(RuntimeError, match="needs PyTorch 2.5 or newer"):
        FX.flex_attention(q, k, v, mask_mod=M.causal)
    with pytest.raises(RuntimeError, match="needs PyTorch 2.5 or newer"):
        FX.block_mask(M.causal, 1, 1, 8)
    out, _ = FX.mod_attention(q, k, v, mask_mod=M.causal)  # the course's path still works
    assert torch.isfinite(out).all()


# --------------------------------------------------------------------------- tile maps


def test_tile_map_of_causal_matches_chapter_06():
    tiles = FX.tile_map(causal_mask(512), 128, 64)
    assert tiles.shape == (4, 8)
    # chapter 06's rule: skipped when the tile's first key is after its last query, full
    # when its last key is at or before its first query, partial otherwise
    for i in range(4):
        for j in range(8):
            first_q, last_q, first_k, last_k = i * 128, i * 128 + 127, j * 64, j * 64 + 63
            want = 0 if first_k > last_q else (2 if last_k <= first_q else 1)
            assert tiles[i, j] == want
    assert FX.fraction_skipped(tiles) == pytest.approx(12 / 32)


def test_tile_map_edge_tiles_count_only_their_real_entries():
    mask = causal_mask(10)
    tiles = FX.tile_map(mask, 4, 4)  # tiles of rows 0-3, 4-7, 8-9
    assert tiles.tolist() == [[1, 0, 0], [2, 1, 0], [2, 2, 1]]
    assert FX.tile_map(torch.ones(5, 7, dtype=torch.bool), 4, 4).unique().tolist() == [2]
    assert FX.tile_map(torch.zeros(5, 7, dtype=torch.bool), 4, 4).unique().tolist() == [0]


def test_tile_map_keeps_leading_dimensions_and_counts_fractions():
    masks = M.materialize(M.sliding_window(4), 2, 1, 16)  # (2, 1, 16, 16)
    tiles = FX.tile_map(masks, 4, 4)
    assert tiles.shape == (2, 1, 4, 4) and tiles.dtype == torch.int64
    assert tiles[0, 0].tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    assert FX.fraction_skipped(tiles[0, 0].tolist()) == pytest.approx(9 / 16)  # a list is fine


def test_tile_map_errors():
    with pytest.raises(ValueError, match="boolean mask"):
        FX.tile_map(torch.ones(4, 4), 2, 2)
    with pytest.raises(ValueError, match="block_m"):
        FX.tile_map(causal_mask(4), 0, 2)


@needs_flex
@pytest.mark.parametrize("name, mask_mod", MASK_MODS, ids=[v[0] for v in MASK_MODS])
def test_flex_block_mask_classifies_tiles_like_tile_map(name, mask_mod):
    bm = FX.block_mask(mask_mod, B, H, N, block_m=8, block_n=4)
    got = FX.tile_map_from_block_mask(bm)
    want = FX.tile_map(M.materialize(mask_mod, B, H, N), 8, 4)
    assert torch.equal(got, want)


def test_sliding_window_skips_more_as_the_sequence_grows():
    fracs = [
        FX.fraction_skipped(FX.tile_map(M.materialize(M.sliding_window(64), 1, 1, n), 32, 32))
        for n in (128, 512, 2048)
    ]
    assert fracs[0] < fracs[1] < fracs[2]
    # window 64 = two tiles of 32: query tile I visits key tiles I-2..I (3), fewer at the start
    visited = 1 + 2 + 3 * (2048 // 32 - 2)
    assert fracs[2] == pytest.approx(1 - visited / (2048 // 32) ** 2)


def test_plot_tile_map_draws_the_three_classes():
    tiles = FX.tile_map(causal_mask(12), 4, 4)  # 3 skipped, 3 partial, 3 full
    ax = FX.plot_tile_map(tiles, 4, 4, title="causal", legend=True)
    image = ax.get_images()[0]
    assert (image.get_array() == tiles.numpy()).all()
    hatched = [p for p in ax.patches if p.get_hatch() == "///"]
    assert len(hatched) == int((tiles == 0).sum()) == 3  # every skipped tile, and no other
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(FX.TILE_LABELS)
    assert ax.get_title() == "causal"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "4", "8"]  # first key of a tile
    with pytest.raises(ValueError, match=r"tile map \[Tq, Tk\]"):
        FX.plot_tile_map(tiles[None], 4, 4)
