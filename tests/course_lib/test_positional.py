"""Unit tests of course_lib.positional: sinusoidal encodings and rotary embeddings (RoPE)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib.positional import (
    apply_rope,
    apply_rope_complex,
    half_to_interleaved,
    interleaved_to_half,
    rope_angles,
    rope_frequencies,
    rope_permutation,
    rope_rotation_matrix,
    rope_wavelengths,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- sinusoidal


@pytest.mark.parametrize("d_model", [2, 8, 7, 64])
def test_sinusoidal_matches_the_formula_entry_by_entry(d_model):
    n, base = 50, 10000.0
    pe = sinusoidal_encoding(n, d_model, base, dtype=torch.float64)
    assert pe.shape == (n, d_model)
    for p in (0, 1, 17, 49):
        for j in range(d_model):
            angle = p / base ** (2 * (j // 2) / d_model)
            want = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert pe[p, j].item() == pytest.approx(want, abs=1e-12), (p, j)


def test_sinusoidal_against_numpy_and_dtype_and_base():
    n, d, base = 30, 16, 100.0
    p = np.arange(n)[:, None]
    i = np.arange(d // 2)[None, :]
    ang = p / base ** (2 * i / d)
    want = np.zeros((n, d))
    want[:, 0::2], want[:, 1::2] = np.sin(ang), np.cos(ang)
    got = sinusoidal_encoding(n, d, base)
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, atol=1e-6)
    # position 0 is (0, 1, 0, 1, ...)
    assert torch.equal(sinusoidal_encoding(1, 6)[0], torch.tensor([0.0, 1, 0, 1, 0, 1]))


def test_sinusoidal_shift_is_linear_and_independent_of_position():
    d = 16
    pe = sinusoidal_encoding(200, d, dtype=torch.float64)
    for k in (1, 5, 37):
        r = sinusoidal_shift_matrix(k, d)
        np.testing.assert_allclose((pe[:-k] @ r.T).numpy(), pe[k:].numpy(), atol=1e-10)
        assert torch.allclose(r @ r.T, torch.eye(d, dtype=torch.float64), atol=1e-12)
    # a wrong matrix must fail this check: the shift by 5 is not the shift by 4
    r4 = sinusoidal_shift_matrix(4, d)
    assert not torch.allclose(pe[:-5] @ r4.T, pe[5:], atol=1e-3)


def test_sinusoidal_dot_product_depends_only_on_distance():
    pe = sinusoidal_encoding(100, 32, dtype=torch.float64)
    gram = pe @ pe.T  # (100, 100)
    for k in (0, 3, 40):
        diag = torch.diagonal(gram, offset=k)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-10)
    assert torch.allclose(torch.diagonal(gram), torch.full((100,), 16.0, dtype=torch.float64))


def test_sinusoidal_bad_input():
    with pytest.raises(ValueError, match="seq_len"):
        sinusoidal_encoding(-1, 8)
    with pytest.raises(ValueError, match="base"):
        sinusoidal_encoding(4, 8, base=0.5)
    with pytest.raises(ValueError, match="even"):
        sinusoidal_shift_matrix(1, 7)


# --------------------------------------------------------------------------- RoPE basics


def _rotate_half_reference(x, positions, base=10000.0):
    """An independent copy of the Hugging Face / GPT-NeoX style, written the way they write it."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))  # (d/2,)
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (N, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (N, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def test_half_split_matches_an_independent_rotate_half_implementation():
    x = torch.randn(2, 3, 11, 16, dtype=torch.float64, generator=_gen(1))
    pos = torch.arange(11)
    got = apply_rope(x, interleaved=False)
    np.testing.assert_allclose(got.numpy(), _rotate_half_reference(x, pos).numpy(), atol=1e-12)


def test_interleaved_matches_complex_multiplication_and_formula():
    x = torch.randn(4, 9, 8, dtype=torch.float64, generator=_gen(2))
    got = apply_rope(x)
    np.testing.assert_allclose(got.numpy(), apply_rope_complex(x).numpy(), atol=1e-12)
    # one entry by hand: position 5, pair 1 of d=8 has theta = 10000^(-2/8)
    phi = 5 * 10000 ** (-2 / 8)
    a, b = x[0, 5, 2].item(), x[0, 5, 3].item()
    assert got[0, 5, 2].item() == pytest.approx(a * math.cos(phi) - b * math.sin(phi), abs=1e-12)
    assert got[0, 5, 3].item() == pytest.approx(a * math.sin(phi) + b * math.cos(phi), abs=1e-12)


def test_position_zero_is_identity_and_shape_dtype_kept():
    x = torch.randn(3, 1, 10, generator=_gen(3))
    assert torch.equal(apply_rope(x), x)
    y = torch.randn(2, 5, 6, 32, generator=_gen(4)).to(torch.bfloat16)
    out = apply_rope(y, interleaved=False)
    assert out.shape == y.shape and out.dtype == torch.bfloat16


@pytest.mark.parametrize("interleaved", [True, False])
def test_rope_preserves_norms(interleaved):
    x = torch.randn(2, 4, 50, 64, dtype=torch.float64, generator=_gen(5))
    pos = torch.randint(0, 100_000, (50,), generator=_gen(6))
    y = apply_rope(x, pos, interleaved=interleaved)
    np.testing.assert_allclose(y.norm(dim=-1).numpy(), x.norm(dim=-1).numpy(), rtol=1e-12)
    # ...and actually changes the vectors (a no-op would pass the norm test too)
    assert (y - x).abs().max() > 0.1


@pytest.mark.parametrize("interleaved", [True, False])
def test_rotation_matrix_is_orthogonal_and_matches_apply_rope(interleaved):
    d = 12
    x = torch.randn(7, d, dtype=torch.float64, generator=_gen(7))
    y = apply_rope(x, interleaved=interleaved)
    for p in range(7):
        r = rope_rotation_matrix(p, d, interleaved=interleaved)
        assert torch.allclose(r.T @ r, torch.eye(d, dtype=torch.float64), atol=1e-12)
        np.testing.assert_allclose((r @ x[p]).numpy(), y[p].numpy(), atol=1e-12)


# --------------------------------------------------------------------------- the relative property


@pytest.mark.parametrize("interleaved", [True, False])
def test_score_depends_only_on_the_offset(interleaved):
    d = 32
    g = _gen(8)
    q = torch.randn(d, dtype=torch.float64, generator=g)
    k = torch.randn(d, dtype=torch.float64, generator=g)

    def score(m, n):
        qm = apply_rope(q[None], torch.tensor([m]), interleaved=interleaved)[0]
        kn = apply_rope(k[None], torch.tensor([n]), interleaved=interleaved)[0]
        return (qm @ kn).item()

    for delta in (-700, -13, -1, 0, 1, 2, 29, 511, 4096):
        starts = [0, 1, 57, 1000, 30_000] if delta >= 0 else [5000, 12_345, 70_000]
        vals = [score(s + delta, s) for s in starts]
        assert max(vals) - min(vals) < 1e-9, (delta, vals)
    # and it does depend on the offset (otherwise the test above is vacuous)
    assert abs(score(5, 0) - score(6, 0)) > 1e-3


def test_score_matrix_is_toeplitz_for_random_batches():
    g = _gen(9)
    q = torch.randn(3, 1, 64, dtype=torch.float64, generator=g).expand(3, 40, 64)
    k = torch.randn(3, 1, 64, dtype=torch.float64, generator=g).expand(3, 40, 64)
    s = apply_rope(q) @ apply_rope(k).transpose(-1, -2)  # (3, 40, 40)
    for off in range(-39, 40, 7):
        diag = torch.diagonal(s, offset=off, dim1=-2, dim2=-1)  # (3, 40-|off|)
        assert torch.allclose(diag, diag[..., :1].expand_as(diag), atol=1e-9)


# --------------------------------------------------------------------------- conventions


def test_interleaved_and_half_split_agree_after_the_permutation():
    d = 16
    perm = rope_permutation(d)
    assert perm.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]
    x = torch.randn(2, 3, 20, d, dtype=torch.float64, generator=_gen(10))
    pos = torch.arange(100, 120)
    a = apply_rope(x, pos, interleaved=True)
    b = apply_rope(x[..., perm], pos, interleaved=False)
    np.testing.assert_allclose(a[..., perm].numpy(), b.numpy(), atol=1e-12)
    np.testing.assert_allclose(interleaved_to_half(a).numpy(), b.numpy(), atol=1e-12)
    np.testing.assert_allclose(half_to_interleaved(b).numpy(), a.numpy(), atol=1e-12)
    # without the permutation the two conventions differ
    assert (apply_rope(x, pos, interleaved=False) - a).abs().max() > 0.1


def test_permuting_wq_wk_columns_gives_identical_attention_scores():
    d_model, d, n = 24, 16, 12
    g = _gen(11)
    x = torch.randn(n, d_model, dtype=torch.float64, generator=g)
    wq = torch.randn(d_model, d, dtype=torch.float64, generator=g)
    wk = torch.randn(d_model, d, dtype=torch.float64, generator=g)
    perm = rope_permutation(d)
    s_int = apply_rope(x @ wq) @ apply_rope(x @ wk).T
    s_half = (
        apply_rope(x @ wq[:, perm], interleaved=False)
        @ apply_rope(x @ wk[:, perm], interleaved=False).T
    )
    np.testing.assert_allclose(s_half.numpy(), s_int.numpy(), atol=1e-10)


def test_conversions_are_inverse():
    x = torch.randn(5, 10, generator=_gen(12))
    assert torch.equal(half_to_interleaved(interleaved_to_half(x)), x)
    assert torch.equal(interleaved_to_half(half_to_interleaved(x)), x)


# --------------------------------------------------------------------------- positions


def test_arbitrary_positions_kv_cache_offset():
    g = _gen(13)
    x = torch.randn(2, 30, 8, dtype=torch.float64, generator=g)
    full = apply_rope(x)
    # rotating the last 10 tokens alone, with their true positions, equals the full pass
    tail = apply_rope(x[:, 20:], torch.arange(20, 30))
    np.testing.assert_allclose(tail.numpy(), full[:, 20:].numpy(), atol=1e-12)
    # without the offset they would be rotated as positions 0..9: different
    assert (apply_rope(x[:, 20:]) - full[:, 20:]).abs().max() > 0.1
    # unordered, repeated, float and per-batch positions
    pos = torch.tensor([[5, 5, 0], [2.5, 100.0, 7]])
    y = apply_rope(x[:, :3], pos)
    for b in range(2):
        for t in range(3):
            r = rope_rotation_matrix(pos[b, t].item(), 8)
            np.testing.assert_allclose(y[b, t].numpy(), (r @ x[b, t]).numpy(), atol=1e-12)
    # positions given as a Python list work too
    assert torch.equal(
        apply_rope(x[:, :3], [3, 1, 2]), apply_rope(x[:, :3], torch.tensor([3, 1, 2]))
    )


def test_position_interpolation_scale_divides_positions():
    x = torch.randn(6, 16, dtype=torch.float64, generator=_gen(14))
    pos = torch.arange(0, 24, 4)
    np.testing.assert_allclose(
        apply_rope(x, pos, scale=4.0).numpy(), apply_rope(x, pos / 4.0).numpy(), atol=1e-12
    )


def test_frequencies_wavelengths_angles():
    theta = rope_frequencies(8, base=10000.0)
    np.testing.assert_allclose(theta.numpy(), [1.0, 0.1, 0.01, 0.001], rtol=1e-12)
    lam = rope_wavelengths(128, base=500_000.0)
    assert lam[0].item() == pytest.approx(2 * math.pi)
    assert lam[-1].item() == pytest.approx(2 * math.pi * 500_000 ** (126 / 128), rel=1e-12)
    ang = rope_angles(torch.arange(3), 4, base=100.0, scale=2.0)
    assert ang.shape == (3, 2)
    np.testing.assert_allclose(ang.numpy(), [[0, 0], [0.5, 0.05], [1.0, 0.1]], atol=1e-12)


# --------------------------------------------------------------------------- bad input


def test_odd_dimension_is_refused_clearly():
    with pytest.raises(ValueError, match=r"even.*d=7.*\(2, 5, 7\)"):
        apply_rope(torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.randn(5, 7), interleaved=False)
    with pytest.raises(ValueError, match="even"):
        rope_frequencies(9)
    with pytest.raises(ValueError, match="even"):
        interleaved_to_half(torch.randn(3, 5))


def test_other_bad_inputs():
    with pytest.raises(ValueError, match=r"\[\.\.\., N, d\]"):
        apply_rope(torch.randn(8))
    with pytest.raises(ValueError, match=r"positions of shape.*N=5"):
        apply_rope(torch.randn(5, 8), torch.arange(4))
    with pytest.raises(ValueError, match="broadcast"):
        apply_rope(torch.randn(2, 5, 8), torch.zeros(3, 5))
    with pytest.raises(TypeError, match="floating"):
        apply_rope(torch.ones(5, 8, dtype=torch.int64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        apply_rope(np.ones((5, 8)))
    with pytest.raises(ValueError, match="base"):
        apply_rope(torch.randn(5, 8), base=1.0)
    with pytest.raises(ValueError, match="scale"):
        apply_rope(torch.randn(5, 8), scale=0.0)


def test_per_sequence_positions_for_batched_heads():
    """x [B, H, N, d] with one row of positions per sequence: [B, N] (Hugging Face's
    position_ids) or [B, 1, N]; never paired with the heads, even when B equals H."""
    g = _gen(15)
    for num_heads in (3, 2):  # B != H, then B == H (where numpy broadcasting would pair B with H)
        x = torch.randn(2, num_heads, 4, 8, dtype=torch.float64, generator=g)  # (B, H, N, d)
        pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])  # (B, N): sequence 1 is cached
        y = apply_rope(x, pos[:, None, :])  # (B, H, N, d)
        for b in range(2):
            np.testing.assert_allclose(y[b].numpy(), apply_rope(x[b], pos[b]).numpy(), atol=1e-12)
        torch.testing.assert_close(apply_rope(x, pos), y, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"read as \[B, N\].*batch size B=3"):
        apply_rope(torch.randn(3, 2, 4, 8), pos)  # two rows of positions for three sequences
    with pytest.raises(ValueError, match="ambiguous"):
        apply_rope(torch.randn(2, 2, 3, 4, 8), torch.zeros(2, 3, 4))  # 3 of 4 token axes


def test_float32_inputs_stay_accurate_at_long_positions():
    """Angles are computed in float64: a float32 x at position ~100k loses nothing extra."""
    x = torch.randn(4, 64, dtype=torch.float64, generator=_gen(16))
    pos = torch.arange(100_000, 100_004)
    want = apply_rope(x, pos)  # float64 throughout
    got = apply_rope(x.float(), pos)  # float32 x
    assert got.dtype == torch.float32
    assert (got.double() - want).abs().max() < 1e-5  # float32 angles would be off by ~1e-2
    ang32 = pos.float()[:, None] * rope_frequencies(64).float()  # (4, 32) float32 angles
    assert (ang32.double() - rope_angles(pos, 64)).abs().max() > 1e-3  # ...as shown here


def test_sinusoidal_takes_numpy_ints_and_refuses_floats():
    assert torch.equal(sinusoidal_encoding(np.int64(5), np.int64(8)), sinusoidal_encoding(5, 8))
    with pytest.raises(ValueError, match="seq_len must be an int"):
        sinusoidal_encoding(5.0, 8)
    with pytest.raises(ValueError, match="d_model must be an int"):
        sinusoidal_encoding(5, 8.5)


# --------------------------------------------------------------------------- long context


def test_llama3_scaling_keeps_fast_pairs_interpolates_slow_ones_and_blends_between():
    from course_lib.positional import llama3_scaled_frequencies

    theta = rope_frequencies(128, 500_000.0)
    scaled = llama3_scaled_frequencies(theta)
    wavelength = 2 * math.pi / theta
    fast, slow = wavelength < 8192 / 4, wavelength > 8192
    assert fast.sum() == 29 and slow.sum() == 29  # 6 pairs in between
    torch.testing.assert_close(scaled[fast], theta[fast], rtol=0, atol=0)
    torch.testing.assert_close(scaled[slow], theta[slow] / 8, rtol=1e-15, atol=0)
    mid = ~fast & ~slow
    assert torch.all(scaled[mid] < theta[mid]) and torch.all(scaled[mid] > theta[mid] / 8)
    assert torch.all(torch.diff(scaled) < 0)  # still a ladder from fast to slow
    with pytest.raises(ValueError, match="low < high"):
        llama3_scaled_frequencies(theta, low_freq_factor=4.0, high_freq_factor=1.0)
    with pytest.raises(ValueError, match="factor must be a number >= 1"):
        llama3_scaled_frequencies(theta, factor=0.5)


def _yarn_reference(d, base, factor, original_context, beta_fast=32.0, beta_slow=1.0):
    """YaRN's frequencies written out from the reference code (jquesnelle/yarn,
    ``LlamaYaRNScaledRotaryEmbedding.yarn``), one pair at a time in plain Python: the
    correction dimension of r turns is d ln(L / (2 pi r)) / (2 ln base); the ramp runs from
    floor(dim(beta_fast)) to ceil(dim(beta_slow)), clipped to [0, d - 1], linear in the pair
    index; the mask 1 - ramp picks the original frequency, ramp the one divided by factor."""
    low = math.floor(
        d * math.log(original_context / (beta_fast * 2 * math.pi)) / (2 * math.log(base))
    )
    high = math.ceil(
        d * math.log(original_context / (beta_slow * 2 * math.pi)) / (2 * math.log(base))
    )
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    out = []
    for i in range(d // 2):
        extrapolation = 1.0 / base ** (2 * i / d)
        interpolation = extrapolation / factor
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        mask = 1 - ramp
        out.append(interpolation * (1 - mask) + extrapolation * mask)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize(
    "d, base, factor, context",
    [
        (128, 10_000.0, 4.0, 4096),
        (128, 10_000.0, 16.0, 4096),
        (64, 1_000_000.0, 8.0, 32768),
        (32, 10_000.0, 2.0, 2048),
    ],
)
def test_yarn_frequencies_equal_the_reference_code(d, base, factor, context):
    from course_lib.positional import yarn_scaled_frequencies

    got = yarn_scaled_frequencies(d, factor, context, base=base)
    torch.testing.assert_close(got, _yarn_reference(d, base, factor, context), rtol=1e-14, atol=0)
    theta = rope_frequencies(d, base)
    # the fast pairs keep their speed, the slow ones are interpolated, a ladder throughout
    assert got[0] == theta[0] and torch.isclose(got[-1], theta[-1] / factor, rtol=1e-14)
    assert torch.all(torch.diff(got) < 0)


def test_yarn_correction_range_is_where_pairs_turn_beta_times():
    from course_lib.positional import yarn_correction_range

    d, base, context = 128, 10_000.0, 4096
    low, high = yarn_correction_range(d, context, base=base, truncate=False)
    turns = (
        context * base ** (-2 * torch.tensor([low, high], dtype=torch.float64) / d) / (2 * math.pi)
    )
    torch.testing.assert_close(turns, torch.tensor([32.0, 1.0], dtype=torch.float64))
    assert (
        yarn_correction_range(d, context, base=base)
        == (math.floor(low), math.ceil(high))
        == (20, 46)
    )
    # clipped to the pairs there are: a tiny context puts both ends below 0
    assert yarn_correction_range(8, 4, base=base) == (0, 0)
    with pytest.raises(ValueError, match="beta_slow < beta_fast"):
        yarn_correction_range(d, context, beta_fast=1.0, beta_slow=32.0)


def test_yarn_paper_ramp_differs_from_the_code_in_between():
    """The paper's equation ramps in r = L / lambda; the code in the pair index, i.e. in
    ln r. Same ends, different middle: d = 128, factor 4, L = 4096 (issue 29's figures)."""
    from course_lib.positional import (
        llama3_scaled_frequencies,
        yarn_paper_frequencies,
        yarn_scaled_frequencies,
    )

    theta = rope_frequencies(128, 10_000.0)
    paper = yarn_paper_frequencies(theta, 4.0, 4096)
    code = yarn_scaled_frequencies(128, 4.0, 4096)
    rel = (code / paper - 1).abs()  # (64,)
    assert int((rel > 1e-12).sum()) == 25 and 0.7 < rel.max() < 0.75
    assert torch.equal(rel[:20], torch.zeros(20, dtype=torch.float64))  # kept in both
    # the paper's ramp is Llama 3.1's rule with alpha, beta for low, high
    torch.testing.assert_close(
        yarn_paper_frequencies(theta, 16.0, 4096, alpha=1.0, beta=4.0),
        llama3_scaled_frequencies(theta, 16.0, 1.0, 4.0, 4096),
    )
    with pytest.raises(TypeError, match="yarn_paper_frequencies"):
        yarn_scaled_frequencies(theta, 4.0, 4096)  # the old signature, refused by name


def test_yarn_temperature():
    from course_lib.positional import yarn_attention_factor

    assert yarn_attention_factor(16.0) == pytest.approx(1 + 0.1 * math.log(16.0))
    assert yarn_attention_factor(1.0) == 1.0
    with pytest.raises(ValueError, match="positive"):
        yarn_attention_factor(0.0)


def test_frequencies_replace_the_base_and_are_checked():
    x = torch.randn(5, 8, dtype=torch.float64, generator=_gen(30))
    theta = rope_frequencies(8, 500.0)
    torch.testing.assert_close(apply_rope(x, frequencies=theta), apply_rope(x, base=500.0))
    with pytest.raises(ValueError, match=r"frequencies of shape \[d/2\] = \[4\]"):
        apply_rope(x, frequencies=torch.ones(3))
