r"""Decoding: a few queries against a long key/value cache, the keys split over programs.

Read with ``kernels/decode.py`` beside it (flash-decoding: each program computes a partial
output and its log-sum-exp over a split of the keys; a second kernel merges them).
:func:`flash_decode` checks its inputs, picks the row tile and the number of splits, and
:func:`launch_decode` launches both kernels with every argument by name.
"""

from __future__ import annotations

import torch

from .inputs import Mask, kernel_views, mask_for
from .launch import (
    LOG2E,
    empty_like_layout,
    head_dim_args,
    last_dim_contiguous,
    on_device,
    prepare,
    sizes,
    with_strides,
)
from .tiles import kernel_config

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
    who = "flash_decode"
    qv, kv, vv, layout, scale = kernel_views(q, k, v, scale, layout, who)
    mask = mask_for(qv, kv, is_causal, causal_alignment, window, scale, layout, who)
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
    qv, kv, vv = (last_dim_contiguous(x) for x in (qv, kv, vv))
    interpreted = prepare(qv)
    menu = kernel_config(head_dim, qv.device, interpreted=interpreted, dtype=qv.dtype)["decode"]
    tile = next((t for t in menu if t.block_m >= rows), menu[-1])  # the smallest that fits
    splits = (
        decode_splits(B * h_kv, n_k, tile.block_n, qv.device) if num_splits is None else num_splits
    )
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ValueError(f"{who}: num_splits must be a positive int, got {num_splits!r}")
    with torch.no_grad(), on_device(qv):
        o, lse = launch_decode(qv, kv, vv, mask, tile, splits)  # (B, H, Nq, d_h), (BH, Nq)
    out = o.transpose(1, 2) if layout == "bnhd" else o
    return (out, lse.view(B, H, n_q)) if return_lse else out


def launch_decode(q, k, v, mask: Mask, tile, splits: int):
    r"""Run the split-key kernel, then the merge: ``O`` (caller's layout) and ``LSE [B*H, Nq]``.

    ``tile``: its ``block_m`` rows hold the :math:`G N_q` packed query rows, ``block_n``
    keys per step; ``splits``: programs per (batch, key/value head), each over a whole number
    of key tiles (the count is rounded so that none is empty). The LSE is a natural log.
    """
    import triton

    from .kernels.decode import _decode_kernel, _decode_merge_kernel

    B, H, n_q, head_dim = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    rows = (H // h_kv) * n_q
    keys_per_split = triton.cdiv(triton.cdiv(n_k, splits), tile.block_n) * tile.block_n
    splits = triton.cdiv(n_k, keys_per_split)
    features = head_dim_args(head_dim, q.dtype)
    o_part = torch.empty(B * H * n_q, splits, head_dim, dtype=torch.float32, device=q.device)
    lse_part = torch.empty(B * H * n_q, splits, dtype=torch.float32, device=q.device)
    o = empty_like_layout(q, mask.layout)  # (B, H, Nq, d_h)
    lse = torch.empty(B * H, n_q, dtype=torch.float32, device=q.device)  # (BH, Nq)
    _decode_kernel[(splits, B * h_kv)](
        **with_strides(Q=q, K=k, V=v),
        O_PART=o_part,
        LSE_PART=lse_part,
        qk_scale=mask.scale * LOG2E,
        **sizes(q, k),
        KEYS_PER_SPLIT=keys_per_split,
        NUM_SPLITS=splits,
        BLOCK_R=max(tile.block_m, triton.next_power_of_2(rows)),
        BLOCK_N=tile.block_n,
        EVEN_N=n_k % tile.block_n == 0,
        num_warps=tile.num_warps,
        num_stages=tile.num_stages,
        **mask.kernel_args(),
        **features,
    )
    _decode_merge_kernel[(B * H * n_q,)](  # one program per query row
        O_PART=o_part, LSE_PART=lse_part, **with_strides(O=o), LSE=lse,
        H=H, N_Q=n_q, NUM_SPLITS=splits,
        HEAD_DIM=head_dim, BLOCK_D=features["BLOCK_D"], BLOCK_S=max(2, triton.next_power_of_2(splits)),
    )  # fmt: skip
    return o, lse
