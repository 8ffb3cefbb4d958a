"""course_lib.flash.inputs: the checks every kernel call makes once, and its Mask.

Every mistake must be named in the error with the likely fix; flash-attn's [B, N, H, d_h]
layout read as the course's [B, H, N, d_h] is the common one, and must never run silently.
These are pure functions: no kernel is launched here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.flash import inputs

WHO = "flash_attention"


def _check(q, k, v, *, scale=None, layout=None, is_causal=False, causal_alignment="top_left",
           window=None):  # fmt: skip
    """What flash_attention does before launching anything: the views, then the mask."""
    qv, kv, vv, layout, scale = inputs.kernel_views(q, k, v, scale, layout, WHO)
    return inputs.mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, WHO)


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
        _check(q, k, v)
    assert str(info.value).startswith(f"{WHO}: ") or str(info.value).startswith(WHO)
    if "d_h = " in match or "B, H" in match:
        assert str(tuple(q.shape)) in str(info.value) or "d_h =" in str(info.value)


def test_kernel_dtype_device_scale_errors():
    x = torch.randn(1, 1, 4, 16)
    with pytest.raises(TypeError, match="bfloat16 is not supported on the CPU"):
        _check(x.bfloat16(), x.bfloat16(), x.bfloat16())
    with pytest.raises(TypeError, match="float64 is not supported"):
        _check(x.double(), x.double(), x.double())
    with pytest.raises(TypeError, match="share one dtype"):
        _check(x, x.half(), x)
    with pytest.raises(TypeError, match="floating-point"):
        _check(x.long(), x.long(), x.long())
    with pytest.raises(ValueError, match="same device"):
        _check(x, x.to("meta"), x)
    with pytest.raises(ValueError, match="runs on CUDA GPUs or on the CPU"):
        _check(*[x.to("meta")] * 3)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        _check(x, x, x, scale=float("nan"))
    with pytest.raises(ValueError, match="positive scale"):
        _check(x, x, x, scale=-0.5)
    with pytest.raises(TypeError, match="torch.Tensor"):
        _check(x.numpy(), x, x)
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        _check(x, x, x, is_causal="bottom_right")
    with pytest.raises(ValueError, match="window must be a positive int"):
        _check(x, x, x, is_causal=True, window=0)
    with pytest.raises(ValueError, match="window must be a positive int"):
        _check(x, x, x, is_causal=True, window=True)
    with pytest.raises(ValueError, match="pass is_causal=True"):
        _check(x, x, x, window=3)
    with pytest.raises(ValueError, match="causal_alignment must be one of"):
        _check(x, x, x, is_causal=True, causal_alignment="bottom-right")
    with pytest.raises(ValueError, match="layout must be one of"):
        _check(x, x, x, layout="bshd")


def test_flash_attn_layout_is_caught_not_silently_wrong():
    """[B, N, H, d] passed the course's way used to run and be wrong (max error 3.6):
    self-attention shapes are now asked about, GQA shapes fail with the fix named."""
    x = torch.randn(1, 64, 4, 16)  # (B, N, H, d) as flash-attn takes it
    with pytest.raises(ValueError, match="layout='bnhd'"):
        _check(x, x, x)
    kv = torch.randn(1, 64, 2, 16)  # (B, N, H_kv, d): 64 "heads" vs 64
    with pytest.raises(ValueError, match="layout='bnhd'"):
        _check(x, kv, kv)
    q1 = torch.randn(1, 1, 8, 16)  # decode-shaped [B, N=1, H, d]
    kc = torch.randn(1, 50, 2, 16)  # cache [B, Nk, H_kv, d]
    with pytest.raises(ValueError, match="multiple of H_kv.*layout='bnhd'"):
        _check(q1, kc, kc)
    # saying which layout settles it either way
    qv, kv_, vv, layout, _ = inputs.kernel_views(x, x, x, None, "bnhd", WHO)
    assert layout == "bnhd" and qv.shape == (1, 4, 64, 16) and qv.data_ptr() == x.data_ptr()
    many = x[:, :, :2]  # 64 heads of 2 tokens: asked about, unless said
    with pytest.raises(ValueError, match="more heads"):
        _check(many, many, many)
    qv, *_, layout, _ = inputs.kernel_views(many, many, many, None, "bhnd", WHO)
    assert layout == "bhnd" and qv.shape == (1, 64, 2, 16)
    with pytest.raises(ValueError, match=r"layout='bnhd' expects q of shape \[B, N, H, d_h\]"):
        inputs._layout_views(x[0], x[0], x[0], "bnhd", WHO)


def test_kernel_views_are_views_and_default_scale():
    q = torch.randn(2, 3, 5, 16)
    k = torch.randn(2, 1, 7, 16)  # grouped: H_kv = 1 divides H = 3
    qv, kv, vv, layout, scale = inputs.kernel_views(q, k, k, None, None, WHO)
    assert (qv is q, kv is k, vv is k, layout) == (True, True, True, "bhnd")
    assert scale == pytest.approx(1 / 4)  # 1 / sqrt(16)
    assert inputs.kernel_views(q, k, k, 2, None, WHO)[-1] == 2.0


def test_mask_for_the_diagonal_offset_and_the_kernel_arguments():
    q, k = torch.randn(1, 1, 3, 16), torch.randn(1, 1, 10, 16)
    top = _check(q, k, k, is_causal=True)
    assert (top.is_causal, top.diag, top.window, top.layout) == (True, 0, None, "bhnd")
    bottom = _check(q, k, k, is_causal=np.bool_(True), causal_alignment="bottom_right", window=4)
    assert bottom.diag == 7 and bottom.window == 4 and bottom.is_causal is True
    assert bottom.kernel_args() == dict(DIAG=7, WINDOW=4, IS_CAUSAL=True, HAS_WINDOW=True)
    plain = _check(q, k, k, scale=0.5)
    assert plain.scale == 0.5
    assert plain.kernel_args() == dict(DIAG=0, WINDOW=0, IS_CAUSAL=False, HAS_WINDOW=False)


def _as_if_on_cuda(monkeypatch):
    """Tensors that say they live on a CUDA device (no GPU needed: nothing is launched)."""
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))


def test_too_many_batch_heads_for_the_cuda_grid_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(inputs, "MAX_GRID_Y", 3)
    q = torch.empty(2, 2, 8, 16, device="meta")  # B*H = 4 > 3
    _as_if_on_cuda(monkeypatch)
    with pytest.raises(ValueError, match="B\\*H = 4"):
        inputs.kernel_views(q, q, q, None, "bhnd", WHO)


def test_bfloat16_needs_an_ampere_gpu(monkeypatch):
    q = torch.empty(1, 1, 8, 16, device="meta", dtype=torch.bfloat16)
    monkeypatch.setattr(inputs, "device_arch", lambda device: 75)  # a T4
    _as_if_on_cuda(monkeypatch)
    with pytest.raises(TypeError, match="compute capability 8.0"):
        inputs.kernel_views(q, q, q, None, "bhnd", WHO)
    monkeypatch.setattr(inputs, "device_arch", lambda device: 80)
    assert inputs.kernel_views(q, q, q, None, "bhnd", WHO)[3] == "bhnd"
