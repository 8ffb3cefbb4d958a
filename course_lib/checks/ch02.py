"""Checks for chapter 02 (Q, K, V and scaled dot-product attention): five exercises.

02.1 attention in numpy · 02.2 the causal mask · 02.3 a padding mask from lengths ·
02.4 a NaN-safe masked softmax · 02.5 from embeddings to attention weights.
Each wrong twin in ``mistakes`` reproduces a common slip and becomes a precise hint.
"""

from __future__ import annotations

import numpy as np

from ..attention import numpy_attention, numpy_causal_mask, numpy_masked_softmax
from .core import Case, Exercise, register


def _plain_softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# --------------------------------------------------------------------------- 02.1


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray):
    r"""``(softmax(q k^T / \sqrt{d_k}) v, weights)`` for ``q [..., Nq, d_k]``,
    ``k [..., Nk, d_k]``, ``v [..., Nk, d_v]``."""
    return numpy_attention(q, k, v)


def _attention_wrong(scale_fn=None, axis=-1, post=False):
    def wrong(q, k, v):
        d_k = q.shape[-1]
        s = q @ np.swapaxes(k, -1, -2)
        s = s * (scale_fn(d_k) if scale_fn else 1.0)
        w = _plain_softmax(s, axis=axis)
        if post:
            w = _plain_softmax(q @ np.swapaxes(k, -1, -2), axis=-1) / np.sqrt(d_k)
        return w @ v, w

    return wrong


def _attention_swapped_outputs(q, k, v):
    out, w = numpy_attention(q, k, v)
    return w, out


def _attention_k_q(q, k, v):
    w = _plain_softmax(k @ np.swapaxes(q, -1, -2) / np.sqrt(q.shape[-1]))  # (..., Nk, Nq)
    return w @ v, w  # only runs when Nq == Nk


def _attention_scaled_by_d_v(q, k, v):
    w = _plain_softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(v.shape[-1]))
    return w @ v, w


def _attention_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def qkv(batch, n_q, n_k, d_k, d_v):
        return (
            rng.normal(size=(*batch, n_q, d_k)),
            rng.normal(size=(*batch, n_k, d_k)),
            rng.normal(size=(*batch, n_k, d_v)),
        )

    if not hidden:
        return [
            Case("one sequence: 4 tokens, d_k = 8, d_v = 6", qkv((), 4, 4, 8, 6)),
            Case("3 queries, 5 keys, d_k = 4, d_v = 2 (Nq ≠ Nk)", qkv((), 3, 5, 4, 2)),
            Case(
                "a batch of 2 sequences: q (2, 4, 8), k (2, 4, 8), v (2, 4, 3)",
                qkv((2,), 4, 4, 8, 3),
            ),
        ]
    return [
        Case("a batch (2, 3) of 6 queries and 7 keys, d_k = 16", qkv((2, 3), 6, 7, 16, 5)),
        Case("one query, one key", qkv((), 1, 1, 3, 3)),
    ]


register(
    Exercise(
        id="02.1",
        title="scaled dot-product attention in numpy",
        points=2,
        target="attention",
        cases=_attention_cases,
        reference=attention_reference,
        atol=1e-8,
        rtol=1e-6,
        mistakes={
            "you forgot to divide the scores by sqrt(d_k).": _attention_wrong(),
            "you divided by d_k instead of sqrt(d_k).": _attention_wrong(lambda d: 1.0 / d),
            "your softmax normalises over the queries (axis -2): each *row* (one query, all "
            "keys) must sum to 1, so use axis=-1.": _attention_wrong(lambda d: d**-0.5, axis=-2),
            "you scaled the weights after the softmax: the 1/sqrt(d_k) goes on the scores, "
            "inside the softmax.": _attention_wrong(post=True),
            "you computed K Q^T instead of Q K^T: row i of the scores must be query i against "
            "every key, q @ swapaxes(k, -1, -2).": _attention_k_q,
            "you returned (weights, output): return the tuple in the order (output, weights).": _attention_swapped_outputs,
            "you divided by sqrt(d_v) (the width of v) instead of sqrt(d_k) (the width of q "
            "and k, q.shape[-1]).": _attention_scaled_by_d_v,
        },
        hint="scores = q @ swapaxes(k, -1, -2) / sqrt(d_k); weights = softmax over the last "
        "axis; output = weights @ v; return (output, weights).",
    )
)


# --------------------------------------------------------------------------- 02.2


def causal_mask_reference(n_q: int, n_k: int) -> np.ndarray:
    """Boolean ``[n_q, n_k]``, True where key ``j <= i`` (top-left aligned)."""
    return numpy_causal_mask(n_q, n_k)


def _causal_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("a square 4 × 4 mask", (4, 4)), Case("3 queries, 5 keys", (3, 5))]
    n = int(rng.integers(6, 10))
    return [
        Case(f"a square {n} × {n} mask", (n, n)),
        Case("5 queries, 2 keys", (5, 2)),
        Case("a single token", (1, 1)),
    ]


register(
    Exercise(
        id="02.2",
        title="the causal mask",
        points=1,
        target="causal_mask",
        cases=_causal_cases,
        reference=causal_mask_reference,
        mistakes={
            "your mask is upside down: True must mean 'may attend', i.e. key j ≤ query i "
            "(the lower triangle, np.tril), not the future.": lambda n_q, n_k: np.triu(
                np.ones((n_q, n_k), dtype=bool)
            ),
            "you masked the diagonal too: a token may attend to itself (j ≤ i, not j < i).": lambda n_q, n_k: (
                np.tril(np.ones((n_q, n_k), dtype=bool), k=-1)
            ),
            "you aligned the mask bottom-right; torch's is_causal (and ours) aligns it top-left: "
            "query 0 sees key 0 only, whatever n_k is.": lambda n_q, n_k: np.tril(
                np.ones((n_q, n_k), dtype=bool), k=n_k - n_q
            ),
            "your mask has the opposite polarity: it is True on the future keys (the ones to "
            "hide). In our convention (and torch SDPA's) True = may attend, so negate it: "
            "True where j ≤ i.": lambda n_q, n_k: np.triu(np.ones((n_q, n_k), dtype=bool), k=1),
            "your mask holds 0/1 numbers (np.tri and np.ones give floats); make it boolean, "
            "e.g. np.ones(..., dtype=bool), or .astype(bool).": lambda n_q, n_k: np.tri(n_q, n_k),
        },
        hint="np.tril of an all-True (n_q, n_k) boolean array.",
    )
)


# --------------------------------------------------------------------------- 02.3


def padding_mask_reference(lengths: np.ndarray, n: int) -> np.ndarray:
    """Boolean ``[B, n]``: True at positions ``j < lengths[b]`` (real tokens)."""
    return np.arange(n)[None, :] < np.asarray(lengths)[:, None]  # (B, n)


def _padding_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("lengths [3, 1, 4], n = 4", (np.array([3, 1, 4]), 4)),
            Case("lengths [2, 5], n = 6", (np.array([2, 5]), 6)),
        ]
    b = int(rng.integers(4, 8))
    n = int(rng.integers(5, 9))
    return [
        Case(f"{b} random lengths, n = {n}", (rng.integers(1, n + 1, size=b), n)),
        Case("a length-0 sequence among others", (np.array([0, 3]), 3)),
    ]


register(
    Exercise(
        id="02.3",
        title="a padding mask from lengths",
        points=1,
        target="padding_mask",
        cases=_padding_cases,
        reference=padding_mask_reference,
        mistakes={
            "off by one: position j is a real token when j < length, not j ≤ length "
            "(positions start at 0).": lambda lengths, n: (
                np.arange(n)[None, :] <= np.asarray(lengths)[:, None]
            ),
            "your mask is inverted: True must mark the real tokens (may attend), False the "
            "padding.": lambda lengths, n: np.arange(n)[None, :] >= np.asarray(lengths)[:, None],
            "your mask is transposed, (n, B): the result has one row per sequence, (B, n); "
            "compare arange(n)[None, :] with lengths[:, None].": lambda lengths, n: (
                np.arange(n)[:, None] < np.asarray(lengths)[None, :]
            ),
        },
        hint="np.arange(n)[None, :] < lengths[:, None] broadcasts to (B, n).",
    )
)


# --------------------------------------------------------------------------- 02.4


def masked_softmax_reference(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of the kept entries; fully masked rows give zeros."""
    return numpy_masked_softmax(scores, mask)


def _naive_masked(scores, mask):
    with np.errstate(invalid="ignore"):
        return _plain_softmax(np.where(mask, scores, -np.inf))


def _big_negative_masked(scores, mask):
    return _plain_softmax(np.where(mask, scores, -1e9))


def _multiply_masked(scores, mask):
    return _plain_softmax(scores) * mask


def _zero_filled(scores, mask):
    return _plain_softmax(np.where(mask, scores, 0.0))


def _inverted_masked(scores, mask):
    return numpy_masked_softmax(scores, ~np.asarray(mask, dtype=bool))


def _max_over_masked_too(scores, mask):
    e = np.exp(scores - scores.max(axis=-1, keepdims=True)) * mask
    d = e.sum(axis=-1, keepdims=True)
    return np.where(d > 0, e / np.where(d > 0, d, 1.0), 0.0)


def _no_max_masked(scores, mask):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.where(mask, np.exp(scores), 0.0)
        d = e.sum(-1, keepdims=True)
        return np.where(d > 0, e / np.where(d > 0, d, 1.0), 0.0)


def _masked_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        s = rng.normal(size=(3, 4))
        m = np.array(
            [[True, True, False, True], [True, False, False, False], [True, True, True, True]]
        )
        s2 = rng.normal(size=(3, 3))
        m2 = np.array([[True, False, True], [False, False, False], [True, True, False]])
        return [
            Case("3 rows, some keys masked", (s, m)),
            Case("a row with every key masked (the NaN trap)", (s2, m2)),
            Case(
                "large scores (1000, 1002, 1001, masked 4000): exp must not overflow",
                (
                    np.array([[1000.0, 1002.0, 1001.0, 4000.0], [2.0, -1.0, 0.5, 1.0]]),
                    np.array([[True, True, True, False], [True, True, False, True]]),
                ),
            ),
        ]
    s = rng.normal(scale=3.0, size=(2, 4, 6))
    m = rng.random((2, 4, 6)) > 0.4
    m[0, 2] = False
    return [
        Case("a (2, 4, 6) batch with a random mask and an empty row", (s, m)),
        Case(
            "large scores (1000, 1001, …): subtract the max of the kept entries",
            (np.array([[1000.0, 1001.0, 1002.0, 5000.0]]), np.array([[True, True, True, False]])),
        ),
        Case(
            "a mask that broadcasts: (1, 5) against (3, 5) scores",
            (rng.normal(size=(3, 5)), np.array([[True, True, False, True, False]])),
        ),
    ]


register(
    Exercise(
        id="02.4",
        title="a NaN-safe masked softmax",
        points=2,
        target="masked_softmax",
        cases=_masked_cases,
        reference=masked_softmax_reference,
        atol=1e-8,
        rtol=1e-6,
        mistakes={
            "a fully masked row spreads its weight evenly over masked keys: that is what "
            "filling with -1e9 does. Such a row must give all zeros.": _big_negative_masked,
            "you subtracted a max taken over *all* entries, masked ones included: one huge "
            "masked score makes every kept exp underflow to 0. Take the max over "
            "the kept entries only (fill the masked ones with -inf first).": _max_over_masked_too,
            "you multiplied the softmax by the mask without renormalising: the kept weights "
            "of a row must sum to 1.": _multiply_masked,
            "you set masked scores to 0 (scores * mask?): e^0 = 1, so masked keys still get "
            "weight. Set them to -inf, whose exp is exactly 0.": _zero_filled,
            "your mask polarity is inverted: True = keep (may attend), False = masked. You "
            "kept the masked entries and dropped the others.": _inverted_masked,
            "exp overflowed: subtract each row's max over the *kept* entries before np.exp.": _no_max_masked,
        },
        hint="fill masked scores with -inf, subtract the row max (use 0 where the max is -inf), "
        "exponentiate, and divide by the row sum only where it is > 0 (else give 0).",
    )
)


# --------------------------------------------------------------------------- 02.5


def attention_weights_reference(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray) -> np.ndarray:
    r"""Weights ``[N, N]`` = softmax((x W_Q)(x W_K)^T / \sqrt{d_k}) for ``x [N, d_model]``,
    ``W_Q, W_K [d_model, d_k]``."""
    q = x @ w_q  # (N, d_k)
    k = x @ w_k  # (N, d_k)
    return _plain_softmax(q @ k.T / np.sqrt(w_q.shape[1]))  # (N, N)


def _weights_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def make(n, d_model, d_k):
        return (
            rng.normal(size=(n, d_model)),
            rng.normal(size=(d_model, d_k)) / np.sqrt(d_model),
            rng.normal(size=(d_model, d_k)) / np.sqrt(d_model),
        )

    if not hidden:
        return [
            Case("5 tokens, d_model = 8, d_k = 4", make(5, 8, 4)),
            Case("3 tokens, d_model = 6, d_k = 2", make(3, 6, 2)),
        ]
    return [
        Case("9 tokens, d_model = 16, d_k = 4", make(9, 16, 4)),
        Case("2 tokens, d_model = 3, d_k = 5 (d_k > d_model)", make(2, 3, 5)),
    ]


register(
    Exercise(
        id="02.5",
        title="from embeddings to attention weights",
        points=2,
        target="attention_weights",
        cases=_weights_cases,
        reference=attention_weights_reference,
        atol=1e-8,
        rtol=1e-6,
        mistakes={
            "you scaled by sqrt(d_model) instead of sqrt(d_k): the dot products live in the "
            "d_k-dimensional query/key space (w_q.shape[1]).": lambda x, w_q, w_k: _plain_softmax(
                (x @ w_q) @ (x @ w_k).T / np.sqrt(x.shape[1])
            ),
            "you used W_Q for the keys too: keys are x @ w_k.": lambda x, w_q, w_k: _plain_softmax(
                (x @ w_q) @ (x @ w_q).T / np.sqrt(w_q.shape[1])
            ),
            "you computed K Q^T instead of Q K^T: row i must hold query i's weights over the "
            "keys (the transpose of what you have before the softmax).": lambda x, w_q, w_k: (
                _plain_softmax((x @ w_k) @ (x @ w_q).T / np.sqrt(w_q.shape[1]))
            ),
            "your softmax normalises columns (axis 0); each row must sum to 1.": lambda x, w_q, w_k: (
                _plain_softmax((x @ w_q) @ (x @ w_k).T / np.sqrt(w_q.shape[1]), axis=0)
            ),
            "you returned the scaled scores: the weights are their softmax over each row.": lambda x, w_q, w_k: (
                (x @ w_q) @ (x @ w_k).T / np.sqrt(w_q.shape[1])
            ),
            "you forgot to divide the scores by sqrt(d_k).": lambda x, w_q, w_k: _plain_softmax(
                (x @ w_q) @ (x @ w_k).T
            ),
        },
        hint="q = x @ w_q; k = x @ w_k; weights = softmax(q @ k.T / sqrt(d_k)) over the last axis.",
    )
)
