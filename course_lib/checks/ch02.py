"""Checks for chapter 02 (Q, K, V and scaled dot-product attention): seven exercises.

02.1 attention in numpy · 02.2 the causal mask · 02.3 a padding mask from lengths ·
02.4 a NaN-safe masked softmax · 02.5 from embeddings to attention weights ·
02.6 attention over a padded batch of token ids (causal or not), which the lecture does not
show: the mask comes from the tokens, padding may sit on the left, and a (B, Nk) mask that
broadcasts silently when B equals N is a trap the checks spring · 02.7 predict, then measure:
attention without projections (a token's weight on itself).
Each wrong twin in ``mistakes`` reproduces a common slip and becomes a precise hint; every
hint has two tiers (a nudge, then the fix when the same check fails again).
"""

from __future__ import annotations

import numpy as np

from ..attention import numpy_attention, numpy_causal_mask, numpy_masked_softmax
from .core import Case, Exercise, Hint, register
from .kit import within


def _plain_softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _overflowing_softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """The softmax without the max subtraction: exp(1000) is inf, inf / inf is NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(s)
        return e / e.sum(axis=axis, keepdims=True)


_OVERFLOW = Hint(
    "exp overflowed to inf on large scores, and inf / inf is NaN.",
    "Subtract each row's max before np.exp: s - s.max(axis=-1, keepdims=True). The factor "
    "e^(-max) cancels in the ratio, so the weights do not change.",
)


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


def _attention_k_dot_T(q, k, v):
    w = _plain_softmax(q @ k.T / np.sqrt(q.shape[-1]))  # k.T reverses every axis of a batch
    return w @ v, w


def _attention_no_max(q, k, v):
    w = _overflowing_softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]))
    return w @ v, w


def _attention_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def qkv(batch_shape, n_q, n_k, d_k, d_v, q_scale=1.0):
        return (
            rng.normal(size=(*batch_shape, n_q, d_k)) * q_scale,
            rng.normal(size=(*batch_shape, n_k, d_k)),
            rng.normal(size=(*batch_shape, n_k, d_v)),
        )

    if not hidden:
        return [
            Case("one sequence: 4 tokens, d_k = 8, d_v = 6", qkv((), 4, 4, 8, 6)),
            Case("3 queries, 5 keys, d_k = 4, d_v = 2 (Nq ≠ Nk)", qkv((), 3, 5, 4, 2)),
            Case(
                "a batch of 2 sequences: q (2, 4, 8), k (2, 4, 8), v (2, 4, 3)",
                qkv((2,), 4, 4, 8, 3),
            ),
            Case(
                "large scores (queries × 500: scores in the thousands, exp overflows)",
                qkv((), 3, 4, 4, 2, q_scale=500.0),
            ),
        ]
    return [
        Case("a batch (2, 3) of 6 queries and 7 keys, d_k = 16", qkv((2, 3), 6, 7, 16, 5)),
        Case("one query, one key", qkv((), 1, 1, 3, 3)),
        Case("a batch of large scores (queries × 1000)", qkv((2,), 5, 6, 8, 4, q_scale=1e3)),
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
        outputs=("output", "weights"),
        mistakes={
            Hint(
                "k.T reverses ALL the axes of a batched array, (B, Nk, d_k) -> (d_k, Nk, B), "
                "so the product with q no longer lines up.",
                "Swap only the last two axes: np.swapaxes(k, -1, -2) (or k.transpose(0, 2, 1) "
                "for exactly 3 axes).",
            ): _attention_k_dot_T,
            Hint(
                "your scores are too large by a factor sqrt(d_k).",
                "Divide the scores by sqrt(d_k) = sqrt(q.shape[-1]) before the softmax.",
            ): _attention_wrong(),
            Hint(
                "your scores are too small by a factor sqrt(d_k).",
                "You divided by d_k; divide by sqrt(d_k).",
            ): _attention_wrong(lambda d: 1.0 / d),
            Hint(
                "your columns sum to 1, not your rows.",
                "Each row (one query, all keys) must sum to 1: the softmax runs over the last "
                "axis, axis=-1.",
            ): _attention_wrong(lambda d: d**-0.5, axis=-2),
            Hint(
                "your weights do not sum to 1: the scale was applied after the softmax.",
                "The 1/sqrt(d_k) goes on the scores, inside the softmax.",
            ): _attention_wrong(post=True),
            Hint(
                "your weight matrix is the transpose of the expected one.",
                "Row i of the scores must be query i against every key: q @ swapaxes(k, -1, "
                "-2), not k @ swapaxes(q, -1, -2).",
            ): _attention_k_q,
            Hint(
                "you returned (weights, output).",
                "Return the tuple in the order (output, weights).",
            ): _attention_swapped_outputs,
            Hint(
                "your scale uses the wrong width.",
                "Divide by sqrt(d_k), the width of q and k (q.shape[-1]), not of v.",
            ): _attention_scaled_by_d_v,
            _OVERFLOW: _attention_no_max,
        },
        hint=Hint(
            "check each stage against the statement's formula: which width you scale by, which "
            "axis the softmax normalises, and the order of the two results you return.",
            "Scores, scale, softmax over the keys, weighted sum of the values. scores = q @ "
            "np.swapaxes(k, -1, -2) / np.sqrt(d_k); subtract each row's max; weights = exp / row "
            "sum (axis=-1); output = weights @ v; return (output, weights).",
        ),
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
            Hint(
                "your mask is upside down: it lets each query see the future.",
                "True must mean 'may attend', i.e. key j ≤ query i: the lower triangle, "
                "np.tril, not np.triu.",
            ): lambda n_q, n_k: np.triu(np.ones((n_q, n_k), dtype=bool)),
            Hint(
                "your diagonal is False: no token may attend to itself.",
                "A token may see itself: j ≤ i, not j < i (np.tril with k=0).",
            ): lambda n_q, n_k: np.tril(np.ones((n_q, n_k), dtype=bool), k=-1),
            Hint(
                "you aligned the mask bottom-right (the last query sees every key).",
                "torch's is_causal (and ours) aligns it top-left: query 0 sees key 0 only, "
                "whatever n_k is: np.tril(..., k=0).",
            ): lambda n_q, n_k: np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q),
            Hint(
                "your mask is True on the keys to hide: the opposite polarity.",
                "In our convention (and torch SDPA's) True = may attend: True where j ≤ i.",
            ): lambda n_q, n_k: np.triu(np.ones((n_q, n_k), dtype=bool), k=1),
            Hint(
                "your mask holds 0/1 numbers, not booleans.",
                "np.tri and np.ones give floats; build it with np.ones(..., dtype=bool) or "
                "add .astype(bool).",
            ): lambda n_q, n_k: np.tri(n_q, n_k),
        },
        hint=Hint(
            "check one row of your mask: which keys may query i see, is True the value for 'may "
            "attend', and is the dtype bool?",
            "Lower triangle of an all-True (n_q, n_k) array. np.tril(np.ones((n_q, n_k), "
            "dtype=bool)).",
        ),
    )
)


# --------------------------------------------------------------------------- 02.3


def padding_mask_reference(lengths: np.ndarray, n_k: int) -> np.ndarray:
    """Boolean ``[B, 1, Nk]``: True at key positions ``j < lengths[b]`` (real tokens).

    The same mask as ``course_lib.attention.padding_mask``: the singleton query axis lets it
    broadcast against scores ``[B, Nq, Nk]``.
    """
    real = np.arange(n_k)[None, :] < np.asarray(lengths)[:, None]  # (B, Nk)
    return real[:, None, :]  # (B, 1, Nk)


def _padding_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("lengths [3, 1, 4], n_k = 4", (np.array([3, 1, 4]), 4)),
            Case("lengths [2, 5], n_k = 6 (every sequence padded)", (np.array([2, 5]), 6)),
        ]
    b = int(rng.integers(4, 8))
    n_k = int(rng.integers(5, 9))
    return [
        Case(f"{b} random lengths, n_k = {n_k}", (rng.integers(1, n_k + 1, size=b), n_k)),
        Case("a length-0 sequence among others", (np.array([0, 3]), 3)),
        Case(
            f"{b} sequences all shorter than n_k = {n_k + 2} (every one padded)",
            (rng.integers(1, n_k + 1, size=b), n_k + 2),
        ),
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
            Hint(
                "off by one: one padding position per sequence counts as real.",
                "Position j is a real token when j < length, not j ≤ length (positions start "
                "at 0).",
            ): lambda lengths, n_k: (np.arange(n_k)[None, :] <= np.asarray(lengths)[:, None])[
                :, None
            ],
            Hint(
                "your mask is inverted: True on the padding.",
                "True must mark the real tokens (may attend), False the padding.",
            ): lambda lengths, n_k: (np.arange(n_k)[None, :] >= np.asarray(lengths)[:, None])[
                :, None
            ],
            Hint(
                "your mask has no query axis: (B, Nk).",
                "Add it in the middle, mask[:, None, :], so that it broadcasts against scores "
                "(B, Nq, Nk). A (B, Nk) mask would be read as (Nq, Nk): an error, or silently "
                "wrong when B happens to equal Nq.",
            ): lambda lengths, n_k: np.arange(n_k)[None, :] < np.asarray(lengths)[:, None],
            Hint(
                "your mask has max(lengths) key positions, not n_k (as course_lib's "
                "padding_mask(lengths) does when n_k is not given).",
                "The batch is n_k wide even when every sequence is padded: compare "
                "np.arange(n_k) with the lengths.",
            ): lambda lengths, n_k: (
                np.arange(int(np.max(lengths)))[None, :] < np.asarray(lengths)[:, None]
            )[:, None],
            Hint(
                "your query axis is in the wrong place: (B, Nk, 1).",
                "The singleton goes in the middle, (B, 1, Nk): it must broadcast over the "
                "queries; (B, Nk, 1) would mask whole query rows instead of key columns.",
            ): lambda lengths, n_k: (np.arange(n_k)[None, :] < np.asarray(lengths)[:, None])[
                :, :, None
            ],
            Hint(
                "your mask is transposed: one row per key position.",
                "Compare np.arange(n_k)[None, :] with lengths[:, None]: one row per sequence.",
            ): lambda lengths, n_k: (np.arange(n_k)[:, None] < np.asarray(lengths)[None, :])[
                :, None
            ],
        },
        hint=Hint(
            "check your mask's shape (B, 1, Nk) and one sequence's row: which of its key "
            "positions are real tokens?",
            "Compare the key positions 0..n_k-1 with each sequence's length, by broadcasting. "
            "(np.arange(n_k)[None, :] < lengths[:, None])[:, None, :] has shape (B, 1, Nk).",
        ),
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


def _masked_axis0(scores, mask):
    return numpy_masked_softmax(scores, np.broadcast_to(mask, np.shape(scores)), axis=0)


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
        no_warnings=Hint(
            "numpy warned about an inf - inf or a 0 / 0, even if np.where later threw that "
            "value away: np.where computes both of its branches for EVERY entry first.",
            "np.where(cond, a, b) computes a and b for EVERY entry, the discarded ones "
            "included. Keep every intermediate finite: replace a row max of -inf by 0 before "
            "subtracting it, and divide by a safe denominator, e / np.where(total > 0, "
            "total, 1.0) (or np.maximum(total, np.finfo(e.dtype).tiny)), instead of "
            "np.where(total > 0, e / total, 0).",
        ),
        mistakes={
            Hint(
                "a fully masked row spreads its weight evenly over the masked keys: that is "
                "what filling with -1e9 does.",
                "Fill with -inf (exp gives exactly 0) and give a row with no kept entry all zeros.",
            ): _big_negative_masked,
            Hint(
                "one huge masked score makes every kept weight underflow: your max includes "
                "the masked entries.",
                "Take the max over the kept entries only: fill the masked ones with -inf "
                "first, then s.max(axis=-1, keepdims=True).",
            ): _max_over_masked_too,
            Hint(
                "the kept weights of a row do not sum to 1.",
                "You multiplied the softmax by the mask without renormalising: mask first "
                "(-inf), then normalise.",
            ): _multiply_masked,
            Hint(
                "masked keys still get weight.",
                "You set masked scores to 0 (scores * mask?), and e^0 = 1. Set them to -inf, "
                "whose exp is exactly 0.",
            ): _zero_filled,
            Hint(
                "your weights sit exactly on the masked entries.",
                "The polarity is inverted: True = keep (may attend), False = masked.",
            ): _inverted_masked,
            Hint(
                "your columns sum to 1, not your rows.",
                "Normalise over the last axis (the keys): max and sum with axis=-1, keepdims=True.",
            ): _masked_axis0,
            Hint(
                "a row with every key masked gives NaN: its max is -inf, and -inf - (-inf) is NaN.",
                "Replace a row max of -inf by 0 before subtracting it (np.where(np.isfinite(m), "
                "m, 0.0)), and give rows whose sum is 0 all zeros.",
            ): _naive_masked,
            Hint(
                "exp overflowed: scores of 1000 and more need the max subtraction.",
                "Subtract each row's max over the *kept* entries before np.exp.",
            ): _no_max_masked,
        },
        hint=Hint(
            "look at two cases of the statement: the weight a masked key must get, and a row in "
            "which every key is masked.",
            "Mask with -inf, then a softmax that survives rows with nothing kept. Fill masked "
            "scores with -inf, subtract the row max (0 where the max is -inf), exponentiate, and "
            "divide by the row sum where it is > 0 (rows with sum 0 stay 0).",
        ),
    )
)


# --------------------------------------------------------------------------- 02.5


def attention_weights_reference(x: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray) -> np.ndarray:
    r"""Weights ``[N, N]`` = softmax((x W_Q)(x W_K)^T / \sqrt{d_k}) for ``x [N, d_model]``,
    ``W_Q, W_K [d_model, d_k]``."""
    q = x @ W_Q  # (N, d_k)
    k = x @ W_K  # (N, d_k)
    return _plain_softmax(q @ k.T / np.sqrt(W_Q.shape[1]))  # (N, N)


def _weights_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def make(n, d_model, d_k, x_scale=1.0):
        return (
            rng.normal(size=(n, d_model)) * x_scale,
            rng.normal(size=(d_model, d_k)) / np.sqrt(d_model),
            rng.normal(size=(d_model, d_k)) / np.sqrt(d_model),
        )

    if not hidden:
        return [
            Case("5 tokens, d_model = 8, d_k = 4", make(5, 8, 4)),
            Case("3 tokens, d_model = 6, d_k = 2", make(3, 6, 2)),
            Case(
                "4 tokens with large embeddings (× 40: scores in the hundreds)", make(4, 8, 4, 40)
            ),
        ]
    return [
        Case("9 tokens, d_model = 16, d_k = 4", make(9, 16, 4)),
        Case("2 tokens, d_model = 3, d_k = 5 (d_k > d_model)", make(2, 3, 5)),
        Case("6 tokens with very large embeddings (× 100)", make(6, 8, 2, 100)),
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
            Hint(
                "your scale uses the model width.",
                "The dot products live in the d_k-dimensional query/key space: divide by "
                "sqrt(d_k) = sqrt(W_Q.shape[1]), not sqrt(d_model).",
            ): lambda x, W_Q, W_K: _plain_softmax((x @ W_Q) @ (x @ W_K).T / np.sqrt(x.shape[1])),
            Hint(
                "your weight matrix is symmetric: keys and queries are the same vectors.",
                "Keys are x @ W_K, queries x @ W_Q.",
            ): lambda x, W_Q, W_K: _plain_softmax((x @ W_Q) @ (x @ W_Q).T / np.sqrt(W_Q.shape[1])),
            Hint(
                "your weights are those of K Qᵀ.",
                "Row i must hold query i's weights over the keys: (x @ W_Q) @ (x @ W_K).T.",
            ): lambda x, W_Q, W_K: _plain_softmax((x @ W_K) @ (x @ W_Q).T / np.sqrt(W_Q.shape[1])),
            Hint(
                "your columns sum to 1, not your rows.",
                "Normalise over the last axis: axis=-1.",
            ): lambda x, W_Q, W_K: _plain_softmax(
                (x @ W_Q) @ (x @ W_K).T / np.sqrt(W_Q.shape[1]), axis=0
            ),
            Hint(
                "you returned the scaled scores.",
                "The weights are their softmax over each row.",
            ): lambda x, W_Q, W_K: (x @ W_Q) @ (x @ W_K).T / np.sqrt(W_Q.shape[1]),
            Hint(
                "your scores are too large by a factor sqrt(d_k).",
                "Divide the scores by sqrt(d_k) = sqrt(W_Q.shape[1]).",
            ): lambda x, W_Q, W_K: _plain_softmax((x @ W_Q) @ (x @ W_K).T),
            _OVERFLOW: lambda x, W_Q, W_K: _overflowing_softmax(
                (x @ W_Q) @ (x @ W_K).T / np.sqrt(W_Q.shape[1])
            ),
        },
        hint=Hint(
            "check which projection makes the queries and which the keys, the width you scale "
            "by, and the axis the softmax normalises.",
            "Project, compare every query with every key, scale, softmax over the keys. q = x @ "
            "W_Q; k = x @ W_K; s = q @ k.T / sqrt(d_k); subtract each row's max; weights = exp / "
            "row sum over the last axis.",
        ),
    )
)


# --------------------------------------------------------------------------- 02.6


def padded_attention_reference(q, k, v, tokens, pad_id, is_causal=False):
    """``(output, weights)``: attention in which no query sees a padding key.

    Key ``j`` of sequence ``b`` may be attended when ``tokens[b, j] != pad_id`` (and
    ``j <= i`` when causal); a query with no such key gets zero weights and output.
    """
    keep = (np.asarray(tokens) != pad_id)[:, None, :]  # (B, 1, Nk)
    return numpy_attention(q, k, v, keep, is_causal=is_causal)


def _padded_wrong(keep_fn=None, causal=None, fill=None, scale=True):
    """A twin that builds its mask with ``keep_fn(tokens, pad_id)`` and masks with ``fill``."""

    def wrong(q, k, v, tokens, pad_id, is_causal=False):
        keep = (
            (np.asarray(tokens) != pad_id)[:, None, :]
            if keep_fn is None
            else keep_fn(np.asarray(tokens), pad_id)
        )
        use_causal = is_causal if causal is None else causal
        if use_causal:
            keep = keep & numpy_causal_mask(q.shape[-2], k.shape[-2])
        s = q @ np.swapaxes(k, -1, -2) / (np.sqrt(q.shape[-1]) if scale else 1.0)
        if fill is None:
            w = numpy_masked_softmax(s, keep)
        else:
            with np.errstate(invalid="ignore"):
                w = _plain_softmax(np.where(keep, s, fill))
        return w @ v, w

    return wrong


def _padded_mask_or(q, k, v, tokens, pad_id, is_causal=False):
    keep = (np.asarray(tokens) != pad_id)[:, None, :]  # (B, 1, Nk)
    if is_causal:
        keep = keep | numpy_causal_mask(q.shape[-2], k.shape[-2])  # OR: padding leaks back in
    return numpy_attention(q, k, v, keep)


def _padded_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def batch(lengths, n, d=4, d_v=3, pad_id=0, left=(), scale=1.0):
        b = len(lengths)
        tokens = rng.integers(1, 50, size=(b, n))
        tokens[tokens == pad_id] = pad_id + 1  # real tokens never equal pad_id
        for i, length in enumerate(lengths):
            if i in left:
                tokens[i, : n - length] = pad_id  # left padding
            else:
                tokens[i, length:] = pad_id  # right padding
        q = rng.normal(size=(b, n, d)) * scale
        return q, rng.normal(size=(b, n, d)), rng.normal(size=(b, n, d_v)), tokens, pad_id

    if not hidden:
        return [
            Case(
                "right padding, bidirectional: lengths [5, 3], N = 5, pad_id = 0",
                batch([5, 3], 5),
            ),
            Case(
                "left padding, causal: lengths [4, 2], N = 4, so the first queries of sequence "
                "1 see only padding",
                (*batch([4, 2], 4, left=(1,)), True),
            ),
            Case(
                "B = N = 3 (a (B, Nk) mask would broadcast as (Nq, Nk) without an error), "
                "pad_id = 7",
                batch([3, 2, 1], 3, pad_id=7),
            ),
        ]
    return [
        Case(
            "a mixed batch of 4, causal, pad_id = 2",
            (*batch([6, 1, 4, 3], 6, d=8, d_v=5, pad_id=2, left=(1, 2)), True),
        ),
        Case("a sequence that is all padding", batch([3, 0], 3)),
        Case("large scores (queries × 1000), causal", (*batch([5, 4], 5, scale=1e3), True)),
    ]


register(
    Exercise(
        id="02.6",
        title="attention over a padded batch of token ids",
        points=2,
        target="padded_attention",
        cases=_padded_cases,
        reference=padded_attention_reference,
        atol=1e-8,
        rtol=1e-6,
        outputs=("output", "weights"),
        no_warnings=Hint(
            "numpy warned about an inf - inf or a 0 / 0 (a fully masked row?), even if "
            "np.where later threw that value away.",
            "np.where(cond, a, b) computes a and b everywhere first: use a softmax that keeps "
            "every intermediate finite, like the one of exercise 02.4 (or course_lib's "
            "numpy_masked_softmax).",
        ),
        mistakes={
            Hint(
                "your mask has no query axis: (B, Nk) against scores (B, Nq, Nk) is read as "
                "(Nq, Nk), which fails, or is silently wrong when B equals N.",
                "Put the query axis in: (tokens != pad_id)[:, None, :] has shape (B, 1, Nk).",
            ): _padded_wrong(keep_fn=lambda t, p: t != p),
            Hint(
                "you masked the padded QUERIES (rows) instead of the padded KEYS (columns).",
                "A padding token must not be *looked at*: the mask depends on the key "
                "position j, (tokens != pad_id)[:, None, :].",
            ): _padded_wrong(keep_fn=lambda t, p: (t != p)[:, :, None]),
            Hint(
                "your mask keeps the padding and drops the real tokens.",
                "True = may attend: tokens != pad_id, not ==.",
            ): _padded_wrong(keep_fn=lambda t, p: (t == p)[:, None, :]),
            Hint(
                "you compared the tokens with 0, not with pad_id.",
                "The padding id is an argument: tokens != pad_id.",
            ): _padded_wrong(keep_fn=lambda t, p: (t != 0)[:, None, :]),
            Hint(
                "with is_causal=True, your queries still see later keys.",
                "Combine the two masks with AND: the padding mask & np.tril(np.ones((N, N), "
                "dtype=bool)).",
            ): _padded_wrong(causal=False),
            Hint(
                "with is_causal=False, your queries see only earlier keys.",
                "Apply the causal triangle only when is_causal is True.",
            ): _padded_wrong(causal=True),
            Hint(
                "a key that is padding (or in the future) can still be seen: you combined the "
                "masks with OR.",
                "A key may be attended when it is real AND not in the future: keep = padding "
                "& causal.",
            ): _padded_mask_or,
            Hint(
                "a query that sees only padding spreads its weight evenly over it: that is "
                "what filling with -1e9 does.",
                "Fill with -inf and give a row with no visible key zero weights (and zero output).",
            ): _padded_wrong(fill=-1e9),
            Hint(
                "your scores are too large by a factor sqrt(d_k).",
                "Divide the scores by sqrt(d_k) = sqrt(q.shape[-1]).",
            ): _padded_wrong(scale=False),
            Hint(
                "a query that sees only padding gives NaN: a softmax over all -inf is "
                "-inf - (-inf).",
                "Use a masked softmax that gives such rows zeros (exercise 02.4).",
            ): _padded_wrong(fill=-np.inf),
        },
        hint=Hint(
            "check your mask on one sequence: which keys each query may see with is_causal True "
            "and with it False, and what a query that sees no key gets.",
            "One boolean mask, shape (B, Nq, Nk) or broadcastable to it, then a masked softmax. "
            "keep = (tokens != pad_id)[:, None, :]; if is_causal: keep = keep & "
            "np.tril(np.ones((N, N), dtype=bool)); then the NaN-safe softmax of 02.4 over "
            "np.where(keep, scores, -inf), and output = weights @ v.",
        ),
    )
)


# --------------------------------------------------------------------------- 02.7 predict, measure


def _row_softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def self_weight_reference(num_tokens: int, d: int, trials: int, seed: int) -> float:
    r"""The mean weight a token gives itself when :math:`Q = K = X` (no projections):
    the diagonal of :math:`\mathrm{softmax}(XX^\top/\sqrt d)`, averaged over ``trials``
    random :math:`X` of ``num_tokens`` i.i.d. :math:`N(0, I_d)` rows."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(trials, num_tokens, d))  # (T, N, d)
    w = _row_softmax(x @ x.transpose(0, 2, 1) / np.sqrt(d))  # (T, N, N)
    return float(np.diagonal(w, axis1=1, axis2=2).mean())


def _self_weight_unscaled(num_tokens, d, trials, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(trials, num_tokens, d))
    w = _row_softmax(x @ x.transpose(0, 2, 1))  # no 1/sqrt(d)
    return float(np.diagonal(w, axis1=1, axis2=2).mean())


def _self_weight_all(num_tokens, d, trials, seed):
    return 1.0 / num_tokens  # the mean of every weight, not of the diagonal


def _self_weight_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("N = 16 tokens, d = 64, 200 trials", (16, 64, 200, 0)),
            Case("N = 16 tokens, d = 4, 500 trials", (16, 4, 500, 1)),
        ]
    return [
        Case("N = 64 tokens, d = 16, 100 trials", (64, 16, 100, int(rng.integers(1000)))),
        Case("N = 8 tokens, d = 2, 1000 trials", (8, 2, 1000, int(rng.integers(1000)))),
    ]


register(
    Exercise(
        id="02.7",
        title="predict, then measure: attention without projections",
        points=1,
        target="measure_self_weight",
        cases=_self_weight_cases,
        reference=self_weight_reference,
        atol=0.02,
        rtol=0.0,
        compare=within(0.02, relative=False),
        measures="the mean weight a token gives itself",
        mistakes={
            Hint(
                "your scores are not scaled by 1/sqrt(d): a token's score with itself, "
                "|x|^2 ~ d, then dwarfs the others even more.",
                "Scores are X X^T / sqrt(d), as in scaled dot-product attention.",
            ): _self_weight_unscaled,
            Hint(
                "you averaged every weight: that is 1/N whatever the inputs, since each row "
                "sums to 1.",
                "Average only the diagonal w[i, i], the weight of token i on itself.",
            ): _self_weight_all,
        },
        hint=Hint(
            "check which weights you average (each token's weight on itself) and how the scores "
            "are scaled before the softmax.",
            "Draw X, take softmax(X X^T / sqrt(d)) row by row, average the diagonal. x = "
            "rng.normal(size=(trials, N, d)); w = softmax(x @ x.transpose(0, 2, 1) / sqrt(d)) "
            "over the last axis; return the mean of np.diagonal(w, axis1=1, axis2=2).",
        ),
    )
)
