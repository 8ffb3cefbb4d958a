"""course_lib.gpt.attention_stats: each statistic on inputs whose value is known."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.gpt.attention_stats import (
    attention_entropy,
    first_token_share,
    qk_variance,
    rope_pair_energy,
)


def test_qk_variance_of_unit_components_is_d_k():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 4, 64, 64, generator=g), torch.randn(4, 2, 64, 64, generator=g)
    assert qk_variance(q, k) == pytest.approx(64, rel=0.1)


def test_entropy_of_zero_scores_is_uniform():
    q, k = torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    want = sum(math.log(n + 1) for n in range(1, 10)) / 9
    assert attention_entropy(q, k, 0.0) == pytest.approx(want)
    assert attention_entropy(q, k, 10.0) < attention_entropy(q, k, 0.1)


def test_rope_pair_energy():
    x = torch.zeros(3, 8)
    x[:, 2], x[:, 3] = 1.0, 1.0  # interleaved pair 1
    assert rope_pair_energy(x).tolist() == [0.0, 1.0, 0.0, 0.0]
    assert rope_pair_energy(x, interleaved=False).tolist() == [0.0, 0.0, 0.5, 0.5]


def test_first_token_share_of_uniform_attention():
    keep = torch.ones(6, 6).tril()
    w = (keep / keep.sum(-1, keepdim=True))[None, None]  # (1, 1, 6, 6)
    assert first_token_share(w) == pytest.approx(sum(1 / (n + 1) for n in range(1, 6)) / 5)
