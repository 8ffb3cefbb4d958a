r"""Checks for chapter 11 (the course's claims, tested on a real model).

Seven exercises, each a function the learner writes, most of them "predict, then measure";
the checks run on small arrays made here (no model), the notebook then runs the same function
on SmolLM2:

* 11.1 ``first_token_share(weights)``: the mean attention weight on key 0 over the queries
  :math:`n \ge 1` of ``weights [B, H, N, N]`` (the "attention sink" of Xiao et al., 2023)
* 11.2 ``kept_pairs(n, window, sinks)``: how many (query, key) pairs a causal sliding window
  of :math:`W` keys that always keeps the first :math:`S` keys lets through
* 11.3 ``held_out_accuracy(right, select, test)``: the best head's accuracy on sentences it
  was not chosen on
* 11.4 ``mean_ablate(out, heads)``: a copy of a layer's per-head outputs with the listed heads
  replaced by their mean (the input is left as it was: ``keeps_inputs``)
* 11.5 ``scaled_score_variance(q, k)``: the variance of :math:`q \cdot k / \sqrt{d_k}`
* 11.6 ``slow_pair_share(x, base, context)``: the share of energy in the RoPE pairs that turn
  less than once within the context
* 11.7 ``causal_lse(q, k, scale)``: the log-sum-exp of each causal row, as the kernel of
  chapter 06 returns it
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .core import Case, Fixed, compare_values
from .declare import exercise
from .kit import randn, within

# --------------------------------------------------------------------------- 11.1 predict, measure


def _causal_weights(rng: np.random.Generator, b: int, h: int, n: int, sink: float = 0.0):
    """Causal softmax rows ``[B, H, N, N]`` (float64) with ``sink`` added to key 0's score."""
    scores = torch.as_tensor(rng.standard_normal((b, h, n, n)))  # (B, H, N, N)
    scores[..., 0] += sink
    keep = torch.ones(n, n, dtype=torch.bool).tril()  # (N, N)
    return torch.softmax(scores.masked_fill(~keep, -torch.inf), dim=-1)  # (B, H, N, N)


def _uniform(b: int, h: int, n: int) -> torch.Tensor:
    keep = torch.ones(n, n, dtype=torch.float64).tril()  # (N, N)
    return (keep / keep.sum(-1, keepdim=True)).expand(b, h, n, n).clone()  # (B, H, N, N)


def first_token_share_reference(weights, *, start=1, key=0, along="keys") -> float:
    r"""The mean weight on key 0 over the queries :math:`n \ge 1`, every head and row:
    :math:`\frac{1}{BH(N-1)}\sum_{b,h}\sum_{n=1}^{N-1} P^{(h)}_{b,n,0}`. Query 0 is left out:
    it has only key 0, so its weight there is 1 whatever the head does."""
    w = torch.as_tensor(weights)  # (B, H, N, N)
    if along == "queries":  # the first query's weights on the other keys
        return float(w[:, :, 0, 1:].mean())
    return float(w[:, :, start:, key].mean())


def _share_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("uniform causal attention, N = 8 (1 row, 1 head)", (_uniform(1, 1, 8),)),
            Fixed("uniform causal attention, N = 64, 2 rows, 3 heads", (_uniform(2, 3, 64),)),
            Case("random causal softmax rows, N = 16", (_causal_weights(rng, 2, 4, 16),)),
            Case(
                "a sink: key 0's score +4, e^4 = 55 times a plain key's weight (N = 32)",
                (_causal_weights(rng, 1, 3, 32, 4.0),),
            ),
        ]
    return [
        Fixed("uniform causal attention, N = 2", (_uniform(1, 1, 2),)),
        Fixed("uniform causal attention, N = 256", (_uniform(1, 2, 256),)),
        Case(
            "a strong sink: +8 on key 0, e^8 = 3000 times a plain key (N = 40)",
            (_causal_weights(rng, 2, 2, 40, 8.0),),
        ),
        Case("random causal softmax rows, N = 5", (_causal_weights(rng, 1, 2, 5),)),
    ]


exercise(
    "11.1",
    first_token_share_reference,
    target="first_token_share",
    title="predict, then measure: the first token's share of attention",
    points=1,
    cases=_share_cases,
    atol=1e-9,
    rtol=1e-6,
    compare=within(1e-6),
    measures="the first token's share of attention",
    slips={
        "query-zero": dict(start=0),
        "last-key": dict(key=-1),
        "first-query": dict(along="queries"),
    },
)


# --------------------------------------------------------------------------- 11.2 predict, measure


def kept_pairs_reference(n, window, sinks, *, own=True, causal_sinks=True, union=True) -> int:
    r"""The (query, key) pairs of :math:`N` tokens a causal sliding window of :math:`W` keys
    (the query's own included) with the first :math:`S` keys kept lets through:
    :math:`\#\{(n, m) : m \le n,\ (n - m < W \vee m < S)\}`."""
    i = torch.arange(n)
    causal = i[None, :] <= i[:, None]  # (N, N)
    dist = i[:, None] - i[None, :]  # (N, N)
    near = (dist < window) if own else (dist <= window)  # (N, N)
    sink = (i[None, :] < sinks).expand(n, n)  # (N, N)
    if causal_sinks:
        sink = sink & causal
    if union:
        return int(((causal & near) | sink).sum())
    return int((causal & near).sum()) + int(sink.sum())


def _kept_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("N = 8, W = 8, no sinks: the full causal triangle", (8, 8, 0)),
            Fixed("N = 1024, W = 64, no sinks", (1024, 64, 0)),
            Fixed(
                "N = 1024, W = 64, 4 sinks: each query past the window gains at most 4 keys",
                (1024, 64, 4),
            ),
            Fixed("N = 10, W = 3, 2 sinks", (10, 3, 2)),
        ]
    n, w, s = int(rng.integers(64, 512)), int(rng.integers(2, 64)), int(rng.integers(1, 9))
    return [
        Case(f"N = {n}, W = {w}, {s} sinks (drawn from the seed)", (n, w, s)),
        Fixed("N = 4096, W = 256, 4 sinks", (4096, 256, 4)),
        Fixed("N = 5, W = 1, 1 sink", (5, 1, 1)),
        Fixed("N = 64, W = 100, 4 sinks: the window is wider than the text", (64, 100, 4)),
    ]


exercise(
    "11.2",
    kept_pairs_reference,
    target="kept_pairs",
    title="predict, then measure: what a sliding window with sinks keeps",
    points=1,
    cases=_kept_cases,
    atol=0.5,
    rtol=0.0,
    compare=within(0.5, relative=False),
    measures="the (query, key) pairs kept",
    slips={
        "wide-window": dict(own=False),
        "sinks-twice": dict(union=False),
        "sinks-not-causal": dict(causal_sinks=False),
    },
)


# --------------------------------------------------------------------------- 11.3 predict, measure


def held_out_accuracy_reference(
    right, select, test, *, choose="select", score="test", best=True, one_head=True
) -> float:
    r"""Choose the head with the highest accuracy on the ``select`` rows of ``right [S, K]``
    (1 where head :math:`k` is right on sentence :math:`s`), then return *its* accuracy on the
    ``test`` rows: :math:`\hat k = \arg\max_k \overline{r}_{\text{select}, k}`,
    :math:`\overline{r}_{\text{test}, \hat k}`."""
    r = torch.as_tensor(right).double()  # (S, K)
    rows = {"select": list(select), "test": list(test), "all": list(select) + list(test)}
    if not one_head:  # every head's mean on the scoring rows
        return float(r[rows[score]].mean())
    acc = r[rows[choose]].mean(0)  # (K,)
    head = int(acc.argmax()) if best else int(acc.argmin())
    return float(r[rows[score], head].mean())


def _coin_heads(rng: np.random.Generator, sentences: int, heads: int, planted=None):
    """``right [S, K]`` of coin-flip heads, head 0 right with probability ``planted`` (if
    given), drawn until the best head on the first half is unique (no tie to break)."""
    half = sentences // 2
    while True:
        right = rng.random((sentences, heads)) < 0.5  # (S, K)
        if planted is not None:
            right[:, 0] = rng.random(sentences) < planted
        acc = right[:half].mean(0)  # (K,)
        if (acc == acc.max()).sum() == 1:
            as_floats = torch.as_tensor(right).float()  # (S, K) 0/1, as the notebook's
            return as_floats, list(range(half)), list(range(half, sentences))


_LUCK = {
    "high": "the best of many coin-flip heads on half of the sentences is the luckiest, not "
    "the best: its luck does not carry over to sentences it was not chosen on, so on those it "
    "falls back to chance. Choosing and scoring on the same sentences would have shown the "
    "luck as skill.",
    "low": "below 0.5 on fresh sentences is the noise of a small test half around chance (a "
    "95 % interval on 31 sentences is about ±0.17 wide).",
}
_SKILL = {
    "low": "a head that is really right most of the time wins the selection half by skill, and "
    "skill, unlike luck, carries over: on fresh sentences it keeps its rate.",
    "high": "the chosen head keeps its true rate on fresh sentences, less than perfect; above "
    "it was the luck of the selection half.",
}


# 4 heads on 12 sentences (one row per head), written so that each way of choosing gives a
# different answer: the best on the first 6 (head 2) scores 2/6 on the last 6
_TELLING = [
    [1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0],
    [1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1],
]


def _held_out_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "270 coin-flip heads on 62 sentences: the luckiest of the first half, scored "
                "on the second",
                _coin_heads(rng, 62, 270),
                why=_LUCK,
            ),
            Case(
                "one head right 90 % of the time among 49 coin flips, 100 sentences",
                _coin_heads(rng, 100, 50, planted=0.9),
                why=_SKILL,
            ),
            Fixed(
                "4 heads, 12 sentences: the best of the first 6 is not the best of the last 6",
                (torch.tensor(_TELLING).T.float(), list(range(6)), list(range(6, 12))),
                why=_LUCK,
            ),
            Case(
                "a perfect head among 19 coin flips, 40 sentences",
                _coin_heads(rng, 40, 20, planted=1.0),
                why=_SKILL,
            ),
        ]
    s = int(rng.integers(20, 200))
    return [
        Case(f"{s} sentences, 270 coin-flip heads (drawn from the seed)", _coin_heads(rng, s, 270)),
        Case("one head right 70 % of the time among 99 coin flips", _coin_heads(rng, 80, 100, 0.7)),
        Case("2 heads, 4 sentences", _coin_heads(rng, 4, 2)),
    ]


exercise(
    "11.3",
    held_out_accuracy_reference,
    target="held_out_accuracy",
    title="predict, then measure: the best head on sentences it was not chosen on",
    points=1,
    cases=_held_out_cases,
    atol=1e-6,
    rtol=1e-6,
    compare=within(1e-6),
    measures="the chosen head's held-out accuracy",
    slips={
        "scored-on-select": dict(score="select"),
        "chosen-on-test": dict(choose="test"),
        "chosen-on-all": dict(choose="all"),
        "worst-head": dict(best=False),
        "every-head": dict(one_head=False),
    },
)


# --------------------------------------------------------------------------- 11.4 ablation


def _a_tensor(what: str):
    """A ``compare`` that wants a torch tensor (the notebook passes it on to torch code)."""

    def compare(got, expected, case):
        if not isinstance(got, torch.Tensor):
            return (
                f"expected a torch tensor, got {type(got).__module__}.{type(got).__name__}: "
                f"{what} Use torch operations, or torch.as_tensor(...) on the result."
            )
        return compare_values(got, expected, 1e-6, 1e-6)

    return compare


def mean_ablate_reference(out, heads, *, over=(0, 2), zero=False, others=False) -> torch.Tensor:
    r"""A copy of one layer's per-head outputs ``out [B, H, N, d]`` in which each head of
    ``heads`` is replaced by its mean over the batch and the positions:
    :math:`o_{b,h,n} \leftarrow \frac{1}{BN}\sum_{b',n'} o_{b',h,n'}` (mean ablation: the head
    still adds its average, but no longer anything that depends on the input)."""
    o = torch.as_tensor(out).clone()  # (B, H, N, d)
    chosen = [h for h in range(o.shape[1]) if (h in set(heads)) != others]
    for h in chosen:
        if zero:
            o[:, h] = 0.0
        else:
            o[:, h] = torch.as_tensor(out)[:, h : h + 1].mean(dim=over, keepdim=True)[:, 0]
    return o  # (B, H, N, d)


def _ablate_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("B = 2, H = 4, N = 5, d = 3, head 1", (randn(rng, 2, 4, 5, 3), [1])),
            Case("B = 3, H = 6, N = 4, d = 2, heads 0 and 5", (randn(rng, 3, 6, 4, 2), [0, 5])),
            Case("no heads: nothing changes", (randn(rng, 2, 3, 4, 2), [])),
        ]
    h = int(rng.integers(3, 10))
    heads = sorted({int(i) for i in rng.integers(0, h, size=2)})
    return [
        Case(
            f"B = 2, H = {h}, heads {heads} (drawn from the seed)", (randn(rng, 2, h, 7, 4), heads)
        ),
        Case("B = 1, N = 1: the mean is the value", (randn(rng, 1, 2, 1, 3), [0])),
        Case("every head of 3", (randn(rng, 4, 3, 6, 2), [0, 1, 2])),
    ]


exercise(
    "11.4",
    mean_ablate_reference,
    target="mean_ablate",
    title="mean-ablate heads, then predict what removing induction heads costs",
    points=1,
    cases=_ablate_cases,
    atol=1e-6,
    rtol=1e-6,
    compare=_a_tensor("run_model puts what you return back into the model's tensors."),
    keeps_inputs=True,
    reveals="the rise in loss on repeated text (nats per token)",
    slips={
        "zero": dict(zero=True),
        "positions-only": dict(over=(2,)),
        "batch-only": dict(over=(0,)),
        "the-others": dict(others=True),
    },
)


# --------------------------------------------------------------------------- 11.5 predict, measure


def scaled_score_variance_reference(q, k, *, power=0.5, std=False, ddof=0) -> float:
    r"""The variance of the scaled scores :math:`q_n \cdot k_m / \sqrt{d_k}` over every pair
    :math:`(n, m)` (and every leading index) of ``q [..., N, d]``, ``k [..., M, d]``, the
    population (1/count) variance. Chapter 03: 1 when the components are independent with mean 0
    and variance 1."""
    q, k = torch.as_tensor(q).double(), torch.as_tensor(k).double()
    s = (q @ k.transpose(-2, -1)) / q.shape[-1] ** power  # (..., N, M)
    v = float(s.flatten().var(correction=ddof))
    return math.sqrt(v) if std else v


def _score_var_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def pair(*shape, std=1.0, mean=0.0):
        return (randn(rng, *shape, std=std) + mean, randn(rng, *shape, std=std) + mean)

    if not hidden:
        return [
            Case("q, k with independent N(0, 1) components, N = 256, d = 64", pair(256, 64)),
            Case("[B, H, N, d] = [2, 3, 40, 32], as a model's heads", pair(2, 3, 40, 32)),
            Case(
                "components with standard deviation 2, d = 64",
                pair(256, 64, std=2.0),
                why="each product q_i k_i has variance sd(q)^2 sd(k)^2 = 16; dividing by "
                "sqrt(d) removes the d terms of the sum, not the size of each term.",
            ),
            Case(
                "components with mean 1 and variance 1, d = 16",
                pair(300, 16, mean=1.0),
                why="with a shared mean the terms of q . k are no longer mean-0 products: "
                "q_i k_i has variance 3 here (1 + 1 + 1 from the two means and the noise), so "
                "the scaled scores have variance about 3.",
            ),
        ]
    d = int(rng.integers(4, 129))
    return [
        Case(f"N(0, 1) components, batch 2, heads 3, d = {d} (drawn)", pair(2, 3, 40, d)),
        Case("d = 1", pair(50, 1)),
        Case("standard deviation 0.5, d = 32", pair(80, 32, std=0.5)),
    ]


exercise(
    "11.5",
    scaled_score_variance_reference,
    target="scaled_score_variance",
    title="predict, then measure: the variance of the scaled scores",
    points=1,
    cases=_score_var_cases,
    atol=1e-9,
    rtol=1e-7,
    compare=within(1e-7),
    measures="the variance of q . k / sqrt(d_k)",
    slips={
        "unscaled": dict(power=0.0),
        "over-d": dict(power=1.0),
        "std": dict(std=True),
        "unbiased": dict(ddof=1),
    },
)


# --------------------------------------------------------------------------- 11.6 predict, measure


def slow_pair_share_reference(
    x, base, context, *, half=False, fast=False, exponent=2.0, count=False
) -> float:
    r"""The share of :math:`\sum \lVert x \rVert^2` over the vectors ``x [..., d]`` that lies
    in the RoPE pairs :math:`(2i, 2i+1)` turning less than once within the context, those with
    :math:`(C - 1)\,\theta_i < 2\pi`, :math:`\theta_i = b^{-2i/d}`: a pair that never completes
    a turn cannot tell positions apart by its angle's phase over the whole context."""
    x = torch.as_tensor(x).double()
    d = x.shape[-1]
    x = x.reshape(-1, d)  # (M, d)
    a, b = (x[:, : d // 2], x[:, d // 2 :]) if half else (x[:, 0::2], x[:, 1::2])  # (M, d/2)
    theta = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    slow = (context - 1) * theta < 2 * math.pi  # (d/2,) turns less than once in the context
    if fast:
        slow = ~slow
    if count:
        return float(slow.double().mean())
    e = (a**2 + b**2).sum(0)  # (d/2,)
    return float(e[slow].sum() / e.sum())


def _slow_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        iso = randn(rng, 500, 64)  # (M, d)
        loud_end = randn(rng, 500, 64) * torch.cat([torch.ones(48), torch.full((16,), 4.0)])
        return [
            Case(
                "isotropic vectors, d = 64, base 100000, context 8192 (SmolLM2's numbers)",
                (iso, 100000.0, 8192),
                why="isotropic vectors spread their energy evenly over the 32 pairs, so the "
                "share is the share of slow pairs: 12 of 32 (05.6 counted the others).",
            ),
            Case(
                "the last 16 coordinates 4 times larger, d = 64, base 100000, context 8192",
                (loud_end, 100000.0, 8192),
                why="the slowest pairs are the last ones, so vectors whose last coordinates are "
                "large put most of their energy where the angle barely moves.",
            ),
            Case("d = 8, base 10000, context 8", (randn(rng, 3, 10, 8), 10000.0, 8)),
            Case(
                "d = 8, base 10000, context 7: pair 0 turns 6 radians by the last position, "
                "short of a turn (2 pi = 6.28)",
                (randn(rng, 40, 8), 10000.0, 7),
            ),
        ]
    d = 2 * int(rng.integers(4, 65))
    return [
        Case(f"d = {d}, base 10000, context 4096 (drawn)", (randn(rng, 200, d), 10000.0, 4096)),
        Case("d = 128, base 500000, context 131072", (randn(rng, 2, 50, 128), 5e5, 131072)),
        Case("d = 4, base 10000, context 2", (randn(rng, 20, 4), 10000.0, 2)),
    ]


exercise(
    "11.6",
    slow_pair_share_reference,
    target="slow_pair_share",
    title="predict, then measure: the energy in RoPE's slow pairs",
    points=1,
    cases=_slow_cases,
    atol=1e-9,
    rtol=1e-7,
    compare=within(1e-7),
    measures="the share of energy in the pairs that turn less than once",
    slips={
        "half-split": dict(half=True),
        "fast-pairs": dict(fast=True),
        "exponent": dict(exponent=1.0),
        "count-pairs": dict(count=True),
    },
)


# --------------------------------------------------------------------------- 11.7 the kernel's LSE


def causal_lse_reference(
    q, k, scale, *, causal=True, use_scale=True, log_base=math.e, max_only=False, fill=-math.inf
) -> torch.Tensor:
    r"""The log-sum-exp of each causal row of scaled scores, ``[..., N]`` for ``q, k [..., N,
    d]``: :math:`\mathrm{LSE}_n = \log \sum_{m \le n} e^{\text{scale}\, q_n \cdot k_m}`, natural
    log (what chapter 06's kernel returns beside its output, for the backward pass)."""
    q, k = torch.as_tensor(q).double(), torch.as_tensor(k).double()
    s = (q @ k.transpose(-2, -1)) * (scale if use_scale else 1.0)  # (..., N, N)
    if causal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril()  # (N, N)
        s = s.masked_fill(~keep, fill)
    if max_only:
        return s.amax(-1)  # (..., N)
    return torch.logsumexp(s, -1) / math.log(log_base)  # (..., N)


def _lse_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "B = 1, H = 2, N = 6, d = 4, scale 1/2",
                (randn(rng, 1, 2, 6, 4), randn(rng, 1, 2, 6, 4), 0.5),
            ),
            Case("N = 8, d = 16, scale 1/4", (randn(rng, 8, 16), randn(rng, 8, 16), 0.25)),
            Case(
                "large scores (q, k of size 30): exp overflows without care",
                (randn(rng, 2, 5, 8, std=30.0), randn(rng, 2, 5, 8, std=30.0), 0.35),
            ),
        ]
    n = int(rng.integers(2, 40))
    return [
        Case(f"N = {n}, d = 8 (drawn)", (randn(rng, 3, n, 8), randn(rng, 3, n, 8), 8**-0.5)),
        Case(
            "N = 1: the LSE is the one score", (randn(rng, 1, 1, 1, 4), randn(rng, 1, 1, 1, 4), 0.5)
        ),
        Case("scale 1, d = 64", (randn(rng, 2, 16, 64), randn(rng, 2, 16, 64), 1.0)),
    ]


exercise(
    "11.7",
    causal_lse_reference,
    target="causal_lse",
    title="the kernel's log-sum-exp, then predict it on real queries and keys",
    points=1,
    cases=_lse_cases,
    atol=1e-6,
    rtol=1e-6,
    compare=_a_tensor("the notebook compares it with the kernel's LSE, a tensor."),
    reveals="the mean log-sum-exp over the rows",
    slips={
        "not-causal": dict(causal=False),
        "zero-fill": dict(fill=0.0),
        "unscaled": dict(use_scale=False),
        "base-2": dict(log_base=2.0),
        "max-only": dict(max_only=True),
    },
)
