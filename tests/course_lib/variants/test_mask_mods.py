"""Unit tests of course_lib.variants.mask_mods, course_lib.variants.score_mods and course_lib.variants.flex.

Every variant is checked equal to the course's explicit-mask attention
(course_lib.attention.scaled_dot_product_attention with a boolean mask or a float bias),
and to PyTorch's FlexAttention where this PyTorch has it (2.5+; eager on the CPU).
"""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import causal_mask, padding_mask, scaled_dot_product_attention
from course_lib.variants import flex as FX
from course_lib.variants import mask_mods as M
from course_lib.variants import score_mods as S
from course_lib.variants.alibi import alibi_bias, alibi_slopes

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


def _variants():
    """(name, mask_mod, the explicit boolean mask [B or 1, H or 1, N, N] built by hand)."""
    i = torch.arange(N)[:, None]
    j = torch.arange(N)[None, :]
    same_doc = DOC_IDS[:, :, None] == DOC_IDS[:, None, :]  # (B, N, N)
    prefix = torch.tensor([6, 0])[:, None, None]  # (B, 1, 1)
    return [
        ("causal", M.causal, causal_mask(N)[None, None]),
        ("sliding window 5", M.sliding_window(5), ((j <= i) & (i - j < 5))[None, None]),
        ("padding", M.padding([17, 24]), padding_mask(torch.tensor([17, 24]), N)[:, None]),
        ("document", M.document(DOC_IDS), same_doc[:, None]),
        (
            "document & causal",
            M.and_masks(M.causal, M.document(DOC_IDS)),
            (same_doc & (j <= i))[:, None],
        ),
        ("prefix-LM", M.prefix_lm([6, 0]), ((j < prefix) | (j <= i))[:, None]),
        (
            "causal | padding",
            M.or_masks(M.causal, M.padding([3, 24])),
            ((j <= i)[None] | (j < torch.tensor([3, 24])[:, None, None]))[:, None],
        ),
    ]


VARIANTS = _variants()


@pytest.mark.parametrize("name, mask_mod, explicit", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_materialize_equals_the_mask_built_by_hand(name, mask_mod, explicit):
    got = M.materialize(mask_mod, B, H, N)
    assert got.shape == (B, H, N, N) and got.dtype == torch.bool
    assert torch.equal(got, explicit.expand(B, H, N, N))


@pytest.mark.parametrize("name, mask_mod, explicit", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_mod_attention_equals_explicit_mask_attention(name, mask_mod, explicit):
    q, k, v = _qkv()
    out, w = FX.mod_attention(q, k, v, mask_mod=mask_mod)
    ref, ref_w = scaled_dot_product_attention(q, k, v, explicit)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)


@needs_flex
@pytest.mark.parametrize("name, mask_mod, explicit", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_flex_attention_equals_explicit_mask_attention(name, mask_mod, explicit):
    q, k, v = _qkv(1)
    ref, _ = scaled_dot_product_attention(q, k, v, explicit)
    out = FX.flex_attention(q, k, v, mask_mod=mask_mod, block_m=8, block_n=8)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)


def test_alibi_score_mod_equals_the_explicit_bias():
    q, k, v = _qkv(2)
    slopes = alibi_slopes(H, dtype=DT)
    out, _ = FX.mod_attention(q, k, v, score_mod=S.alibi(slopes), mask_mod=M.causal)
    ref, _ = scaled_dot_product_attention(q, k, v, alibi_bias(H, N, dtype=DT), is_causal=True)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_soft_cap_score_mod_equals_the_formula_and_bounds_the_scores():
    q, k, v = _qkv(3)
    q = q * 20  # large scores, so that the cap matters
    cap = 5.0
    out, w = FX.mod_attention(q, k, v, score_mod=S.soft_cap(cap), mask_mod=M.causal)
    scores = cap * torch.tanh(q @ k.transpose(-2, -1) / D**0.5 / cap)
    assert scores.abs().max() < cap
    ref_w = torch.softmax(scores.masked_fill(~causal_mask(N), float("-inf")), dim=-1)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, ref_w @ v, atol=1e-12, rtol=0)
    plain, _ = FX.mod_attention(q, k, v, mask_mod=M.causal)
    assert (out - plain).abs().max() > 1e-2  # the cap changed something


def test_soft_cap_with_a_huge_cap_is_the_identity():
    q, k, v = _qkv(4)
    out, _ = FX.mod_attention(q, k, v, score_mod=S.soft_cap(1e6))
    ref, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, ref, atol=1e-9, rtol=0)


@needs_flex
@pytest.mark.parametrize("which", ["alibi", "soft_cap"])
def test_flex_score_mods_equal_mod_attention(which):
    q, k, v = _qkv(5)
    mod = S.alibi(alibi_slopes(H, dtype=DT)) if which == "alibi" else S.soft_cap(0.7)
    ref, _ = FX.mod_attention(q, k, v, score_mod=mod, mask_mod=M.causal)
    out = FX.flex_attention(q, k, v, score_mod=mod, mask_mod=M.causal, block_m=8)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = _qkv(6)
    out, w = FX.mod_attention(q, k, v, mask_mod=M.padding([0, 5]))
    assert torch.isfinite(out).all()
    assert out[0].abs().max() == 0 and w[0].abs().max() == 0


def test_document_ids_and_errors():
    assert M.document_ids([3, 2, 4]).tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert M.document_ids([2, 1], 5).tolist() == [0, 0, 1, 2, 2]
    with pytest.raises(ValueError, match="more than seq_len"):
        M.document_ids([3, 4], 5)
    with pytest.raises(ValueError, match="positive integer"):
        M.sliding_window(0)
    with pytest.raises(TypeError, match="integer lengths"):
        M.padding([1.5, 2.0])
    with pytest.raises(ValueError, match=r"\[B, N\]"):
        M.document(torch.zeros(5, dtype=torch.long))


def test_materialize_rejects_a_mask_mod_that_returns_no_boolean():
    with pytest.raises(TypeError, match="boolean tensor"):
        M.materialize(lambda b, h, q, kv: (q - kv).float(), 1, 1, 4)


def test_python_and_instead_of_tensor_and_fails_clearly():
    def bad(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) and (q_idx - kv_idx < 3)

    with pytest.raises(RuntimeError, match="ambiguous"):
        M.materialize(bad, 1, 1, 4)


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


def test_tile_map_errors():
    with pytest.raises(ValueError, match="boolean mask"):
        FX.tile_map(torch.ones(4, 4), 2, 2)
    with pytest.raises(ValueError, match="block_m"):
        FX.tile_map(causal_mask(4), 0, 2)


@needs_flex
@pytest.mark.parametrize("name, mask_mod, explicit", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_flex_block_mask_classifies_tiles_like_tile_map(name, mask_mod, explicit):
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


@needs_flex
def test_flex_attention_takes_a_prebuilt_block_mask_but_not_both():
    q, k, v = _qkv(7)
    mod = M.sliding_window(5)
    bm = FX.block_mask(mod, None, None, N, block_m=8)  # one tile map for every sequence, head
    ref, _ = FX.mod_attention(q, k, v, mask_mod=mod)
    torch.testing.assert_close(FX.flex_attention(q, k, v, block_mask=bm), ref, atol=1e-10, rtol=0)
    with pytest.raises(ValueError, match="not both"):
        FX.flex_attention(q, k, v, mask_mod=mod, block_mask=bm)


@pytest.mark.parametrize(
    "mod",
    [
        M.padding([2, 3]),
        M.document(torch.zeros(2, 3, dtype=torch.long)),
        M.prefix_lm([1, 2]),
        M.prefix_lm(1),
    ],
)
def test_mask_mods_follow_the_index_device(mod):
    """Captured tensors move to the indices' device, so a mask built on the CPU works where
    FlexAttention evaluates it on a GPU. The "meta" device stands in for the GPU: mixing a
    CPU tensor into a meta computation raises, as mixing it into a CUDA one would."""
    assert M.materialize(mod, 2, 1, 3, device="meta").device.type == "meta"


def test_without_flex_the_wrappers_say_what_is_missing(monkeypatch):
    monkeypatch.setattr(FX, "flex_available", lambda: False)
    q, k, v = _qkv(8)
    with pytest.raises(RuntimeError, match="needs PyTorch 2.5 or newer"):
        FX.flex_attention(q, k, v, mask_mod=M.causal)
    with pytest.raises(RuntimeError, match="needs PyTorch 2.5 or newer"):
        FX.block_mask(M.causal, 1, 1, 8)
    out, _ = FX.mod_attention(q, k, v, mask_mod=M.causal)  # the course's path still works
    assert torch.isfinite(out).all()
