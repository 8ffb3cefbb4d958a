r"""Decoding: a few queries against a long key/value cache, the keys split over programs.

The kernels are in :mod:`course_lib.flash.kernels.decode` (flash-decoding: partial outputs
and their log-sum-exps, merged by a second kernel).
"""

from __future__ import annotations

import torch

from .inputs import _kernel_views, _mask_for
from .launch import (
    _dot_precision,
    _empty_like_layout,
    _last_dim_contiguous,
    _on_device,
    _prepare,
    _strides,
    kernel_config,
)

DECODE_MAX_ROWS = 128  # G * Nq packed into one tile of rows


def decode_splits(
    batch_kv_heads: int, n_k: int, block_n: int, device, *, num_sms: int | None = None
) -> int:
    """How many programs share one (batch, key/value head)'s keys in :func:`flash_decode`.

    Enough programs to fill the GPU twice (two per streaming multiprocessor), each with at
    least 4 key tiles, and never more splits than key tiles. ``num_sms`` defaults to the
    GPU's count (132 on an H100 SXM); in Triton's interpreter (no GPU to fill, and each
    split a Python-speed program): at most 4.
    """
    tiles = -(-n_k // block_n)
    if num_sms is None:
        if torch.device(device).type != "cuda":
            return max(1, min(4, tiles))
        num_sms = torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    want = -(-2 * num_sms // max(1, batch_kv_heads))
    return max(1, min(want, tiles // 4 or 1, tiles))


def flash_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: int | None = None,
    layout: str | None = None,
    num_splits: int | None = None,
    return_lse: bool = False,
):
    r"""Attention for a few queries against a long key/value cache (forward only).

    Same arguments and conventions as :func:`flash_attention`; for a KV cache with
    :math:`N_q > 1` new queries pass ``is_causal=True, causal_alignment="bottom_right"``
    (with :math:`N_q = 1` and no window, causal or not makes no difference). The keys are
    split over ``num_splits`` programs per (batch, key/value head) (default:
    :func:`decode_splits`), each computing a partial output :math:`O_s` and its log-sum-exp
    :math:`L_s` over its keys; a second kernel merges them,
    :math:`L = \log\sum_s e^{L_s}`, :math:`O = \sum_s e^{L_s - L} O_s` (the merge rule of the
    online softmax, chapter 09's too). The :math:`G\cdot N_q` query rows of a key/value head
    share one tile, so the cache is read once per key/value head (:math:`G N_q \le 128`).
    Returns the output, or ``(output, lse [B, H, Nq])`` with ``return_lse``.
    """
    import triton

    who = "flash_decode"
    qv, kv, vv, layout, scale = _kernel_views(q, k, v, scale, layout, who)
    mask = _mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError(
            "flash_decode is forward-only (inference): it has no backward. Use "
            "flash_attention for training, or call it under torch.no_grad()."
        )
    B, H, n_q, head_dim = qv.shape
    h_kv, n_k = kv.shape[1], kv.shape[2]
    rows = (H // h_kv) * n_q
    if rows > DECODE_MAX_ROWS:
        raise ValueError(
            f"{who}: G * Nq = {H // h_kv} * {n_q} = {rows} query rows per key/value head; the "
            f"decode kernel packs at most {DECODE_MAX_ROWS} (use flash_attention for long "
            "query sequences)"
        )
    qv, kv, vv = (_last_dim_contiguous(x) for x in (qv, kv, vv))
    kernels, interpreted = _prepare(qv)
    menu = kernel_config(head_dim, qv.device, interpreted=interpreted, dtype=qv.dtype)["decode"]
    c = next((c for c in menu if c["BLOCK_M"] >= rows), menu[-1])  # the smallest row tile that fits
    block_n = c["BLOCK_N"]
    splits = decode_splits(B * h_kv, n_k, block_n, qv.device) if num_splits is None else num_splits
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ValueError(f"{who}: num_splits must be a positive int, got {num_splits!r}")
    keys_per_split = triton.cdiv(triton.cdiv(n_k, splits), block_n) * block_n
    splits = triton.cdiv(n_k, keys_per_split)
    block_d = max(16, triton.next_power_of_2(head_dim))
    dev = qv.device
    o_part = torch.empty(B * H * n_q, splits, head_dim, dtype=torch.float32, device=dev)
    lse_part = torch.empty(B * H * n_q, splits, dtype=torch.float32, device=dev)
    o = _empty_like_layout(qv, layout)  # (B, H, Nq, d_h)
    lse = torch.empty(B * H, n_q, dtype=torch.float32, device=dev)  # (BH, Nq)
    with torch.no_grad(), _on_device(qv):
        kernels._decode_kernel[(splits, B * h_kv)](
            qv, kv, vv, o_part, lse_part, scale * kernels.LOG2E,
            *_strides(qv), *_strides(kv), *_strides(vv),
            H, H // h_kv, n_q, n_k, *mask.kernel_args(), keys_per_split, splits,
            HEAD_DIM=head_dim, BLOCK_D=block_d,
            BLOCK_R=max(c["BLOCK_M"], triton.next_power_of_2(rows)), BLOCK_N=block_n,
            EVEN_N=n_k % block_n == 0, EVEN_D=block_d == head_dim,
            DOT_PRECISION=_dot_precision(qv.dtype), num_warps=c["num_warps"],
            num_stages=c["num_stages"], **mask.meta(),
        )  # fmt: skip
        kernels._decode_merge_kernel[(B * H * n_q,)](
            o_part, lse_part, o, lse, *_strides(o), H, n_q, splits,
            HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_S=max(2, triton.next_power_of_2(splits)),
        )  # fmt: skip
    out = o.transpose(1, 2) if layout == "bnhd" else o
    return (out, lse.view(B, H, n_q)) if return_lse else out
