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

    with pytest.raises(CheckFailed, match="the last partial tile of queries") as first:
        check("06.3", skip_last_block, quiet=True, hints="nudge")
    assert "triton.cdiv" not in str(first.value)  # the nudge first, then the fix
    with pytest.raises(CheckFailed, match=r"Launch triton\.cdiv\(n, 16\) programs"):
        check("06.3", skip_last_block, quiet=True, hints="full")


def test_triton_cases_live_where_kernels_run():
    """A compiled kernel cannot read CPU memory: on a GPU the 06.3 inputs are CUDA tensors."""
    from course_lib.checks.ch06 import _kernel_device
    from course_lib.checks.core import cases_for

    device = _kernel_device()
    assert device == ("cuda" if torch.cuda.is_available() else "cpu")
    for case in cases_for("06.3", hidden=True):
        assert all(t.device.type == device for t in case.args)


# --------------------------------------------------------------------------- named mistakes


def _message(ex_id, fn, hints="nudge", hidden=False) -> str:
    import numpy as np

    with np.errstate(all="ignore"):
        with pytest.raises(CheckFailed) as info:
            check(ex_id, fn, quiet=True, hints=hints, hidden=hidden)
    return str(info.value)


def test_tiled_loop_with_the_tile_max_is_caught_on_a_visible_case():
    """A max taken from the current tile alone (not the running max) is right in exact
    arithmetic, so it passes ordinary cases; the visible +750 / -750 case overflows it."""
    import math

    import numpy as np

    def tile_max(Q, K, V, block_size):
        N, head_dim = Q.shape
        O, L = np.empty((N, V.shape[1])), np.empty(N)
        for i in range(0, N, block_size):
            Qi = Q[i : i + block_size]
            m, l = np.full(len(Qi), -np.inf), np.zeros(len(Qi))
            A = np.zeros((len(Qi), V.shape[1]))
            for j in range(0, K.shape[0], block_size):
                S = Qi @ K[j : j + block_size].T / math.sqrt(head_dim)
                m_new = S.max(axis=1)  # the mistake: forgets the running max
                alpha = np.exp(m - m_new)
                P = np.exp(S - m_new[:, None])
                l = alpha * l + P.sum(axis=1)
                A = alpha[:, None] * A + P @ V[j : j + block_size]
                m = m_new
            O[i : i + block_size], L[i : i + block_size] = A / l[:, None], m + np.log(l)
        return O, L

    msg = _message("06.2", tile_max)
    assert "+750" in msg and "NaN" in msg  # the case that breaks it, and what broke
    assert "current tile alone" in msg
    # the other visible cases pass: it really is only the overflow
    assert "1 of 4 cases failed" in msg


def test_tiled_loop_named_outputs_and_lse_without_the_max():
    import numpy as np

    ex = get_exercise("06.2")

    def lse_without_m(Q, K, V, b):
        O, L = ex.reference(Q, K, V, b)
        m = np.array([(Q[i : i + 1] @ K.T / np.sqrt(Q.shape[1])).max() for i in range(Q.shape[0])])
        return O, L - m

    msg = _message("06.2", lse_without_m)
    assert "L:" in msg and "item 1" not in msg  # the output is named
    assert "log(l) without the max" in msg


def test_backward_mistakes_on_delta_are_named():
    ex = get_exercise("06.4")

    def delta_without_o(q, k, v, o, lse, do, scale):
        P = torch.exp(scale * q @ k.transpose(-2, -1) - lse[..., None])
        dP = do @ v.transpose(-2, -1)
        dS = P * (dP - do.sum(-1)[..., None])  # D = rowsum(dO): the O is missing
        return scale * dS @ k, scale * dS.transpose(-2, -1) @ q, P.transpose(-2, -1) @ do

    def ds_precedence(q, k, v, o, lse, do, scale):
        P = torch.exp(scale * q @ k.transpose(-2, -1) - lse[..., None])
        dP = do @ v.transpose(-2, -1)
        dS = P * dP - (do * o).sum(-1)[..., None]  # D outside the bracket
        return scale * dS @ k, scale * dS.transpose(-2, -1) @ q, P.transpose(-2, -1) @ do

    msg = _message("06.4", delta_without_o)
    assert "rowsum(dO), without O" in msg and "dq:" in msg
    assert "inside, before multiplying by P" in _message("06.4", ds_precedence)
    assert ex.outputs == ("dq", "dk", "dv")


def test_causal_tiles_floor_plus_one_is_not_blamed_on_min():
    """floor(x / block_n) + 1 instead of ceil: diagnosed as such, not as a missing min(n, ...)."""
    import math

    def floor_plus_one(n, block_m, block_n):
        return sum(min(n, s + block_m) // block_n + 1 for s in range(0, n, block_m))

    def no_min(n, block_m, block_n):
        return sum(math.ceil((s + block_m) / block_n) for s in range(0, n, block_m))

    msg = _message("06.5", floor_plus_one)
    assert "floor(x / block_n) + 1" in msg and "min(n" not in msg.split("Likely cause")[1][:80]
    assert "last query tile ends at n" in _message("06.5", no_min)


def test_hints_come_in_two_tiers():
    def unscaled(q, k, v, is_causal):
        return get_exercise("06.6").mistakes[
            next(h for h in get_exercise("06.6").mistakes if "not scaled" in h)
        ](q, k, v, is_causal)

    nudge = _message("06.6", unscaled, hints="nudge")
    full = _message("06.6", unscaled, hints="full")
    assert "not scaled" in nudge and "sqrt(d_h)" not in nudge
    assert "sqrt(d_h)" in full


# --------------------------------------------------------------------------- 06.6


def _naive_gqa(q, k, v, is_causal):
    """K, V repeated per query head (repeat_interleave), an explicit bottom-right mask."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, Nq, Nk)
    if is_causal:
        n_q, n_k = s.shape[-2:]
        keep = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def test_gqa_reference_equals_repeated_kv_sdpa_and_the_kernel_reference():
    import torch.nn.functional as F

    from course_lib.checks.core import cases_for
    from course_lib.flash import flash_attention_reference

    ex = get_exercise("06.6")
    for hidden in (False, True):
        for case in cases_for("06.6", hidden=hidden):
            q, k, v, is_causal = case.args
            out, lse = ex.reference(*case.args)
            ref_out, ref_lse = _naive_gqa(q, k, v, is_causal)
            torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=1e-10)
            torch.testing.assert_close(lse, ref_lse, atol=1e-12, rtol=1e-10)
            fl_out, fl_lse = flash_attention_reference(
                q, k, v, is_causal=is_causal, causal_alignment="bottom_right", block_size=3
            )
            torch.testing.assert_close(out, fl_out, atol=1e-12, rtol=1e-10)
            keep = None
            if is_causal:
                keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(
                    k.shape[2] - q.shape[2]
                )
            sdpa = F.scaled_dot_product_attention(
                q, k, v, attn_mask=keep, enable_gqa=q.shape[1] != k.shape[1]
            )
            torch.testing.assert_close(out, sdpa, atol=1e-12, rtol=1e-10)


def test_gqa_learner_mistakes_are_named():
    def with_repeat(q, k, v, is_causal):  # k.repeat: head h gets key/value head h % H_kv
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
        s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if is_causal:
            n_q, n_k = s.shape[-2:]
            s = s.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q), -torch.inf)
        return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)

    def top_left(q, k, v, is_causal):  # torch SDPA's is_causal convention
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if is_causal:
            n_q, n_k = s.shape[-2:]
            s = s.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(), -torch.inf)
        return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)

    assert "h // G" in _message("06.6", with_repeat)
    msg = _message("06.6", top_left)
    assert "top-left" in msg and ("output:" in msg or "lse:" in msg)
    # repeating K and V is allowed by the checks (it gives the same numbers); the statement
    # asks for a view, and the reference shows one
    assert check("06.6", _naive_gqa, quiet=True).passed


def _learner_rescales(n_scores, block_size, rows, seed, *, per_block=True):
    """06.7 written another way: torch's generator, a Python loop over the blocks."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n_scores, generator=g, dtype=torch.float64)
    step = block_size if per_block else 1
    m = torch.full((rows,), float("-inf"), dtype=torch.float64)
    count = torch.zeros(rows)
    for start in range(0, n_scores, step):
        new = torch.maximum(m, x[:, start : start + step].amax(-1))
        count += (new > m).double()
        m = new
    return float(count.mean())


def test_06_7_another_correct_experiment_passes_and_shows_the_prediction(capsys):
    assert check("06.7", _learner_rescales, prediction=lambda n, b, r, s: n / b).passed
    assert check("06.7", _learner_rescales, hidden=True).passed
    assert "you predicted 1024, measured 7.5" in capsys.readouterr().out


def test_06_7_counting_scores_not_blocks_is_named():
    with pytest.raises(CheckFailed, match="ignoring the blocks"):
        check("06.7", lambda *a: _learner_rescales(*a, per_block=False), quiet=True)
