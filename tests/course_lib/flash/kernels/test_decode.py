"""course_lib.flash.kernels.decode: the split-key kernel's partial results and the merge
kernel, each launched by hand, and the rules of their source that only a compiled kernel
would show."""

from __future__ import annotations

import math

import torch
import triton
from flash_lab import DEVICE, ground_truth, kernel_module_source, make_inputs, states_its_precision

from course_lib.flash import launch
from course_lib.flash.inputs import kernel_views, mask_for

launch.load_kernels()  # in the mode conftest.py has chosen already
from course_lib.flash.kernels.decode import _decode_kernel, _decode_merge_kernel  # noqa: E402


def test_every_dot_states_its_precision_and_offsets_are_int64():
    dots, kernels = kernel_module_source("decode")
    assert len(dots) == 2 and all(states_its_precision(d) for d in dots)  # transposed tiles
    assert list(kernels) == ["_decode_kernel", "_decode_merge_kernel"]
    assert "b = (bhk // H_KV).to(tl.int64)" in kernels["_decode_kernel"]
    assert "row = tl.program_id(0).to(tl.int64)" in kernels["_decode_merge_kernel"]


def test_the_merge_kernel_weights_each_split_by_its_log_sum_exp():
    """L = log sum_s e^{L_s}, O = sum_s e^{L_s - L} O_s; a split that saw no key (L_s =
    -inf) has weight 0, and a row none of whose splits saw a key gets O = 0, L = -inf."""
    B, H, n_q, d, splits = 1, 2, 3, 20, 3
    rows = B * H * n_q
    g = torch.Generator().manual_seed(0)
    o_part = torch.randn(rows, splits, d, generator=g)
    lse_part = torch.randn(rows, splits, generator=g) * 3
    lse_part[1, 2] = -math.inf  # one empty split
    lse_part[4] = -math.inf  # a row that saw nothing at all
    o = torch.empty(B, H, n_q, d, device=DEVICE)
    lse = torch.empty(B * H, n_q, device=DEVICE)
    _decode_merge_kernel[(rows,)](
        O_PART=o_part.to(DEVICE), LSE_PART=lse_part.to(DEVICE), **launch.with_strides(O=o),
        LSE=lse, H=H, N_Q=n_q, NUM_SPLITS=splits, HEAD_DIM=d, BLOCK_D=32, BLOCK_S=4,
    )  # fmt: skip
    want_lse = torch.logsumexp(lse_part, dim=1)  # (rows,)
    w = torch.exp(lse_part - want_lse.masked_fill(want_lse == -math.inf, 0)[:, None])
    want = (w[..., None] * o_part).sum(1)  # (rows, d)
    torch.testing.assert_close(o.cpu().reshape(rows, d), want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse.cpu().reshape(rows), want_lse, atol=1e-6, rtol=1e-6)
    assert torch.equal(o.cpu().reshape(rows, d)[4], torch.zeros(d))


def test_each_split_is_attention_over_its_own_keys():
    """Program s covers keys [s * KEYS_PER_SPLIT, (s + 1) * KEYS_PER_SPLIT): its partial
    output and natural log-sum-exp are attention over those keys alone, for every packed
    row (G = 4 query heads x 2 queries of one key/value head, bottom-right causal)."""
    B, H, h_kv, n_q, n_k, d, per_split = 1, 4, 1, 2, 70, 16, 32
    q, k, v, _ = make_inputs(B, H, n_q, n_k, d, torch.float32, DEVICE, h_kv=h_kv)
    qv, kv, _, layout, scale = kernel_views(q, k, v, None, "bhnd", "test")
    mask = mask_for(qv, kv, True, "bottom_right", None, scale, layout, "test")
    splits = triton.cdiv(n_k, per_split)  # 3: keys 0-31, 32-63, 64-69
    o_part = torch.full((B * H * n_q, splits, d), float("nan"), device=DEVICE)
    lse_part = torch.full((B * H * n_q, splits), float("nan"), device=DEVICE)
    _decode_kernel[(splits, B * h_kv)](
        **launch.with_strides(Q=q, K=k, V=v), O_PART=o_part, LSE_PART=lse_part,
        qk_scale=scale * launch.LOG2E, **launch.sizes(q, k), KEYS_PER_SPLIT=per_split,
        NUM_SPLITS=splits, BLOCK_R=16, BLOCK_N=16, EVEN_N=False, **mask.kernel_args(),
        **launch.head_dim_args(d, q.dtype),
    )  # fmt: skip
    for s in range(splits):
        keys = slice(s * per_split, min((s + 1) * per_split, n_k))
        # bottom-right over all n_k keys, restricted to this split's columns
        allowed = (torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + n_k - n_q)[:, keys]
        scores = (q @ k[:, :, keys].transpose(-2, -1)).cpu().double() * scale  # (B, H, Nq, n)
        scores = scores.masked_fill(~allowed, -math.inf)
        want_lse = torch.logsumexp(scores, -1).reshape(-1)  # (B*H*Nq,)
        want = (torch.softmax(scores, -1) @ v[:, :, keys].cpu().double()).reshape(-1, d)
        torch.testing.assert_close(o_part[:, s].cpu().double(), want, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(lse_part[:, s].cpu().double(), want_lse, atol=2e-5, rtol=1e-5)
    # and merged, they are attention over every key
    (ref, *_), _ = ground_truth(q, k, v, torch.zeros_like(q), is_causal=True,
                                causal_alignment="bottom_right")  # fmt: skip
    w = torch.softmax(lse_part.cpu().double(), dim=1)  # (rows, splits) e^{L_s - L}
    merged = (w[..., None] * o_part.cpu().double()).sum(1)
    torch.testing.assert_close(merged, ref.reshape(-1, d), atol=2e-5, rtol=1e-4)
