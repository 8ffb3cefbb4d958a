"""course_lib.flash.forward: flash_attention's forward, flash_attention_with_lse, the autograd
function's saved tensors, and the forward kernel's two ways of reading memory (pointers, and
tensor descriptors: Hopper's TMA).

The output and the log-sum-exp are compared with float64 references (tolerances: see
tests/support/flash_lab.py); the gradients are tests/course_lib/flash/test_backward.py's.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from flash_lab import DEVICE, KERNEL_CASES, MASKED_CASES, check_kernel, check_masked, make_inputs

import course_lib.flash as flash
from course_lib.flash import (
    flash_attention,
    flash_attention_reference,
    flash_attention_with_lse,
    forward,
)
from course_lib.flash.launch import TMA_ENV, device_arch, tma_compatible, tma_enabled

interpreter_only = pytest.mark.skipif(
    flash.triton_mode() != "interpreter", reason="compares the paths in Triton's interpreter"
)


@pytest.mark.parametrize("B,H,n_q,n_k,d,is_causal,scale", KERNEL_CASES)
def test_forward_matches_sdpa_float32(B, H, n_q, n_k, d, is_causal, scale):
    check_kernel(B, H, n_q, n_k, d, is_causal, scale, torch.float32, grads=False)


@pytest.mark.parametrize("n,is_causal", [(64, True), (127, False)])
def test_forward_matches_sdpa_float16(n, is_causal):
    check_kernel(1, 2, n, n, 64, is_causal, None, torch.float16, grads=False)


@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,mask", MASKED_CASES)
def test_forward_gqa_alignment_window(B, H, h_kv, n_q, n_k, d, mask):
    """Output and LSE against float64 naive attention with the explicit mask (-inf exactly
    where a query sees no key), and the output against the tiled reference."""
    q, k, v, out = check_masked(B, H, h_kv, n_q, n_k, d, grads=False, **mask)
    ref, _ = flash_attention_reference(q, k, v, **mask)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


def test_kernel_lse_and_causality():
    q, k, v, _ = make_inputs(1, 2, 100, 100, 32, torch.float32, DEVICE)
    out, lse = flash_attention_with_lse(q, k, v, is_causal=True)
    assert lse.shape == (1, 2, 100) and lse.dtype == torch.float32
    scores = q @ k.transpose(-2, -1) / math.sqrt(32)  # (B, H, N, N)
    future = ~torch.ones(100, 100, dtype=torch.bool, device=DEVICE).tril()  # (N, N)
    scores = scores.masked_fill(future, -math.inf)  # (B, H, N, N)
    # a natural log, not the kernel's base 2
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=1e-5, rtol=1e-5)
    # Changing the future must not change the past: rows < 50 ignore keys >= 50.
    k2, v2 = k.clone(), v.clone()
    k2[..., 50:, :] += 10.0
    v2[..., 50:, :] -= 10.0
    out2 = flash_attention(q, k2, v2, is_causal=True)
    assert torch.equal(out[..., :50, :], out2[..., :50, :])
    assert not torch.allclose(out[..., 50:, :], out2[..., 50:, :])


def test_with_lse_is_outside_autograd_and_in_the_callers_layout():
    q, k, v, _ = make_inputs(1, 4, 20, 20, 16, torch.float32, DEVICE, h_kv=2)
    q.requires_grad_()
    out, lse = flash_attention_with_lse(q, k, v, is_causal=True)
    assert not out.requires_grad and not lse.requires_grad
    torch.testing.assert_close(out, flash_attention(q, k, v, is_causal=True).detach())
    ob, lse_b = flash_attention_with_lse(
        *(x.detach().transpose(1, 2) for x in (q, k, v)), is_causal=True, layout="bnhd"
    )
    assert ob.shape == (1, 20, 4, 16) and torch.equal(ob, out.transpose(1, 2))
    assert torch.equal(lse_b, lse)  # the LSE stays [B, H, Nq]


def test_the_autograd_function_saves_q_k_v_o_and_the_lse_only():
    """Never P: what autograd keeps between forward and backward is O(N d)."""
    B, H, N, d = 1, 2, 96, 16
    q, k, v, _ = make_inputs(B, H, N, N, d, torch.float32, DEVICE)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(t.shape) or t, lambda t: t
    ):
        flash_attention(q, k, v, is_causal=True)
    assert sorted(saved) == sorted([(B, H, N, d)] * 4 + [(B * H, N)])


def test_kernel_gqa_reads_kv_heads_without_copies(monkeypatch):
    """No repeated K/V is materialised: the kernel receives k, v with H_kv heads."""
    seen = []
    real = forward.launch_forward

    def spy(q, k, v, mask):
        seen.append((q.shape[1], k.shape[1], k.data_ptr()))
        return real(q, k, v, mask)

    monkeypatch.setattr(forward, "launch_forward", spy)
    q, k, v, _ = make_inputs(1, 8, 16, 16, 16, torch.float32, DEVICE, h_kv=2)
    flash_attention(q, k, v)
    assert seen == [(8, 2, k.data_ptr())]


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
    q, k, v, do = make_inputs(1, 4, 20, 20, 16, torch.float32, DEVICE, h_kv=2)
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


def test_the_entry_points_check_their_inputs_and_say_who_they_are():
    x = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match=r"^flash_attention: .*\[B, H, N, d_h\]"):
        flash_attention(x[0], x[0], x[0])
    with pytest.raises(ValueError, match=r"^flash_attention_with_lse: .*pass is_causal=True"):
        flash_attention_with_lse(x, x, x, window=2)
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        flash_attention(x, x, x, deterministic="no")


# --------------------------------------------------------------------------- TMA


def test_uses_tma_needs_the_switch_alignment_and_16_bit_on_a_gpu(monkeypatch):
    x16 = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    x32 = x16.float()
    monkeypatch.setattr(forward, "tma_enabled", lambda device, interpreted=None: False)
    assert not forward.uses_tma(x16, x16, x16, interpreted=False)
    monkeypatch.setattr(forward, "tma_enabled", lambda device, interpreted=None: True)
    assert forward.uses_tma(x16, x16, x16, interpreted=False)
    assert not forward.uses_tma(x32, x32, x32, interpreted=False)  # compiled TMA: 16-bit only
    assert forward.uses_tma(x32, x32, x32, interpreted=True)  # the interpreter emulates any
    odd = torch.zeros(1, 2, 8, 20, dtype=torch.float16)  # a 40-byte token stride
    assert not forward.uses_tma(odd, odd, odd, interpreted=True)
    assert not forward.uses_tma(x16, x16, x16, odd, interpreted=True)  # the output counts too


@pytest.fixture
def descriptor_ops(monkeypatch):
    """Counts the descriptor loads and stores the interpreter executes."""
    from triton.runtime import interpreter

    counts = {"load": 0, "store": 0}
    builder = interpreter.InterpreterBuilder
    for op in counts:
        original = getattr(builder, f"create_descriptor_{op}")

        def counted(self, *args, _op=op, _original=original, **kwargs):
            counts[_op] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(builder, f"create_descriptor_{op}", counted)
    return counts


def _tma_inputs(B, H, h_kv, n_q, n_k, d, dtype, layout, seed):
    g = torch.Generator().manual_seed(seed)
    if layout == "bnhd":  # flash-attn's [B, N, H, d]: the kernel reads a transposed view
        shapes = [(B, n_q, H, d), (B, n_k, h_kv, d), (B, n_k, h_kv, d)]
    else:
        shapes = [(B, H, n_q, d), (B, h_kv, n_k, d), (B, h_kv, n_k, d)]
    return [torch.randn(*s, generator=g).to(dtype) for s in shapes]


TMA_CASES = [
    # (B, H, H_kv, Nq, Nk, d, dtype, layout, mask): every case crosses several 64 x 32 tiles
    pytest.param(1, 2, 2, 127, 200, 64, torch.float32, "bhnd", {}, id="ragged"),
    pytest.param(2, 2, 2, 128, 96, 64, torch.float32, "bhnd", {}, id="even"),
    pytest.param(
        1, 2, 2, 127, 200, 48, torch.float32, "bhnd",
        dict(is_causal=True, causal_alignment="bottom_right"), id="causal-d48",
    ),
    pytest.param(
        1, 4, 2, 100, 150, 32, torch.float32, "bhnd",
        dict(is_causal=True, window=40), id="window-gqa",
    ),
    pytest.param(
        2, 4, 1, 70, 90, 48, torch.float32, "bnhd", dict(is_causal=True), id="bnhd-gqa-d48",
    ),
    pytest.param(
        1, 4, 2, 65, 130, 48, torch.float16, "bnhd",
        dict(is_causal=True, window=50, causal_alignment="bottom_right"), id="fp16-bnhd-all",
    ),
]  # fmt: skip


@interpreter_only
@pytest.mark.parametrize("B, H, h_kv, n_q, n_k, d, dtype, layout, mask", TMA_CASES)
def test_descriptor_path_equals_pointer_path(
    monkeypatch, descriptor_ops, B, H, h_kv, n_q, n_k, d, dtype, layout, mask
):
    """On a Hopper GPU ``COURSE_FLASH_TMA=1`` makes the forward kernel load Q, K, V and store
    O through tensor descriptors; Triton's interpreter emulates them (bounds per dimension,
    zero fill), so ``force`` runs that code path here. Same output and LSE as the pointer
    path, bit for bit; the descriptor path really ran (descriptor loads and the O store
    were executed) and the pointer path ran none. What the compiled code does with it (TMA
    copies on sm_90) is checked in tests/course_lib/flash/test_aot.py."""
    q, k, v = _tma_inputs(B, H, h_kv, n_q, n_k, d, dtype, layout, seed=n_q + d)
    monkeypatch.setenv(TMA_ENV, "0")
    o_ptr, lse_ptr = flash_attention_with_lse(q, k, v, layout=layout, **mask)
    assert descriptor_ops == {"load": 0, "store": 0}
    monkeypatch.setenv(TMA_ENV, "force")
    o_tma, lse_tma = flash_attention_with_lse(q, k, v, layout=layout, **mask)
    programs = B * H * -(-n_q // 64)  # the interpreter's 64-query tiles
    assert descriptor_ops["store"] == programs and descriptor_ops["load"] > programs
    assert o_tma.shape == o_ptr.shape == q.shape and o_tma.stride() == o_ptr.stride()
    assert torch.equal(o_tma, o_ptr), (o_tma - o_ptr).abs().max()
    assert torch.equal(lse_tma, lse_ptr)
    assert o_ptr.abs().max() > 0.1  # a real output, not zeros on both sides


@interpreter_only
def test_misaligned_tensors_take_the_pointer_path(monkeypatch, descriptor_ops):
    """float16 with d = 20: a token stride of 40 bytes breaks TMA's 16-byte rule, so the
    launch falls back to pointers (no descriptor op) and still gives the right answer."""
    q, k, v = _tma_inputs(1, 2, 2, 40, 70, 20, torch.float16, "bhnd", seed=1)
    assert not tma_compatible(q, k, v)
    monkeypatch.setenv(TMA_ENV, "0")
    expected, _ = flash_attention_with_lse(q, k, v, is_causal=True)
    monkeypatch.setenv(TMA_ENV, "force")
    got, _ = flash_attention_with_lse(q, k, v, is_causal=True)
    assert descriptor_ops == {"load": 0, "store": 0}
    assert torch.equal(got, expected)


# --------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "n,d,is_causal", [(1024, 64, False), (1000, 128, True), (4096, 128, True), (2047, 96, False)]
)
def test_forward_matches_sdpa_on_gpu(dtype, n, d, is_causal):
    check_kernel(2, 4, n, n, d, is_causal, None, dtype, device="cuda", grads=False)


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,h_kv,n_q,n_k,d,mask", MASKED_CASES)
def test_forward_gqa_alignment_window_on_gpu(B, H, h_kv, n_q, n_k, d, mask):
    """The interpreter's masked cases, compiled (float32: true float32 dots)."""
    check_masked(B, H, h_kv, n_q, n_k, d, device="cuda", grads=False, **mask)


@pytest.mark.gpu
def test_forward_float32_on_gpu_is_true_float32():
    """float32 dots use input_precision="ieee": the GPU meets the CPU's float32 tolerances
    (TF32, the default of a compiled tl.dot, would miss them by ~100x)."""
    check_kernel(1, 2, 512, 512, 64, True, None, torch.float32, device="cuda", grads=False)
    check_kernel(2, 2, 300, 300, 128, False, 0.1, torch.float32, device="cuda", grads=False)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "H, h_kv, n, d, layout, mask",
    [
        (4, 4, 1000, 128, "bhnd", dict(is_causal=True)),
        (8, 2, 777, 48, "bnhd", dict(is_causal=True, window=300)),
        (4, 4, 2048, 64, "bhnd", {}),
    ],
)
def test_descriptor_path_on_a_hopper_gpu(monkeypatch, H, h_kv, n, d, layout, mask):
    """``COURSE_FLASH_TMA=1`` on an H100/H200: the TMA path is chosen and gives the pointer
    path's output and LSE (bfloat16; the same arithmetic, so within a rounding of the
    output's last bit)."""
    if device_arch("cuda") < 90:
        pytest.skip("tensor descriptors (TMA) need sm_90 or newer")
    g = torch.Generator().manual_seed(n)
    shape = (1, n, H, d) if layout == "bnhd" else (1, H, n, d)
    kv_shape = (1, n, h_kv, d) if layout == "bnhd" else (1, h_kv, n, d)
    q = torch.randn(*shape, generator=g).to("cuda", torch.bfloat16)
    k, v = (torch.randn(*kv_shape, generator=g).to("cuda", torch.bfloat16) for _ in "kv")
    monkeypatch.setenv(TMA_ENV, "0")
    o_ptr, lse_ptr = flash_attention_with_lse(q, k, v, layout=layout, **mask)
    monkeypatch.setenv(TMA_ENV, "1")
    assert tma_enabled(q.device) and tma_compatible(q, k, v)
    o_tma, lse_tma = flash_attention_with_lse(q, k, v, layout=layout, **mask)
    torch.cuda.synchronize()
    torch.testing.assert_close(o_tma, o_ptr, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse_tma, lse_ptr, atol=1e-4, rtol=1e-4)
