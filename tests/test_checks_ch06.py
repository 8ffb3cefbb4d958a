"""The chapter 06 exercises: references pass, every declared mistake is caught and named."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import CheckFailed, check
from course_lib.checks.core import get_exercise


def test_backward_reference_matches_autograd():
    import math

    from course_lib.checks.core import cases_for

    for hidden in (False, True):
        for case in cases_for("06.4", hidden=hidden):
            q, k, v, o, lse, do, scale = case.args
            qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
            out = torch.softmax(scale * qa @ ka.transpose(-2, -1), dim=-1) @ va
            out.backward(do)
            got = get_exercise("06.4").reference(*case.args)
            for g, ref in zip(got, (qa.grad, ka.grad, va.grad)):
                torch.testing.assert_close(g, ref, atol=1e-12, rtol=1e-10)
            assert not math.isnan(float(got[0].sum()))


def test_online_update_reproduces_softmax_statistics():
    import numpy as np

    ex = get_exercise("06.1")
    x = np.random.default_rng(0).normal(size=(3, 20)) * 4
    m, l = np.full(3, -np.inf), np.zeros(3)
    for j in range(0, 20, 6):
        m, l = ex.reference(m, l, x[:, j : j + 6])
    assert np.allclose(m, x.max(1)) and np.allclose(l, np.exp(x - x.max(1, keepdims=True)).sum(1))


def test_triton_solution_passes_through_the_interpreter(monkeypatch):
    """A Triton kernel + wrapper like the solution's passes 06.3's visible and hidden cases
    (compiled on CUDA when there is a GPU, with true float32 dots as the notebook sets)."""
    import math

    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")

    import triton
    import triton.language as tl

    @triton.jit
    def _kernel(Q, K, V, O, n, scale, D: tl.constexpr, BLOCK: tl.constexpr):
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        dims = tl.arange(0, D)
        q = tl.load(Q + rows[:, None] * D + dims[None, :], mask=rows[:, None] < n, other=0.0)
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK], tl.float32)
        acc = tl.zeros([BLOCK, D], tl.float32)
        for start in range(0, n, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            kt = tl.load(K + cols[None, :] * D + dims[:, None], mask=cols[None, :] < n, other=0.0)
            v = tl.load(V + cols[:, None] * D + dims[None, :], mask=cols[:, None] < n, other=0.0)
            s = tl.where(cols[None, :] < n, tl.dot(q, kt) * scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            l = alpha * l + tl.sum(p, 1)
            acc = alpha[:, None] * acc + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * D + dims[None, :], acc / l[:, None], mask=rows[:, None] < n)

    def flash_forward(q, k, v):
        n, d = q.shape
        o = torch.empty_like(q)
        _kernel[(triton.cdiv(n, 16),)](q, k, v, o, n, 1 / math.sqrt(d), D=d, BLOCK=16)
        return o

    assert check("06.3", flash_forward).passed
    assert check("06.3", flash_forward, hidden=True).passed


def test_triton_grid_that_skips_the_ragged_block_is_diagnosed():
    """Launching n // 16 programs leaves the last, partial query block uncomputed."""
    ex = get_exercise("06.3")

    def skip_last_block(q, k, v):
        o = ex.reference(q, k, v).clone()  # (N, d)
        o[q.shape[0] // 16 * 16 :] = 7.0  # rows no program wrote
        return o

    with pytest.raises(CheckFailed, match=r"triton\.cdiv\(n, 16\) programs"):
        check("06.3", skip_last_block, quiet=True)


def test_triton_cases_live_where_kernels_run():
    """A compiled kernel cannot read CPU memory: on a GPU the 06.3 inputs are CUDA tensors."""
    from course_lib.checks.ch06 import _kernel_device
    from course_lib.checks.core import cases_for

    device = _kernel_device()
    assert device == ("cuda" if torch.cuda.is_available() else "cpu")
    for case in cases_for("06.3", hidden=True):
        assert all(t.device.type == device for t in case.args)
