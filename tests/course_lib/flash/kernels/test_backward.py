"""course_lib.flash.kernels.backward: the preprocess kernel launched by hand, the dK/dV and
dQ kernels with tiles other than the launcher's (deterministic, and with atomic dQ both
ways), and the rules of their source that only a compiled kernel would show."""

from __future__ import annotations

import re

import pytest
import torch
import triton
from flash_lab import DEVICE, ground_truth, kernel_module_source, make_inputs, states_its_precision

from course_lib.flash import backward, flash_attention, launch
from course_lib.flash.tiles import Tile

launch.load_kernels()  # in the mode conftest.py has chosen already
from course_lib.flash.kernels.backward import _bwd_preprocess_kernel  # noqa: E402


def test_every_dot_states_its_precision_and_offsets_are_int64():
    """dK/dV: 4 dots, and the atomic dQ both ways (transposed on sm_90, not on sm_80); dQ: 3.
    Every kernel turns its batch and head indices into int64 before any offset."""
    dots, kernels = kernel_module_source("backward")
    assert len(dots) == 9 and all(states_its_precision(d) for d in dots)
    assert list(kernels) == ["_bwd_preprocess_kernel", "_bwd_dkdv_kernel", "_bwd_dq_kernel"]
    for name, body in kernels.items():
        assert re.search(r"\bb = \(bhk? // H(_KV)?\)\.to\(tl\.int64\)", body), name


def test_the_preprocess_kernel_is_the_row_sum_of_do_times_o():
    """D_i = sum_k dO_ik O_ik, for ragged rows (45 = 2 tiles of 16 + 13), d = 48 padded to 64
    feature lanes, and tensors read through flash-attn's [B, N, H, d] strides."""
    g = torch.Generator().manual_seed(0)
    o, do = (torch.randn(2, 45, 3, 48, generator=g).to(DEVICE).transpose(1, 2) for _ in "od")
    delta = torch.full((2 * 3, 45), float("nan"), device=DEVICE)
    _bwd_preprocess_kernel[(triton.cdiv(45, 16), 2 * 3)](
        **launch.with_strides(O=o, DO=do), DELTA=delta, H=3, N_Q=45, HEAD_DIM=48, BLOCK_D=64,
        BLOCK_M=16,
    )  # fmt: skip
    want = (o * do).sum(-1).reshape(6, 45)
    torch.testing.assert_close(delta, want, atol=1e-5, rtol=1e-5)


TILES = [
    dict(dkdv=[Tile(16, 16)], dkdv_atomic=[Tile(16, 16)], dq=[Tile(16, 16)]),
    dict(dkdv=[Tile(16, 64)], dkdv_atomic=[Tile(32, 16)], dq=[Tile(32, 64)]),
]
CASES = [
    # H, H_kv, Nq, Nk, d, mask
    (2, 1, 37, 50, 24, dict(is_causal=True, causal_alignment="bottom_right", window=9)),
    (2, 2, 40, 24, 16, dict(is_causal=True, causal_alignment="bottom_right")),  # empty rows
    (2, 1, 32, 64, 32, dict(is_causal=True)),  # lengths multiples of every tile
]


@pytest.mark.parametrize("tiles", TILES, ids=["16x16", "mixed"])
@pytest.mark.parametrize("H,h_kv,n_q,n_k,d,mask", CASES)
def test_any_tile_gives_the_gradients(monkeypatch, tiles, H, h_kv, n_q, n_k, d, mask):
    """The dK/dV kernel (summing over the G query heads of a key/value head) and the dQ
    kernel with other tiles than the interpreter's; and the dK/dV kernel with ATOMIC_DQ,
    its dQ tile computed transposed (sm_90) and not (sm_80)."""
    monkeypatch.setattr(backward, "kernel_config", lambda *a, **kw: tiles)
    q, k, v, do = make_inputs(1, H, n_q, n_k, d, torch.float32, DEVICE, h_kv=h_kv, seed=n_k)
    (_, *want), _ = ground_truth(q, k, v, do, **mask)
    for deterministic, arch in ((True, 90), (False, 90), (False, 80)):
        monkeypatch.setattr(backward, "device_arch", lambda device, arch=arch: arch)
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        flash_attention(qg, kg, vg, deterministic=deterministic, **mask).backward(do)
        for name, got, ref in zip(("dQ", "dK", "dV"), (qg.grad, kg.grad, vg.grad), want):
            torch.testing.assert_close(
                got.cpu().double(), ref, atol=2e-5, rtol=1e-4, msg=f"{name} {deterministic}"
            )
