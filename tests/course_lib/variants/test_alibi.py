"""Unit tests of course_lib.variants.alibi: the slopes recipe of Press et al. (2022) and the bias."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.variants.alibi import alibi_bias, alibi_slopes


def test_power_of_two_slopes_are_the_geometric_sequence():
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    torch.testing.assert_close(
        alibi_slopes(16), torch.tensor([2 ** (-0.5 * k) for k in range(1, 17)])
    )
    assert alibi_slopes(1).tolist() == [2.0**-8]


def test_non_power_of_two_takes_every_other_slope_of_the_next_power():
    s12 = alibi_slopes(12, dtype=torch.float64)
    assert s12[:8].tolist() == alibi_slopes(8, dtype=torch.float64).tolist()
    assert s12[8:].tolist() == pytest.approx([2 ** (-0.5 * k) for k in (1, 3, 5, 7)])
    s6 = alibi_slopes(6, dtype=torch.float64)
    assert s6.tolist() == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    # the extra slopes fall between the first ones, never repeating them
    for n in (3, 5, 6, 7, 12, 20, 40, 96):
        s = alibi_slopes(n, dtype=torch.float64)
        assert len(set(s.tolist())) == n and (s > 0).all() and (s < 1).all()


def test_slopes_errors():
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            alibi_slopes(bad)


def test_bias_is_minus_slope_times_distance():
    b = alibi_bias(4, 5, 7, dtype=torch.float64)
    m = alibi_slopes(4, dtype=torch.float64)
    assert b.shape == (4, 5, 7)
    for h in range(4):
        for i in range(5):
            for j in range(7):
                assert math.isclose(b[h, i, j].item(), -m[h].item() * (i - j))
    assert (b.diagonal(dim1=-2, dim2=-1) == 0).all()


def test_bias_rejects_wrong_slopes():
    with pytest.raises(ValueError, match=r"slopes of shape \[H\]"):
        alibi_bias(4, 3, slopes=torch.ones(3))
