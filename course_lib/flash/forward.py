r"""The forward pass, in the shape of Triton's fused-attention tutorial: launcher, autograd.

Read with ``kernels/forward.py`` beside it (the kernel, ``_fwd_kernel``, and its inner loop):

1. :func:`launch_forward` chooses Triton's mode (:func:`.launch.prepare`), imports the
   kernel object, and launches it with every argument by name, one program per tile of
   queries of one (batch, head); the tile comes from :func:`.tiles.kernel_config` (several
   on a GPU: autotuned, :func:`.launch.run_kernel`).
2. :class:`FlashAttentionFunction` ties it to the backward (:mod:`.backward`): the forward
   saves q, k, v, O and the log-sum-exp, never P.
3. :func:`flash_attention` (differentiable) and :func:`flash_attention_with_lse` (forward
   only, with the log-sum-exp) check their inputs once (:mod:`.inputs`) and call them.
"""

from __future__ import annotations

import math

import torch

from .backward import launch_backward
from .inputs import Mask, kernel_views, mask_for
from .launch import (
    LOG2E,
    buckets,
    empty_like_layout,
    ensure_allocator,
    head_dim_args,
    last_dim_contiguous,
    on_device,
    prepare,
    run_kernel,
    sizes,
    tma_compatible,
    tma_enabled,
    with_strides,
)
from .tiles import kernel_config

LN2 = math.log(2.0)  # a base-2 log-sum-exp times ln 2 is the natural one


def uses_tma(q, k, v, o=None, *, interpreted: bool | None = None) -> bool:
    """Whether the forward kernel reads these tensors through tensor descriptors (TMA).

    The switch says yes (:func:`course_lib.flash.launch.tma_enabled`), every tensor meets
    TMA's alignment rules (:func:`course_lib.flash.launch.tma_compatible`; ``o``, the output,
    when already allocated), and on a GPU the inputs are 16-bit (the dtypes the compiled
    TMA path was checked in).
    """
    if not tma_enabled(q.device, interpreted=interpreted):
        return False
    if interpreted is None:
        interpreted = q.device.type != "cuda"
    sixteen_bit = q.dtype in (torch.float16, torch.bfloat16)
    tensors = (q, k, v) if o is None else (q, k, v, o)
    return tma_compatible(*tensors) and (interpreted or sixteen_bit)


def launch_forward(q, k, v, mask: Mask):
    r"""Run the forward kernel: ``O [B, H, Nq, d_h]`` (caller's layout) and ``LSE [B*H, Nq]``.

    The LSE is in base 2, :math:`L_2 = L / \ln 2`, the units of the kernels' exponents
    (``exp2``), so the backward uses it as it is.
    """
    interpreted = prepare(q)
    import triton

    from .kernels.forward import _fwd_kernel

    B, H, n_q, head_dim = q.shape
    o = empty_like_layout(q, mask.layout)  # (B, H, Nq, d_h)
    lse = torch.empty(B * H, n_q, dtype=torch.float32, device=q.device)  # (BH, Nq)
    use_tma = uses_tma(q, k, v, o, interpreted=interpreted)
    if use_tma and not interpreted:
        ensure_allocator()  # the kernel writes its descriptors to a global scratch buffer
    tiles = kernel_config(head_dim, q.device, interpreted=interpreted, dtype=q.dtype)["fwd"]
    run_kernel(
        _fwd_kernel,
        tiles,
        lambda tile: (triton.cdiv(n_q, tile["BLOCK_M"]), B * H),  # (query tiles, B*H)
        **with_strides(Q=q, K=k, V=v, O=o),
        LSE=lse,
        qk_scale=mask.scale * LOG2E,
        USE_TMA=use_tma,
        **sizes(q, k),
        **buckets(q, k),
        **mask.kernel_args(),
        **head_dim_args(head_dim, q.dtype),
    )
    return o, lse


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: the forward saves only q, k, v, O and the LSE — never P."""

    @staticmethod
    def forward(ctx, q, k, v, mask, deterministic=True):
        q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
        with on_device(q):
            o, lse = launch_forward(q, k, v, mask)  # (B, H, Nq, d_h), (BH, Nq)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mask, ctx.deterministic = mask, deterministic
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        with on_device(q):
            dq, dk, dv = launch_backward(do, q, k, v, o, lse, ctx.mask, ctx.deterministic)
        return dq, dk, dv, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: int | None = None,
    layout: str | None = None,
    deterministic: bool = True,
) -> torch.Tensor:
    r"""Exact attention :math:`\mathrm{softmax}(\text{scale}\cdot QK^\top)V` by Triton kernels.

    ``q [B, H, Nq, d_h]``, ``k, v [B, H_kv, Nk, d_h]`` with :math:`16 \le d_h \le 128` and
    :math:`H_{kv}` dividing :math:`H` (grouped-query attention, read directly: query head
    :math:`h` uses key/value head :math:`\lfloor h / (H/H_{kv})\rfloor`; the backward sums
    dK, dV over each group). Any sequence lengths. ``layout="bnhd"`` takes flash-attn's
    ``[B, N, H, d_h]`` and returns the output that way (read through strides, no copy);
    shapes that look like that layout (more heads than tokens in q and k) must say which
    layout they are in.

    ``is_causal``: top-left aligned by default, as torch SDPA (query :math:`i` sees keys
    :math:`j \le i`); ``causal_alignment="bottom_right"`` as flash-attn and a KV cache
    (:math:`j \le i + N_k - N_q`). ``window=W`` (with ``is_causal``): only the last :math:`W`
    keys, the query's own included (tiles outside the window are never loaded). See the
    module's table for the conventions of torch SDPA, flash-attn and Triton's tutorial.

    Differentiable in q, k, v (the backward recomputes the attention weights from the saved
    log-sum-exp). dtypes: float16/bfloat16 on CUDA (the fast path; float32 works too, in
    true float32 matmuls without tensor cores — for checking, not speed); float32/float16 on
    the CPU through Triton's interpreter. For a few queries against a long cache, use
    :func:`flash_decode`.

    ``deterministic=False`` takes the faster backward of FlashAttention-2: dQ is added with
    float32 atomics from the dK/dV pass (5 tile matmuls instead of 7, no dQ kernel). The
    additions happen in a different order on every run, so dQ is equal to the deterministic
    one within float32 rounding but not bit for bit; dK and dV are unchanged.
    """
    who = "flash_attention"
    if not isinstance(deterministic, bool):
        raise TypeError(f"{who}: deterministic must be True or False, got {deterministic!r}")
    qv, kv, vv, layout, scale = kernel_views(q, k, v, scale, layout, who)
    mask = mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who)
    out = FlashAttentionFunction.apply(qv, kv, vv, mask, deterministic)  # (B, H, Nq, d_h)
    return out.transpose(1, 2) if layout == "bnhd" else out


def flash_attention_with_lse(
    q,
    k,
    v,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: int | None = None,
    layout: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward kernel's two outputs, ``O`` (q's layout) and ``LSE [B, H, Nq]`` (no autograd)."""
    who = "flash_attention_with_lse"
    qv, kv, vv, layout, scale = kernel_views(q, k, v, scale, layout, who)
    mask = mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who)
    qv, kv, vv = (last_dim_contiguous(x) for x in (qv, kv, vv))
    with torch.no_grad(), on_device(qv):
        o, lse = launch_forward(qv, kv, vv, mask)
    o = o.transpose(1, 2) if layout == "bnhd" else o
    return o, lse.view(qv.shape[:-1]) * LN2  # the kernel's base-2 L_2, as a natural log
