r"""Checks for chapter 02 (Q, K, V and scaled dot-product attention).

Seven exercises, each a function the learner writes (texts: ``ch02.md``):

* 02.1 ``attention(q, k, v)``: scaled dot-product attention in numpy, ``(output, weights)``
* 02.2 ``causal_mask(n_q, n_k)``: the boolean causal mask, aligned top-left
* 02.3 ``padding_mask(lengths, n_k)``: a ``[B, 1, Nk]`` padding mask from the lengths
* 02.4 ``masked_softmax(scores, mask)``: a softmax whose fully masked rows give zeros, without
  a RuntimeWarning (``no_warnings``)
* 02.5 ``attention_weights(x, W_Q, W_K)``: from embeddings to attention weights
* 02.6 ``padded_attention(q, k, v, tokens, pad_id, is_causal)``: attention over a padded batch
  of token ids, which the lecture does not show: the mask comes from the tokens, padding may
  sit on the left, and a ``(B, Nk)`` mask that broadcasts silently when B equals N is a trap
  the checks spring
* 02.7 ``measure_self_weight(num_tokens, d, trials, seed)``: predict, then measure attention
  without projections (a token's weight on itself)
"""

from __future__ import annotations

import numpy as np

from .core import Case, Fixed
from .declare import exercise
from .kit import within


def _softmax(s: np.ndarray, axis: int = -1, shift: bool = True) -> np.ndarray:
    """The softmax over ``axis``; without ``shift`` (each row's max subtracted first) exp
    overflows to inf on large scores, and inf / inf is NaN."""
    e = np.exp(s - s.max(axis=axis, keepdims=True) if shift else s)
    return e / e.sum(axis=axis, keepdims=True)


# --------------------------------------------------------------------------- 02.1


def attention_reference(
    q,
    k,
    v,
    *,
    k_dot_t=False,
    keys_first=False,
    width="d_k",
    power=0.5,
    scale_after=False,
    axis=-1,
    shift=True,
    swap_outputs=False,
):
    r"""``(softmax(q k^T / \sqrt{d_k}) v, weights)`` for ``q [..., Nq, d_k]``,
    ``k [..., Nk, d_k]``, ``v [..., Nk, d_v]``."""
    kt = k.T if k_dot_t else np.swapaxes(k, -1, -2)  # (..., d_k, Nk); k.T reverses every axis
    s = k @ np.swapaxes(q, -1, -2) if keys_first else q @ kt  # (..., Nq, Nk)
    d = q.shape[-1] if width == "d_k" else v.shape[-1]
    if scale_after:  # the softmax of the raw scores, then the scale
        w = _softmax(s) / np.sqrt(d)  # (..., Nq, Nk)
    else:
        w = _softmax(s / d**power, axis, shift)  # (..., Nq, Nk)
    return (w, w @ v) if swap_outputs else (w @ v, w)  # (..., Nq, d_v), (..., Nq, Nk)


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


exercise(
    "02.1",
    attention_reference,
    target="attention",
    title="scaled dot-product attention in numpy",
    points=2,
    cases=_attention_cases,
    atol=1e-8,
    rtol=1e-6,
    outputs=("output", "weights"),
    slips={
        "k-dot-t": dict(k_dot_t=True),
        "unscaled": dict(power=0),
        "over-d-k": dict(power=1),
        "columns": dict(axis=-2),
        "scaled-after": dict(scale_after=True),
        "k-q": dict(keys_first=True),
        "swapped-outputs": dict(swap_outputs=True),
        "d-v": dict(width="d_v"),
        "overflow": dict(shift=False),
    },
)


# --------------------------------------------------------------------------- 02.2


def causal_mask_reference(n_q, n_k, *, upper=False, offset=0, bottom_right=False, dtype=bool):
    r"""Boolean ``[n_q, n_k]``, True where key :math:`j \le i` (top-left aligned)."""
    ones = np.ones((n_q, n_k), dtype=dtype)  # (Nq, Nk)
    if bottom_right:  # the last query sees every key
        offset += n_k - n_q
    return np.triu(ones, offset) if upper else np.tril(ones, offset)  # (Nq, Nk)


def _causal_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [Fixed("a square 4 × 4 mask", (4, 4)), Fixed("3 queries, 5 keys", (3, 5))]
    n = int(rng.integers(6, 10))
    return [
        Case(f"a square {n} × {n} mask", (n, n)),
        Fixed("5 queries, 2 keys", (5, 2)),
        Fixed("a single token", (1, 1)),
    ]


exercise(
    "02.2",
    causal_mask_reference,
    target="causal_mask",
    title="the causal mask",
    points=1,
    cases=_causal_cases,
    slips={
        "upside-down": dict(upper=True),
        "no-diagonal": dict(offset=-1),
        "bottom-right": dict(bottom_right=True),
        "inverted": dict(upper=True, offset=1),
        "not-bool": dict(dtype=float),
    },
)


# --------------------------------------------------------------------------- 02.3


def padding_mask_reference(lengths, n_k, *, real=np.less, max_width=False, axis=1, keys=True):
    r"""Boolean ``[B, 1, Nk]``: True at key positions :math:`j < \mathrm{len}_b` (real tokens).

    The same mask as ``course_lib.attention.padding_mask``: the singleton query axis lets it
    broadcast against scores ``[B, Nq, Nk]``.
    """
    lengths = np.asarray(lengths)  # (B,)
    positions = np.arange(int(np.max(lengths)) if max_width else n_k)  # (Nk,)
    if keys:
        mask = real(positions[None, :], lengths[:, None])  # (B, Nk)
    else:  # one row per key position
        mask = real(positions[:, None], lengths[None, :])  # (Nk, B)
    return mask if axis is None else np.expand_dims(mask, axis)  # (B, 1, Nk)


def _padding_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("lengths [3, 1, 4], n_k = 4", (np.array([3, 1, 4]), 4)),
            Fixed("lengths [2, 5], n_k = 6 (every sequence padded)", (np.array([2, 5]), 6)),
        ]
    b = int(rng.integers(4, 8))
    n_k = int(rng.integers(5, 9))
    return [
        Case(f"{b} random lengths, n_k = {n_k}", (rng.integers(1, n_k + 1, size=b), n_k)),
        Fixed("a length-0 sequence among others", (np.array([0, 3]), 3)),
        Case(
            f"{b} sequences all shorter than n_k = {n_k + 2} (every one padded)",
            (rng.integers(1, n_k + 1, size=b), n_k + 2),
        ),
    ]


exercise(
    "02.3",
    padding_mask_reference,
    target="padding_mask",
    title="a padding mask from lengths",
    points=1,
    cases=_padding_cases,
    slips={
        "off-by-one": dict(real=np.less_equal),
        "inverted": dict(real=np.greater_equal),
        "no-query-axis": dict(axis=None),
        "max-length": dict(max_width=True),
        "axis-last": dict(axis=2),
        "transposed": dict(keys=False),
    },
)


# --------------------------------------------------------------------------- 02.4


def masked_softmax_reference(
    scores,
    mask,
    *,
    fill=-np.inf,
    max_of_kept=True,
    mask_after=False,
    inverted=False,
    axis=-1,
    guard=True,
    shift=True,
):
    r"""The softmax over the last axis of the kept entries (``mask`` True); a fully masked row
    gives zeros: :math:`w_{ij} = m_{ij}\, e^{s_{ij}} / \sum_l m_{il}\, e^{s_{il}}`, and 0 where
    the sum is empty. Every intermediate stays finite (no RuntimeWarning)."""
    if inverted:
        mask = ~np.asarray(mask, dtype=bool)
    if mask_after:  # the softmax of every score, then multiplied by the mask
        return _softmax(scores, axis) * mask  # (..., Nq, Nk)
    s = np.where(mask, scores, fill)  # (..., Nq, Nk)
    m = (s if max_of_kept else scores).max(axis=axis, keepdims=True)  # (..., Nq, 1)
    if guard:  # a fully masked row: max 0, not -inf (-inf - (-inf) is NaN)
        m = np.where(np.isfinite(m), m, 0.0)  # (..., Nq, 1)
    e = np.exp(s - m) if shift else np.exp(s)  # (..., Nq, Nk)
    total = e.sum(axis=axis, keepdims=True)  # (..., Nq, 1)
    return e / (np.maximum(total, np.finfo(e.dtype).tiny) if guard else total)  # (..., Nq, Nk)


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
            Fixed(
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
        Fixed(
            "large scores (1000, 1001, …): subtract the max of the kept entries",
            (np.array([[1000.0, 1001.0, 1002.0, 5000.0]]), np.array([[True, True, True, False]])),
        ),
        Case(
            "a mask that broadcasts: (1, 5) against (3, 5) scores",
            (rng.normal(size=(3, 5)), np.array([[True, True, False, True, False]])),
        ),
    ]


exercise(
    "02.4",
    masked_softmax_reference,
    target="masked_softmax",
    title="a NaN-safe masked softmax",
    points=2,
    cases=_masked_cases,
    atol=1e-8,
    rtol=1e-6,
    no_warnings=True,
    slips={
        "fill-1e9": dict(fill=-1e9),
        "max-of-all": dict(max_of_kept=False),
        "mask-after": dict(mask_after=True),
        "fill-0": dict(fill=0.0),
        "inverted": dict(inverted=True),
        "columns": dict(axis=0),
        "nan-rows": dict(guard=False),
        "overflow": dict(shift=False),
    },
)


# --------------------------------------------------------------------------- 02.5


def attention_weights_reference(
    x,
    W_Q,
    W_K,
    *,
    symmetric=False,
    keys_first=False,
    width="d_k",
    axis=-1,
    softmax=True,
    power=0.5,
    shift=True,
):
    r"""Weights ``[N, N]`` = softmax((x W_Q)(x W_K)^T / \sqrt{d_k}) for ``x [N, d_model]``,
    ``W_Q, W_K [d_model, d_k]``."""
    q = x @ W_Q  # (N, d_k)
    k = x @ (W_Q if symmetric else W_K)  # (N, d_k)
    s = k @ q.T if keys_first else q @ k.T  # (N, N)
    s = s / (W_Q.shape[1] if width == "d_k" else x.shape[1]) ** power  # (N, N)
    return _softmax(s, axis, shift) if softmax else s  # (N, N)


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


exercise(
    "02.5",
    attention_weights_reference,
    target="attention_weights",
    title="from embeddings to attention weights",
    points=2,
    cases=_weights_cases,
    atol=1e-8,
    rtol=1e-6,
    slips={
        "d-model": dict(width="d_model"),
        "symmetric": dict(symmetric=True),
        "k-q": dict(keys_first=True),
        "columns": dict(axis=0),
        "scores": dict(softmax=False),
        "unscaled": dict(power=0),
        "overflow": dict(shift=False),
    },
)


# --------------------------------------------------------------------------- 02.6


def padded_attention_reference(
    q,
    k,
    v,
    tokens,
    pad_id,
    is_causal=False,
    *,
    mask_axis=1,
    inverted=False,
    pad_zero=False,
    causal=None,
    combine="and",
    fill=-np.inf,
    power=0.5,
    guard=True,
):
    """``(output, weights)``: attention in which no query sees a padding key.

    Key ``j`` of sequence ``b`` may be attended when ``tokens[b, j] != pad_id`` (and
    ``j <= i`` when causal); a query with no such key gets zero weights and output.
    """
    pad = 0 if pad_zero else pad_id
    real = (np.asarray(tokens) == pad) if inverted else (np.asarray(tokens) != pad)  # (B, Nk)
    keep = real if mask_axis is None else np.expand_dims(real, mask_axis)  # (B, 1, Nk)
    causal = is_causal if causal is None else causal  # a slip may force the triangle on or off
    if causal:
        tri = causal_mask_reference(q.shape[-2], k.shape[-2])  # (Nq, Nk)
        keep = (keep | tri) if combine == "or" else (keep & tri)  # (B, Nq, Nk)
    s = q @ np.swapaxes(k, -1, -2) / q.shape[-1] ** power  # (B, Nq, Nk)
    w = masked_softmax_reference(s, keep, fill=fill, guard=guard)  # (B, Nq, Nk)
    return w @ v, w  # (B, Nq, d_v), (B, Nq, Nk)


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


exercise(
    "02.6",
    padded_attention_reference,
    target="padded_attention",
    title="attention over a padded batch of token ids",
    points=2,
    cases=_padded_cases,
    atol=1e-8,
    rtol=1e-6,
    outputs=("output", "weights"),
    no_warnings=True,
    slips={
        "no-query-axis": dict(mask_axis=None),
        "padded-queries": dict(mask_axis=2),
        "inverted": dict(inverted=True),
        "pad-zero": dict(pad_zero=True),
        "not-causal": dict(causal=False),
        "always-causal": dict(causal=True),
        "or": dict(combine="or"),
        "fill-1e9": dict(fill=-1e9),
        "unscaled": dict(power=0),
        "nan-rows": dict(guard=False),
    },
)


# --------------------------------------------------------------------------- 02.7 predict, measure


def self_weight_reference(num_tokens, d, trials, seed, *, power=0.5, diagonal=True) -> float:
    r"""The mean weight a token gives itself when :math:`Q = K = X` (no projections):
    the diagonal of :math:`\mathrm{softmax}(XX^\top/\sqrt d)`, averaged over ``trials``
    random :math:`X` of ``num_tokens`` i.i.d. :math:`N(0, I_d)` rows."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(trials, num_tokens, d))  # (T, N, d)
    w = _softmax(x @ x.transpose(0, 2, 1) / d**power)  # (T, N, N)
    if not diagonal:  # every weight: 1/N whatever the inputs
        return float(w.mean())
    return float(np.diagonal(w, axis1=1, axis2=2).mean())


def _self_weight_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("N = 16 tokens, d = 64, 200 trials", (16, 64, 200, 0)),
            Fixed("N = 16 tokens, d = 4, 500 trials", (16, 4, 500, 1)),
        ]
    return [
        Case("N = 64 tokens, d = 16, 100 trials", (64, 16, 100, int(rng.integers(1000)))),
        Case("N = 8 tokens, d = 2, 1000 trials", (8, 2, 1000, int(rng.integers(1000)))),
    ]


exercise(
    "02.7",
    self_weight_reference,
    target="measure_self_weight",
    title="predict, then measure: attention without projections",
    points=1,
    cases=_self_weight_cases,
    atol=0.02,
    rtol=0.0,
    compare=within(0.02, relative=False),
    measures="the mean weight a token gives itself",
    slips={"unscaled": dict(power=0), "every-weight": dict(diagonal=False)},
)
