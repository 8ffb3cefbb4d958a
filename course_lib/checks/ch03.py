r"""Checks for chapter 03 (why divide by √d_k).

Seven exercises, each a function the learner writes (texts: ``ch03.md``):

* 03.1 ``dot_product_variance(q, k, scale)``: Var(c · q·k) from given samples (deterministic)
* 03.2 ``stable_softmax(scores, temperature)``: softmax(s / τ) that survives huge scores and
  −inf, in the input's dtype (``check_dtype``)
* 03.3 ``softmax_jacobian(p)``: diag(p) − p pᵀ, batched
* 03.4 ``attention_entropy(weights)``: entropy of attention rows with 0 log 0 = 0
* 03.5 ``multihead_scores(q, k, num_heads)``: per-head scores scaled by 1/√d_h (not 1/√d_model)
* 03.6 ``softmax_backward(p, grad_p)``: ∂L/∂s = p ⊙ (g − ⟨p, g⟩) per row, without building J
* 03.7 ``measure_max_weight(d_k, num_keys, scaled, trials, seed)``: predict, then measure the
  largest weight with and without 1/√d_k
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .core import Case, Fixed
from .declare import exercise
from .kit import BROADCAST_ERROR, randn, softmax_rows, within
from .rules import SOFTMAX_CALLS, SOFTMAX_NAMES, Rule

# --------------------------------------------------------------------------- 03.1


def variance_reference(
    q,
    k,
    scale=1.0,
    *,
    ddof=0,
    dot=True,
    scale_after=False,
    factor="scale",
    center=True,
    pairs="own",
) -> float:
    r""":math:`\frac1N\sum_n (s_n - \bar s)^2` with :math:`s_n = c\, q_n\cdot k_n`."""
    c = {"scale": scale, "none": 1.0, "1/sqrt(d_k)": 1 / math.sqrt(q.shape[-1])}[factor]
    if pairs == "all":  # every q_n with every k_m
        s = q @ k.T  # (N, N)
    else:
        s = (q * k).sum(axis=-1) if dot else q * k  # (N,), or (N, d_k) without the sum
    if scale_after:  # the variance times c, not c²
        return float(c * np.var(s, ddof=ddof))
    s = c * s
    return float(np.var(s, ddof=ddof) if center else np.mean(s**2))


def _variance_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "N=2000 pairs, d_k=16, scale 1",
                (rng.normal(size=(2000, 16)), rng.normal(size=(2000, 16))),
                {"scale": 1.0},
            ),
            Case(
                "N=2000 pairs, d_k=64, scale 1/√64",
                (rng.normal(size=(2000, 64)), rng.normal(size=(2000, 64))),
                {"scale": 1 / 8},
            ),
        ]

    def signs(shape):
        return rng.choice([-1.0, 1.0], size=shape)

    return [
        Case(
            "d_k=1, N=5 (one product per pair)",
            (rng.normal(size=(5, 1)), rng.normal(size=(5, 1))),
            {"scale": 1.0},
        ),
        Case(
            "±1 components, d_k=32, scale 0.5", (signs((500, 32)), signs((500, 32))), {"scale": 0.5}
        ),
        Case(
            "non-zero mean, d_k=8, scale 1/√8",
            (rng.normal(1.0, 1.0, size=(300, 8)), rng.normal(0.5, 2.0, size=(300, 8))),
            {"scale": 1 / math.sqrt(8)},
        ),
    ]


exercise(
    "03.1",
    variance_reference,
    target="dot_product_variance",
    title="measure Var(q·k)",
    points=2,
    cases=_variance_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "unbiased": dict(ddof=1),
        "products": dict(dot=False),
        "scale-after": dict(scale_after=True),
        "no-scale": dict(factor="none"),
        "own-sqrt-d": dict(factor="1/sqrt(d_k)"),
        "second-moment": dict(center=False),
        "all-pairs": dict(pairs="all"),
    },
)

# --------------------------------------------------------------------------- 03.2


def stable_softmax_reference(
    scores, temperature=1.0, *, double=False, shift="row", tau="divides", dim=-1, sum_over="row"
) -> torch.Tensor:
    r""":math:`\mathrm{softmax}(s/\tau)` over the last axis, in the input's dtype."""
    s = scores.double() if double else scores  # (..., n)
    if tau == "multiplies":
        z = s * temperature  # (..., n)
    elif tau == "ignored":
        z = s
    else:
        z = s / temperature  # (..., n)
    if shift == "row":
        z = z - z.amax(dim=dim, keepdim=True)  # (..., n)
    elif shift == "tensor":  # one max for the whole tensor
        z = z - z.max()  # (..., n)
    e = torch.exp(z)  # (..., n); overflows for large scores without the shift
    return e / (e.sum() if sum_over == "tensor" else e.sum(dim, keepdim=True))  # (..., n)


def _f32(a) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float32)


def _softmax_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("3 rows of 4 scores, τ=1", (_f32(rng.normal(size=(3, 4))),), {"temperature": 1.0}),
            Case(
                "unscaled scores at d_k≈1024: rows near +1000, 0, −1500 and +500, τ=1",
                (
                    _f32(
                        rng.normal(scale=32.0, size=(4, 6))
                        + np.array([[1000.0], [0.0], [-1500.0], [500.0]])
                    ),
                ),
                {"temperature": 1.0},
            ),
            Case(
                "τ = √64 = 8 on a (2, 3, 5) batch",
                (_f32(rng.normal(scale=8.0, size=(2, 3, 5))),),
                {"temperature": 8.0},
            ),
        ]
    offsets = np.array([[0.0], [-2000.0], [3000.0]])
    masked = rng.normal(size=(3, 6))
    masked[:, 4:] = -np.inf  # two masked keys per row, never a fully masked row
    return [
        Case(
            "rows offset by thousands (one max per row, not per tensor)",
            (_f32(rng.normal(size=(3, 5)) + offsets),),
            {"temperature": 1.0},
        ),
        Case("−inf scores (masked keys) get weight 0", (_f32(masked),), {"temperature": 2.0}),
        Case("τ=0.1 sharpens 50 scores", (_f32(rng.normal(size=(1, 50))),), {"temperature": 0.1}),
    ]


exercise(
    "03.2",
    stable_softmax_reference,
    target="stable_softmax",
    title="a numerically stable softmax with temperature",
    points=1,
    cases=_softmax_cases,
    atol=1e-6,
    rtol=1e-5,
    check_dtype=True,
    rules=(Rule("no-softmax", calls=SOFTMAX_CALLS, names=SOFTMAX_NAMES),),
    slips={
        # first: its values equal the reference's, so other slips would match them too
        "float64": dict(double=True),
        "overflow": dict(shift="none"),
        "global-max": dict(shift="tensor"),
        "times-tau": dict(tau="multiplies"),
        "wrong-axis": dict(dim=0),
        "no-tau": dict(tau="ignored"),
        "tensor-sum": dict(sum_over="tensor"),
    },
)

# --------------------------------------------------------------------------- 03.3


def jacobian_reference(p, *, diagonal="p", outer="per-row", sign=1) -> torch.Tensor:
    r""":math:`J = \mathrm{diag}(p) - p p^\top` for each row of ``p [..., n]``."""
    d: torch.Tensor | float
    if diagonal == "p(1-p)":
        d = torch.diag_embed(p * (1 - p))  # (..., n, n)
    elif diagonal == "none":
        d = 0.0
    else:
        d = torch.diag_embed(p)  # (..., n, n)
    if outer == "none":
        pp = 0.0
    elif outer == "dot":  # not per row
        pp = p @ p if p.ndim == 1 else p.transpose(-2, -1) @ p  # () or (n, n)
    elif outer == "squares":  # p_i² along row i
        pp = (p * p)[..., :, None]  # (..., n, 1)
    else:
        pp = p[..., :, None] * p[..., None, :]  # (..., n, n)
    return sign * (d - pp)  # (..., n, n)


def _jacobian_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("one row of 4 weights", (softmax_rows(rng, (4,)),)),
            Case("a (3, 5) batch of rows", (softmax_rows(rng, (3, 5)),)),
        ]
    onehot = torch.zeros(2, 6, dtype=torch.float64)
    onehot[0, 2] = onehot[1, 5] = 1.0
    return [
        Case("a (2, 3, 7) batch", (softmax_rows(rng, (2, 3, 7)),)),
        Fixed("one-hot rows: the Jacobian is all zeros", (onehot,)),
        Case("nearly saturated rows (scores of std 30)", (softmax_rows(rng, (4, 8), 30.0),)),
    ]


exercise(
    "03.3",
    jacobian_reference,
    target="softmax_jacobian",
    title="the softmax Jacobian",
    points=2,
    cases=_jacobian_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "no-diagonal": dict(diagonal="none"),
        "flipped": dict(sign=-1),
        "diagonal-only": dict(diagonal="p(1-p)", outer="none"),
        "subtracted-twice": dict(diagonal="p(1-p)"),
        "dot": dict(outer="dot"),
        "squares": dict(outer="squares"),
    },
)

# --------------------------------------------------------------------------- 03.4


def entropy_reference(weights, *, base=math.e, negate=True, zero_safe=True, dim=-1, mean=False):
    r""":math:`H = -\sum_j w_j \ln w_j` over the last axis with :math:`0\ln 0 = 0`."""
    w = weights  # (..., n)
    logw = torch.where(w > 0, w.log(), torch.zeros_like(w)) if zero_safe else w.log()  # (..., n)
    terms = w * logw / math.log(base)  # (..., n)
    h = terms.mean(dim) if mean else terms.sum(dim)  # (...)
    return -h if negate else h


def _entropy_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    causal = torch.softmax(
        torch.tensor(rng.normal(size=(5, 5))).masked_fill(
            ~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")
        ),
        -1,
    )  # zeros above diag
    if not hidden:
        uniform = torch.full((1, 8), 1 / 8, dtype=torch.float64)
        return [
            Fixed("uniform over 8 keys: log 8", (uniform,)),
            Case("4 attention rows over 6 keys", (softmax_rows(rng, (4, 6)),)),
            Case("causal rows with exact zeros (0 log 0 = 0)", (causal,)),
        ]
    return [
        Case("causal rows, another draw", (causal,)),
        Fixed("one-hot rows: entropy 0", (torch.eye(4, dtype=torch.float64),)),
        Case("a (2, 3, 10) batch", (softmax_rows(rng, (2, 3, 10), 3.0),)),
    ]


exercise(
    "03.4",
    entropy_reference,
    target="attention_entropy",
    title="the entropy of attention rows",
    points=1,
    cases=_entropy_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "bits": dict(base=2),
        "no-minus": dict(negate=False),
        "nan-zeros": dict(zero_safe=False),
        "wrong-axis": dict(dim=0),
        "mean": dict(mean=True),
    },
)

# --------------------------------------------------------------------------- 03.5


def multihead_reference(
    q, k, num_heads, *, width="d_h", power=0.5, keys_first=False, split="heads"
) -> torch.Tensor:
    r"""Per-head scores :math:`Q_h K_h^\top/\sqrt{d_h}`: ``[B, H, N, N]``."""
    b, n, d_model = q.shape
    head_dim = d_model // num_heads
    if split == "reshape":  # straight to (B, H, N, d_h): mixes tokens and features
        qh, kh = (x.reshape(b, num_heads, n, head_dim) for x in (q, k))
    elif split == "interleaved":  # head h gets the features h, h + H, h + 2H, ...
        qh, kh = (x.view(b, n, head_dim, num_heads).permute(0, 3, 1, 2) for x in (q, k))
    else:
        qh, kh = (
            x.view(b, n, num_heads, head_dim).transpose(1, 2) for x in (q, k)
        )  # (B, H, N, d_h)
    s = kh @ qh.transpose(-2, -1) if keys_first else qh @ kh.transpose(-2, -1)  # (B, H, N, N)
    return s / (head_dim if width == "d_h" else d_model) ** power  # (B, H, N, N)


def _mh_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("B=1, N=4, d_model=8, H=2", (randn(rng, 1, 4, 8), randn(rng, 1, 4, 8), 2)),
            Case("B=2, N=5, d_model=32, H=4", (randn(rng, 2, 5, 32), randn(rng, 2, 5, 32), 4)),
        ]
    return [
        Case("one head (H=1): d_h = d_model", (randn(rng, 2, 3, 6), randn(rng, 2, 3, 6), 1)),
        Case("B=1, N=6, d_model=64, H=8", (randn(rng, 1, 6, 64), randn(rng, 1, 6, 64), 8)),
        Case("H = d_model (d_h = 1)", (randn(rng, 1, 3, 4), randn(rng, 1, 3, 4), 4)),
    ]


exercise(
    "03.5",
    multihead_reference,
    target="multihead_scores",
    title="multi-head scores with the right scale",
    points=2,
    cases=_mh_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "d-model": dict(width="d_model"),
        "unscaled": dict(power=0),
        "over-d-h": dict(power=1),
        "transposed": dict(keys_first=True),
        "reshape": dict(split="reshape"),
        "interleaved": dict(split="interleaved"),
    },
)

# --------------------------------------------------------------------------- 03.6


def softmax_backward_reference(
    p, grad_p, *, average="weighted", times_p=True, sign=1, keepdim=True
) -> torch.Tensor:
    r""":math:`\partial L/\partial s = J^\top g = p \odot (g - \langle p, g\rangle)` per row."""
    if average == "none":
        avg = 0.0
    elif average == "plain":  # the mean of g, not weighted by p
        avg = grad_p.mean(-1, keepdim=True)  # (..., 1)
    elif average == "tensor":  # one sum for the whole tensor
        avg = (p * grad_p).sum()  # ()
    else:
        avg = (p * grad_p).sum(-1, keepdim=keepdim)  # (..., 1): <p, g> per row
    d = grad_p - avg  # (..., n)
    return sign * (p * d if times_p else d)  # (..., n)


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        masked = softmax_rows(rng, (3, 6))
        masked[:, 4:] = 0.0  # two masked keys per row: weight 0
        masked = masked / masked.sum(-1, keepdim=True)
        return [
            Case("one row of 5 weights", (softmax_rows(rng, (5,)), randn(rng, 5))),
            Case("a (4, 4) batch: 4 rows of 4 keys", (softmax_rows(rng, (4, 4)), randn(rng, 4, 4))),
            Case("a (2, 3, 6) batch", (softmax_rows(rng, (2, 3, 6)), randn(rng, 2, 3, 6))),
            Case("rows with masked keys (weight exactly 0)", (masked, randn(rng, 3, 6))),
        ]
    onehot = torch.zeros(3, 5, dtype=torch.float64)
    onehot[0, 1] = onehot[1, 4] = onehot[2, 0] = 1.0
    return [
        Case("one-hot rows: no gradient reaches the scores", (onehot, randn(rng, 3, 5))),
        Case("one key per row (n = 1)", (torch.ones(4, 1, dtype=torch.float64), randn(rng, 4, 1))),
        Case(
            "(2, 4, 8, 8) batch, nearly saturated",
            (softmax_rows(rng, (2, 4, 8, 8), 6.0), randn(rng, 2, 4, 8, 8)),
        ),
        Case("a long row: 1000 keys", (softmax_rows(rng, (2, 1000)), randn(rng, 2, 1000))),
    ]


exercise(
    "03.6",
    softmax_backward_reference,
    target="softmax_backward",
    title="the softmax backward pass without the Jacobian",
    points=2,
    cases=_backward_cases,
    atol=1e-12,
    rtol=1e-9,
    slips={
        "no-average": dict(average="none"),
        "plain-mean": dict(average="plain"),
        "no-p-factor": dict(times_p=False),
        "flipped": dict(sign=-1),
        "whole-tensor": dict(average="tensor"),
        "no-keepdim": dict(keepdim=False),
    },
    errors={"broadcast": BROADCAST_ERROR},
)


# --------------------------------------------------------------------------- 03.7 predict, measure


def max_weight_reference(
    d_k, num_keys, scaled, trials, seed, *, power=0.5, always_scaled=False
) -> float:
    r"""The mean largest attention weight of one query over ``num_keys`` keys, q and k with
    i.i.d. :math:`N(0, 1)` components; scores :math:`q\cdot k` divided by :math:`\sqrt{d_k}`
    when ``scaled``. Averaged over ``trials`` draws."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(trials, 1, d_k))  # (T, 1, d_k)
    k = rng.normal(size=(trials, num_keys, d_k))  # (T, n, d_k)
    s = (q * k).sum(-1) / (d_k**power if scaled or always_scaled else 1.0)  # (T, n)
    return float(torch.softmax(torch.from_numpy(s), -1).amax(-1).mean())


def _max_weight_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("d_k = 256, 32 keys, unscaled, 300 trials", (256, 32, False, 300, 0)),
            Fixed("d_k = 256, 32 keys, scaled by 1/sqrt(d_k), 300 trials", (256, 32, True, 300, 1)),
            Fixed("d_k = 16, 32 keys, unscaled, 500 trials", (16, 32, False, 500, 2)),
        ]
    return [
        Case("d_k = 64, 8 keys, scaled, 1000 trials", (64, 8, True, 1000, int(rng.integers(999)))),
        Fixed("d_k = 128, 64 keys, unscaled, 300 trials", (128, 64, False, 300, 5)),
    ]


exercise(
    "03.7",
    max_weight_reference,
    target="measure_max_weight",
    title="predict, then measure: the largest weight with and without 1/sqrt(d_k)",
    points=1,
    cases=_max_weight_cases,
    atol=0.05,
    rtol=0.0,
    compare=within(0.05, relative=False),
    measures="the mean largest attention weight",
    slips={"over-d-k": dict(power=1), "always-scaled": dict(always_scaled=True)},
)
