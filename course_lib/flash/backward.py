r"""The backward pass on the host: the preprocess, dK/dV and dQ kernels launched in turn.

The kernels are in :mod:`course_lib.flash.kernels.backward`; the autograd glue that calls
this is :class:`course_lib.flash.forward.FlashAttentionFunction`.
"""

from __future__ import annotations

import torch

from .inputs import _Mask
from .launch import (
    _bucket,
    _dot_precision,
    _empty_like_layout,
    _last_dim_contiguous,
    _launch,
    _prepare,
    _strides,
    device_arch,
    kernel_config,
)


def _backward(do, q, k, v, o, lse, mask: _Mask, deterministic: bool = True):
    r"""Run the backward kernels: returns ``dQ, dK, dV`` shaped like q, k, v.

    Deterministic (the default): the preprocess, the dK/dV kernel and the dQ kernel, seven
    tile matmuls, every gradient written by one program (bit-for-bit reproducible).
    ``deterministic=False``: the dK/dV kernel also adds each tile's :math:`dS K` into a
    float32 dQ buffer with atomics (FlashAttention-2's five matmuls, no dQ kernel); the order
    of the additions changes from run to run, so dQ differs in its last bits.
    """
    import triton

    kernels, interpreted = _prepare(q)
    B, H, n_q, head_dim = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    do = _last_dim_contiguous(do)
    cfg = kernel_config(head_dim, q.device, interpreted=interpreted, dtype=q.dtype)
    block_d = max(16, triton.next_power_of_2(head_dim))

    delta = torch.empty_like(lse)  # (BH, Nq) D_i = rowsum(dO * O)
    kernels._bwd_preprocess_kernel[(triton.cdiv(n_q, 64), B * H)](
        o, do, delta, *_strides(o), *_strides(do), H, n_q,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=64,
    )  # fmt: skip
    dq = _empty_like_layout(q, mask.layout)  # (B, H, Nq, d_h)
    dk = _empty_like_layout(k, mask.layout)  # (B, H_kv, Nk, d_h)
    dv = _empty_like_layout(v, mask.layout)  # (B, H_kv, Nk, d_h)
    common = (H, H // h_kv, n_q, n_k, *mask.kernel_args(), _bucket(n_q), _bucket(n_k))
    meta = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        EVEN_D=block_d == head_dim,
        DOT_PRECISION=_dot_precision(q.dtype),
        **mask.meta(),
    )
    inputs = (q, k, v, do, lse, delta)
    strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(do))
    # fp32 dQ for the atomic additions (zeroed); a placeholder the kernel never touches else
    dq_acc = dk if deterministic else torch.zeros(B, H, n_q, head_dim, device=q.device)
    _launch(
        kernels,
        "_bwd_dkdv_kernel",
        cfg["dkdv" if deterministic else "dkdv_atomic"],
        lambda m: (triton.cdiv(n_k, m["BLOCK_N"]), B * h_kv),  # (key tiles, B*H_kv)
        n_q, n_k, *inputs, dk, dv, dq_acc, mask.scale, mask.scale * kernels.LOG2E,
        *strides, *_strides(dk), *_strides(dv), *_strides(dq_acc), *common,
        reset=() if deterministic else ("DQ_ACC",), ATOMIC_DQ=not deterministic,
        DQ_TRANSPOSED=device_arch(q.device) >= 90, **meta,
    )  # fmt: skip
    if not deterministic:
        return dq.copy_(dq_acc), dk, dv  # (B, H, Nq, d_h) in q's dtype
    _launch(
        kernels,
        "_bwd_dq_kernel",
        cfg["dq"],
        lambda m: (triton.cdiv(n_q, m["BLOCK_M"]), B * H),  # (query tiles, B*H)
        n_q, n_k, *inputs, dq, mask.scale, mask.scale * kernels.LOG2E,
        *strides, *_strides(dq), *common, **meta,
    )  # fmt: skip
    return dq, dk, dv
