"""Unit tests of course_lib.variants.sliding_window: ring-buffer cache, memory, receptive field."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import scaled_dot_product_attention
from course_lib.multihead import kv_cache_bytes, repeat_kv
from course_lib.variants import mask_mods as M
from course_lib.variants.sliding_window import (
    RingKVCache,
    reachable,
    receptive_field,
    sliding_window_cache_bytes,
)


@pytest.mark.parametrize("window, h, h_kv", [(4, 2, 2), (5, 4, 2), (1, 3, 1), (30, 2, 1)])
def test_ring_cache_decoding_equals_full_attention_with_the_window_mask(window, h, h_kv):
    g = torch.Generator().manual_seed(window)
    b, n, d = 2, 17, 6
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h_kv, n, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, h_kv, n, d, generator=g, dtype=torch.float64)
    mask = M.materialize(M.sliding_window(window), 1, 1, n)
    full, _ = scaled_dot_product_attention(
        q, repeat_kv(k, h // h_kv), repeat_kv(v, h // h_kv), mask
    )  # (B, H, N, d)
    cache = RingKVCache(window, b, h_kv, d, dtype=torch.float64)
    size = cache.nbytes
    for t in range(n):
        slot = cache.update(k[:, :, t : t + 1], v[:, :, t : t + 1])
        assert slot == t % window
        out = cache.attend(q[:, :, t : t + 1])  # (B, H, 1, d)
        torch.testing.assert_close(out, full[:, :, t : t + 1], atol=1e-12, rtol=0)
        assert cache.nbytes == size  # constant memory
    held = [-1] * max(0, window - n) + list(range(max(0, n - window), n))
    assert sorted(cache.positions.tolist()) == held  # the last W tokens, -1 for empty slots


def test_ring_cache_errors():
    cache = RingKVCache(3, 1, 2, 4)
    with pytest.raises(ValueError, match="one token at a time"):
        cache.update(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match="positive integer"):
        RingKVCache(0, 1, 2, 4)
    cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="multiple of"):
        cache.attend(torch.zeros(1, 3, 1, 4))


def test_cache_bytes_stop_growing_at_the_window_mistral_7b():
    # Mistral 7B (Jiang et al., 2023): 32 layers, 8 KV heads of 128, window 4096
    w = sliding_window_cache_bytes(32, 8, 128, 4096, 4096)
    assert w == 512 * 2**20  # 512 MiB in bf16, per sequence
    assert sliding_window_cache_bytes(32, 8, 128, 32768, 4096) == w
    assert kv_cache_bytes(32, 8, 128, 32768) == 8 * w
    assert sliding_window_cache_bytes(32, 8, 128, 100, 4096) == kv_cache_bytes(32, 8, 128, 100)


@pytest.mark.parametrize("window, layers", [(2, 1), (3, 4), (5, 3), (8, 2)])
def test_receptive_field_equals_reachability(window, layers):
    n = 40
    mask = M.materialize(M.sliding_window(window), 1, 1, n)[0, 0]
    r = reachable(mask, layers)
    last = r[n - 1]  # which inputs reach the last output
    span = int(last.sum())
    assert span == min(n, receptive_field(window, layers))
    assert last[n - span :].all() and not last[: n - span].any()


def test_receptive_field_of_a_real_stack_by_gradients():
    """A stack of random sliding-window attention layers: d out_last / d x_j is nonzero
    exactly for the positions the receptive field says."""
    torch.manual_seed(0)
    n, d, window, layers = 24, 4, 3, 4
    x = torch.randn(1, n, d, dtype=torch.float64, requires_grad=True)
    mask = M.materialize(M.sliding_window(window), 1, 1, n)[0]  # (1, N, N)
    h = x
    for _ in range(layers):
        w = torch.randn(3, d, d, dtype=torch.float64)
        o, _ = scaled_dot_product_attention(h @ w[0], h @ w[1], h @ w[2], mask)
        h = h + o
    h[0, -1].sum().backward()
    nonzero = x.grad[0].abs().sum(-1) > 0
    assert int(nonzero.sum()) == receptive_field(window, layers)


def test_receptive_field_errors():
    with pytest.raises(ValueError):
        receptive_field(0, 3)
    with pytest.raises(ValueError, match="square boolean"):
        reachable(torch.ones(3, 4, dtype=torch.bool), 2)
