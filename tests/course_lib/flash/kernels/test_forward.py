"""course_lib.flash.kernels.forward: the forward kernel, launched directly with tiles other
than the launcher's, and the rules of its source that only a compiled kernel would show."""

from __future__ import annotations

import math
import re

import pytest
import torch
import triton
from flash_lab import DEVICE, ground_truth, kernel_module_source, make_inputs, states_its_precision

from course_lib.flash import launch
from course_lib.flash.inputs import kernel_views, mask_for

launch.load_kernels()  # in the mode conftest.py has chosen already
from course_lib.flash.kernels.forward import _fwd_kernel  # noqa: E402


def test_every_dot_states_its_precision_and_offsets_are_int64():
    """``b * stride_b`` overflows int32 once B*H*N*d passes 2^31 - 1 elements: silent wrong
    addresses on a GPU, which the interpreter (numpy) never shows. The program ids become
    int64 before any offset; every dot says its input precision."""
    dots, kernels = kernel_module_source("forward")
    assert len(dots) == 2 and all(states_its_precision(d) for d in dots)
    assert list(kernels) == ["_fwd_kernel"]
    body = kernels["_fwd_kernel"]
    assert re.search(r"\bb = \(bh // H\)\.to\(tl\.int64\)", body)
    assert "hk = (h // NUM_GROUPS).to(tl.int64)" in body and "h = h.to(tl.int64)" in body


def _run_forward(q, k, v, tile_m, tile_n, **options):
    """``_fwd_kernel`` launched by hand with a ``tile_m x tile_n`` tile: ``(O, L_2)``."""
    qv, kv, vv, layout, scale = kernel_views(q, k, v, None, "bhnd", "test")
    mask = mask_for(qv, kv, options.get("is_causal", False),
                    options.get("causal_alignment", "top_left"), options.get("window"), scale,
                    layout, "test")  # fmt: skip
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty(B * H, n_q, dtype=torch.float32, device=q.device)
    _fwd_kernel[(triton.cdiv(n_q, tile_m), B * H)](
        **launch.with_strides(Q=q, K=k, V=v, O=o),
        LSE=lse,
        qk_scale=scale * launch.LOG2E,
        **launch.sizes(q, k),
        **launch.buckets(q, k),
        **mask.kernel_args(),
        **launch.head_dim_args(d, q.dtype),
        BLOCK_M=tile_m,
        BLOCK_N=tile_n,
        EVEN_M=n_q % tile_m == 0,
        EVEN_N=n_k % tile_n == 0,
    )
    return o, lse.view(B, H, n_q)


CASES = [
    # H, H_kv, Nq, Nk, d, mask
    (4, 2, 37, 50, 24, dict(is_causal=True, causal_alignment="bottom_right", window=9)),
    (2, 2, 40, 24, 16, dict(is_causal=True, causal_alignment="bottom_right")),  # empty rows
    (2, 1, 32, 64, 32, dict(is_causal=True)),  # lengths multiples of every tile: no bounds
    (2, 2, 19, 45, 16, dict()),
]


@pytest.mark.parametrize("tile_m,tile_n", [(16, 16), (32, 16), (16, 64)])
@pytest.mark.parametrize("H,h_kv,n_q,n_k,d,mask", CASES)
def test_any_tile_gives_the_output_and_a_base_2_log_sum_exp(tile_m, tile_n, H, h_kv, n_q, n_k,
                                                            d, mask):  # fmt: skip
    """Taller, wider, ragged or even tiles: the same attention. The kernel stores its
    log-sum-exp in base 2, L_2 = L / ln 2 (the units of its exp2), -inf for a query that
    sees no key, whose output is 0."""
    q, k, v, _ = make_inputs(1, H, n_q, n_k, d, torch.float32, DEVICE, h_kv=h_kv, seed=n_q)
    o, lse2 = _run_forward(q, k, v, tile_m, tile_n, **mask)
    (ref, *_), ref_lse = ground_truth(q, k, v, torch.zeros_like(q), **mask)
    torch.testing.assert_close(o.cpu().double(), ref, atol=2e-5, rtol=1e-4)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse2.cpu()), finite)
    assert (o.cpu()[~finite] == 0).all()
    lse_nat = lse2.cpu().double() * math.log(2.0)
    torch.testing.assert_close(lse_nat[finite], ref_lse[finite], atol=2e-5, rtol=1e-5)
