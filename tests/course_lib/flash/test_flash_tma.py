"""The forward kernel's tensor-descriptor (TMA) path against its pointer path, on the CPU.

On a Hopper GPU ``COURSE_FLASH_TMA=1`` makes the forward kernel load Q, K, V and store O
through tensor descriptors (:func:`course_lib.flash.launch.tma_enabled`). Triton's
interpreter emulates descriptors (bounds per dimension, zero fill), so ``force`` runs that
code path here: it must give the same output and log-sum-exp as the pointer path, bit for
bit, on ragged lengths, causal masks, windows, grouped heads, flash-attn's layout and a head
dimension that is not a power of two. What the compiled code does with it (TMA copies on
sm_90) is checked in ``tests/course_lib/flash/test_flash_aot.py``.
"""

from __future__ import annotations

import pytest
import torch

import course_lib.flash as flash
from course_lib.flash import flash_attention_with_lse
from course_lib.flash.launch import TMA_ENV, device_arch, tma_compatible, tma_enabled

interpreter_only = pytest.mark.skipif(
    flash.triton_mode() != "interpreter", reason="compares the paths in Triton's interpreter"
)


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


def _inputs(B, H, h_kv, n_q, n_k, d, dtype, layout, seed):
    g = torch.Generator().manual_seed(seed)
    if layout == "bnhd":  # flash-attn's [B, N, H, d]: the kernel reads a transposed view
        shapes = [(B, n_q, H, d), (B, n_k, h_kv, d), (B, n_k, h_kv, d)]
    else:
        shapes = [(B, H, n_q, d), (B, h_kv, n_k, d), (B, h_kv, n_k, d)]
    return [torch.randn(*s, generator=g).to(dtype) for s in shapes]


CASES = [
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
@pytest.mark.parametrize("B, H, h_kv, n_q, n_k, d, dtype, layout, mask", CASES)
def test_descriptor_path_equals_pointer_path(
    monkeypatch, descriptor_ops, B, H, h_kv, n_q, n_k, d, dtype, layout, mask
):
    """Same output and LSE from both paths; the descriptor path really ran (descriptor loads
    and the O store were executed) and the pointer path ran none."""
    q, k, v = _inputs(B, H, h_kv, n_q, n_k, d, dtype, layout, seed=n_q + d)
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
    q, k, v = _inputs(1, 2, 2, 40, 70, 20, torch.float16, "bhnd", seed=1)
    assert not tma_compatible(q, k, v)
    monkeypatch.setenv(TMA_ENV, "0")
    expected, _ = flash_attention_with_lse(q, k, v, is_causal=True)
    monkeypatch.setenv(TMA_ENV, "force")
    got, _ = flash_attention_with_lse(q, k, v, is_causal=True)
    assert descriptor_ops == {"load": 0, "store": 0}
    assert torch.equal(got, expected)


def test_tma_compatible_checks_base_and_strides():
    x = torch.randn(2, 3, 40, 48)
    assert tma_compatible(x, x.transpose(1, 2).contiguous().transpose(1, 2))
    assert not tma_compatible(torch.randn(1, 2, 8, 20).half())  # 40-byte token stride
    assert tma_compatible(x.half()[..., :20])  # 20 of 48 features: the strides stay aligned
    assert not tma_compatible(x.reshape(-1)[1:].reshape(1, 1, 1, -1)[..., :48])  # base + 4 B
    assert not tma_compatible(x.transpose(-1, -2))  # d not the unit-stride dimension

    def strided(heads):  # a 14-byte head stride: never used when there is one head
        return torch.empty_strided((2, heads, 4, 24), (2000, 7, 24, 1), dtype=torch.float16)

    assert tma_compatible(strided(1)) and not tma_compatible(strided(2))


@interpreter_only
def test_tma_switch_rule(monkeypatch):
    """Off by default and for 0; 1 only when compiled on sm_90+ (never on the CPU or in the
    interpreter); force also in the interpreter; anything else is an error."""
    monkeypatch.delenv(TMA_ENV, raising=False)
    assert not tma_enabled("cpu") and not tma_enabled("cuda", interpreted=False)
    for setting, interpreted, device, expected in [
        ("0", True, "cpu", False),
        ("1", True, "cpu", False),
        ("1", False, "cpu", False),  # compiled, but not a CUDA tensor
        ("force", True, "cpu", True),
        ("force", False, "cpu", False),
    ]:
        monkeypatch.setenv(TMA_ENV, setting)
        assert tma_enabled(device, interpreted=interpreted) is expected, (setting, interpreted)
    monkeypatch.setenv(TMA_ENV, "yes")
    with pytest.raises(ValueError, match="COURSE_FLASH_TMA"):
        tma_enabled("cpu")


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
