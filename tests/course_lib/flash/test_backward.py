"""course_lib.flash.backward: dQ, dK, dV from the backward kernels, deterministic (three
kernels) and not (dQ added with atomics from the dK/dV pass).

Gradients are compared with float64 references on the same rounded inputs (tolerances: see
tests/support/flash_lab.py); the forward's output is tests/course_lib/flash/test_forward.py's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from flash_lab import (
    DEVICE,
    KERNEL_CASES,
    MASKED_CASES,
    TOL,
    assert_close,
    check_kernel,
    check_masked,
    make_inputs,
    sdpa_grads,
)

from course_lib.flash import backward, flash_attention, forward
from course_lib.flash.inputs import kernel_views, mask_for


@pytest.mark.parametrize("B,H,n_q,n_k,d,is_causal,scale", KERNEL_CASES)
def test_gradients_match_sdpa_float32(B, H, n_q, n_k, d, is_causal, scale):
    check_kernel(B, H, n_q, n_k, d, is_causal, scale, torch.float32)


@pytest.mark.parametrize("n,is_causal", [(64, True), (127, False)])
def test_gradients_match_sdpa_float16(n, is_causal):
    check_kernel(1, 2, n, n, 64, is_causal, None, torch.float16)


@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,mask", MASKED_CASES)
def test_gradients_gqa_alignment_window(B, H, h_kv, n_q, n_k, d, mask):
    """dQ, and dK, dV summed over each group of query heads, against float64 naive attention
    with the explicit mask (rows that see no key contribute nothing)."""
    check_masked(B, H, h_kv, n_q, n_k, d, **mask)


def test_gradients_match_sdpa_enable_gqa():
    """torch SDPA's own grouped-query attention (enable_gqa, torch >= 2.5), causal top-left."""
    if "enable_gqa" not in (F.scaled_dot_product_attention.__doc__ or ""):
        pytest.skip("this torch has no enable_gqa")
    q, k, v, do = make_inputs(2, 6, 37, 37, 32, torch.float32, DEVICE, h_kv=2)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = flash_attention(q, k, v, is_causal=True)
    out.backward(do)
    refs = sdpa_grads(q, k, v, do, True, None)
    for name, got, ref in zip(("output", "dQ", "dK", "dV"), (out, q.grad, k.grad, v.grad), refs):
        assert_close(got, ref, TOL[torch.float32]["out" if name == "output" else "grad"], name)


def test_launch_backward_is_what_autograd_calls():
    """The saved O and base-2 LSE of the forward, handed to launch_backward by hand, give
    autograd's gradients bit for bit; dQ, dK, dV come back shaped and typed like q, k, v."""
    q, k, v, do = make_inputs(1, 4, 20, 33, 16, torch.float32, DEVICE, h_kv=2)
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    flash_attention(qg, kg, vg, is_causal=True, causal_alignment="bottom_right").backward(do)
    qv, kv, vv, layout, scale = kernel_views(q, k, v, None, None, "test")
    mask = mask_for(qv, kv, True, "bottom_right", None, scale, layout, "test")
    o, lse = forward.launch_forward(q, k, v, mask)
    dq, dk, dv = backward.launch_backward(do, q, k, v, o, lse, mask)
    for got, want, like in ((dq, qg.grad, q), (dk, kg.grad, k), (dv, vg.grad, v)):
        assert got.shape == like.shape and got.dtype == like.dtype
        assert torch.equal(got, want)


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
    monkeypatch.setattr(backward, "device_arch", lambda device: arch)
    q, k, v, do = make_inputs(B, H, n_q, n_k, d, torch.float32, DEVICE, h_kv=h_kv)
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


def test_the_deterministic_backward_is_reproducible_bit_for_bit():
    q, k, v, do = make_inputs(1, 2, 45, 45, 16, torch.float32, DEVICE)
    runs = []
    for _ in range(2):
        qg = q.clone().requires_grad_()
        flash_attention(qg, k, v, is_causal=True).backward(do)
        runs.append(qg.grad)
    assert torch.equal(*runs)


# --------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "n,d,is_causal", [(1024, 64, False), (1000, 128, True), (4096, 128, True), (2047, 96, False)]
)
def test_gradients_match_sdpa_on_gpu(dtype, n, d, is_causal):
    check_kernel(2, 4, n, n, d, is_causal, None, dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,mask", MASKED_CASES)
def test_gradients_gqa_alignment_window_on_gpu(B, H, h_kv, n_q, n_k, d, mask):
    """The interpreter's masked cases, compiled (float32: true float32 dots)."""
    check_masked(B, H, h_kv, n_q, n_k, d, device="cuda", **mask)


@pytest.mark.gpu
def test_gradients_float32_on_gpu_are_true_float32():
    """float32 dots use input_precision="ieee": the GPU meets the CPU's float32 tolerances
    (TF32, the default of a compiled tl.dot, would miss them by ~100x)."""
    check_kernel(1, 2, 512, 512, 64, True, None, torch.float32, device="cuda")
    check_kernel(2, 2, 300, 300, 128, False, 0.1, torch.float32, device="cuda")


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
        refs, theirs = sdpa_grads(*args), sdpa_grads(*args, dtype=torch.bfloat16)
        for name, got, ref, th in zip(("output", "dQ", "dK", "dV"), ours, refs, theirs):
            err = (got.detach().double().cpu() - ref).abs().max().item()
            err_torch = (th - ref).abs().max().item()
            assert err <= 3 * err_torch + 1e-3, f"head {h} {name}: {err:.3g} vs {err_torch:.3g}"
