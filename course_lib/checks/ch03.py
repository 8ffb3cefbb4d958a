"""Checks for chapter 03 (why divide by √d_k): seven exercises.

03.1 ``dot_product_variance``: Var(c · q·k) from given samples (deterministic);
03.2 ``stable_softmax``: softmax(s / τ) that survives huge scores and −inf;
03.3 ``softmax_jacobian``: diag(p) − p pᵀ, batched;
03.4 ``attention_entropy``: entropy of attention rows with 0 log 0 = 0;
03.5 ``multihead_scores``: per-head scores scaled by 1/√d_h (not 1/√d_model);
03.6 ``softmax_backward``: ∂L/∂s = p ⊙ (g − ⟨p, g⟩) per row, without building J;
03.7 ``measure_max_weight``: predict, then measure the largest weight with and without 1/√d_k.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .core import Case, Exercise, Hint, register
from .kit import BROADCAST_ERROR, softmax_rows, within

# --------------------------------------------------------------------------- 03.1


def variance_reference(q: np.ndarray, k: np.ndarray, scale: float = 1.0) -> float:
    r""":math:`\frac1N\sum_n (s_n - \bar s)^2` with :math:`s_n = c\, q_n\cdot k_n`."""
    s = scale * (q * k).sum(axis=-1)  # (N,)
    return float(np.var(s))


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
    signs = lambda shape: rng.choice([-1.0, 1.0], size=shape)
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


register(
    Exercise(
        id="03.1",
        title="measure Var(q·k)",
        points=2,
        target="dot_product_variance",
        cases=_variance_cases,
        reference=variance_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you used the unbiased estimator (divide by N − 1, torch.var's default).",
                "This exercise asks for the 1/N variance, numpy's np.var default (ddof=0).",
            ): lambda q, k, scale=1.0: float(np.var(scale * (q * k).sum(-1), ddof=1)),
            Hint(
                "you computed the variance of the products q_i·k_i themselves, not of the scores.",
                "Sum them over d_k first (axis=-1): the score is the dot product.",
            ): lambda q, k, scale=1.0: float(np.var(scale * q * k)),
            Hint(
                "you multiplied the variance by the scale.",
                "Scaling a score by c multiplies its variance by c², so scale the dot products "
                "before taking the variance.",
            ): lambda q, k, scale=1.0: float(scale * np.var((q * k).sum(-1))),
            Hint(
                "you ignored the `scale` argument.", "Multiply every score by it."
            ): lambda q, k, scale=1.0: float(np.var((q * k).sum(-1))),
            Hint(
                "you divided by √d_k yourself.",
                "Multiply by the `scale` argument instead (the caller chooses it: 1 means "
                "unscaled).",
            ): lambda q, k, scale=1.0: float(np.var((q * k).sum(-1) / math.sqrt(q.shape[-1]))),
            Hint(
                "you returned the mean of s² (the second moment), not the variance.",
                "Subtract the mean score first, (s - s.mean())², or use np.var.",
            ): lambda q, k, scale=1.0: float(np.mean((scale * (q * k).sum(-1)) ** 2)),
            Hint(
                "you took the variance over all N×N pairs q_n·k_m (q @ k.T).",
                "Pair row n of q with row n of k only: (q * k).sum(-1).",
            ): lambda q, k, scale=1.0: float(np.var(scale * (q @ k.T))),
        },
        hint=Hint(
            "check what one score is (which row of q meets which row of k), where `scale` "
            "enters, and which variance the statement asks for.",
            "One score per pair (row n of q with row n of k), then their 1/N variance. s = scale "
            "* (q * k).sum(axis=-1) gives the N scores; return float(np.var(s)).",
        ),
    )
)

# --------------------------------------------------------------------------- 03.2


def stable_softmax_reference(scores: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    r""":math:`\mathrm{softmax}(s/\tau)` over the last axis, in the input's dtype."""
    return torch.softmax(scores / temperature, dim=-1)  # (..., n)


def _naive_softmax(scores, temperature=1.0):
    e = torch.exp(scores / temperature)  # (..., n) overflows for large scores
    return e / e.sum(-1, keepdim=True)


def _global_max_softmax(scores, temperature=1.0):
    z = scores / temperature
    e = torch.exp(z - z.max())  # one max for the whole tensor
    return e / e.sum(-1, keepdim=True)


def _softmax_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    t = lambda a: torch.tensor(a, dtype=torch.float32)
    if not hidden:
        return [
            Case("3 rows of 4 scores, τ=1", (t(rng.normal(size=(3, 4))),), {"temperature": 1.0}),
            Case(
                "unscaled scores at d_k≈1024: rows near +1000, 0, −1500 and +500, τ=1",
                (
                    t(
                        rng.normal(scale=32.0, size=(4, 6))
                        + np.array([[1000.0], [0.0], [-1500.0], [500.0]])
                    ),
                ),
                {"temperature": 1.0},
            ),
            Case(
                "τ = √64 = 8 on a (2, 3, 5) batch",
                (t(rng.normal(scale=8.0, size=(2, 3, 5))),),
                {"temperature": 8.0},
            ),
        ]
    offsets = np.array([[0.0], [-2000.0], [3000.0]])
    masked = rng.normal(size=(3, 6))
    masked[:, 4:] = -np.inf  # two masked keys per row, never a fully masked row
    return [
        Case(
            "rows offset by thousands (one max per row, not per tensor)",
            (t(rng.normal(size=(3, 5)) + offsets),),
            {"temperature": 1.0},
        ),
        Case("−inf scores (masked keys) get weight 0", (t(masked),), {"temperature": 2.0}),
        Case("τ=0.1 sharpens 50 scores", (t(rng.normal(size=(1, 50))),), {"temperature": 0.1}),
    ]


register(
    Exercise(
        id="03.2",
        title="a numerically stable softmax with temperature",
        points=1,
        target="stable_softmax",
        cases=_softmax_cases,
        reference=stable_softmax_reference,
        atol=1e-6,
        rtol=1e-5,
        check_dtype=True,
        mistakes={
            # first: its values equal the reference's, so other twins would match them too
            Hint(
                "the weights are right but your result has another dtype than the scores.",
                "float64 from .double() or a float64 constant? Return the input's dtype, e.g. "
                ".to(scores.dtype): attention multiplies the weights by V in that precision.",
            ): lambda s, temperature=1.0: torch.softmax(s.double() / temperature, -1),
            Hint(
                "exp overflowed on large scores.",
                "Subtract each row's maximum (after dividing by τ) before torch.exp.",
            ): _naive_softmax,
            Hint(
                "you subtracted one maximum for the whole tensor.",
                "Use each row's own maximum (z.amax(dim=-1, keepdim=True)), or rows far below "
                "the global max underflow to 0/0.",
            ): _global_max_softmax,
            Hint(
                "you multiplied the scores by τ.", "The temperature divides: softmax(s / τ)."
            ): lambda s, temperature=1.0: torch.softmax(s * temperature, -1),
            Hint(
                "you normalised over the wrong axis.",
                "The weights of one query (the last axis) sum to 1.",
            ): lambda s, temperature=1.0: torch.softmax(s / temperature, 0),
            Hint(
                "you ignored the temperature.", "Divide the scores by it first."
            ): lambda s, temperature=1.0: torch.softmax(s, -1),
            Hint(
                "you divided by the sum of the whole tensor.",
                "Each row (one query) sums to 1: e / e.sum(dim=-1, keepdim=True).",
            ): lambda s, temperature=1.0: (lambda e: e / e.sum())(
                torch.exp(s / temperature - (s / temperature).amax(-1, keepdim=True))
            ),
        },
        hint=Hint(
            "check where the temperature enters, which axis you normalise, and what your code "
            "does with very large scores.",
            "Divide by τ, subtract each row's maximum, exponentiate, normalise each row. z = "
            "scores / temperature; z = z - z.amax(dim=-1, keepdim=True); e = z.exp(); return e / "
            "e.sum(dim=-1, keepdim=True).",
        ),
    )
)

# --------------------------------------------------------------------------- 03.3


def jacobian_reference(p: torch.Tensor) -> torch.Tensor:
    r""":math:`J = \mathrm{diag}(p) - p p^\top` for each row of ``p [..., n]``."""
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., n, n)


def _dot_not_outer(p):
    pp = p @ p if p.ndim == 1 else p.transpose(-2, -1) @ p  # () or (n, n): not per row
    return torch.diag_embed(p) - pp


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
        Case("one-hot rows: the Jacobian is all zeros", (onehot,)),
        Case("nearly saturated rows (scores of std 30)", (softmax_rows(rng, (4, 8), 30.0),)),
    ]


register(
    Exercise(
        id="03.3",
        title="the softmax Jacobian",
        points=2,
        target="softmax_jacobian",
        cases=_jacobian_cases,
        reference=jacobian_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint("you left out the diagonal term.", "J = diag(p) − p pᵀ, not −p pᵀ."): lambda p: (
                -(p[..., :, None] * p[..., None, :])
            ),
            Hint(
                "your signs are flipped.",
                "∂p_i/∂s_i = p_i(1 − p_i) is positive, so J = diag(p) − p pᵀ.",
            ): lambda p: p[..., :, None] * p[..., None, :] - torch.diag_embed(p),
            Hint(
                "you kept only the diagonal p_i(1 − p_i).",
                "The off-diagonal entries −p_i p_j matter too (each score's change moves every "
                "weight).",
            ): lambda p: torch.diag_embed(p * (1 - p)),
            Hint(
                "you subtracted p_i² twice on the diagonal.",
                "diag(p) − p pᵀ already gives p_i − p_i² = p_i(1 − p_i) there, so start from "
                "diag(p), not diag(p(1 − p)).",
            ): lambda p: torch.diag_embed(p * (1 - p)) - p[..., :, None] * p[..., None, :],
            Hint(
                "your p pᵀ is not one outer product per row.",
                "For a 1-D p, p @ p.T is the number Σ p_i², and for a batch, p.T @ p sums over "
                "the rows. Use p[..., :, None] * p[..., None, :], shape (..., n, n).",
            ): _dot_not_outer,
            Hint(
                "your outer product is wrong: p² broadcast along a row.",
                "(p pᵀ)_ij = p_i p_j needs p[..., :, None] * p[..., None, :] (a column times a "
                "row).",
            ): lambda p: torch.diag_embed(p) - (p * p)[..., :, None],
        },
        hint=Hint(
            "work out the Jacobian of a softmax over 3 entries by hand (its diagonal and "
            "off-diagonal entries) and compare it with one (n, n) block of yours.",
            "Two pieces: diag(p) for every row, minus the outer product p pᵀ of every row. "
            "torch.diag_embed(p) builds diag(p) for every row; the outer product is p[..., :, "
            "None] * p[..., None, :]. The result has shape (..., n, n).",
        ),
    )
)

# --------------------------------------------------------------------------- 03.4


def entropy_reference(weights: torch.Tensor) -> torch.Tensor:
    r""":math:`H = -\sum_j w_j \ln w_j` over the last axis with :math:`0\ln 0 = 0`."""
    logw = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))  # (..., n)
    return -(weights * logw).sum(-1)  # (...)


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
            Case("uniform over 8 keys: log 8", (uniform,)),
            Case("4 attention rows over 6 keys", (softmax_rows(rng, (4, 6)),)),
            Case("causal rows with exact zeros (0 log 0 = 0)", (causal,)),
        ]
    return [
        Case("causal rows, another draw", (causal,)),
        Case("one-hot rows: entropy 0", (torch.eye(4, dtype=torch.float64),)),
        Case("a (2, 3, 10) batch", (softmax_rows(rng, (2, 3, 10), 3.0),)),
    ]


register(
    Exercise(
        id="03.4",
        title="the entropy of attention rows",
        points=1,
        target="attention_entropy",
        cases=_entropy_cases,
        reference=entropy_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you used log base 2 (bits).",
                "This exercise measures entropy in nats: torch.log.",
            ): lambda w: -(w * torch.log2(w.clamp_min(1e-300))).sum(-1),
            Hint("you forgot the minus sign.", "Entropy is −Σ w log w ≥ 0."): lambda w: (
                w * torch.log(w.clamp_min(1e-300))
            ).sum(-1),
            Hint(
                "0 · log 0 gave NaN for the zero weights (masked keys).",
                "Use torch.where(w > 0, w.log(), 0) so that they contribute 0.",
            ): lambda w: -(w * torch.log(w)).sum(-1),
            Hint(
                "you summed over the wrong axis.",
                "One entropy per row, summing over the last axis.",
            ): lambda w: -(w * torch.log(w.clamp_min(1e-300))).sum(0),
            Hint(
                "you averaged over the keys (mean) instead of summing.",
                "H = −Σ_j w_j log w_j.",
            ): lambda w: -(w * torch.log(w.clamp_min(1e-300))).mean(-1),
        },
        hint=Hint(
            "one entropy per row, in nats, with 0 log 0 counted as 0.",
            "H = -(w * log w).sum(-1), with the terms where w == 0 set to 0.",
        ),
    )
)

# --------------------------------------------------------------------------- 03.5


def multihead_reference(q: torch.Tensor, k: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""Per-head scores :math:`Q_h K_h^\top/\sqrt{d_h}`: ``[B, H, N, N]``."""
    b, n, d_model = q.shape
    head_dim = d_model // num_heads
    qh = q.view(b, n, num_heads, head_dim).transpose(1, 2)  # (B, H, N, d_h)
    kh = k.view(b, n, num_heads, head_dim).transpose(1, 2)  # (B, H, N, d_h)
    return qh @ kh.transpose(-2, -1) / math.sqrt(head_dim)  # (B, H, N, N)


def _dmodel_bug(q, k, num_heads):
    return (
        multihead_reference(q, k, num_heads)
        * math.sqrt(q.shape[-1] // num_heads)
        / math.sqrt(q.shape[-1])
    )


def _view_bug(q, k, num_heads):
    b, n, d_model = q.shape
    head_dim = d_model // num_heads
    qh = q.reshape(b, num_heads, n, head_dim)  # wrong: mixes tokens and features
    kh = k.reshape(b, num_heads, n, head_dim)
    return qh @ kh.transpose(-2, -1) / math.sqrt(head_dim)


def _interleaved_split(q, k, num_heads):
    b, n, d_model = q.shape
    head_dim = d_model // num_heads
    qh = q.view(b, n, head_dim, num_heads).permute(0, 3, 1, 2)  # (B, H, N, d_h) strided heads
    kh = k.view(b, n, head_dim, num_heads).permute(0, 3, 1, 2)  # (B, H, N, d_h)
    return qh @ kh.transpose(-2, -1) / math.sqrt(head_dim)  # (B, H, N, N)


def _mh_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    t = lambda shape: torch.tensor(rng.normal(size=shape))
    if not hidden:
        return [
            Case("B=1, N=4, d_model=8, H=2", (t((1, 4, 8)), t((1, 4, 8)), 2)),
            Case("B=2, N=5, d_model=32, H=4", (t((2, 5, 32)), t((2, 5, 32)), 4)),
        ]
    return [
        Case("one head (H=1): d_h = d_model", (t((2, 3, 6)), t((2, 3, 6)), 1)),
        Case("B=1, N=6, d_model=64, H=8", (t((1, 6, 64)), t((1, 6, 64)), 8)),
        Case("H = d_model (d_h = 1)", (t((1, 3, 4)), t((1, 3, 4)), 4)),
    ]


register(
    Exercise(
        id="03.5",
        title="multi-head scores with the right scale",
        points=2,
        target="multihead_scores",
        cases=_mh_cases,
        reference=multihead_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you divided by √d_model (your scores are √H times too small).",
                "Each head's dot product sums only d_h = d_model / H terms, so divide by √d_h.",
            ): _dmodel_bug,
            Hint(
                "you did not scale the scores at all.", "Divide by √d_h."
            ): lambda q, k, num_heads: (
                multihead_reference(q, k, num_heads) * math.sqrt(q.shape[-1] // num_heads)
            ),
            Hint(
                "you divided by d_h instead of √d_h.",
                "That shrinks the scores by another √d_h (μP does this on purpose; the "
                "exercise asks for the standard 1/√d_h).",
            ): lambda q, k, num_heads: (
                multihead_reference(q, k, num_heads) / math.sqrt(q.shape[-1] // num_heads)
            ),
            Hint(
                "your scores are transposed.",
                "Row i is query i, so S = Q_h K_hᵀ (q_h @ k_h.transpose(-2, -1)), not K_h Q_hᵀ.",
            ): lambda q, k, num_heads: multihead_reference(q, k, num_heads).transpose(-2, -1),
            Hint(
                "you reshaped straight to (B, H, N, d_h), which mixes tokens and features.",
                "View as (B, N, H, d_h) first, then transpose(1, 2).",
            ): _view_bug,
            Hint(
                "you split the features as (d_h, H): head h got features h, h+H, h+2H, ...",
                "Head h owns the contiguous slice h·d_h ... (h+1)·d_h − 1: view as "
                "(B, N, H, d_h), not (B, N, d_h, H).",
            ): _interleaved_split,
        },
        hint=Hint(
            "check which features belong to head h, and the width each head's scores are scaled "
            "by.",
            "Split q and k into heads, then one score matrix per head, scaled by 1/√d_h. d_h = "
            "d_model // H; q.view(B, N, H, d_h).transpose(1, 2) gives (B, H, N, d_h); then q_h @ "
            "k_h.transpose(-2, -1) / sqrt(d_h).",
        ),
    )
)

# --------------------------------------------------------------------------- 03.6


def softmax_backward_reference(p: torch.Tensor, grad_p: torch.Tensor) -> torch.Tensor:
    r""":math:`\partial L/\partial s = J^\top g = p \odot (g - \langle p, g\rangle)` per row."""
    return p * (grad_p - (p * grad_p).sum(-1, keepdim=True))  # (..., n)


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    t = lambda shape: torch.tensor(rng.normal(size=shape))
    if not hidden:
        masked = softmax_rows(rng, (3, 6))
        masked[:, 4:] = 0.0  # two masked keys per row: weight 0
        masked = masked / masked.sum(-1, keepdim=True)
        return [
            Case("one row of 5 weights", (softmax_rows(rng, (5,)), t((5,)))),
            Case("a (4, 4) batch: 4 rows of 4 keys", (softmax_rows(rng, (4, 4)), t((4, 4)))),
            Case("a (2, 3, 6) batch", (softmax_rows(rng, (2, 3, 6)), t((2, 3, 6)))),
            Case("rows with masked keys (weight exactly 0)", (masked, t((3, 6)))),
        ]
    onehot = torch.zeros(3, 5, dtype=torch.float64)
    onehot[0, 1] = onehot[1, 4] = onehot[2, 0] = 1.0
    return [
        Case("one-hot rows: no gradient reaches the scores", (onehot, t((3, 5)))),
        Case("one key per row (n = 1)", (torch.ones(4, 1, dtype=torch.float64), t((4, 1)))),
        Case(
            "(2, 4, 8, 8) batch, nearly saturated",
            (softmax_rows(rng, (2, 4, 8, 8), 6.0), t((2, 4, 8, 8))),
        ),
        Case("a long row: 1000 keys", (softmax_rows(rng, (2, 1000)), t((2, 1000)))),
    ]


register(
    Exercise(
        id="03.6",
        title="the softmax backward pass without the Jacobian",
        points=2,
        target="softmax_backward",
        cases=_backward_cases,
        reference=softmax_backward_reference,
        atol=1e-12,
        rtol=1e-9,
        mistakes={
            Hint(
                "your gradient's rows do not sum to 0 (shifting every score by the same "
                "amount changes nothing, so they must).",
                "You multiplied p by g and stopped: ∂L/∂s_j = p_j (g_j − Σ_i p_i g_i); "
                "subtract the p-weighted average of g first.",
            ): lambda p, g: p * g,
            Hint(
                "you subtracted the plain average of g (or its sum), not its p-weighted average.",
                "The term is Σ_i p_i g_i (the weights p_i, from the −p pᵀ part of J), not "
                "mean(g) or Σ_i g_i.",
            ): lambda p, g: p * (g - g.mean(-1, keepdim=True)),
            Hint(
                "you left out the factor p_j in front.",
                "∂L/∂s_j = p_j (g_j − Σ_i p_i g_i): the bracket is multiplied by p_j, which is "
                "why a saturated softmax (p_j ≈ 0 or 1) passes almost nothing.",
            ): lambda p, g: g - (p * g).sum(-1, keepdim=True),
            Hint(
                "your signs are flipped.",
                "∂L/∂s_j = p_j (g_j − Σ_i p_i g_i), not p_j (Σ_i p_i g_i − g_j).",
            ): lambda p, g: -softmax_backward_reference(p, g),
            Hint(
                "your sum Σ_i p_i g_i runs over the wrong axis (or over the whole tensor).",
                "One sum per row, over the last axis, kept for broadcasting: "
                "(p * g).sum(dim=-1, keepdim=True).",
            ): lambda p, g: p * (g - (p * g).sum()),
            Hint(
                "your row sums were broadcast along the wrong axis (keepdim missing).",
                "(p * g).sum(-1) has shape (...,) and lines up with the *last* axis of p: "
                "keep the summed axis with keepdim=True, shape (..., 1).",
            ): lambda p, g: p * (g - (p * g).sum(-1)),
        },
        errors={
            BROADCAST_ERROR: Hint(
                "your row sums could not be broadcast against p (keepdim missing?).",
                "(p * g).sum(-1) drops the last axis; keep it with keepdim=True so that it "
                "has shape (..., 1) and lines up with each row.",
            ),
        },
        hint=Hint(
            "check a row of your result: adding the same amount to every score changes nothing, "
            "so each row of the gradient must sum to 0.",
            "∂L/∂s = Jᵀ g with J = diag(p) − p pᵀ: multiply it out instead of building J. "
            "diag(p) g = p * g and p pᵀ g = p (pᵀ g): ∂L/∂s = p * (g - (p * g).sum(-1, "
            "keepdim=True)).",
        ),
    )
)


# --------------------------------------------------------------------------- 03.7 predict, measure


def max_weight_reference(d_k: int, num_keys: int, scaled: bool, trials: int, seed: int) -> float:
    r"""The mean largest attention weight of one query over ``num_keys`` keys, q and k with
    i.i.d. :math:`N(0, 1)` components; scores :math:`q\cdot k` divided by :math:`\sqrt{d_k}`
    when ``scaled``. Averaged over ``trials`` draws."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(trials, 1, d_k))  # (T, 1, d_k)
    k = rng.normal(size=(trials, num_keys, d_k))  # (T, n, d_k)
    s = (q * k).sum(-1) / (math.sqrt(d_k) if scaled else 1.0)  # (T, n)
    return float(torch.softmax(torch.from_numpy(s), -1).amax(-1).mean())


def _max_weight_scaled_by(d_k, num_keys, trials, seed, divisor):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(trials, 1, d_k))
    k = rng.normal(size=(trials, num_keys, d_k))
    s = (q * k).sum(-1) / divisor
    return float(torch.softmax(torch.from_numpy(s), -1).amax(-1).mean())


def _max_weight_always_scaled(d_k, num_keys, scaled, trials, seed):
    return max_weight_reference(d_k, num_keys, True, trials, seed)


def _max_weight_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("d_k = 256, 32 keys, unscaled, 300 trials", (256, 32, False, 300, 0)),
            Case("d_k = 256, 32 keys, scaled by 1/sqrt(d_k), 300 trials", (256, 32, True, 300, 1)),
            Case("d_k = 16, 32 keys, unscaled, 500 trials", (16, 32, False, 500, 2)),
        ]
    return [
        Case("d_k = 64, 8 keys, scaled, 1000 trials", (64, 8, True, 1000, int(rng.integers(999)))),
        Case("d_k = 128, 64 keys, unscaled, 300 trials", (128, 64, False, 300, 5)),
    ]


register(
    Exercise(
        id="03.7",
        title="predict, then measure: the largest weight with and without 1/sqrt(d_k)",
        points=1,
        target="measure_max_weight",
        cases=_max_weight_cases,
        reference=max_weight_reference,
        atol=0.05,
        rtol=0.0,
        compare=within(0.05, relative=False),
        measures="the mean largest attention weight",
        mistakes={
            Hint(
                "you divided the scores by d_k, not sqrt(d_k): they are too small, and the "
                "weights close to uniform (1 / num_keys).",
                "Var(q . k) = d_k, so the standard deviation is sqrt(d_k): divide by that.",
            ): lambda d_k, n, scaled, trials, seed: _max_weight_scaled_by(
                d_k, n, trials, seed, d_k if scaled else 1.0
            ),
            Hint(
                "you scaled the scores even when `scaled` is False.",
                "Divide by sqrt(d_k) only when scaled is True: the unscaled case is the "
                "experiment's point.",
            ): _max_weight_always_scaled,
        },
        hint=Hint(
            "check which weight you keep per trial (the largest), whether the scores are scaled "
            "in both settings of `scaled`, and what you average over.",
            "Draw one query and num_keys keys per trial, softmax the scores, keep the largest "
            "weight, average over the trials. s = (q * k).sum(-1) (divided by sqrt(d_k) when "
            "scaled), shapes (trials, 1, d_k) and (trials, num_keys, d_k); return softmax(s, "
            "-1).max(-1).mean().",
        ),
    )
)
