r"""What a FlashAttention call is asked to do, checked once: layout, heads, mask options, dtypes.

Shared by the tiled reference (:mod:`.reference`) and the kernels' launchers
(:mod:`.forward`, :mod:`.decode`): :func:`kernel_views` checks a kernel call and
:func:`mask_for` turns its mask options into a :class:`Mask`, the kernels' mask arguments. Every mistake is named in the error, with the likely fix
(flash-attn's ``[B, N, H, d_h]`` layout read as the course's is the common one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..validation import check_flash_inputs, shape_of
from .launch import device_arch

SUPPORTED_HEAD_DIMS = (16, 128)  # inclusive range of head dimensions the kernel takes
ALIGNMENTS = ("top_left", "bottom_right")
LAYOUTS = ("bhnd", "bnhd")

# --------------------------------------------------------------------------- conventions


def _check_options(is_causal, causal_alignment, window, who: str) -> int | None:
    """Validate the mask options; returns the window as an int (or None)."""
    if not isinstance(is_causal, (bool, np.bool_)):
        raise TypeError(
            f"{who}: is_causal must be True or False, got {is_causal!r}; choose the alignment "
            f"with causal_alignment={ALIGNMENTS}"
        )
    if causal_alignment not in ALIGNMENTS:
        raise ValueError(
            f"{who}: causal_alignment must be one of {ALIGNMENTS}, got {causal_alignment!r} "
            "('top_left': query i sees keys j <= i, as torch SDPA's is_causal; "
            "'bottom_right': j <= i + Nk - Nq, as flash-attn's causal and a KV cache)"
        )
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"{who}: window must be a positive int (a number of keys), got {window!r}")
    if not is_causal:
        raise ValueError(
            f"{who}: window={window} is a causal sliding window (query i sees keys "
            f"i - {window} + 1 .. i); pass is_causal=True with it"
        )
    return int(window)


def _diag_offset(n_q: int, n_k: int, causal_alignment: str) -> int:
    r"""The diagonal offset :math:`\delta`: query :math:`i` sits at key position :math:`i + \delta`."""
    return 0 if causal_alignment == "top_left" else n_k - n_q


def _layout_views(q, k, v, layout, who: str):
    """The inputs as ``[B, H, N, d_h]`` views (no copy), after checking ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(
            f"{who}: layout must be one of {LAYOUTS}, got {layout!r} ('bhnd' = [B, H, N, d_h], "
            "torch SDPA's and the course's; 'bnhd' = [B, N, H, d_h], flash-attn's)"
        )
    if layout == "bnhd":
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x.dim() != 4:
                raise ValueError(
                    f"{who}: layout='bnhd' expects {name} of shape [B, N, H, d_h] (4 "
                    f"dimensions), got {shape_of(x)}"
                )
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return q, k, v


def _check_heads(q, k, v, who: str, layout: str) -> None:
    """Batch dimensions equal; k and v share H_kv; H a multiple of H_kv (GQA), on axis -3."""
    names = "[B, N, H, d_h]" if layout == "bnhd" else "[..., H, N, d_h]"
    hint = (
        ""
        if layout == "bnhd"
        else " If your tensors are [B, N, H, d_h] (flash-attn's layout, or Hugging Face's "
        "before the transpose), pass layout='bnhd'."
    )
    if not (q.dim() == k.dim() == v.dim()):
        raise ValueError(
            f"{who}: q, k and v must have the same number of dimensions {names}: got q "
            f"{shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}"
        )
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"{who}: k and v must have the same batch, heads and number of keys: got k "
            f"{shape_of(k)}, v {shape_of(v)}" + hint
        )
    if q.dim() < 3 or q.shape[-3] == k.shape[-3]:
        if q.shape[:-2] != k.shape[:-2]:
            raise ValueError(
                f"{who}: q, k and v must have the same batch dimensions: got q "
                f"{shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}" + hint
            )
        return
    h, h_kv = q.shape[-3], k.shape[-3]
    if q.shape[:-3] != k.shape[:-3]:
        raise ValueError(
            f"{who}: q, k and v must have the same batch dimensions: got q {shape_of(q)}, "
            f"k {shape_of(k)}, v {shape_of(v)}" + hint
        )
    if h_kv == 0 or h % h_kv:
        raise ValueError(
            f"{who}: q has H = {h} heads and k, v have H_kv = {h_kv}: grouped-query attention "
            f"needs H to be a multiple of H_kv (query head h reads key/value head h // (H / "
            f"H_kv)). Got q {shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}." + hint
        )


def _validate(q, k, v, scale, who: str, layout: str) -> float:
    """The checks of :func:`check_flash_inputs`, with grouped key/value heads allowed."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who}: expected {name} to be a torch.Tensor, got {type(x).__name__}")
    _check_heads(q, k, v, who, layout)
    if q.dim() >= 3 and q.shape[-3] != k.shape[-3]:  # let the shared checks see equal heads
        k = k[..., :1, :, :].expand(*q.shape[:-2], *k.shape[-2:])
        v = v[..., :1, :, :].expand(*q.shape[:-2], *v.shape[-2:])
    return check_flash_inputs(q, k, v, scale, who=who)


_DTYPES_CPU = (torch.float32, torch.float16)
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y: the kernels put batch x heads there
_DTYPES_CUDA = (torch.float16, torch.bfloat16, torch.float32)


def kernel_views(q, k, v, scale, layout, who: str):
    """Validate a kernel call; returns ``[B, H, N, d_h]`` views, the layout and the scale."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who}: expected {name} to be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(
                f"{who}: expected q, k, v of shape [B, H, N, d_h] (4 dimensions; or [B, N, H, "
                f"d_h] with layout='bnhd'), got q {shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}"
            )
    if layout is None:
        # [B, N, H, d_h] read as [B, H, N, d_h] looks like more heads than tokens, in q and
        # k alike: the one mistake shapes can reveal. Ask rather than guess.
        if q.shape[1] == k.shape[1] > max(q.shape[2], k.shape[2]) and q.shape[2] > 1:
            raise ValueError(
                f"{who}: q {shape_of(q)} and k {shape_of(k)} read as [B, H, N, d_h] have "
                f"more heads ({q.shape[1]}) than tokens ({q.shape[2]}): is this flash-attn's "
                "[B, N, H, d_h] layout? Pass layout='bnhd' for [B, N, H, d_h], or "
                "layout='bhnd' if you do mean so many heads."
            )
        layout = "bhnd"
    qv, kv, vv = _layout_views(q, k, v, layout, who)
    scale = _validate(qv, kv, vv, scale, who, layout)
    if scale <= 0:
        raise ValueError(f"{who}: the kernels take a positive scale, got {scale!r}")
    head_dim = qv.shape[-1]
    if vv.shape[-1] != head_dim:
        raise ValueError(
            f"{who}: v must have the same head dimension as q and k (d_h = {head_dim}), got "
            f"v {shape_of(v)}"
        )
    lo, hi = SUPPORTED_HEAD_DIMS
    if not lo <= head_dim <= hi:
        raise ValueError(
            f"{who}: head dimension d_h = {head_dim} is not supported; the kernel takes "
            f"{lo} <= d_h <= {hi} (use flash_attention_reference or torch SDPA otherwise)"
        )
    if qv.shape[-2] == 0:
        raise ValueError(f"{who}: there are no queries (Nq = 0)")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"{who} runs on CUDA GPUs or on the CPU through Triton's interpreter, got "
            f"tensors on {q.device}"
        )
    allowed = _DTYPES_CUDA if q.device.type == "cuda" else _DTYPES_CPU
    if q.dtype not in allowed:
        where = "on CUDA" if q.device.type == "cuda" else "on the CPU (Triton's interpreter)"
        names = ", ".join(str(t).replace("torch.", "") for t in allowed)
        raise TypeError(f"{who}: dtype {q.dtype} is not supported {where}; use one of {names}")
    if q.device.type == "cuda" and q.dtype == torch.bfloat16 and device_arch(q.device) < 80:
        raise TypeError(
            f"{who}: bfloat16 needs a GPU of compute capability 8.0 or newer (Ampere); use "
            "float16 on this GPU"
        )
    if q.device.type == "cuda" and qv.shape[0] * qv.shape[1] > MAX_GRID_Y:
        raise ValueError(
            f"{who}: B*H = {qv.shape[0] * qv.shape[1]} (batch x heads) exceeds the CUDA grid "
            f"limit of {MAX_GRID_Y} programs on the second grid axis; split the batch into "
            "chunks"
        )
    return qv, kv, vv, layout, scale


@dataclass(frozen=True)
class Mask:
    """What a kernel call masks: causal (with its diagonal offset) and a sliding window."""

    is_causal: bool
    diag: int
    window: int | None
    scale: float
    layout: str

    def kernel_args(self) -> dict:
        """The mask as every kernel takes it: ``DIAG``, ``WINDOW`` and two compile-time flags."""
        return dict(
            DIAG=self.diag,
            WINDOW=self.window or 0,
            IS_CAUSAL=self.is_causal,
            HAS_WINDOW=self.window is not None,
        )


def mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who) -> Mask:
    """The :class:`Mask` of a call, its options checked."""
    window = _check_options(is_causal, causal_alignment, window, who)
    diag = _diag_offset(qv.shape[-2], kv.shape[-2], causal_alignment)
    return Mask(bool(is_causal), diag, window, scale, layout)
