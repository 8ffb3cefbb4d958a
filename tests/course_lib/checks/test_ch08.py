"""The chapter 08 exercises: specific wrong answers a learner writes are caught and named.

(That every reference passes and every declared mistake is named on the visible cases is
tests/course_lib/checks/test_exercise_contract.py's job, for every chapter.)
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.checks import CheckFailed, check
from course_lib.checks.ch08 import (
    DEEPSEEK_V2_CONFIG,
    absorbed_scores_reference,
    document_causal_reference,
    linear_attention_step_reference,
    mla_cache_bytes_from_config,
    ring_decode_step_reference,
)
from course_lib.variants import flex as FX
from course_lib.variants import mask_mods as M
from course_lib.variants.linear_attention import linear_attention_step
from course_lib.variants.mla import (
    DEEPSEEK_V2,
    MLAConfig,
    MultiHeadLatentAttention,
    mla_cache_bytes,
)
from course_lib.variants.sliding_window import RingKVCache


def test_python_and_in_a_mask_mod_is_reported_with_the_hint():
    def with_and(b, h, q_idx, kv_idx, doc_ids):
        return (doc_ids[b, q_idx] == doc_ids[b, kv_idx]) and (q_idx >= kv_idx)

    with pytest.raises(CheckFailed, match=r"raised RuntimeError[\s\S]*Python's `and`"):
        check("08.1", with_and, quiet=True)
    with pytest.raises(CheckFailed, match=r"tensor operators only"):
        check("08.1", with_and, quiet=True, hints="full")

    def forgot_batch(b, h, q_idx, kv_idx, doc_ids):
        return (doc_ids[q_idx] == doc_ids[kv_idx]) & (q_idx >= kv_idx)

    with pytest.raises(CheckFailed, match=r"raised IndexError[\s\S]*picks \*sequences\*"):
        check("08.1", forgot_batch, quiet=True)


def test_document_causal_reference_works_as_a_flex_mask_mod():
    """The reference is a real mask_mod: with the doc_ids bound it drives mod_attention
    (and FlexAttention, where available) exactly like the library's and_masks."""
    doc = torch.stack([M.document_ids([3, 5, 4]), M.document_ids([6, 6])])  # (B, N)
    mod = lambda b, h, q, kv: document_causal_reference(b, h, q, kv, doc)  # noqa: E731
    lib = M.and_masks(M.causal, M.document(doc))
    assert torch.equal(M.materialize(mod, 2, 3, 12), M.materialize(lib, 2, 3, 12))
    if FX.flex_available():
        q, k, v = (torch.randn(2, 3, 12, 4, dtype=torch.float64) for _ in range(3))
        ref, _ = FX.mod_attention(q, k, v, mask_mod=lib)
        torch.testing.assert_close(FX.flex_attention(q, k, v, mask_mod=mod, block_m=4), ref)


def test_alibi_slopes_with_rounded_power_of_two_is_a_shape_error_explained():
    def rounded(num_heads):
        p = 2 ** round(math.log2(num_heads))  # 16 for 12 heads
        return torch.tensor([2 ** (-8 * h / p) for h in range(1, p + 1)])

    with pytest.raises(CheckFailed, match=r"expected shape \(12,\), got \(16,\)"):
        check("08.2", rounded, quiet=True)


def test_classify_tiles_returning_only_the_map_is_explained():
    def only_map(mask, block_m, block_n):
        return FX.tile_map(mask, block_m, block_n)

    with pytest.raises(CheckFailed, match="expected a tuple of 2 items"):
        check("08.3", only_map, quiet=True)


def test_ring_decode_step_reference_equals_the_library_ring_cache():
    torch.manual_seed(0)
    w, b, h, h_kv, d = 3, 2, 4, 2, 5
    cache = RingKVCache(w, b, h_kv, d, dtype=torch.float64)
    k_cache = torch.zeros(b, h_kv, w, d, dtype=torch.float64)
    v_cache = torch.zeros(b, h_kv, w, d, dtype=torch.float64)
    for t in range(8):
        q, kn, vn = (torch.randn(b, n, 1, d, dtype=torch.float64) for n in (h, h_kv, h_kv))
        out, k_cache, v_cache = ring_decode_step_reference(q, kn, vn, k_cache, v_cache, t)
        cache.update(kn, vn)
        torch.testing.assert_close(out, cache.attend(q), atol=1e-12, rtol=0)
        torch.testing.assert_close(k_cache, cache.k, atol=0, rtol=0)


def test_ring_decode_step_that_modifies_the_cache_in_place_still_passes():
    def in_place(q_new, k_new, v_new, k_cache, v_cache, position):
        out, k2, v2 = ring_decode_step_reference(q_new, k_new, v_new, k_cache, v_cache, position)
        k_cache.copy_(k2)
        v_cache.copy_(v2)
        return out, k_cache, v_cache

    assert check("08.4", in_place, quiet=True).passed


def test_mla_bytes_reference_agrees_with_the_library():
    assert mla_cache_bytes_from_config(DEEPSEEK_V2_CONFIG, 4096, 2, 2) == mla_cache_bytes(
        DEEPSEEK_V2.num_layers, DEEPSEEK_V2.kv_latent_dim, DEEPSEEK_V2.rope_head_dim, 4096, 2
    )


def test_absorbed_scores_reference_equals_the_mla_module():
    """The exercise's scores are those inside MultiHeadLatentAttention.decode_absorbed."""
    torch.manual_seed(1)
    cfg = MLAConfig(d_model=16, num_heads=2, head_dim=4, kv_latent_dim=6, rope_head_dim=2)
    m = MultiHeadLatentAttention(cfg).double()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        c_kv, k_rope = m.compress(x)  # (1, 5, d_c), (1, 5, d_h^R)
        q_nope, q_rope = m.queries(x[:, -1:], start=4)
        k, _ = m.expand(c_kv, k_rope)  # (1, H, 5, d_h + d_h^R)
        naive = torch.cat([q_nope, q_rope], -1) @ k.transpose(-2, -1) * m.scale
        w_uk, _ = m.absorbed_weights()
        got = absorbed_scores_reference(q_nope, q_rope, c_kv, k_rope, w_uk)
    torch.testing.assert_close(got, naive, atol=1e-12, rtol=0)


def test_linear_step_reference_equals_the_library_step_and_nan_on_read_first_is_named():
    q, k, v = (torch.randn(2, 3, n, dtype=torch.float64) for n in (4, 4, 5))
    s, z = torch.zeros(2, 3, 4, 5, dtype=torch.float64), torch.zeros(2, 3, 4, dtype=torch.float64)
    ref = linear_attention_step_reference(q, k, v, s, z)
    lib = linear_attention_step(q, k, v, s, z, eps=0.0)
    for a, b in zip(ref, lib):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)

    def no_state_update(q_t, k_t, v_t, state, normalizer):
        o, _, _ = linear_attention_step_reference(q_t, k_t, v_t, state, normalizer)
        return o, state, normalizer

    with pytest.raises(CheckFailed, match=r"state: 24 of 24 values are off"):
        check("08.7", no_state_update, quiet=True)


def test_classify_tiles_with_a_float32_fraction_and_int32_tiles_passes():
    def float32_fraction(mask, block_m, block_n):
        tiles = FX.tile_map(mask, block_m, block_n)
        return tiles.int(), (tiles == 0).float().mean().item()

    assert check("08.3", float32_fraction, quiet=True).passed
    assert check("08.3", float32_fraction, hidden=True, quiet=True).passed


def test_ring_shift_mistake_is_named_as_a_queue():
    def queue(q_new, k_new, v_new, k_cache, v_cache, position):
        k_cache = torch.cat([k_cache[:, :, 1:], k_new], dim=2)
        v_cache = torch.cat([v_cache[:, :, 1:], v_new], dim=2)
        g = q_new.shape[1] // k_cache.shape[1]
        k, v = k_cache.repeat_interleave(g, 1), v_cache.repeat_interleave(g, 1)
        w = torch.softmax(q_new @ k.transpose(-2, -1) / q_new.shape[-1] ** 0.5, dim=-1)
        return w @ v, k_cache, v_cache

    with pytest.raises(CheckFailed, match="like a queue"):
        check("08.4", queue, quiet=True)


def test_sorted_alibi_slopes_are_named():
    def sorted_slopes(num_heads):
        from course_lib.variants.alibi import alibi_slopes

        return torch.sort(alibi_slopes(num_heads, dtype=torch.float64), descending=True).values

    with pytest.raises(CheckFailed, match="right slopes in the wrong order"):
        check("08.2", sorted_slopes, quiet=True)


def test_classify_tiles_by_reshape_is_told_about_ragged_edges():
    def by_reshape(mask, block_m, block_n):
        n_q, n_k = mask.shape
        x = mask.reshape(n_q // block_m, block_m, n_k // block_n, block_n)
        tiles = torch.where(x.all(3).all(1), 2, torch.where(x.any(3).any(1), 1, 0))
        return tiles, (tiles == 0).float().mean().item()

    with pytest.raises(CheckFailed, match="a reshape into whole tiles fails"):
        check("08.3", by_reshape, quiet=True)


def _learner_ring(q_new, k_new, v_new, k_cache, v_cache, position, *, valid="position"):
    w = k_cache.shape[2]
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, position % w] = k_new[:, :, 0]
    v_cache[:, :, position % w] = v_new[:, :, 0]
    g = q_new.shape[1] // k_cache.shape[1]
    k, v = k_cache.repeat_interleave(g, 1), v_cache.repeat_interleave(g, 1)
    scores = q_new @ k.transpose(-2, -1) / math.sqrt(q_new.shape[-1])  # (B, H, 1, W)
    if valid == "position":
        keep = torch.arange(w) <= position
    elif valid == "strict":
        keep = torch.arange(w) < position
    else:  # a slot is a token when its key is not all zeros
        keep = (k.abs().sum(-1) > 0)[:, :, None, :]
    return torch.softmax(scores.masked_fill(~keep, -math.inf), -1) @ v, k_cache, v_cache


def test_ring_decode_mistakes_a_learner_makes_are_named():
    assert check("08.4", _learner_ring, quiet=True).passed
    with pytest.raises(CheckFailed, match="does not see itself"):
        check("08.4", lambda *a: _learner_ring(*a, valid="strict"), quiet=True)
    with pytest.raises(CheckFailed, match="by looking at their values"):
        check("08.4", lambda *a: _learner_ring(*a, valid="values"), quiet=True)


def test_mla_bytes_as_a_float_fails_with_the_reason():
    def as_float(config, seq_len, batch_size=1, bytes_per_value=2):
        return float(mla_cache_bytes_from_config(config, seq_len, batch_size, bytes_per_value))

    with pytest.raises(CheckFailed, match="expected an int") as failure:
        check("08.5", as_float, quiet=True)
    msg = str(failure.value)
    assert "forgot the batch" not in msg  # the value is right: no mistake named
    assert "Hint:" not in msg and "latent and one RoPE key" not in msg, msg  # nor the formula


def _learner_linear_step(q_t, k_t, v_t, state, normalizer, *, phi=None, keepdim=True):
    phi = phi or (lambda x: torch.nn.functional.elu(x) + 1)
    fq, fk = phi(q_t), phi(k_t)
    state = state + fk[..., :, None] * v_t[..., None, :]
    normalizer = normalizer + fk
    num = torch.einsum("bhk,bhkv->bhv", fq, state)
    return num / (fq * normalizer).sum(-1, keepdim=keepdim), state, normalizer


def test_linear_step_mistakes_a_learner_makes_are_named():
    assert check("08.7", _learner_linear_step, quiet=True).passed
    with pytest.raises(CheckFailed, match="relu"):
        check("08.7", lambda *a: _learner_linear_step(*a, phi=torch.relu), quiet=True)
    with pytest.raises(CheckFailed, match="without the \\+ 1"):
        check("08.7", lambda *a: _learner_linear_step(*a, phi=torch.nn.functional.elu), quiet=True)
    with pytest.raises(CheckFailed, match="do not line up"):
        check("08.7", lambda *a: _learner_linear_step(*a, keepdim=False), quiet=True)


def _learner_skipped(seq_len, window, block, *, entries=False):
    """08.8 written another way: a mask_mod on index grids, then tiles counted by hand."""
    q = torch.arange(seq_len)[:, None]
    k = torch.arange(seq_len)[None, :]
    mask = (k <= q) & (q - k < window)
    if entries:
        return 1.0 - mask.float().mean().item()
    t = -(-seq_len // block)
    empty = sum(
        not mask[i * block : (i + 1) * block, j * block : (j + 1) * block].any()
        for i in range(t)
        for j in range(t)
    )
    return empty / (t * t)


def test_08_8_another_correct_measurement_passes_and_shows_the_prediction(capsys):
    assert check("08.8", _learner_skipped, prediction=0.8125).passed
    assert check("08.8", _learner_skipped, hidden=True).passed
    assert "you predicted 0.8125, measured 0.8242: right on" in capsys.readouterr().out


def test_08_8_masked_entries_instead_of_tiles_are_named():
    with pytest.raises(CheckFailed, match="you measured the masked \\*entries\\*"):
        check("08.8", lambda *a: _learner_skipped(*a, entries=True), quiet=True)
