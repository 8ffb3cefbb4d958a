r"""Checks for chapter 06 (FlashAttention).

Seven exercises, each a function the learner writes:

* 06.1 ``online_softmax_update(m, l, x_block)`` (numpy): one step of the online softmax,
  :math:`m' = \max(m, \max_j x_j)`, :math:`\ell' = e^{m - m'}\ell + \sum_j e^{x_j - m'}`;
* 06.2 ``tiled_attention(Q, K, V, block_size)`` (numpy): the tiled forward loop, returning
  ``(O, L)`` with the log-sum-exp :math:`L`;
* 06.3 ``flash_forward(q, k, v)`` (torch, float32): the Python wrapper that launches the
  learner's own Triton forward kernel (defined in the same cell), checked through Triton's
  interpreter on the CPU;
* 06.4 ``attention_backward(q, k, v, o, lse, do, scale)`` (torch, float64): dQ, dK, dV from
  the saved output and log-sum-exp, with :math:`D = \mathrm{rowsum}(dO \circ O)`;
* 06.5 ``causal_tiles(n, block_m, block_n)``: how many tiles a causal kernel computes;
* 06.6 ``gqa_attention(q, k, v, is_causal)`` (torch): grouped-query attention without
  repeating K and V, causal aligned bottom-right (a KV cache), returning ``(output, lse)``;
* 06.7 ``measure_rescales(n_scores, block_size, rows, seed)``: predict, then measure how
  often the online softmax rescales.

Hints come in two tiers (:class:`~course_lib.checks.core.Hint`): a nudge on the first
failure, the formula when the same exercise fails again.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .core import Case, Diagnosed, Exercise, Hint, register
from .kit import twin, with_note, within

# --------------------------------------------------------------------------- 06.1 online softmax


def online_softmax_update_reference(
    m: np.ndarray, l: np.ndarray, x_block: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`m' = \max(m, \mathrm{rowmax}\,x)`, :math:`\ell' = e^{m-m'}\ell + \mathrm{rowsum}\,e^{x - m'}`."""
    m_new = np.maximum(m, x_block.max(axis=-1))  # (rows,)
    l_new = np.exp(m - m_new) * l + np.exp(x_block - m_new[..., None]).sum(axis=-1)  # (rows,)
    return m_new, l_new


def _online_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "the first block: m = -inf, l = 0 (nothing seen yet), 2 rows of 4 scores",
                (np.full(2, -np.inf), np.zeros(2), rng.normal(size=(2, 4))),
            ),
            Case(
                "a block whose scores exceed the running max (the old sum must shrink)",
                (
                    np.array([0.5, 1.0]),
                    np.array([2.0, 3.0]),
                    np.array([[3.0, 0.0, 1.0], [2.5, 4.0, -1.0]]),
                ),
            ),
            Case(
                "scores around 1000: only differences may be exponentiated",
                (np.array([1000.0]), np.array([1.0]), np.array([[1001.0, 999.0, 1002.5]])),
            ),
            Case(
                "a block below the running max: the max must not go down",
                (
                    np.array([4.0, 2.0]),
                    np.array([1.5, 2.5]),
                    np.array([[1.0, -0.5, 0.25], [0.0, 1.5, -2.0]]),
                ),
            ),
        ]
    return [
        Case(
            "a block entirely below the running max (m stays)",
            (np.array([5.0, 6.0, 7.0]), np.array([1.5, 2.0, 1.0]), rng.normal(size=(3, 5)) - 3.0),
        ),
        Case(
            "scores around -1000: e^x underflows to 0 unless the max is subtracted",
            (
                np.array([-1000.0, -990.0]),
                np.array([1.0, 2.0]),
                np.array([[-1001.0, -999.5], [-995.0, -1003.0]]),
            ),
        ),
        Case(
            "8 rows, a block of 1 score",
            (rng.normal(size=8), rng.uniform(1, 3, size=8), rng.normal(size=(8, 1)) * 3),
        ),
    ]


def _online_raw_exp(m, l, x):
    """e^x of raw scores: overflows (inf / inf = nan) near 1000, underflows near -1000."""
    m_new = np.maximum(m, x.max(axis=-1))
    with np.errstate(all="ignore"):
        return m_new, (np.exp(m) * l + np.exp(x).sum(axis=-1)) / np.exp(m_new)


def _online_no_rescale(m, l, x):
    m_new = np.maximum(m, x.max(axis=-1))
    return m_new, l + np.exp(x - m_new[..., None]).sum(axis=-1)


def _online_inverted_rescale(m, l, x):
    m_new = np.maximum(m, x.max(axis=-1))
    with np.errstate(all="ignore"):
        return m_new, np.exp(m_new - m) * l + np.exp(x - m_new[..., None]).sum(axis=-1)


def _online_block_max_only(m, l, x):
    m_new = x.max(axis=-1)
    return m_new, np.exp(m - m_new) * l + np.exp(x - m_new[..., None]).sum(axis=-1)


register(
    Exercise(
        id="06.1",
        title="one step of the online softmax",
        points=2,
        target="online_softmax_update",
        cases=_online_cases,
        reference=online_softmax_update_reference,
        atol=1e-10,
        rtol=1e-8,
        mistakes={
            Hint(
                "you added the new block's sum without rescaling the old one.",
                "l was computed relative to the old max m, so multiply it by exp(m - m_new) "
                "before adding.",
            ): _online_no_rescale,
            Hint(
                "you rescaled the old sum by exp(m_new - m), which is >= 1.",
                "The factor must be exp(m - m_new) <= 1, because every old term exp(x - m) "
                "must become exp(x - m_new).",
            ): _online_inverted_rescale,
            Hint(
                "your new max uses only the block, so the running max can go down.",
                "m_new = np.maximum(m, x_block.max(axis=-1)): the max of the old max and the "
                "block's.",
            ): _online_block_max_only,
            Hint(
                "you exponentiated raw scores: e^1000 overflows to inf (and inf/inf is nan), "
                "e^-1000 underflows to 0.",
                "Only exponentiate differences, x - m_new and m - m_new, which are <= 0.",
            ): _online_raw_exp,
        },
        hint=Hint(
            "check what your running sum is relative to: the max it was computed with, and the "
            "new max.",
            "Update the max first, then rescale the old sum to the new max and add the block's. "
            "m_new = np.maximum(m, x_block.max(axis=-1)); l_new = np.exp(m - m_new) * l + "
            "np.exp(x_block - m_new[:, None]).sum(axis=-1).",
        ),
        outputs=("m_new", "l_new"),
    )
)

# --------------------------------------------------------------------------- 06.2 tiled forward


def _tiled(
    Q,
    K,
    V,
    block_size,
    *,
    rescale=True,
    scaled=True,
    lse_log=True,
    rescale_l=True,
    tile_max_only=False,
    lse_plus_m=True,
):
    N, head_dim = Q.shape
    O = np.empty((N, V.shape[1]))  # (N, d_v)
    L = np.empty(N)  # (N,)
    s = 1.0 / math.sqrt(head_dim) if scaled else 1.0
    for i in range(0, N, block_size):
        Qi = Q[i : i + block_size]  # (Br, d_h)
        m = np.full(len(Qi), -np.inf)  # (Br,)
        l = np.zeros(len(Qi))  # (Br,)
        A = np.zeros((len(Qi), V.shape[1]))  # (Br, d_v)
        for j in range(0, K.shape[0], block_size):
            S = Qi @ K[j : j + block_size].T * s  # (Br, Bc)
            m_new = S.max(axis=1) if tile_max_only else np.maximum(m, S.max(axis=1))  # (Br,)
            alpha = np.exp(m - m_new)  # (Br,)
            P = np.exp(S - m_new[:, None])  # (Br, Bc)
            l = (alpha * l if rescale_l else l) + P.sum(axis=1)  # (Br,)
            A = (alpha[:, None] * A if rescale else A) + P @ V[j : j + block_size]  # (Br, d_v)
            m = m_new
        O[i : i + block_size] = A / l[:, None]  # (Br, d_v)
        if not lse_log:
            L[i : i + block_size] = m  # (Br,)
        else:
            L[i : i + block_size] = (m if lse_plus_m else 0.0) + np.log(l)  # (Br,)
    return O, L


def tiled_attention_reference(
    Q: np.ndarray, K: np.ndarray, V: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    r"""Tiled attention: :math:`O = \mathrm{softmax}(QK^\top/\sqrt{d_h})V`, :math:`L = \mathrm{logsumexp}`."""
    return _tiled(Q, K, V, block_size)


def _plus_minus_750(rng: np.random.Generator) -> tuple:
    """2 queries, 8 keys, tiles of 4: the first key tile scores about +750, the next -750.

    With the running max the second block's weights are exp(-1500) = 0 and nothing breaks.
    A max taken from the current tile alone drops to -750, and exp(m - m_new) = exp(1500)
    overflows to inf: inf / inf = nan.
    """
    Q = np.ones((2, 4))  # (Nq, d_h): scores = sum of a key's entries / sqrt(4)
    K = np.concatenate([np.full((4, 4), 375.0), np.full((4, 4), -375.0)])  # (Nk, d_h)
    K = K + rng.normal(size=K.shape) * 0.01
    return (Q, K, rng.normal(size=(8, 3)), 4)


def _tiled_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "N = 8 queries and keys, d_h = 4, tiles of 4",
                (rng.normal(size=(8, 4)), rng.normal(size=(8, 4)), rng.normal(size=(8, 4)), 4),
            ),
            Case(
                "N = 10, d_h = 6, tiles of 3 (the last tile has 1 row)",
                (rng.normal(size=(10, 6)), rng.normal(size=(10, 6)), rng.normal(size=(10, 6)), 3),
            ),
            Case(
                "one key tile scores about +750, the next about -750 (tiles of 4)",
                _plus_minus_750(rng),
            ),
        ]
    return [
        Case(
            "7 queries, 13 keys, d_v = 5 != d_h = 3, tiles of 4",
            (rng.normal(size=(7, 3)), rng.normal(size=(13, 3)), rng.normal(size=(13, 5)), 4),
        ),
        Case(
            "a single query and key",
            (rng.normal(size=(1, 2)), rng.normal(size=(1, 2)), rng.normal(size=(1, 2)), 2),
        ),
        Case(
            "large scores (inputs x 6): needs the running max",
            (
                rng.normal(size=(12, 8)) * 6,
                rng.normal(size=(12, 8)) * 6,
                rng.normal(size=(12, 8)),
                5,
            ),
        ),
        Case(
            "one tile holds everything",
            (rng.normal(size=(6, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 4)), 16),
        ),
        Case(
            "a key tile scoring about +750 before one about -750, another draw",
            _plus_minus_750(rng),
        ),
    ]


register(
    Exercise(
        id="06.2",
        title="the tiled forward loop",
        points=3,
        target="tiled_attention",
        cases=_tiled_cases,
        reference=tiled_attention_reference,
        atol=1e-10,
        rtol=1e-8,
        mistakes={
            Hint(
                "your accumulator A is not rescaled when the running max grows.",
                "Multiply A by alpha = exp(m - m_new), row by row (alpha[:, None] * A), before "
                "adding P_tile @ V_j.",
            ): twin(_tiled, rescale=False),
            Hint(
                "your scores are not scaled.",
                "S = Qi @ Kj.T / sqrt(d_h), with d_h = Q.shape[1].",
            ): twin(_tiled, scaled=False),
            Hint(
                "your L is the running max m only.",
                "The log-sum-exp is L = m + log(l): m alone ignores how many keys share the max.",
            ): twin(_tiled, lse_log=False),
            Hint(
                "your L is log(l) without the max: l was summed relative to m.",
                "l = sum_j exp(S_j - m), so log(sum_j exp(S_j)) = m + log(l).",
            ): twin(_tiled, lse_plus_m=False),
            Hint(
                "your new max comes from the current tile alone (m_new = rowmax(S)), so it can "
                "go down: then alpha = exp(m - m_new) > 1, and exp(750 - (-750)) overflows to "
                "inf.",
                "The running max is m_new = np.maximum(m, S.max(axis=1)). (With exact "
                "arithmetic any reference point would do, which is why the other cases pass; "
                "floating point needs the largest score seen so far.)",
            ): twin(_tiled, tile_max_only=True),
        },
        hint=Hint(
            "check the state each query tile keeps across the key tiles, what happens to it when "
            "the running max grows, and how O and L are finished.",
            "For each query tile keep m, l and A; for each key tile update them with the "
            "online-softmax rules; finish with O = A / l and L = m + log(l). m = -inf, l = 0, A "
            "= 0; then S = Qi @ Kj.T / sqrt(d_h), m_new = max(m, rowmax S), alpha = exp(m - "
            "m_new), P = exp(S - m_new), l = alpha*l + rowsum P, A = alpha*A + P @ Vj.",
        ),
        outputs=("O", "L"),
    )
)

# --------------------------------------------------------------------------- 06.3 Triton forward

TRITON_BLOCK = 16  # the block size the exercise asks for (the mistake twins assume it)


def _kernel_device() -> str:
    """Where a learner's Triton kernel can read tensors: a CUDA GPU when Triton compiles,
    the CPU when it interprets (a compiled kernel cannot read CPU memory)."""
    from ..flash import triton_mode

    return "cuda" if triton_mode() == "compiled" else "cpu"


def flash_forward_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    r""":math:`\mathrm{softmax}(qk^\top/\sqrt{d_h})\,v` for ``q, k, v [N, d_h]`` (float32)."""
    s = (q.double() @ k.double().T) / math.sqrt(q.shape[-1])  # (N, N)
    return (torch.softmax(s, dim=-1) @ v.double()).float()  # (N, d_h)


def _flash_unmasked(q, k, v):
    """Keys padded with zeros to a multiple of the block, unmasked: each adds e^{0 - m}."""
    n = k.shape[0]
    pad = -n % TRITON_BLOCK
    k = torch.cat([k, k.new_zeros(pad, k.shape[1])])  # (N + pad, d_h)
    v = torch.cat([v, v.new_zeros(pad, v.shape[1])])  # (N + pad, d_h)
    return flash_forward_reference(q, k, v)


def _flash_no_rescale(q, k, v):
    out = _tiled(
        *(t.detach().double().cpu().numpy() for t in (q, k, v)), TRITON_BLOCK, rescale=False
    )[0]
    return torch.from_numpy(out).float().to(q.device)


def _flash_unscaled(q, k, v):
    return flash_forward_reference(q * math.sqrt(q.shape[-1]), k, v)


def _flash_mask_off_by_one(q, k, v):
    """``cols <= n``: the zero-padded key number n (only exists if n % 16 != 0) joins in."""
    if k.shape[0] % TRITON_BLOCK == 0:
        return flash_forward_reference(q, k, v)
    return flash_forward_reference(
        q, torch.cat([k, k.new_zeros(1, k.shape[1])]), torch.cat([v, v.new_zeros(1, v.shape[1])])
    )


def _flash_l_not_rescaled(q, k, v):
    out = _tiled(
        *(t.detach().double().cpu().numpy() for t in (q, k, v)), TRITON_BLOCK, rescale_l=False
    )[0]
    return torch.from_numpy(out).float().to(q.device)


def _flash_exp2(q, k, v):
    """``tl.exp2`` on natural-log scores: a softmax of s * ln 2 instead of s."""
    return flash_forward_reference(q * math.log(2.0), k, v)


def _last_block_missing(got, expected, case: Case) -> str | None:
    """Only the last, partial query block is wrong: the grid launched n // 16 programs
    instead of cdiv(n, 16)."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return None
    n = expected.shape[0]
    full = n // TRITON_BLOCK * TRITON_BLOCK  # rows covered by whole blocks
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()  # (N, d_h)
    bad_rows = (~torch.isclose(g, e, rtol=_FLASH_RTOL, atol=_FLASH_ATOL)).any(dim=1).nonzero()
    if n % TRITON_BLOCK and bad_rows.numel() and int(bad_rows.min()) >= full:
        return Diagnosed(
            "",
            cause=Hint(
                f"only rows {full}..{n - 1}, the last partial tile of queries, are wrong: no "
                "program computed them.",
                f"Launch triton.cdiv(n, {TRITON_BLOCK}) programs, not n // {TRITON_BLOCK}: "
                "the grid must cover a last tile that is not full.",
            ),
        )
    return None


_FLASH_ATOL, _FLASH_RTOL = 1e-5, 1e-4  # float32 accumulation over <= 50 keys: errors ~1e-6
_flash_compare = with_note(_FLASH_ATOL, _FLASH_RTOL, _last_block_missing)


def _flash_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    device = _kernel_device()

    def t(*shape, scale=1.0):
        return torch.from_numpy(rng.normal(size=shape) * scale).float().to(device)

    if not hidden:
        return [
            Case("N = 16 (one tile), d_h = 16", (t(16, 16), t(16, 16), t(16, 16))),
            Case("N = 37 (ragged last tile), d_h = 32", (t(37, 32), t(37, 32), t(37, 32))),
        ]
    return [
        Case("N = 1, d_h = 16", (t(1, 16), t(1, 16), t(1, 16))),
        Case(
            "N = 50, d_h = 16, large scores (inputs x 3)",
            (t(50, 16, scale=3.0), t(50, 16, scale=3.0), t(50, 16)),
        ),
    ]


register(
    Exercise(
        id="06.3",
        title="a FlashAttention forward kernel in Triton",
        points=3,
        target="flash_forward",
        cases=_flash_cases,
        reference=flash_forward_reference,
        atol=_FLASH_ATOL,
        rtol=_FLASH_RTOL,
        mistakes={
            Hint(
                "keys past the end of the sequence take part in the softmax: loaded with "
                "other=0.0, they score 0, not -inf.",
                "tl.load(..., other=0.0) fills them with zeros. Set s = tl.where(cols[None, :] < n, s, float('-inf')) before the max.",
            ): _flash_unmasked,
            Hint(
                "your accumulator is not rescaled when the running max grows (it only shows "
                "once a row spans several key tiles).",
                "acc = alpha[:, None] * acc + tl.dot(p, v), with alpha = tl.exp(m - m_new).",
            ): _flash_no_rescale,
            Hint(
                "your scores are not scaled.",
                "Pass scale = 1 / sqrt(d_h) to the kernel as a float and use "
                "s = tl.dot(q, kt) * scale.",
            ): _flash_unscaled,
            Hint(
                "your mask lets in key number n, one past the end.",
                "The keys are 0 .. n-1: mask with cols < n, not cols <= n.",
            ): _flash_mask_off_by_one,
            Hint(
                "your running sum l is not rescaled when the running max grows.",
                "Like acc, it was computed relative to the old max: l = alpha * l + tl.sum(p, 1).",
            ): _flash_l_not_rescaled,
            Hint(
                "tl.exp2(x) is 2**x, not e**x.",
                "Either use tl.exp, or multiply the scores by log2(e) = 1.4427 first (and then "
                "alpha = tl.exp2(m - m_new) too).",
            ): _flash_exp2,
        },
        compare=_flash_compare,
        hint=Hint(
            "check the keys past the end of the sequence (what score do they get?) and what "
            "happens to the accumulator and the running sum when the running max grows.",
            "One program per tile of 16 queries: load q once, loop over key tiles with the "
            "online softmax, mask the keys past the end, divide by l at the end. Mask keys >= n "
            "with -inf; launch with grid (triton.cdiv(n, 16),).",
        ),
    )
)

# --------------------------------------------------------------------------- 06.4 backward


def attention_backward_reference(q, k, v, o, lse, do, scale):
    r"""dQ, dK, dV of attention from the saved O and LSE.

    .. math::

        P = e^{\text{scale}\,QK^\top - L},\ dV = P^\top dO,\ dP = dO\,V^\top,\
        D = \mathrm{rowsum}(dO\circ O),\ dS = P\circ(dP - D),\
        dQ = \text{scale}\,dS\,K,\ dK = \text{scale}\,dS^\top Q
    """
    return _backward(q, k, v, o, lse, do, scale)


def _backward(
    q,
    k,
    v,
    o,
    lse,
    do,
    scale,
    *,
    use_delta=True,
    scaled=True,
    transpose_p=True,
    delta_without_o=False,
    ds_precedence=False,
):
    P = torch.exp(scale * q @ k.transpose(-2, -1) - lse[..., None])  # (..., Nq, Nk)
    dV = (P.transpose(-2, -1) if transpose_p else P) @ do  # (..., Nk, d_v)
    dP = do @ v.transpose(-2, -1)  # (..., Nq, Nk)
    D = (do * o).sum(dim=-1) if use_delta else torch.zeros_like(lse)  # (..., Nq)
    if delta_without_o:
        D = do.sum(dim=-1)  # (..., Nq)
    if ds_precedence:
        dS = P * dP - D[..., None]  # (..., Nq, Nk)
    else:
        dS = P * (dP - D[..., None])  # (..., Nq, Nk)
    s = scale if scaled else 1.0
    return (
        s * dS @ k,
        s * dS.transpose(-2, -1) @ q,
        dV,
    )  # (..., Nq, d_h), (..., Nk, d_h), (..., Nk, d_v)


def _backward_case(rng, name, shape_q, n_k, scale=None):
    *batch_shape, n_q, head_dim = shape_q
    g = lambda *s: torch.from_numpy(rng.normal(size=s))  # float64
    q, k, v, do = (
        g(*batch_shape, n_q, head_dim),
        g(*batch_shape, n_k, head_dim),
        g(*batch_shape, n_k, head_dim),
        g(*batch_shape, n_q, head_dim),
    )
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    s = scale * q @ k.transpose(-2, -1)  # (..., Nq, Nk)
    lse = torch.logsumexp(s, dim=-1)  # (..., Nq)
    o = torch.softmax(s, dim=-1) @ v  # (..., Nq, d_h)
    return Case(name, (q, k, v, o, lse, do, scale))


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _backward_case(rng, "N = 5, d_h = 4", (5, 4), 5),
            _backward_case(rng, "N = 9, d_h = 8, scale = 0.5", (9, 8), 9, scale=0.5),
        ]
    return [
        _backward_case(rng, "6 queries, 11 keys (P is not square)", (6, 4), 11),
        _backward_case(rng, "batch and heads: q of shape (2, 3, 7, 4)", (2, 3, 7, 4), 7),
    ]


register(
    Exercise(
        id="06.4",
        title="the backward pass from the log-sum-exp",
        points=3,
        target="attention_backward",
        cases=_backward_cases,
        reference=attention_backward_reference,
        atol=1e-10,
        rtol=1e-8,
        mistakes={
            Hint(
                "you left out D, the second term of the softmax Jacobian: without it the "
                "gradients of q and k are wrong.",
                "dS = P * (dP - D[..., None]) with D = (dO * O).sum(-1).",
            ): twin(_backward, use_delta=False),
            Hint(
                "your D is rowsum(dO), without O.",
                "D_i = sum_j P_ij dP_ij = dO_i . O_i: D = (do * o).sum(-1), an elementwise "
                "product before the sum.",
            ): twin(_backward, delta_without_o=True),
            Hint(
                "your dS is P * dP - D: D must be subtracted inside, before multiplying by P.",
                "dS = P * (dP - D[..., None]): every entry of the row is P_ij (dP_ij - D_i), so "
                "masked or tiny P_ij give tiny dS_ij.",
            ): twin(_backward, ds_precedence=True),
            Hint(
                "dQ and dK miss the factor scale.",
                "S = scale * Q K^T, so dQ = scale * dS K and dK = scale * dS^T Q.",
            ): twin(_backward, scaled=False),
            Hint(
                "your dV multiplies P, not its transpose.",
                "dV = P^T dO (keys on the rows): P.transpose(-2, -1) @ do.",
            ): twin(_backward, transpose_p=False),
        },
        hint=Hint(
            "check each gradient's shape, and follow the chain rule one step at a time: through "
            "the values, through the softmax, then through the scaled scores.",
            "Recompute P from the LSE, then follow the chain rule back through O = P V, the "
            "softmax and S = scale * Q K^T. P = exp(scale * q @ k^T - lse[..., None]); dV = P^T "
            "dO; dP = dO V^T; D = (dO * O).sum(-1); dS = P * (dP - D[..., None]); dQ = scale dS "
            "K; dK = scale dS^T Q. Use .transpose(-2, -1) so batch dimensions work.",
        ),
        outputs=("dq", "dk", "dv"),
    )
)

# --------------------------------------------------------------------------- 06.5 causal tiles


def causal_tiles_reference(n: int, block_m: int, block_n: int) -> int:
    """Tiles (query tile, key tile) a causal forward computes: key tiles up to min(n, end)."""
    return sum(math.ceil(min(n, start + block_m) / block_n) for start in range(0, n, block_m))


def _tiles_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("n = 256, block_m = 64, block_n = 64", (256, 64, 64)),
            Case("n = 1000, block_m = 128, block_n = 64", (1000, 128, 64)),
            Case(
                "n = 1000, block_m = 128, block_n = 48: a ragged last query tile", (1000, 128, 48)
            ),
        ]
    return [
        Case("n = 1", (1, 128, 64)),
        Case("n = 4096, block_m = 128, block_n = 32", (4096, 128, 32)),
        Case("n = 300, block_m = 32, block_n = 128", (300, 32, 128)),
        *(_tiles_drawn(rng) for _ in range(2)),
    ]


def _tiles_drawn(rng: np.random.Generator) -> Case:
    """A length and tile sizes drawn from ``rng`` (the grader's seed)."""
    n = int(rng.integers(1, 5000))
    block_m, block_n = (int(rng.choice([16, 32, 48, 64, 128])) for _ in range(2))
    return Case(f"n = {n}, block_m = {block_m}, block_n = {block_n}", (n, block_m, block_n))


register(
    Exercise(
        id="06.5",
        title="count the tiles a causal kernel computes",
        points=1,
        target="causal_tiles",
        cases=_tiles_cases,
        reference=causal_tiles_reference,
        atol=1e-9,
        rtol=0.0,
        mistakes={
            Hint(
                "you counted every tile: a causal kernel stops each query tile's loop at its "
                "last query.",
                "For the tile starting at row start, the keys end at min(n, start + block_m).",
            ): lambda n, bm, bn: math.ceil(n / bm) * math.ceil(n / bn),
            Hint(
                "you used the triangle number T(T+1)/2 of square tiles: right only when "
                "block_m == block_n and n is a multiple of them.",
                "Count per query tile: ceil(min(n, start + block_m) / block_n) key tiles.",
            ): lambda n, bm, bn: math.ceil(n / bm) * (math.ceil(n / bm) + 1) // 2,
            Hint(
                "you counted the key tiles as floor(x / block_n) + 1: one too many whenever x is "
                "a multiple of block_n (x = 128 keys in tiles of 64 are 2 tiles, not 3).",
                "The number of tiles covering x keys is ceil(x / block_n) = -(-x // block_n), "
                "or math.ceil(x / block_n).",
            ): lambda n, bm, bn: sum(min(n, s + bm) // bn + 1 for s in range(0, n, bm)),
            Hint(
                "the last query tile ends at n, not where a full tile would end: its rows past "
                "n do not exist.",
                "Take min(n, start + block_m) as the end of the keys a tile's queries see.",
            ): lambda n, bm, bn: sum(math.ceil((s + bm) / bn) for s in range(0, n, bm)),
        },
        hint=Hint(
            "count a small case by hand (n = 5, tiles of 2 by 2): which key tiles does each "
            "query tile's loop visit?",
            "Sum over the query tiles the number of key tiles each one's loop visits. sum over "
            "start = 0, block_m, ...: ceil(min(n, start + block_m) / block_n).",
        ),
    )
)

# --------------------------------------------------------------------------- 06.6 GQA


def _gqa(q, k, v, is_causal, *, interleaved=False, top_left=False, scaled=True, masked=True):
    """Grouped-query attention by a view of q, with the twins' mistakes as switches."""
    B, H, n_q, head_dim = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    g = H // h_kv
    if interleaved:  # head h paired with key/value head h % H_kv, as .repeat() would do
        qg = q.view(B, g, h_kv, n_q, head_dim).transpose(1, 2)  # (B, H_kv, G, Nq, d)
    else:
        qg = q.view(B, h_kv, g, n_q, head_dim)  # (B, H_kv, G, Nq, d): heads h*G .. h*G+G-1
    s = qg @ k[:, :, None].transpose(-2, -1)  # (B, H_kv, G, Nq, Nk)
    if scaled:
        s = s / math.sqrt(head_dim)
    if is_causal and masked:
        allowed = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
        allowed = allowed.tril(0 if top_left else n_k - n_q)  # (Nq, Nk) j <= i + Nk - Nq
        s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, H_kv, G, Nq)
    out = torch.exp(s - lse[..., None]) @ v[:, :, None]  # (B, H_kv, G, Nq, d_v)
    if interleaved:
        out, lse = out.transpose(1, 2), lse.transpose(1, 2)  # back to (B, G, H_kv, ...)
    return out.reshape(B, H, n_q, v.shape[-1]), lse.reshape(B, H, n_q)


def gqa_attention_reference(q, k, v, is_causal):
    r"""Grouped-query attention, causal aligned bottom-right: ``(output, lse)``.

    Query head :math:`h` reads key/value head :math:`\lfloor h/G \rfloor`,
    :math:`G = H/H_{kv}`; query :math:`i` sees keys :math:`j \le i + N_k - N_q` when causal.
    """
    return _gqa(q, k, v, is_causal)


def _gqa_case(rng, name, B, H, h_kv, n_q, n_k, head_dim, is_causal):
    def t(*shape):
        return torch.from_numpy(rng.normal(size=shape))  # float64

    q = t(B, H, n_q, head_dim)  # (B, H, Nq, d)
    k, v = t(B, h_kv, n_k, head_dim), t(B, h_kv, n_k, head_dim)  # (B, H_kv, Nk, d)
    return Case(name, (q, k, v, is_causal))


def _gqa_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _gqa_case(rng, "H = 4, H_kv = 2, 3 new queries, 7 keys in the cache, causal", 1, 4, 2, 3, 7, 8, True),
            _gqa_case(rng, "B = 2, H = 6, H_kv = 3, Nq = Nk = 5, not causal", 2, 6, 3, 5, 5, 4, False),
        ]  # fmt: skip
    return [
        _gqa_case(rng, "multi-query: H_kv = 1, one new query against 9 keys, causal", 1, 4, 1, 1, 9, 8, True),
        _gqa_case(rng, "H = 8, H_kv = 2, Nq = Nk = 6, causal", 2, 8, 2, 6, 6, 4, True),
        _gqa_case(rng, "H = H_kv = 3 (plain multi-head), 4 queries, 10 keys, causal", 1, 3, 3, 4, 10, 4, True),
    ]  # fmt: skip


register(
    Exercise(
        id="06.6",
        title="grouped-query attention over a KV cache, without repeating K and V",
        points=2,
        target="gqa_attention",
        cases=_gqa_cases,
        reference=gqa_attention_reference,
        atol=1e-10,
        rtol=1e-8,
        mistakes={
            Hint(
                "your query heads read the wrong key/value heads: query head h belongs to "
                "key/value head h // G (consecutive query heads share one, as "
                "repeat_interleave would give), not h % H_kv (what k.repeat(1, G, 1, 1) gives).",
                "q.view(B, H_kv, G, Nq, d) puts heads h*G .. h*G + G - 1 next to key/value head "
                "h; then k[:, :, None] broadcasts over G.",
            ): twin(_gqa, interleaved=True),
            Hint(
                "your causal mask is aligned top-left (query i sees keys j <= i): with a cache the "
                "new queries come last, so query i sees keys j <= i + Nk - Nq.",
                "torch.ones(Nq, Nk, dtype=torch.bool).tril(Nk - Nq) is the bottom-right mask.",
            ): twin(_gqa, top_left=True),
            Hint(
                "you did not apply the causal mask when is_causal is True.",
                "Set the scores of keys j > i + Nk - Nq to -inf before the softmax and the "
                "log-sum-exp.",
            ): twin(_gqa, masked=False),
            Hint(
                "your scores are not scaled.",
                "Divide q k^T by sqrt(d_h), d_h = q.shape[-1].",
            ): twin(_gqa, scaled=False),
        },
        hint=Hint(
            "check which key/value head each query head reads, how the causal mask is aligned "
            "when Nk > Nq, and the second result, the log-sum-exp.",
            "Group the query heads (a view, no copy), let k and v broadcast over the group, mask "
            "bottom-right, and return the output and the log-sum-exp. qg = q.view(B, H_kv, G, "
            "Nq, d); s = qg @ k[:, :, None].transpose(-2, -1) / sqrt(d); mask with tril(Nk - "
            "Nq); lse = torch.logsumexp(s, -1); out = torch.softmax(s, -1) @ v[:, :, None]; "
            "reshape both back to H heads.",
        ),
        outputs=("output", "lse"),
    )
)


# --------------------------------------------------------------------------- 06.7 predict, measure


def _rescales(n_scores, block_size, rows, seed, *, per_element=False, count_first=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, n_scores // block_size, block_size))  # (R, T, B) scores
    block_max = x.reshape(rows, -1, 1) if per_element else x.max(-1, keepdims=True)
    running = np.maximum.accumulate(block_max[..., 0], axis=1)  # (R, T) m after each block
    raised = (running[:, 1:] > running[:, :-1]).sum(axis=1)  # (R,) blocks after the first
    return float(raised.mean() + (1.0 if count_first else 0.0))


def rescale_count_reference(n_scores: int, block_size: int, rows: int, seed: int) -> float:
    r"""How many key blocks raise the running maximum of an online softmax (so that the
    accumulator is rescaled), per row of ``n_scores`` i.i.d. :math:`N(0,1)` scores taken
    ``block_size`` at a time, the first block included (it replaces :math:`-\infty`);
    averaged over ``rows`` rows. In expectation :math:`H_{n/B} = \sum_{j=1}^{n/B} 1/j`."""
    return _rescales(n_scores, block_size, rows, seed)


def _rescale_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("1024 scores, one at a time (blocks of 1), 2000 rows", (1024, 1, 2000, 0)),
            Case("1024 scores in blocks of 64, 2000 rows", (1024, 64, 2000, 1)),
        ]
    return [
        Case("4096 scores in blocks of 128, 1000 rows", (4096, 128, 1000, int(rng.integers(999)))),
        Case("256 scores in blocks of 16, 4000 rows", (256, 16, 4000, int(rng.integers(999)))),
        Case("64 scores in one block", (64, 64, 100, 5)),
    ]


register(
    Exercise(
        id="06.7",
        title="predict, then measure: how often the online softmax rescales",
        points=1,
        target="measure_rescales",
        cases=_rescale_cases,
        reference=rescale_count_reference,
        atol=0.0,
        rtol=0.05,
        compare=within(0.05),
        measures="key blocks that raise the running max, per row",
        mistakes={
            Hint(
                "you counted the scores that raise the maximum one by one, ignoring the blocks.",
                "The kernel updates m once per block, from the block's own maximum: count the "
                "blocks whose maximum exceeds the running m.",
            ): twin(_rescales, per_element=True),
            Hint(
                "you did not count the first block.",
                "The first block raises m from -inf: it counts (that is why a single block "
                "gives 1).",
            ): twin(_rescales, count_first=False),
        },
        hint=Hint(
            "check what raises the running max (a block's maximum, not each score) and whether "
            "the first block counts.",
            "Per row: the maximum of each block, the running maximum over blocks, and how many "
            "times it goes up (the first block included). x.reshape(rows, n // B, B).max(-1) "
            "gives the block maxima; np.maximum.accumulate(..., axis=1) the running max; count "
            "its increases, plus 1.",
        ),
    )
)
