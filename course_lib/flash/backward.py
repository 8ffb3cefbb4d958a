r"""The backward pass: the preprocess, dK/dV and dQ kernels, launched in turn.

Read with ``kernels/backward.py`` beside it (the three kernels and their inner loops); the
autograd function that calls :func:`launch_backward` is
:class:`course_lib.flash.forward.FlashAttentionFunction`.

1. ``_bwd_preprocess_kernel``: :math:`D_i = \mathrm{rowsum}(dO_i \circ O_i)`, one program per
   64 query rows.
2. ``_bwd_dkdv_kernel``: one program per key tile of one (batch, key/value head), summing
   over the query tiles of the :math:`G` query heads that read it; with ``ATOMIC_DQ``
   (``deterministic=False``) it also adds each tile's share of dQ into a float32 buffer.
3. ``_bwd_dq_kernel`` (deterministic only): one program per query tile, over the key tiles.
"""

from __future__ import annotations

import torch

from .inputs import Mask
from .launch import (
    LOG2E,
    buckets,
    device_arch,
    empty_like_layout,
    head_dim_args,
    last_dim_contiguous,
    prepare,
    run_kernel,
    sizes,
    strides,
    with_strides,
)
from .tiles import kernel_config

PREPROCESS_ROWS = 64  # query rows per program of the preprocess kernel


def launch_backward(do, q, k, v, o, lse, mask: Mask, deterministic: bool = True):
    r"""Run the backward kernels: returns ``dQ, dK, dV`` shaped like q, k, v.

    Deterministic (the default): the preprocess, the dK/dV kernel and the dQ kernel, seven
    tile matmuls, every gradient written by one program (bit-for-bit reproducible).
    ``deterministic=False``: the dK/dV kernel also adds each tile's :math:`dS K` into a
    float32 dQ buffer with atomics (FlashAttention-2's five matmuls, no dQ kernel); the order
    of the additions changes from run to run, so dQ differs in its last bits.
    """
    interpreted = prepare(q)
    import triton

    from .kernels.backward import _bwd_dkdv_kernel, _bwd_dq_kernel, _bwd_preprocess_kernel

    B, H, n_q, head_dim = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    do = last_dim_contiguous(do)
    tiles = kernel_config(head_dim, q.device, interpreted=interpreted, dtype=q.dtype)
    features = head_dim_args(head_dim, q.dtype)

    delta = torch.empty_like(lse)  # (BH, Nq) D_i = rowsum(dO * O)
    _bwd_preprocess_kernel[(triton.cdiv(n_q, PREPROCESS_ROWS), B * H)](
        **with_strides(O=o, DO=do),
        DELTA=delta,
        H=H,
        N_Q=n_q,
        HEAD_DIM=head_dim,
        BLOCK_D=features["BLOCK_D"],
        BLOCK_M=PREPROCESS_ROWS,
    )
    dq = empty_like_layout(q, mask.layout)  # (B, H, Nq, d_h)
    dk = empty_like_layout(k, mask.layout)  # (B, H_kv, Nk, d_h)
    dv = empty_like_layout(v, mask.layout)  # (B, H_kv, Nk, d_h)
    # what both kernels read: the inputs and their strides, the scales, sizes, mask, features
    shared = dict(
        **with_strides(Q=q, K=k, V=v, DO=do),
        LSE=lse,
        DELTA=delta,
        sm_scale=mask.scale,
        qk_scale=mask.scale * LOG2E,
        **sizes(q, k),
        **buckets(q, k),
        **mask.kernel_args(),
        **features,
    )
    # fp32 dQ for the atomic additions (zeroed); a placeholder the kernel never touches else
    dq_acc = dk if deterministic else torch.zeros(B, H, n_q, head_dim, device=q.device)
    run_kernel(
        _bwd_dkdv_kernel,
        tiles["dkdv" if deterministic else "dkdv_atomic"],
        lambda tile: (triton.cdiv(n_k, tile["BLOCK_N"]), B * h_kv),  # (key tiles, B*H_kv)
        reset=() if deterministic else ("DQ_ACC",),
        **with_strides(DK=dk, DV=dv),
        DQ_ACC=dq_acc,
        **strides("dq", dq_acc),
        ATOMIC_DQ=not deterministic,
        DQ_TRANSPOSED=device_arch(q.device) >= 90,  # dQ^T = K^T dS^T: wgmma on Hopper
        **shared,
    )
    if not deterministic:
        return dq.copy_(dq_acc), dk, dv  # (B, H, Nq, d_h) in q's dtype
    run_kernel(
        _bwd_dq_kernel,
        tiles["dq"],
        lambda tile: (triton.cdiv(n_q, tile["BLOCK_M"]), B * H),  # (query tiles, B*H)
        **with_strides(DQ=dq),
        **shared,
    )
    return dq, dk, dv
