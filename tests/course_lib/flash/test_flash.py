"""course_lib.flash: the tiled reference and the Triton kernels, forward, backward, decode.

Without a CUDA GPU the kernels run in Triton's interpreter (the root conftest.py turns it on
before triton is imported), which costs ~milliseconds per tile operation, so the CPU
cases are small: every N in {1, 17, 64, 127, 200} appears, with the interpreter's tiles
(64 queries x 32 keys forward) giving ragged last tiles and several tiles per row at
N = 127 and 200, and lengths that are multiples of the tiles taking the even fast path.
The ``gpu``-marked twins run the compiled kernels at realistic sizes and skip cleanly
without CUDA.

Tolerances (kernel vs a float64 reference computed from the *same* rounded inputs):

* float32: every dot product and running sum is float32 (relative rounding 6e-8 per
  operation); over N <= 200 keys and d <= 128 features the accumulated error is ~1e-6
  for unit-variance inputs. atol 2e-5 / rtol 1e-4 leaves a 10x margin and still catches
  any real bug (a missing rescale or mask gives errors of order 1e-1).
* float16: P is rounded to float16 (relative 4.9e-4) before P @ V and dS before dS @ K,
  outputs are stored in float16 (half an ulp is 2.4e-4 near 0.5); errors of ~1e-3 are
  expected, so outputs get atol 4e-3 and gradients 1e-2 (their magnitudes are larger).
* GPU, float16/bfloat16, N up to 4096: errors grow with N and with the gradients' size, so
  the bound is relative to torch's own SDPA in the same precision (see _check_kernel).
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import course_lib.flash as flash
from course_lib.flash import (
    flash_attention,
    flash_attention_reference,
    flash_attention_with_lse,
    flash_decode,
    forward,
    inputs,
    launch,
)
from course_lib.flash.tiles import Tile, gpu_tiles

# Where the small "CPU" cases run: the CPU through the interpreter, or, when Triton compiles
# (a CUDA machine), the GPU — a compiled kernel cannot read CPU tensors.
DEVICE = "cpu" if flash.triton_mode() == "interpreter" else "cuda"

TOL = {
    torch.float32: dict(out=(2e-5, 1e-4), grad=(2e-5, 1e-4)),
    torch.float16: dict(out=(4e-3, 1e-2), grad=(1e-2, 1e-2)),
}


def _inputs(B, H, n_q, n_k, d, dtype, device="cpu", seed=0, h_kv=None):
    g = torch.Generator().manual_seed(seed)
    h_kv = H if h_kv is None else h_kv
    q = torch.randn(B, H, n_q, d, generator=g)  # (B, H, Nq, d)
    k = torch.randn(B, h_kv, n_k, d, generator=g)  # (B, H_kv, Nk, d)
    v = torch.randn(B, h_kv, n_k, d, generator=g)  # (B, H_kv, Nk, d)
    do = torch.randn(B, H, n_q, d, generator=g)  # (B, H, Nq, d)
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, do)]


def _visible(n_q, n_k, is_causal, alignment="top_left", window=None, device="cpu"):
    """(Nq, Nk) boolean, True = may attend: the definition the kernels must implement."""
    diag = 0 if alignment == "top_left" else n_k - n_q
    i = torch.arange(n_q, device=device)[:, None] + diag  # (Nq, 1) key position of query i
    j = torch.arange(n_k, device=device)[None, :]  # (1, Nk)
    ok = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if is_causal:
        ok &= j <= i
    if window is not None:
        ok &= j >= i - window + 1
    return ok


def naive_attention(q, k, v, is_causal=False, causal_alignment="top_left", window=None, scale=None):
    """Attention with an explicit mask, K/V repeated for GQA; rows with no key give 0 and -inf.

    Differentiable; used in float64 as the ground truth for outputs, LSE and gradients.
    """
    g = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)  # (B, H, Nk, d)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale  # (B, H, Nq, Nk)
    ok = _visible(q.shape[-2], k.shape[-2], is_causal, causal_alignment, window, q.device)
    s = s.masked_fill(~ok, -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # (B, H, Nq)
    p = torch.exp(s - lse.masked_fill(lse == -math.inf, 0.0)[..., None])  # (B, H, Nq, Nk)
    return p @ v, lse


def _ground_truth(q, k, v, do, **mask):
    """float64 output, LSE and gradients of naive attention on the same (rounded) inputs."""
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    out, lse = naive_attention(qr, kr, vr, **mask)
    out.backward(do.double())
    return [t.detach().cpu() for t in (out, qr.grad, kr.grad, vr.grad)], lse.detach().cpu()


def _sdpa_grads(q, k, v, do, is_causal, scale, dtype=torch.float64):
    """Output and gradients of torch's SDPA in ``dtype`` on the same (rounded) inputs."""
    qr, kr, vr = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    gqa = dict(enable_gqa=True) if qr.shape[1] != kr.shape[1] else {}
    out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=is_causal, scale=scale, **gqa)
    out.backward(do.to(dtype))
    return [t.detach().double().cpu() for t in (out, qr.grad, kr.grad, vr.grad)]


def _assert_close(got, expected, tol, what):
    atol, rtol = tol
    got = got.detach().double().cpu()
    err = (got - expected).abs()
    bound = atol + rtol * expected.abs()
    assert bool((err <= bound).all()), (
        f"{what}: max error {err.max().item():.3g} (atol={atol}, rtol={rtol}), "
        f"at {tuple(int(i) for i in torch.nonzero(err > bound)[0])}"
    )


def _check_kernel(
    B, H, n_q, n_k, d, is_causal, scale=None, dtype=torch.float32, device=DEVICE, grads=True
):
    q, k, v, do = _inputs(B, H, n_q, n_k, d, dtype, device)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = flash_attention(q, k, v, is_causal=is_causal, scale=scale, layout="bhnd")
    assert out.shape == (B, H, n_q, d) and out.dtype == dtype and out.device == q.device
    refs = _sdpa_grads(q, k, v, do, is_causal, scale)  # float64, on q's device
    if grads:
        out.backward(do)
    ours = [out] + ([q.grad, k.grad, v.grad] if grads else [])
    names = ["output", "dQ", "dK", "dV"]
    if device == "cuda" and dtype != torch.float32:
        # At large N the error budget is best set by torch itself: our error against float64
        # must stay within 3x that of torch's own SDPA in the same low precision (the test
        # used by the FlashAttention repository), plus a small absolute slack.
        theirs = _sdpa_grads(q, k, v, do, is_causal, scale, dtype=dtype)
        for name, got, ref, th in zip(names, ours, refs, theirs):
            err = (got.detach().double().cpu() - ref).abs().max().item()
            err_torch = (th - ref).abs().max().item()
            assert err <= 3 * err_torch + 1e-3, f"{name}: error {err:.3g} vs torch {err_torch:.3g}"
        return
    tol = TOL[dtype]
    for name, got, ref in zip(names, ours, refs):
        assert got.shape == ref.shape and got.dtype == dtype
        _assert_close(got, ref, tol["out" if name == "output" else "grad"], name)


def _check_masked(B, H, h_kv, n_q, n_k, d, *, dtype=torch.float32, device=DEVICE, **mask):
    """The kernel's output, LSE and gradients against naive float64 attention with a mask."""
    q, k, v, do = _inputs(B, H, n_q, n_k, d, dtype, device, h_kv=h_kv, seed=n_q + n_k)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = flash_attention(q, k, v, layout="bhnd", **mask)
    out.backward(do)
    (ref_o, ref_dq, ref_dk, ref_dv), ref_lse = _ground_truth(q, k, v, do, **mask)
    tol = TOL[dtype]
    _assert_close(out, ref_o, tol["out"], "output")
    for name, got, ref in (("dQ", q.grad, ref_dq), ("dK", k.grad, ref_dk), ("dV", v.grad, ref_dv)):
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        _assert_close(got, ref, tol["grad"], name)
    _, lse = flash_attention_with_lse(q.detach(), k.detach(), v.detach(), layout="bhnd", **mask)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)  # -inf exactly where no key is seen
    _assert_close(lse[finite], ref_lse[finite].double(), (2e-5, 1e-5), "lse")
    return q, k, v, out


# --------------------------------------------------------------------------- reference


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
    half, _ = flash_attention_reference(q.half(), k.half(), v.half(), block_size=16)
    assert half.dtype == torch.float16


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
    q, k, v, do = _inputs(2, H, n_q, n_k, 8, torch.float64, h_kv=h_kv, seed=n_q * n_k)
    (ref_o, ref_dq, ref_dk, ref_dv), ref_lse = _ground_truth(q, k, v, do, **mask)
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = flash_attention_reference(qr, kr, vr, block_size=(8, 4), **mask)
    out.backward(do)
    torch.testing.assert_close(out, ref_o, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lse, ref_lse, atol=1e-12, rtol=1e-10)  # -inf where no key
    for got, ref in ((qr.grad, ref_dq), (kr.grad, ref_dk), (vr.grad, ref_dv)):
        torch.testing.assert_close(got, ref, atol=1e-11, rtol=1e-9)
    if mask.get("window") is None and not (n_q > n_k and mask.get("causal_alignment")):
        # torch SDPA agrees where it can express the same thing (GQA: enable_gqa)
        allowed = _visible(
            n_q, n_k, mask.get("is_causal", False), mask.get("causal_alignment", "top_left")
        )
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=H != h_kv)
        torch.testing.assert_close(out, sdpa, atol=1e-12, rtol=1e-10)


def test_reference_gradient_through_the_lse():
    """L is an output too (chapter 09 merges partial results by it): its gradient is P."""
    q, k, v, _ = _inputs(1, 2, 9, 14, 8, torch.float64, h_kv=1)
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
    q, k, v, _ = _inputs(2, 4, 12, 12, 8, torch.float64, h_kv=2)
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
    B, H, N, d, block = 1, 2, 1024, 16, 64
    q, k, v, do = _inputs(B, H, N, N, d, torch.float32)
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


def _ideal_tiles(n_q, n_k, bm, bn, is_causal, alignment, window):
    """0 skipped / 1 partial / 2 full, from the mask itself (a ragged tile is partial)."""
    ok = _visible(n_q, n_k, is_causal, alignment, window)
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
            got = flash.kernel_tile_map(
                n_q, n_k, bm, bn, is_causal=is_causal, causal_alignment=alignment, window=window
            )
            ideal = _ideal_tiles(n_q, n_k, bm, bn, is_causal, alignment, window)
            assert torch.equal(got, ideal), (n_q, n_k, is_causal, alignment, window, got, ideal)


launch.load_kernels()  # in the mode conftest.py has chosen already
from course_lib.flash.kernels.common import _key_range, _query_range  # noqa: E402


@triton.jit
def _probe_ranges(OUT, A, B, N, DIAG, WINDOW, BLOCK: tl.constexpr, QUERY: tl.constexpr):
    """Store the kernels' (lo, full_lo, full_hi, hi) for one call, causal with a window."""
    if QUERY:
        lo, flo, fhi, hi = _query_range(A, B, N, DIAG, WINDOW, BLOCK, True, True)
    else:
        lo, flo, fhi, hi = _key_range(A, B, N, DIAG, WINDOW, BLOCK, True, True)
    tl.store(OUT + 0, lo)
    tl.store(OUT + 1, flo)
    tl.store(OUT + 2, fhi)
    tl.store(OUT + 3, hi)


def test_tile_ranges_in_the_kernel_equal_the_python_twin():
    """kernels._key_range and _query_range, run through Triton, against the Python
    key_tile_range and the brute-force classification of the query tiles seeing a key tile."""
    probe = _probe_ranges
    out = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    cases = [
        (0, 7, 30, 0, 5),
        (8, 15, 30, 9, 4),
        (24, 29, 30, -5, 30),
        (0, 3, 13, 16, 2),
        (4, 11, 20, 3, 1),
    ]
    for first, last, n, diag, window in cases:
        probe[(1,)](out, first, last, n, diag, window, BLOCK=4, QUERY=False)
        want = flash.key_tile_range(first, last, n, 4, is_causal=True, diag=diag, window=window)
        assert tuple(out.tolist()) == want, (first, last, n, diag, window)
        # the transpose: queries 0..n_q-1 that see keys first..last, in tiles of 4
        probe[(1,)](out, first, last, n, diag, window, BLOCK=4, QUERY=True)
        lo, flo, fhi, hi = out.tolist()
        rows = torch.arange(n)[:, None] + diag
        cols = torch.arange(first, last + 1)[None, :]
        ok = (cols <= rows) & (cols >= rows - window + 1)  # (n, keys)
        sees = ok.any(1).nonzero().flatten().tolist()
        if sees:
            assert lo <= sees[0] and hi > sees[-1] and hi <= n
        for t0 in range(0, n, 4):
            rows_t = slice(t0, min(t0 + 4, n))
            if flo <= t0 < fhi:
                assert ok[rows_t].all() and t0 + 4 <= n  # claimed full: really full
            elif ok[rows_t].any():
                assert lo <= t0 < hi  # a tile with a visible key is visited


# --------------------------------------------------------------------------- kernels on CPU

KERNEL_CASES = [
    # B, H, Nq, Nk, d, causal, scale
    (1, 1, 1, 1, 16, False, None),
    (1, 1, 1, 1, 16, True, None),
    (2, 3, 17, 17, 32, True, None),
    (2, 2, 17, 17, 64, False, 0.3),  # custom scale
    (1, 2, 64, 64, 64, False, None),  # even lengths: the fast path without bounds masks
    (1, 2, 64, 64, 48, True, None),  # d not a power of two: padded feature lanes
    (1, 1, 127, 127, 128, True, None),
    (1, 1, 127, 127, 16, False, None),
    (1, 1, 200, 200, 32, True, 0.05),
    (1, 1, 200, 200, 80, False, None),
    (1, 2, 30, 70, 32, True, None),  # Nq != Nk, causal aligned top-left
    (2, 1, 70, 30, 32, False, None),
    (1, 2, 128, 128, 32, True, None),  # even and causal: full, diagonal and skipped tiles
]


@pytest.mark.parametrize("B,H,n_q,n_k,d,is_causal,scale", KERNEL_CASES)
def test_kernel_matches_sdpa_float32(B, H, n_q, n_k, d, is_causal, scale):
    _check_kernel(B, H, n_q, n_k, d, is_causal, scale, torch.float32)


@pytest.mark.parametrize("n,is_causal", [(64, True), (127, False)])
def test_kernel_matches_sdpa_float16(n, is_causal):
    _check_kernel(1, 2, n, n, 64, is_causal, None, torch.float16)


MASKED_CASES = [
    # B, H, H_kv, Nq, Nk, d, mask
    (1, 4, 2, 40, 40, 32, dict()),  # GQA, G = 2
    (2, 4, 1, 33, 64, 16, dict(is_causal=True)),  # MQA, top-left, even keys
    (1, 4, 2, 24, 96, 32, dict(is_causal=True, causal_alignment="bottom_right")),  # KV cache
    (1, 2, 2, 96, 40, 16, dict(is_causal=True, causal_alignment="bottom_right")),  # empty rows
    (1, 2, 2, 128, 128, 16, dict(is_causal=True, window=40)),  # window: tiles skipped on the left
    (1, 6, 2, 50, 90, 32, dict(is_causal=True, causal_alignment="bottom_right", window=20)),
    (1, 2, 1, 70, 70, 16, dict(is_causal=True, window=1)),  # only the query's own key
]


@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,mask", MASKED_CASES)
def test_kernel_gqa_alignment_window(B, H, h_kv, n_q, n_k, d, mask):
    """Forward, LSE and backward (dK, dV summed over each group) against float64 naive
    attention with the explicit mask; and the output against the tiled reference."""
    q, k, v, out = _check_masked(B, H, h_kv, n_q, n_k, d, **mask)
    ref, _ = flash_attention_reference(q.detach(), k.detach(), v.detach(), **mask)
    torch.testing.assert_close(out.detach(), ref, atol=2e-5, rtol=1e-4)


def test_kernel_gqa_matches_sdpa_enable_gqa():
    """torch SDPA's own grouped-query attention (enable_gqa, torch >= 2.5), causal top-left."""
    if "enable_gqa" not in (F.scaled_dot_product_attention.__doc__ or ""):
        pytest.skip("this torch has no enable_gqa")
    q, k, v, do = _inputs(2, 6, 37, 37, 32, torch.float32, DEVICE, h_kv=2)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = flash_attention(q, k, v, is_causal=True)
    out.backward(do)
    refs = _sdpa_grads(q, k, v, do, True, None)
    for name, got, ref in zip(("output", "dQ", "dK", "dV"), (out, q.grad, k.grad, v.grad), refs):
        _assert_close(got, ref, TOL[torch.float32]["out" if name == "output" else "grad"], name)


def test_kernel_gqa_reads_kv_heads_without_copies(monkeypatch):
    """No repeated K/V is materialised: the kernel receives k, v with H_kv heads."""
    seen = []
    real = forward.launch_forward

    def spy(q, k, v, mask):
        seen.append((q.shape[1], k.shape[1], k.data_ptr()))
        return real(q, k, v, mask)

    monkeypatch.setattr(forward, "launch_forward", spy)
    q, k, v, _ = _inputs(1, 8, 16, 16, 16, torch.float32, DEVICE, h_kv=2)
    flash_attention(q, k, v)
    assert seen == [(8, 2, k.data_ptr())]


FAST_BACKWARD_CASES = [
    # B, H, H_kv, Nq, Nk, d, causal, alignment, window: ragged tiles, GQA, a window, N_q < N_k
    (1, 2, 2, 45, 45, 16, False, "top_left", None),
    (1, 4, 2, 70, 70, 32, True, "top_left", None),
    (2, 2, 1, 33, 33, 16, True, "top_left", 8),
    (1, 2, 2, 20, 50, 16, True, "bottom_right", None),
]


@pytest.mark.parametrize("arch", [90, 80])
@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,causal,alignment,window", FAST_BACKWARD_CASES)
def test_fast_backward_equals_the_deterministic_one(B, H, h_kv, n_q, n_k, d, causal, alignment,
                                                    window, arch, monkeypatch):  # fmt: skip
    """deterministic=False (dQ added with float32 atomics from the dK/dV pass, 5 matmuls):
    dK and dV bit for bit the deterministic ones (the same kernel computes them), dQ equal
    within float32 rounding (only the order of the additions differs). Both ways of
    computing a tile's dQ: transposed, dQ^T = K^T dS^T (what an sm_90 GPU runs, and this
    CPU by default), and dQ = dS K (an sm_80 GPU)."""
    import course_lib.flash.backward as backward

    monkeypatch.setattr(backward, "device_arch", lambda device: arch)
    q, k, v, do = _inputs(B, H, n_q, n_k, d, torch.float32, DEVICE, h_kv=h_kv)
    grads = []
    for deterministic in (True, False):
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        out = flash_attention(qg, kg, vg, is_causal=causal, causal_alignment=alignment,
                              window=window, deterministic=deterministic)  # fmt: skip
        out.backward(do)
        grads.append((out.detach(), qg.grad, kg.grad, vg.grad))
    (o1, dq1, dk1, dv1), (o2, dq2, dk2, dv2) = grads
    assert torch.equal(o1, o2) and torch.equal(dk1, dk2) and torch.equal(dv1, dv2)
    torch.testing.assert_close(dq2, dq1, atol=1e-5, rtol=1e-5)
    assert dq2.dtype == q.dtype and dq2.shape == q.shape


def test_fast_backward_refuses_a_non_bool():
    x = torch.randn(1, 1, 4, 16)
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        flash_attention(x, x, x, deterministic="no")


def test_kernel_lse_and_causality():
    q, k, v, _ = _inputs(1, 2, 100, 100, 32, torch.float32, DEVICE)
    out, lse = flash_attention_with_lse(q, k, v, is_causal=True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(32)  # (B, H, N, N)
    future = ~torch.ones(100, 100, dtype=torch.bool, device=DEVICE).tril()  # (N, N)
    scores = scores.masked_fill(future, -math.inf)  # (B, H, N, N)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=1e-5, rtol=1e-5)
    # Changing the future must not change the past: rows < 50 ignore keys >= 50.
    k2, v2 = k.clone(), v.clone()
    k2[..., 50:, :] += 10.0
    v2[..., 50:, :] -= 10.0
    out2 = flash_attention(q, k2, v2, is_causal=True)
    assert torch.equal(out[..., :50, :], out2[..., :50, :])
    assert not torch.allclose(out[..., 50:, :], out2[..., 50:, :])


def test_kernel_non_contiguous_inputs():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 17, 2, 32, generator=g) for _ in range(3))  # (B, N, H, d)
    q, k, v = (x.to(DEVICE).transpose(1, 2) for x in (q, k, v))  # (B, H, N, d), strided
    assert not q.is_contiguous()
    ref = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(flash_attention(q, k, v), ref, atol=2e-5, rtol=1e-4)


def test_kernel_layout_bnhd_reads_flash_attn_tensors_without_copies(monkeypatch):
    """flash-attn's [B, N, H, d] with layout='bnhd': same numbers as the course's layout,
    output in the caller's layout, gradients too; the kernel reads through strides."""
    q, k, v, do = _inputs(1, 4, 20, 20, 16, torch.float32, DEVICE, h_kv=2)
    ref = flash_attention(q, k, v, is_causal=True, layout="bhnd")
    qb, kb, vb = (
        x.transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v)
    )  # (B, N, H, d)
    seen = []
    real = forward.launch_forward
    monkeypatch.setattr(
        forward,
        "launch_forward",
        lambda q_, k_, v_, m: seen.append(q_.data_ptr()) or real(q_, k_, v_, m),
    )
    out = flash_attention(qb, kb, vb, is_causal=True, layout="bnhd")
    assert out.shape == (1, 20, 4, 16) and out.is_contiguous()
    assert seen == [qb.data_ptr()]  # no copy of q
    torch.testing.assert_close(out, ref.transpose(1, 2), atol=1e-6, rtol=1e-5)
    out.backward(do.transpose(1, 2))
    assert qb.grad.shape == qb.shape and kb.grad.shape == kb.shape


def test_flash_attn_layout_is_caught_not_silently_wrong():
    """[B, N, H, d] passed the course's way used to run and be wrong (max error 3.6):
    self-attention shapes are now asked about, GQA shapes fail with the fix named."""
    x = torch.randn(1, 64, 4, 16, device=DEVICE)  # (B, N, H, d) as flash-attn takes it
    with pytest.raises(ValueError, match="layout='bnhd'"):
        flash_attention(x, x, x)
    kv = torch.randn(1, 64, 2, 16, device=DEVICE)  # (B, N, H_kv, d): 64 "heads" vs 64
    with pytest.raises(ValueError, match="layout='bnhd'"):
        flash_attention(x, kv, kv)
    q1 = torch.randn(1, 1, 8, 16, device=DEVICE)  # decode-shaped [B, N=1, H, d]
    kc = torch.randn(1, 50, 2, 16, device=DEVICE)  # cache [B, Nk, H_kv, d]
    with pytest.raises(ValueError, match="multiple of H_kv.*layout='bnhd'"):
        flash_attention(q1, kc, kc)
    # saying which layout settles it either way
    assert flash_attention(x, x, x, layout="bnhd").shape == (1, 64, 4, 16)
    assert flash_attention(x[:, :, :1], x[:, :, :1], x[:, :, :1], layout="bhnd").shape == (
        1,
        64,
        1,
        16,
    )


# --------------------------------------------------------------------------- decoding

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
    q, k, v, _ = _inputs(B, H, n_q, n_k, d, torch.float32, DEVICE, h_kv=h_kv, seed=n_k)
    out, lse = flash_decode(q, k, v, num_splits=splits, return_lse=True, **mask)
    (ref, *_), ref_lse = _ground_truth(q, k, v, torch.zeros_like(q), **mask)
    _assert_close(out, ref, TOL[torch.float32]["out"], "decode output")
    _assert_close(lse, ref_lse, (2e-5, 1e-5), "decode lse")
    main = flash_attention(q, k, v, **mask)
    torch.testing.assert_close(out, main, atol=2e-5, rtol=1e-4)


def test_decode_float16_and_layout():
    q, k, v, _ = _inputs(1, 4, 1, 100, 32, torch.float16, DEVICE, h_kv=2)
    out = flash_decode(q, k, v, num_splits=3)
    (ref, *_), _ = _ground_truth(q, k, v, torch.zeros_like(q))
    assert out.dtype == torch.float16
    _assert_close(out, ref, TOL[torch.float16]["out"], "decode fp16")
    out2 = flash_decode(*(x.transpose(1, 2) for x in (q, k, v)), num_splits=3, layout="bnhd")
    torch.testing.assert_close(out2, out.transpose(1, 2))


def test_decode_is_forward_only_and_says_so():
    q, k, v, _ = _inputs(1, 2, 1, 40, 16, torch.float32, DEVICE)
    with pytest.raises(RuntimeError, match="forward-only"):
        flash_decode(q.requires_grad_(), k, v)
    with torch.no_grad():
        assert flash_decode(q, k, v).shape == (1, 2, 1, 16)
    big = torch.randn(1, 2, 65, 16, device=DEVICE)
    with pytest.raises(ValueError, match="at most 128"):
        flash_decode(big, k[:, :1], v[:, :1])  # G * Nq = 2 * 65 rows
    with pytest.raises(ValueError, match="num_splits"):
        flash_decode(q.detach(), k, v, num_splits=0)


def test_decode_splits_fill_the_gpu_not_more():
    assert flash.decode_splits(8, 32768, 64, "cpu") == 4  # interpreter: a few
    assert flash.decode_splits(8, 10, 64, "cpu") == 1


# --------------------------------------------------------------------------- configs


def test_kernel_config_is_gpu_sized_on_cuda():
    for d in (64, 128):
        cfg = flash.kernel_config(d, "cuda", interpreted=False)
        assert set(cfg) == {"fwd", "dkdv", "dkdv_atomic", "dq", "decode"}
        for kind in ("fwd", "dkdv", "dq"):
            assert len(cfg[kind]) > 1  # several candidates: autotuned, too-big ones discarded
            assert all(c["BLOCK_M"] >= 16 and c["BLOCK_N"] >= 16 for c in cfg[kind])  # tl.dot
        assert cfg["fwd"][0]["BLOCK_M"] == 128  # a tall query tile that stays on chip
        # 8 warps lay two warpgroups along the dK/dV pass's key tile: it needs 128 keys
        assert all(c["BLOCK_N"] >= 16 * c["num_warps"] for c in cfg["dkdv"])
    small = flash.kernel_config(64, "cpu", interpreted=True)
    assert all(len(v) == 1 and v[0]["BLOCK_M"] <= 64 for v in small.values())


def test_autotuning_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("COURSE_FLASH_AUTOTUNE", "0")
    cfg = flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.bfloat16)
    assert all(len(v) == 1 for k, v in cfg.items() if k != "decode")  # decode: a menu by size
    assert [c["BLOCK_M"] for c in cfg["decode"]] == [16, 64, 128]
    assert cfg["fwd"][0] == gpu_tiles(128)["fwd"][0]


def test_kernel_config_float32_on_cuda_is_one_small_config():
    # float32 dots run in true float32 (no tensor cores): one small tile, no autotuning.
    cfg = flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.float32)
    assert all(len(v) == 1 and v[0]["BLOCK_M"] * v[0]["BLOCK_N"] <= 64 * 64 for v in cfg.values())
    assert len(flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.bfloat16)["fwd"]) > 1


def test_autotuned_launch_path_through_the_interpreter(monkeypatch):
    """The GPU path (several candidate configs, Triton's autotuner, EVEN_M/EVEN_N from
    triton.heuristics) with a CPU timer; lengths in one power-of-two bucket tune once."""
    import time

    calls = []

    def cpu_bench(fn, quantiles=None):
        t0 = time.perf_counter()
        fn()
        ms = 1e3 * (time.perf_counter() - t0)
        calls.append(ms)
        return [ms, ms, ms]

    two = {
        "fwd": [Tile(32, 16), Tile(16, 32)],
        "dkdv": [Tile(16, 32), Tile(32, 16)],
        "dkdv_atomic": [Tile(16, 32), Tile(32, 16)],
        "dq": [Tile(32, 16), Tile(16, 16)],
        "decode": [Tile(16, 16)],
    }
    for module in (flash.forward, flash.backward):  # where the launchers look them up
        monkeypatch.setattr(module, "kernel_config", lambda *a, **k: two)
    monkeypatch.setattr(launch, "AUTOTUNE_TIMER", cpu_bench)
    _check_kernel(1, 2, 45, 45, 32, True, None, torch.float32)
    assert any(tuner.timer is cpu_bench for tuner in launch.autotuners())
    tuned = len(calls)
    _check_kernel(1, 2, 50, 50, 32, True, None, torch.float32)  # same bucket (64): no re-tuning
    assert len(calls) == tuned
    _check_kernel(1, 2, 32, 32, 32, False, None, torch.float32)  # even lengths, new bucket
    assert len(calls) > tuned
    # The atomic dQ under the autotuner: every timed trial adds into the same buffer, so the
    # tuner must zero it before each (reset_to_zero); otherwise dQ comes out several times over.
    q, k, v, do = _inputs(1, 2, 40, 40, 32, torch.float32, DEVICE)
    q.requires_grad_()
    flash_attention(q, k, v, is_causal=True, deterministic=False).backward(do)
    assert any(tuner.reset == ("DQ_ACC",) for tuner in launch.autotuners())
    _assert_close(q.grad, _sdpa_grads(q, k, v, do, True, None)[1], TOL[torch.float32]["grad"], "dQ")
    from course_lib.flash import bench

    chosen = bench.autotuned_configs()  # recorded in the benchmark's JSON on a GPU
    assert {"fwd_kernel", "bwd_dkdv_kernel", "bwd_dq_kernel"} <= set(chosen)
    assert all("BLOCK_M" in c for c in chosen.values())


# ------------------------------------------------ what only a compiled (GPU) kernel would show


def _kernel_source() -> str:
    return flash.kernel_source()


def test_every_tl_dot_states_its_input_precision():
    """A compiled tl.dot rounds float32 operands to TF32 by default; the interpreter never
    does, so a forgotten ``input_precision`` passes every CPU test and loses 3 digits on a
    GPU. Each dot must take the launcher's DOT_PRECISION, which is "ieee" for float32."""
    import re

    src = _kernel_source()
    dots = re.findall(r"tl\.dot\((.*?)\)\s*(?:#|$)", src, flags=re.M | re.S)
    # fwd 2, dK/dV 4 + the atomic dQ both ways (transposed on sm_90), dQ 3, transposed decode 2
    assert len(dots) == src.count("tl.dot(") == 13
    assert all("input_precision=DOT_PRECISION" in d for d in dots), dots
    assert launch.dot_precision(torch.float32) == "ieee"
    assert launch.dot_precision(torch.float16) != "ieee"  # ignored for 16-bit operands


def test_batch_head_offsets_are_int64():
    """``b * stride_b`` overflows int32 once B*H*N*d passes 2^31 - 1 elements (B*H = 2048
    heads of N = 16k, d = 128 make 2^32): silent wrong addresses on a GPU. The interpreter
    computes in numpy and would need a 16 GiB tensor to show it, so we check the source:
    every kernel turns its program ids into int64 before any offset."""
    import re

    src = _kernel_source()
    kernels = re.split(r"\n@triton\.jit\ndef ", src)
    launched = [k for k in kernels if k.split("(")[0].endswith("_kernel")]
    assert len(launched) == 6
    for body in launched:
        name = body.split("(")[0]
        assert ".to(tl.int64)" in body, name
        assert "b = (" in body or "row = tl.program_id(0).to(tl.int64)" in body, name


def test_too_many_batch_heads_for_the_cuda_grid_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(inputs, "MAX_GRID_Y", 3)
    q = torch.empty(2, 2, 8, 16, device="meta")  # B*H = 4 > 3
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
    with pytest.raises(ValueError, match="B\\*H = 4"):
        inputs.kernel_views(q, q, q, None, "bhnd", "flash_attention")


# The kernels compiled ahead of time for sm_90 and sm_80: tests/course_lib/flash/test_flash_aot.py.


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((2, 8, 16), (2, 8, 16), (2, 8, 16)), r"\[B, H, N, d_h\]"),
        (((1, 1, 8, 16), (1, 1, 8, 32), (1, 1, 8, 16)), "share the last dimension"),
        (((1, 1, 8, 16), (1, 1, 9, 16), (1, 1, 8, 16)), "number of keys"),
        (((2, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16)), "same batch dimensions"),
        (((1, 3, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16)), "multiple of H_kv"),
        (((1, 1, 8, 16), (1, 1, 8, 16), (1, 1, 8, 32)), "same head dimension"),
        (((1, 1, 8, 8), (1, 1, 8, 8), (1, 1, 8, 8)), "d_h = 8 is not supported"),
        (((1, 1, 8, 256), (1, 1, 8, 256), (1, 1, 8, 256)), "d_h = 256 is not supported"),
        (((1, 1, 0, 16), (1, 1, 8, 16), (1, 1, 8, 16)), "no queries"),
        (((1, 1, 8, 16), (1, 1, 0, 16), (1, 1, 0, 16)), "no keys"),
    ],
)
def test_kernel_shape_errors(shapes, match):
    q, k, v = (torch.randn(s) for s in shapes)
    with pytest.raises(ValueError, match=match) as info:
        flash_attention(q, k, v)
    if "d_h = " in match or "B, H" in match:
        assert str(tuple(q.shape)) in str(info.value) or "d_h =" in str(info.value)


def test_kernel_dtype_device_scale_errors():
    x = torch.randn(1, 1, 4, 16)
    with pytest.raises(TypeError, match="bfloat16 is not supported on the CPU"):
        flash_attention(x.bfloat16(), x.bfloat16(), x.bfloat16())
    with pytest.raises(TypeError, match="float64 is not supported"):
        flash_attention(x.double(), x.double(), x.double())
    with pytest.raises(TypeError, match="share one dtype"):
        flash_attention(x, x.half(), x)
    with pytest.raises(TypeError, match="floating-point"):
        flash_attention(x.long(), x.long(), x.long())
    with pytest.raises(ValueError, match="same device"):
        flash_attention(x, x.to("meta"), x)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        flash_attention(x, x, x, scale=float("nan"))
    with pytest.raises(ValueError, match="positive scale"):
        flash_attention(x, x, x, scale=-0.5)
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        flash_attention(x, x, x, is_causal="bottom_right")
    with pytest.raises(ValueError, match="window must be a positive int"):
        flash_attention(x, x, x, is_causal=True, window=0)


def test_missing_triton_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "course_lib.flash.kernels", None)  # import fails
    with pytest.raises(ImportError, match="Colab"):
        flash_attention(*[torch.randn(1, 1, 4, 16)] * 3)
    assert flash.triton_mode() == "unavailable"


def test_cpu_tensors_in_compiled_mode_explain_the_fix(monkeypatch):
    kernels = launch.load_kernels()
    monkeypatch.setattr(kernels, "is_interpreted", lambda: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        flash_attention(*[torch.randn(1, 1, 4, 16)] * 3)


# --------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "n,d,is_causal", [(1024, 64, False), (1000, 128, True), (4096, 128, True), (2047, 96, False)]
)
def test_kernel_matches_sdpa_on_gpu(dtype, n, d, is_causal):
    _check_kernel(2, 4, n, n, d, is_causal, None, dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,mask", MASKED_CASES)
def test_kernel_gqa_alignment_window_on_gpu(B, H, h_kv, n_q, n_k, d, mask):
    """The interpreter's masked cases, compiled (float32: true float32 dots)."""
    _check_masked(B, H, h_kv, n_q, n_k, d, device="cuda", **mask)


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,splits,mask", DECODE_CASES)
def test_decode_on_gpu(B, H, h_kv, n_q, n_k, d, splits, mask):
    q, k, v, _ = _inputs(B, H, n_q, n_k, d, torch.float32, "cuda", h_kv=h_kv, seed=n_k)
    out = flash_decode(q, k, v, num_splits=splits, **mask)
    (ref, *_), _ = _ground_truth(q, k, v, torch.zeros_like(q), **mask)
    _assert_close(out, ref, TOL[torch.float32]["out"], "decode output")


@pytest.mark.gpu
def test_decode_long_cache_bf16_on_gpu():
    """Nq = 1 against a 32k cache with GQA (the benchmark's decode shape), default splits."""
    q, k, v, _ = _inputs(2, 32, 1, 32768, 128, torch.bfloat16, "cuda", h_kv=8)
    out = flash_decode(q, k, v)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    assert (out.float() - ref).abs().max().item() < 2e-2


@pytest.mark.gpu
def test_kernel_float32_on_gpu_is_true_float32():
    """float32 dots use input_precision="ieee": the GPU meets the CPU's float32 tolerances
    (TF32, the default of a compiled tl.dot, would miss them by ~100x)."""
    _check_kernel(1, 2, 512, 512, 64, True, None, torch.float32, device="cuda")
    _check_kernel(2, 2, 300, 300, 128, False, 0.1, torch.float32, device="cuda")


@pytest.mark.gpu
def test_kernel_offsets_past_int32_on_gpu():
    """B*H*N*d > 2^31 - 1 elements per tensor: the last heads sit beyond int32 offsets.
    The first and last heads' output and gradients are compared with SDPA on those heads
    alone, with the error bound of the other GPU tests (3x torch's own bf16 error)."""
    B, H, N, d = 1, 2100, 8192, 128  # 2.2e9 elements, 4.4 GB per bf16 tensor
    need = 8 * B * H * N * d * 2 + 2**31  # q, k, v, o, do, dq, dk, dv
    if torch.cuda.get_device_properties(0).total_memory < 1.2 * need:
        pytest.skip("needs ~45 GB of GPU memory")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (
        torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)
    )  # (B, H, N, d)
    assert q.numel() > 2**31
    for t in (q, k, v):
        t.requires_grad_()
    out = flash_attention(q, k, v, is_causal=True, layout="bhnd")  # (B, H, N, d)
    out.backward(do)
    for h in (0, H - 1):
        sl = slice(h, h + 1)
        ours = [out[:, sl], q.grad[:, sl], k.grad[:, sl], v.grad[:, sl]]
        args = (q[:, sl], k[:, sl], v[:, sl], do[:, sl], True, None)
        refs, theirs = _sdpa_grads(*args), _sdpa_grads(*args, dtype=torch.bfloat16)
        for name, got, ref, th in zip(("output", "dQ", "dK", "dV"), ours, refs, theirs):
            err = (got.detach().double().cpu() - ref).abs().max().item()
            err_torch = (th - ref).abs().max().item()
            assert err <= 3 * err_torch + 1e-3, f"head {h} {name}: {err:.3g} vs {err_torch:.3g}"
