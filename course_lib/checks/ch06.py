r"""Checks for chapter 06 (FlashAttention).

Five exercises, each a function the learner writes:

* 06.1 ``online_softmax_update(m, l, x_block)`` (numpy): one step of the online softmax,
  :math:`m' = \max(m, \max_j x_j)`, :math:`\ell' = e^{m - m'}\ell + \sum_j e^{x_j - m'}`;
* 06.2 ``tiled_attention(Q, K, V, block_size)`` (numpy): the tiled forward loop, returning
  ``(O, L)`` with the log-sum-exp :math:`L`;
* 06.3 ``flash_forward(q, k, v)`` (torch, float32): the Python wrapper that launches the
  learner's own Triton forward kernel (defined in the same cell), checked through Triton's
  interpreter on the CPU;
* 06.4 ``attention_backward(q, k, v, o, lse, do, scale)`` (torch, float64): dQ, dK, dV from
  the saved output and log-sum-exp, with :math:`D = \mathrm{rowsum}(dO \circ O)`;
* 06.5 ``causal_tiles(n, block_m, block_n)``: how many tiles a causal kernel computes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .core import Case, Exercise, compare_values, get_exercise, register

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
            "you added the new block's sum without rescaling the old one: l was computed relative "
            "to the old max m, so multiply it by exp(m - m_new) before adding.": _online_no_rescale,
            "you rescaled the old sum by exp(m_new - m): the factor must be exp(m - m_new) <= 1, "
            "because every old term exp(x - m) must become exp(x - m_new).": _online_inverted_rescale,
            "your new max uses only the block: m_new = max(m, max of the block), otherwise the "
            "running max can go down.": _online_block_max_only,
            "you exponentiated raw scores: e^1000 overflows to inf (and inf/inf is nan), e^-1000 "
            "underflows to 0. Only exponentiate differences, x - m_new and m - m_new, which are "
            "<= 0.": _online_raw_exp,
        },
        hint="m_new = np.maximum(m, x_block.max(axis=-1)); "
        "l_new = np.exp(m - m_new) * l + np.exp(x_block - m_new[:, None]).sum(axis=-1).",
    )
)

# --------------------------------------------------------------------------- 06.2 tiled forward


def _tiled(Q, K, V, block_size, *, rescale=True, scaled=True, lse_log=True, rescale_l=True):
    N, d = Q.shape
    O = np.empty((N, V.shape[1]))  # (N, d_v)
    L = np.empty(N)  # (N,)
    s = 1.0 / math.sqrt(d) if scaled else 1.0
    for i in range(0, N, block_size):
        Qi = Q[i : i + block_size]  # (Br, d)
        m = np.full(len(Qi), -np.inf)  # (Br,)
        l = np.zeros(len(Qi))  # (Br,)
        A = np.zeros((len(Qi), V.shape[1]))  # (Br, d_v)
        for j in range(0, K.shape[0], block_size):
            S = Qi @ K[j : j + block_size].T * s  # (Br, Bc)
            m_new = np.maximum(m, S.max(axis=1))  # (Br,)
            alpha = np.exp(m - m_new)  # (Br,)
            P = np.exp(S - m_new[:, None])  # (Br, Bc)
            l = (alpha * l if rescale_l else l) + P.sum(axis=1)  # (Br,)
            A = (alpha[:, None] * A if rescale else A) + P @ V[j : j + block_size]  # (Br, d_v)
            m = m_new
        O[i : i + block_size] = A / l[:, None]  # (Br, d_v)
        L[i : i + block_size] = m + np.log(l) if lse_log else m  # (Br,)
    return O, L


def tiled_attention_reference(
    Q: np.ndarray, K: np.ndarray, V: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    r"""Tiled attention: :math:`O = \mathrm{softmax}(QK^\top/\sqrt d)V`, :math:`L = \mathrm{logsumexp}`."""
    return _tiled(Q, K, V, block_size)


def _tiled_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "N = 8 queries and keys, d = 4, blocks of 4",
                (rng.normal(size=(8, 4)), rng.normal(size=(8, 4)), rng.normal(size=(8, 4)), 4),
            ),
            Case(
                "N = 10, d = 6, blocks of 3 (the last block has 1 row)",
                (rng.normal(size=(10, 6)), rng.normal(size=(10, 6)), rng.normal(size=(10, 6)), 3),
            ),
        ]
    return [
        Case(
            "7 queries, 13 keys, d_v = 5 != d = 3, blocks of 4",
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
            "one block holds everything",
            (rng.normal(size=(6, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 4)), 16),
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
            "your accumulator A is not rescaled: when the running max grows, multiply A by "
            "alpha = exp(m - m_new) (row by row) before adding P_tile @ V_j.": lambda Q, K, V, b: (
                _tiled(Q, K, V, b, rescale=False)
            ),
            "you forgot the 1/sqrt(d) scale of the scores.": lambda Q, K, V, b: _tiled(
                Q, K, V, b, scaled=False
            ),
            "your L is the running max m only: the log-sum-exp is L = m + log(l).": lambda Q, K, V, b: (
                _tiled(Q, K, V, b, lse_log=False)
            ),
        },
        hint="for each query block keep m (-inf), l (0) and A (zeros); for each key block: "
        "S = Qi @ Kj.T / sqrt(d), m_new = max(m, rowmax S), alpha = exp(m - m_new), "
        "P = exp(S - m_new), l = alpha*l + rowsum P, A = alpha*A + P @ Vj; then O = A / l.",
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
    r""":math:`\mathrm{softmax}(qk^\top/\sqrt d)\,v` for ``q, k, v [N, d]`` (float32)."""
    s = (q.double() @ k.double().T) / math.sqrt(q.shape[-1])  # (N, N)
    return (torch.softmax(s, dim=-1) @ v.double()).float()  # (N, d)


def _flash_unmasked(q, k, v):
    """Keys padded with zeros to a multiple of the block, unmasked: each adds e^{0 - m}."""
    n = k.shape[0]
    pad = -n % TRITON_BLOCK
    k = torch.cat([k, k.new_zeros(pad, k.shape[1])])  # (N + pad, d)
    v = torch.cat([v, v.new_zeros(pad, v.shape[1])])  # (N + pad, d)
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


def _flash_compare(got, expected, case: Case) -> str | None:
    """The default comparison, plus a diagnosis when only the last, partial query block is
    wrong: the grid launched n // 16 programs instead of cdiv(n, 16)."""
    ex = get_exercise("06.3")
    msg = compare_values(got, expected, ex.atol, ex.rtol)
    if msg is None or not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return msg
    n = expected.shape[0]
    full = n // TRITON_BLOCK * TRITON_BLOCK  # rows covered by whole blocks
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()  # (N, d)
    bad_rows = (~torch.isclose(g, e, rtol=ex.rtol, atol=ex.atol)).any(dim=1).nonzero()
    if n % TRITON_BLOCK and bad_rows.numel() and int(bad_rows.min()) >= full:
        msg += (
            f"\n    Likely cause: only rows {full}..{n - 1}, the last partial block of "
            f"queries, are wrong: no program computed them. Launch "
            f"triton.cdiv(n, {TRITON_BLOCK}) programs, not n // {TRITON_BLOCK}."
        )
    return msg


def _flash_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    device = _kernel_device()

    def t(*shape, scale=1.0):
        return torch.from_numpy(rng.normal(size=shape) * scale).float().to(device)

    if not hidden:
        return [
            Case("N = 16 (one block), d = 16", (t(16, 16), t(16, 16), t(16, 16))),
            Case("N = 37 (ragged last block), d = 32", (t(37, 32), t(37, 32), t(37, 32))),
        ]
    return [
        Case("N = 1, d = 16", (t(1, 16), t(1, 16), t(1, 16))),
        Case(
            "N = 50, d = 16, large scores (inputs x 3)",
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
        atol=1e-5,
        rtol=1e-4,  # float32 accumulation over <= 50 keys: errors ~1e-6
        mistakes={
            "keys past the end of the sequence take part in the softmax: tl.load(..., other=0.0) "
            "gives them a score of 0, not -inf. Set s = tl.where(cols[None, :] < n, s, "
            "float('-inf')) before the max.": _flash_unmasked,
            "your accumulator is not rescaled by alpha = exp(m - m_new) when the running max "
            "grows (it only shows once a row spans several key blocks).": _flash_no_rescale,
            "you forgot the 1/sqrt(d) scale of the scores (pass it to the kernel as a float).": _flash_unscaled,
            "your mask lets in key number n, one past the end (cols <= n): the keys are "
            "0 .. n-1, so mask with cols < n.": _flash_mask_off_by_one,
            "your running sum l is not rescaled: like acc, it was computed relative to the old "
            "max, so l = alpha * l + tl.sum(p, 1).": _flash_l_not_rescaled,
            "tl.exp2(x) is 2**x, not e**x: either use tl.exp, or multiply the scores by "
            "log2(e) = 1.4427 first (and then alpha = tl.exp2(m - m_new) too).": _flash_exp2,
        },
        compare=_flash_compare,
        hint="one program per block of 16 queries: load q once, loop over key blocks with "
        "the online softmax, mask keys >= n with -inf, divide by l at the end; launch "
        "with grid (triton.cdiv(n, 16),).",
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


def _backward(q, k, v, o, lse, do, scale, *, use_delta=True, scaled=True, transpose_p=True):
    P = torch.exp(scale * q @ k.transpose(-2, -1) - lse[..., None])  # (..., Nq, Nk)
    dV = (P.transpose(-2, -1) if transpose_p else P) @ do  # (..., Nk, d_v)
    dP = do @ v.transpose(-2, -1)  # (..., Nq, Nk)
    D = (do * o).sum(dim=-1) if use_delta else torch.zeros_like(lse)  # (..., Nq)
    dS = P * (dP - D[..., None])  # (..., Nq, Nk)
    s = scale if scaled else 1.0
    return (
        s * dS @ k,
        s * dS.transpose(-2, -1) @ q,
        dV,
    )  # (..., Nq, d), (..., Nk, d), (..., Nk, d_v)


def _backward_case(rng, name, shape_q, n_k, scale=None):
    *batch, n_q, d = shape_q
    g = lambda *s: torch.from_numpy(rng.normal(size=s))  # float64
    q, k, v, do = g(*batch, n_q, d), g(*batch, n_k, d), g(*batch, n_k, d), g(*batch, n_q, d)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = scale * q @ k.transpose(-2, -1)  # (..., Nq, Nk)
    lse = torch.logsumexp(s, dim=-1)  # (..., Nq)
    o = torch.softmax(s, dim=-1) @ v  # (..., Nq, d)
    return Case(name, (q, k, v, o, lse, do, scale))


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _backward_case(rng, "N = 5, d = 4", (5, 4), 5),
            _backward_case(rng, "N = 9, d = 8, scale = 0.5", (9, 8), 9, scale=0.5),
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
            "you left out D: dS = P * (dP - D) with D = (dO * O).sum(-1), the softmax Jacobian's "
            "second term. Without it the gradients of q and k are wrong.": lambda *a: _backward(
                *a, use_delta=False
            ),
            "dQ and dK miss the factor scale: S = scale * Q K^T, so dQ = scale * dS K and "
            "dK = scale * dS^T Q.": lambda *a: _backward(*a, scaled=False),
            "dV = P^T dO (keys on the rows), not P dO.": lambda *a: _backward(
                *a, transpose_p=False
            ),
        },
        hint="P = exp(scale * q @ k^T - lse[..., None]); dV = P^T dO; dP = dO V^T; "
        "D = (dO * O).sum(-1); dS = P * (dP - D[..., None]); dQ = scale dS K; dK = scale dS^T Q. "
        "Use .transpose(-2, -1) so batch dimensions work.",
    )
)

# --------------------------------------------------------------------------- 06.5 causal tiles


def causal_tiles_reference(n: int, block_m: int, block_n: int) -> int:
    """Tiles (query block, key block) a causal forward computes: key blocks up to min(n, end)."""
    return sum(math.ceil(min(n, start + block_m) / block_n) for start in range(0, n, block_m))


def _tiles_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("n = 256, block_m = 64, block_n = 64", (256, 64, 64)),
            Case("n = 1000, block_m = 128, block_n = 64", (1000, 128, 64)),
            Case("n = 300, block_m = 128, block_n = 32: a ragged last query block", (300, 128, 32)),
        ]
    return [
        Case("n = 1", (1, 128, 64)),
        Case("n = 4096, block_m = 128, block_n = 32", (4096, 128, 32)),
        Case("n = 300, block_m = 32, block_n = 128", (300, 32, 128)),
    ]


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
            "you counted every tile: a causal kernel stops each query block's loop at its last "
            "query, min(n, start + block_m).": lambda n, bm, bn: (
                math.ceil(n / bm) * math.ceil(n / bn)
            ),
            "you used the triangle number T(T+1)/2 of square blocks: that is right only when "
            "block_m == block_n and n is a multiple of them.": lambda n, bm, bn: (
                math.ceil(n / bm) * (math.ceil(n / bm) + 1) // 2
            ),
            "the last query block ends at n, not at start + block_m: take min(n, start + block_m).": lambda n, bm, bn: (
                sum(math.ceil((s + bm) / bn) for s in range(0, n, bm))
            ),
        },
        hint="sum over query blocks start = 0, block_m, ...: ceil(min(n, start + block_m) / block_n).",
    )
)
