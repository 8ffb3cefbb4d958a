"""The chapter 05 exercises: references pass, every declared mistake is caught and named."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import CheckFailed, check
from course_lib.checks.core import get_exercise

IDS = ["05.1", "05.2", "05.3", "05.4", "05.5", "05.6"]


def test_mistakes_are_told_apart():
    """Each wrong twin is named by its own hint, not by another mistake's hint."""
    for ex_id in IDS:
        ex = get_exercise(ex_id)
        for hint, wrong in ex.mistakes.items():
            try:
                check(ex_id, wrong, quiet=True)
            except CheckFailed as failure:
                named = [h for h in ex.mistakes if h in str(failure)]
                assert named and named[0] == hint, (ex_id, hint[:40], named)


def test_05_1_accepts_a_torch_table_and_float32():
    from course_lib.positional import sinusoidal_encoding

    assert check("05.1", lambda n, d: sinusoidal_encoding(n, d), hidden=True).passed


def test_05_2_reports_a_wrong_shape():
    with pytest.raises(CheckFailed, match="expected shape"):
        check("05.2", lambda x, positions: x[..., ::2], quiet=True)


def test_05_3_reference_equals_absolute_positions():
    """The offset formula equals rotating q to m and k to n, for several (m, n)."""
    from course_lib.checks.ch05 import relative_score_reference
    from course_lib.positional import apply_rope

    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 16, dtype=torch.float64, generator=g)
    k = torch.randn(3, 16, dtype=torch.float64, generator=g)
    m, n = torch.tensor([5, 40, 2]), torch.tensor([1, 70, 2])
    absolute = (
        apply_rope(q[:, None], m[:, None])[:, 0] * apply_rope(k[:, None], n[:, None])[:, 0]
    ).sum(-1)
    assert torch.allclose(relative_score_reference(q, k, m - n), absolute, atol=1e-12)


def test_05_4_reference_preserves_multi_head_scores():
    from course_lib.checks.ch05 import interleaved_to_half_weights_reference as convert
    from course_lib.positional import apply_rope

    g = torch.Generator().manual_seed(1)
    H, head_dim, d_model, n = 3, 8, 10, 7
    x = torch.randn(n, d_model, dtype=torch.float64, generator=g)
    wq = torch.randn(d_model, H * head_dim, dtype=torch.float64, generator=g)
    wk = torch.randn(d_model, H * head_dim, dtype=torch.float64, generator=g)

    def scores(wq, wk, interleaved):
        q = (x @ wq).reshape(n, H, head_dim).transpose(0, 1)  # (H, N, d)
        k = (x @ wk).reshape(n, H, head_dim).transpose(0, 1)  # (H, N, d)
        return apply_rope(q, interleaved=interleaved) @ apply_rope(k, interleaved=interleaved).mT

    want = scores(wq, wk, True)
    got = scores(convert(wq, H), convert(wk, H), False)
    assert torch.allclose(got, want, atol=1e-10)
    assert not torch.allclose(scores(wq, wk, False), want, atol=1e-3)


def test_05_1_accepts_a_table_computed_in_float32():
    """float32 rounding (~1e-5 at position 200) is not a mistake; hidden cases must pass too."""

    def table32(n, d):
        p = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
        w = 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float32) / d)  # (d/2,)
        pe = torch.zeros(n, d)  # (n, d) float32
        pe[:, 0::2], pe[:, 1::2] = torch.sin(p * w), torch.cos(p * w)
        return pe

    assert check("05.1", table32, quiet=True).passed
    assert check("05.1", table32, hidden=True, quiet=True).passed


def _rope_float32_angles(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float32) / d)  # (d/2,)
    ang = positions.to(torch.float32)[:, None] * theta  # (N, d/2) float32: the mistake
    a, b = x[..., 0::2], x[..., 1::2]  # (..., N, d/2)
    c, s = torch.cos(ang), torch.sin(ang)  # (N, d/2)
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)  # (..., N, d)


def test_05_2_float32_angles_are_caught_visibly_and_explained():
    with pytest.raises(CheckFailed, match=r"not precise enough.*float64") as info:
        check("05.2", _rope_float32_angles, quiet=True)
    assert "positions 5000" in str(info.value)  # a visible case, not only the grader's
    assert "1 of 4 cases failed" in str(info.value)  # the rotation itself is right


def test_05_2_returning_x_is_not_blamed_on_positions():
    with pytest.raises(CheckFailed) as info:
        check("05.2", lambda x, positions: x, quiet=True)
    assert "ignored `positions`" not in str(info.value)


def test_05_3_refuses_a_complex_result_with_a_clear_message():
    from course_lib.checks.ch05 import relative_score_reference as ref

    def complex_sum(q, k, delta):
        return ref(q, k, delta).to(torch.complex128)  # right real part, still complex

    with pytest.raises(CheckFailed, match=r"complex.*REAL part") as info:
        check("05.3", complex_sum, quiet=True)
    assert "Likely cause" not in str(info.value)  # no wrong twin claims it


def test_05_3_modulus_instead_of_real_part_is_named():
    def relative_score(q, k, delta):
        d = q.shape[-1]
        theta = 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
        zq = torch.complex(q[:, 0::2], q[:, 1::2])
        zk = torch.complex(k[:, 0::2], k[:, 1::2])
        rot = torch.polar(torch.ones_like(theta), delta.double()[:, None] * theta)
        return (zq * zk.conj() * rot).sum(-1).abs()

    with pytest.raises(CheckFailed, match=r"modulus \|…\| of the complex sum"):
        check("05.3", relative_score, quiet=True)


def test_05_4_permuting_rows_is_named_when_square_and_when_it_raises():
    def rows_per_head(W, num_heads):  # the per-head permutation on W's rows
        d_model, width = W.shape
        head_dim = width // num_heads
        perm = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
        return W.reshape(num_heads, head_dim, -1)[:, perm].reshape(d_model, width)

    def rows_indexed(W, num_heads):  # W[perm]: an IndexError on the (1, 8) case
        head_dim = W.shape[1] // num_heads
        perm = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
        return W[perm]

    for wrong in (rows_per_head, rows_indexed):
        with pytest.raises(CheckFailed, match="you permuted the rows of W|you indexed the rows"):
            check("05.4", wrong, quiet=True)


def test_05_5_reference_against_the_three_cases_written_out():
    import math

    from course_lib.positional import rope_frequencies

    ref = get_exercise("05.5").reference
    theta = rope_frequencies(128, 500_000.0)
    got = ref(theta, 8.0, 1.0, 4.0, 8192)
    for t, g in zip(theta.tolist(), got.tolist()):
        wavelength = 2 * math.pi / t
        if wavelength < 8192 / 4:
            assert g == t
        elif wavelength > 8192:
            assert g == pytest.approx(t / 8, rel=1e-14)
        else:
            s = (8192 / wavelength - 1) / 3
            assert g == pytest.approx((1 - s) * t / 8 + s * t, rel=1e-14)


def test_05_5_position_interpolation_is_named():
    with pytest.raises(CheckFailed, match="plain position interpolation"):
        check("05.5", lambda theta, factor, low, high, ctx: theta / factor, quiet=True)


def _learner_turns(head_dim, base, context_len, *, half=False):
    """05.6 written another way: wavelengths, not angles."""
    import math

    wavelengths = [2 * math.pi * base ** (2 * i / head_dim) for i in range(head_dim // 2)]
    reach = (context_len - 1) * (2 if half else 1)
    return sum(1 for w in wavelengths if w <= reach)


def test_05_6_another_correct_count_passes_and_shows_the_prediction(capsys):
    assert check("05.6", _learner_turns, prediction=32).passed
    assert check("05.6", _learner_turns, hidden=True).passed
    assert "you predicted 32, measured 41" in capsys.readouterr().out


def test_05_6_half_turns_are_named():
    with pytest.raises(CheckFailed, match="you counted half turns"):
        check("05.6", lambda *a: _learner_turns(*a, half=True), quiet=True)
