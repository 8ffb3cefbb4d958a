"""course_lib.flash.reference: the tiled algorithm in plain torch, and the tile classes.

The reference is checked in float64 against naive attention with an explicit mask (the two
differ only in the order of their sums), through its custom backward, and for what it
promises about memory: never more than one tile of scores, under autograd too.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from flash_lab import ground_truth, make_inputs, naive_attention, visible

from course_lib.flash import flash_attention_reference, kernel_tile_map, key_tile_range

# --------------------------------------------------------------------------- the algorithm


@pytest.mark.parametrize("n", [1, 17, 64, 127, 200])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size", [16, (32, 8), 256])
def test_reference_equals_naive_attention(n, is_causal, block_size):
    g = torch.Generator().manual_seed(n)
    q = torch.randn(2, 3, n, 24, generator=g, dtype=torch.float64)  # (B, H, N, d)
    k = torch.randn(2, 3, n, 24, generator=g, dtype=torch.float64)  # (B, H, N, d)
    v = torch.randn(2, 3, n, 40, generator=g, dtype=torch.float64)  # (B, H, N, d_v)
    out, lse = flash_attention_reference(q, k, v, is_causal=is_causal, block_size=block_size)
    scores = q @ k.transpose(-2, -1) / math.sqrt(24)  # (B, H, N, N)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -math.inf)
    naive = torch.softmax(scores, dim=-1) @ v  # (B, H, N, d_v)
    # Float64 all the way: the tiled and naive sums differ only in summation order.
    torch.testing.assert_close(out, naive, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=1e-12, rtol=1e-10)


def test_reference_rectangular_scale_and_dtype():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 10, 8, generator=g)  # (B, Nq, d): any leading dims
    k = torch.randn(3, 37, 8, generator=g)  # (B, Nk, d)
    v = torch.randn(3, 37, 5, generator=g)  # (B, Nk, d_v)
    for causal in (False, True):
        out, lse = flash_attention_reference(q, k, v, is_causal=causal, scale=0.7, block_size=4)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.7)
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
        assert out.dtype == torch.float32 and lse.shape == (3, 10)
    half, half_lse = flash_attention_reference(q.half(), k.half(), v.half(), block_size=16)
    assert half.dtype == torch.float16 and half_lse.dtype == torch.float32  # work in float32


REFERENCE_MASKS = [
    # H, H_kv, Nq, Nk, mask
    (4, 2, 13, 29, dict(is_causal=True, causal_alignment="bottom_right")),  # a KV cache
    (4, 1, 29, 13, dict(is_causal=True, causal_alignment="bottom_right")),  # rows with no key
    (2, 2, 29, 29, dict(is_causal=True, window=5)),
    (6, 3, 11, 40, dict(is_causal=True, causal_alignment="bottom_right", window=9)),
    (4, 2, 20, 20, dict()),  # GQA alone
    (2, 2, 30, 20, dict(is_causal=True)),  # top-left, Nq > Nk
]


@pytest.mark.parametrize("H,h_kv,n_q,n_k,mask", REFERENCE_MASKS)
def test_reference_gqa_alignment_window_against_naive(H, h_kv, n_q, n_k, mask):
    """Output, LSE and all three gradients (through the custom backward) in float64."""
    q, k, v, do = make_inputs(2, H, n_q, n_k, 8, torch.float64, h_kv=h_kv, seed=n_q * n_k)
    (ref_o, ref_dq, ref_dk, ref_dv), ref_lse = ground_truth(q, k, v, do, **mask)
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = flash_attention_reference(qr, kr, vr, block_size=(8, 4), **mask)
    out.backward(do)
    torch.testing.assert_close(out, ref_o, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lse, ref_lse, atol=1e-12, rtol=1e-10)  # -inf where no key
    for got, ref in ((qr.grad, ref_dq), (kr.grad, ref_dk), (vr.grad, ref_dv)):
        torch.testing.assert_close(got, ref, atol=1e-11, rtol=1e-9)
    if mask.get("window") is None and not (n_q > n_k and mask.get("causal_alignment")):
        # torch SDPA agrees where it can express the same thing (GQA: enable_gqa)
        allowed = visible(
            n_q, n_k, mask.get("is_causal", False), mask.get("causal_alignment", "top_left")
        )
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=H != h_kv)
        torch.testing.assert_close(out, sdpa, atol=1e-12, rtol=1e-10)


def test_reference_rows_that_see_no_key_are_zero():
    """Bottom-right with Nq > Nk: the first Nq - Nk queries see nothing: output 0, L = -inf."""
    q, k, v, _ = make_inputs(1, 2, 9, 4, 8, torch.float64)
    out, lse = flash_attention_reference(
        q, k, v, is_causal=True, causal_alignment="bottom_right", block_size=3
    )
    assert torch.equal(out[..., :5, :], torch.zeros_like(out[..., :5, :]))
    assert torch.isneginf(lse[..., :5]).all() and torch.isfinite(lse[..., 5:]).all()


def test_reference_gradient_through_the_lse():
    """L is an output too (chapter 09 merges partial results by it): its gradient is P."""
    q, k, v, _ = make_inputs(1, 2, 9, 14, 8, torch.float64, h_kv=1)
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = flash_attention_reference(
        qr, kr, vr, is_causal=True, causal_alignment="bottom_right", block_size=4
    )
    (out.sum() + (lse * torch.arange(9.0, dtype=torch.float64)).sum()).backward()
    qn, kn, vn = (x.clone().requires_grad_() for x in (q, k, v))
    o2, l2 = naive_attention(qn, kn, vn, is_causal=True, causal_alignment="bottom_right")
    (o2.sum() + (l2 * torch.arange(9.0, dtype=torch.float64)).sum()).backward()
    for a, b in ((qr, qn), (kr, kn), (vr, vn)):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-11, rtol=1e-9)


def test_reference_layout_bnhd_is_flash_attn_layout():
    q, k, v, _ = make_inputs(2, 4, 12, 12, 8, torch.float64, h_kv=2)
    out, lse = flash_attention_reference(q, k, v, is_causal=True, block_size=5)
    out2, lse2 = flash_attention_reference(
        *(x.transpose(1, 2).contiguous() for x in (q, k, v)),
        is_causal=True,
        block_size=5,
        layout="bnhd",
    )
    assert out2.shape == (2, 12, 4, 8)  # [B, N, H, d] in, [B, N, H, d] out
    torch.testing.assert_close(out2, out.transpose(1, 2))
    torch.testing.assert_close(lse2, lse)  # the LSE stays [B, H, Nq], as flash-attn's


class _LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest tensor any torch operation creates while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_reference_never_holds_more_than_one_tile_under_autograd():
    """Autograd of the tiled loop kept every tile (N=8192 forward+backward: 1835 MiB, more
    than naive attention's 808 MiB). With the custom backward, what is saved is q, k, v, O
    and L (O(N d)), and no operation of the forward or the backward creates a tensor larger
    than O(N d) or one tile: counted, not timed."""
    B, H, N, d, block = 1, 2, 512, 16, 64
    q, k, v, do = make_inputs(B, H, N, N, d, torch.float32)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _LargestTensor() as fwd:
        out, lse = flash_attention_reference(q, k, v, is_causal=True, block_size=block)
    inputs_and_outputs = 4 * B * H * N * d * 4 + B * H * N * 4  # q, k, v, O and L in float32
    assert sum(saved) <= inputs_and_outputs, (sum(saved), inputs_and_outputs)
    with _LargestTensor() as bwd:
        out.backward(do)
    one_tile, one_matrix = B * H * block * block, B * H * N * N
    for mode in (fwd, bwd):
        assert mode.largest <= max(one_tile, B * H * N * d), mode.largest
        assert mode.largest < one_matrix // 16
    # and the gradients are right
    qn, kn, vn = (x.detach().double().requires_grad_() for x in (q, k, v))
    o2, _ = naive_attention(qn, kn, vn, is_causal=True)
    o2.backward(do.double())
    torch.testing.assert_close(q.grad.double(), qn.grad, atol=2e-5, rtol=1e-4)


def test_reference_errors():
    q = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="share the last dimension"):
        flash_attention_reference(q, torch.randn(2, 5, 4), torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="number of keys"):
        flash_attention_reference(q, q, torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match="block_size"):
        flash_attention_reference(q, q, q, block_size=0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        flash_attention_reference(q.numpy(), q, q)
    q4 = torch.randn(1, 6, 5, 8)
    with pytest.raises(ValueError, match="multiple of H_kv"):
        flash_attention_reference(q4, torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8))
    with pytest.raises(ValueError, match="causal_alignment"):
        flash_attention_reference(q4, q4, q4, is_causal=True, causal_alignment="bottom-right")
    with pytest.raises(ValueError, match="pass is_causal=True"):
        flash_attention_reference(q4, q4, q4, window=3)
    with pytest.raises(ValueError, match="layout"):
        flash_attention_reference(q4, q4, q4, layout="bshd")


# --------------------------------------------------------------------------- tile classes


def test_key_tile_range_by_hand():
    """(lo, full_lo, full_hi, hi) for a few cases worked out on paper (tiles of 8 keys)."""
    # no mask, 30 keys: tiles 0, 8, 16 are full, the ragged one at 24 is partial
    assert key_tile_range(0, 7, 30, 8) == (0, 0, 24, 30)
    # causal, queries 8..15: keys 0..7 full, 8..15 crosses the diagonal, the rest skipped
    assert key_tile_range(8, 15, 30, 8, is_causal=True) == (0, 0, 8, 16)
    # and a window of 4 (query 8 sees 5..8, query 15 sees 12..15): both tiles partial
    assert key_tile_range(8, 15, 30, 8, is_causal=True, window=4) == (0, 16, 16, 16)
    # the diagonal before the first key (bottom-right, Nq > Nk): nothing at all
    assert key_tile_range(0, 3, 10, 4, is_causal=True, diag=-5) == (0, 0, 0, 0)


def _ideal_tiles(n_q, n_k, bm, bn, is_causal, alignment, window):
    """0 skipped / 1 partial / 2 full, from the mask itself (a ragged tile is partial)."""
    ok = visible(n_q, n_k, is_causal, alignment, window)
    t_q, t_k = -(-n_q // bm), -(-n_k // bn)
    tiles = torch.zeros(t_q, t_k, dtype=torch.long)
    for i in range(t_q):
        for j in range(t_k):
            tile = ok[i * bm : (i + 1) * bm, j * bn : (j + 1) * bn]
            if tile.any():
                full_size = (j + 1) * bn <= n_k
                tiles[i, j] = 2 if tile.all() and full_size else 1
    return tiles


@pytest.mark.parametrize("bm,bn", [(4, 4), (8, 4), (4, 8), (16, 4)])
def test_kernel_tile_map_is_the_ideal_classification(bm, bn):
    """The loop bounds of key_tile_range visit exactly the tiles that hold a visible key,
    and skip the mask on exactly the tiles where every key is visible to every query."""
    for n_q, n_k in ((16, 16), (13, 29), (29, 13), (1, 40), (17, 17)):
        for is_causal, alignment, window in (
            (False, "top_left", None),
            (True, "top_left", None),
            (True, "bottom_right", None),
            (True, "top_left", 3),
            (True, "bottom_right", 6),
            (True, "bottom_right", 1),
        ):
            got = kernel_tile_map(
                n_q, n_k, bm, bn, is_causal=is_causal, causal_alignment=alignment, window=window
            )
            ideal = _ideal_tiles(n_q, n_k, bm, bn, is_causal, alignment, window)
            assert torch.equal(got, ideal), (n_q, n_k, is_causal, alignment, window, got, ideal)


def test_kernel_tile_map_checks_its_options():
    with pytest.raises(ValueError, match="pass is_causal=True"):
        kernel_tile_map(8, 8, 4, 4, window=2)
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        kernel_tile_map(8, 8, 4, 4, is_causal="yes")
