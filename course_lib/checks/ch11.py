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

from .core import Case, Exercise, Hint, compare_values, register
from .kit import randn, twin, unless_different, within

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


def _share(weights, start=1, key=0):
    w = torch.as_tensor(weights)
    return float(w[:, :, start:, key].mean())


def first_token_share_reference(weights) -> float:
    r"""The mean weight on key 0 over the queries :math:`n \ge 1`, every head and row:
    :math:`\frac{1}{BH(N-1)}\sum_{b,h}\sum_{n=1}^{N-1} P^{(h)}_{b,n,0}`. Query 0 is left out:
    it has only key 0, so its weight there is 1 whatever the head does."""
    return _share(weights)


def _share_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("uniform causal attention, N = 8 (1 row, 1 head)", (_uniform(1, 1, 8),)),
            Case("uniform causal attention, N = 64, 2 rows, 3 heads", (_uniform(2, 3, 64),)),
            Case("random causal softmax rows, N = 16", (_causal_weights(rng, 2, 4, 16),)),
            Case(
                "a sink: key 0's score +4, e^4 = 55 times a plain key's weight (N = 32)",
                (_causal_weights(rng, 1, 3, 32, 4.0),),
            ),
        ]
    return [
        Case("uniform causal attention, N = 2", (_uniform(1, 1, 2),)),
        Case("uniform causal attention, N = 256", (_uniform(1, 2, 256),)),
        Case(
            "a strong sink: +8 on key 0, e^8 = 3000 times a plain key (N = 40)",
            (_causal_weights(rng, 2, 2, 40, 8.0),),
        ),
        Case("random causal softmax rows, N = 5", (_causal_weights(rng, 1, 2, 5),)),
    ]


register(
    Exercise(
        id="11.1",
        title="predict, then measure: the first token's share of attention",
        points=1,
        target="first_token_share",
        cases=_share_cases,
        reference=first_token_share_reference,
        atol=1e-9,
        rtol=1e-6,
        compare=within(1e-6),
        measures="the first token's share of attention",
        gaps={
            "low": "uniform attention spreads a query's weight over all its keys, but a trained "
            "head must put its weight somewhere even when no key is relevant, and most of "
            "SmolLM2's heads park it on the first token, which every query can see (an "
            "'attention sink', Xiao et al., 2023). In most layers from layer 3 on, many times "
            "the uniform share lands there, in some more than half of all attention; layers 0 "
            "and 1 stay below the uniform share.",
            "high": "the first token is a sink in most layers, but not all weight goes there: "
            "layers 0 and 1 barely look at it, and even sink heads keep part of their weight "
            "for the keys that matter.",
            "right": "you expected a sink, and SmolLM2 has one.",
        },
        mistakes={
            Hint(
                "you counted query 0, whose only key is key 0.",
                "Query 0 puts weight 1 on key 0 whatever the head does: start at query 1.",
            ): twin(_share, start=0),
            Hint(
                "you measured the weight on the last key, not the first.",
                "The first token is key 0: weights[:, :, 1:, 0].",
            ): unless_different(lambda w: _share(w, key=-1), first_token_share_reference),
            Hint(
                "you measured the first *query*'s weights, not the first *key*'s.",
                "weights[b, h, n, m] is query n's weight on key m: key 0 is the last index = 0.",
            ): unless_different(
                lambda w: float(torch.as_tensor(w)[:, :, 0, 1:].mean()),
                first_token_share_reference,
            ),
        },
        hint=Hint(
            "check which entries of `weights` you average: which key, which queries, and over "
            "which axes (every head and every row of the batch).",
            "Average the weight on key 0 over the queries 1 .. N-1, every head and row. return "
            "float(weights[:, :, 1:, 0].mean())",
        ),
    )
)


# --------------------------------------------------------------------------- 11.2 predict, measure


def _kept(n, window, sinks, *, own=True, causal_sinks=True, union=True):
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


def kept_pairs_reference(n: int, window: int, sinks: int) -> int:
    r"""The (query, key) pairs of :math:`N` tokens a causal sliding window of :math:`W` keys
    (the query's own included) with the first :math:`S` keys kept lets through:
    :math:`\#\{(n, m) : m \le n,\ (n - m < W \vee m < S)\}`."""
    return _kept(n, window, sinks)


def _kept_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("N = 8, W = 8, no sinks: the full causal triangle", (8, 8, 0)),
            Case("N = 1024, W = 64, no sinks", (1024, 64, 0)),
            Case(
                "N = 1024, W = 64, 4 sinks: each query past the window gains at most 4 keys",
                (1024, 64, 4),
            ),
            Case("N = 10, W = 3, 2 sinks", (10, 3, 2)),
        ]
    n, w, s = int(rng.integers(64, 512)), int(rng.integers(2, 64)), int(rng.integers(1, 9))
    return [
        Case(f"N = {n}, W = {w}, {s} sinks (drawn from the seed)", (n, w, s)),
        Case("N = 4096, W = 256, 4 sinks", (4096, 256, 4)),
        Case("N = 5, W = 1, 1 sink", (5, 1, 1)),
        Case("N = 64, W = 100, 4 sinks: the window is wider than the text", (64, 100, 4)),
    ]


register(
    Exercise(
        id="11.2",
        title="predict, then measure: what a sliding window with sinks keeps",
        points=1,
        target="kept_pairs",
        cases=_kept_cases,
        reference=kept_pairs_reference,
        atol=0.5,
        rtol=0.0,
        compare=within(0.5, relative=False),
        measures="the (query, key) pairs kept",
        mistakes={
            Hint(
                "your window holds W + 1 keys: you kept n - m <= W.",
                "The window is the last W keys *including the query's own*: n - m < W.",
            ): unless_different(lambda n, w, s: _kept(n, w, s, own=False), kept_pairs_reference),
            Hint(
                "you counted a sink key that is inside the window twice.",
                "Take the union of the two masks, (window OR sink), then count.",
            ): unless_different(lambda n, w, s: _kept(n, w, s, union=False), kept_pairs_reference),
            Hint(
                "your sinks let an early query see a later key.",
                "A sink is still a key of the causal mask: query n sees sink m only when m <= n.",
            ): unless_different(
                lambda n, w, s: _kept(n, w, s, causal_sinks=False), kept_pairs_reference
            ),
        },
        hint=Hint(
            "count a small case by hand (N = 6, W = 2, S = 1): which keys does each query keep?",
            "Build the [N, N] boolean mask and count its True entries. i = arange(n); keep = "
            "(i[None] <= i[:, None]) & ((i[:, None] - i[None] < window) | (i[None] < sinks)); "
            "return int(keep.sum())",
        ),
    )
)


# --------------------------------------------------------------------------- 11.3 predict, measure


def _held_out(right, select, test, *, choose="select", score="test", best=True):
    r = torch.as_tensor(right).double()  # (S, K)
    rows = {"select": list(select), "test": list(test), "all": list(select) + list(test)}
    acc = r[rows[choose]].mean(0)  # (K,)
    head = int(acc.argmax()) if best else int(acc.argmin())
    return float(r[rows[score], head].mean())


def held_out_accuracy_reference(right, select, test) -> float:
    r"""Choose the head with the highest accuracy on the ``select`` rows of ``right [S, K]``
    (1 where head :math:`k` is right on sentence :math:`s`), then return *its* accuracy on the
    ``test`` rows: :math:`\hat k = \arg\max_k \overline{r}_{\text{select}, k}`,
    :math:`\overline{r}_{\text{test}, \hat k}`."""
    return _held_out(right, select, test)


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
            right = torch.as_tensor(right).float()  # (S, K) 0/1, as the notebook's
            return right, list(range(half)), list(range(half, sentences))


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
            Case(
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


register(
    Exercise(
        id="11.3",
        title="predict, then measure: the best head on sentences it was not chosen on",
        points=1,
        target="held_out_accuracy",
        cases=_held_out_cases,
        reference=held_out_accuracy_reference,
        atol=1e-6,
        rtol=1e-6,
        compare=within(1e-6),
        measures="the chosen head's held-out accuracy",
        gaps={
            "high": "you expected a perfect head. The best head at the pronoun is good, not "
            "perfect: in some held-out groups it favours the same noun in both versions, so it is "
            "right in one and wrong in the other (the per-group counts are printed below).",
            "low": "you expected luck, as with coin-flip heads. But here the pronoun itself "
            "decides (it or they, he or she), and some heads read it: a head chosen for skill "
            "keeps its rate on groups it was not chosen on, as the 90 % head of the check did.",
            "right": "you expected a head that reads agreement to keep its rate on fresh groups, "
            "and it does.",
        },
        mistakes={
            Hint(
                "you scored the head on the sentences you chose it on.",
                "That is the selection's own accuracy, flattered by luck: choose on `select`, "
                "then score that head on `test`.",
            ): unless_different(
                twin(_held_out, choose="select", score="select"), held_out_accuracy_reference
            ),
            Hint(
                "you chose the head on the test sentences.",
                "The test half may only score: choose with right[select].mean(0).argmax().",
            ): unless_different(
                twin(_held_out, choose="test", score="test"), held_out_accuracy_reference
            ),
            Hint(
                "you chose the head on every sentence, the test ones included.",
                "Then the test half helped choose and is no longer held out: choose on `select` "
                "only.",
            ): unless_different(twin(_held_out, choose="all"), held_out_accuracy_reference),
            Hint(
                "you chose the *worst* head (argmin).",
                "The best head has the highest accuracy on `select`: argmax.",
            ): unless_different(twin(_held_out, best=False), held_out_accuracy_reference),
            Hint(
                "you averaged every head on the test half instead of choosing one.",
                "First choose the best head on `select`, then return its mean on `test`.",
            ): unless_different(
                lambda r, s, t: float(torch.as_tensor(r).double()[list(t)].mean()),
                held_out_accuracy_reference,
            ),
        },
        hint=Hint(
            "check which rows choose the head, which rows score it, and the axis of `right` that "
            "holds the heads.",
            "Accuracy per head on the selection rows, argmax, then that head's mean on the test "
            "rows. r = torch.as_tensor(right).double(); k = int(r[select].mean(0).argmax()); "
            "return float(r[test, k].mean())",
        ),
    )
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


def _ablate(out, heads, *, over=(0, 2), zero=False, others=False):
    o = torch.as_tensor(out).clone()  # (B, H, N, d)
    chosen = [h for h in range(o.shape[1]) if (h in set(heads)) != others]
    for h in chosen:
        if zero:
            o[:, h] = 0.0
        else:
            o[:, h] = torch.as_tensor(out)[:, h : h + 1].mean(dim=over, keepdim=True)[:, 0]
    return o  # (B, H, N, d)


def mean_ablate_reference(out: torch.Tensor, heads) -> torch.Tensor:
    r"""A copy of one layer's per-head outputs ``out [B, H, N, d]`` in which each head of
    ``heads`` is replaced by its mean over the batch and the positions:
    :math:`o_{b,h,n} \leftarrow \frac{1}{BN}\sum_{b',n'} o_{b',h,n'}` (mean ablation: the head
    still adds its average, but no longer anything that depends on the input)."""
    return _ablate(out, heads)


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


register(
    Exercise(
        id="11.4",
        title="mean-ablate heads, then predict what removing induction heads costs",
        points=1,
        target="mean_ablate",
        cases=_ablate_cases,
        reference=mean_ablate_reference,
        atol=1e-6,
        rtol=1e-6,
        compare=_a_tensor("run_model puts what you return back into the model's tensors."),
        keeps_inputs=Hint(
            "your function changed its input in place: `out` must stay as it was given.",
            "Clone it first (o = out.clone()), replace the heads in the clone and return the "
            "clone, as the statement asks: a caller may still need the layer's own output.",
        ),
        reveals="the rise in loss on repeated text (nats per token)",
        gaps={
            "low": "on the second copy of random tokens, copying from the first copy is the "
            "only way to predict, and induction heads do the copying. With the strongest ones "
            "replaced by a constant the model loses most of that skill: its loss climbs most of "
            "the way to the first copy's, where there is nothing to copy.",
            "high": "the loss does not climb all the way to the first copy's: other heads copy "
            "too, and take over part of the work (backup heads, Wang et al., 2022), so the "
            "rise stops short of the first copy's loss.",
            "right": "you expected the copying to break, and it did.",
        },
        mistakes={
            Hint(
                "you set the heads to zero (zero ablation).",
                "Mean ablation keeps each head's average output and removes only what depends "
                "on the input: out[:, h] = out[:, h].mean(dim=(0, 1), keepdim=True).",
            ): unless_different(twin(_ablate, zero=True), mean_ablate_reference),
            Hint(
                "you averaged over the positions only: each batch row keeps its own mean.",
                "Average over the batch too, dims (0, 2) of out, (0, 1) of out[:, h].",
            ): unless_different(twin(_ablate, over=(2,)), mean_ablate_reference),
            Hint(
                "you averaged over the batch only: each position keeps its own mean.",
                "Average over the positions too, dims (0, 2) of out.",
            ): unless_different(twin(_ablate, over=(0,)), mean_ablate_reference),
            Hint(
                "you ablated every head *except* the ones listed.",
                "Replace the heads in `heads`; leave the others as they are.",
            ): unless_different(twin(_ablate, others=True), mean_ablate_reference),
        },
        hint=Hint(
            "check which heads you replace, what you replace them with (a mean over which "
            "axes?), and that you return a copy.",
            "Copy out, then for each listed head put its mean over batch and positions. o = "
            "out.clone(); for h in heads: o[:, h] = out[:, h].mean(dim=(0, 1), keepdim=True); "
            "return o",
        ),
    )
)


# --------------------------------------------------------------------------- 11.5 predict, measure


def _score_var(q, k, *, power=0.5, std=False, ddof=0):
    q, k = torch.as_tensor(q).double(), torch.as_tensor(k).double()
    s = (q @ k.transpose(-2, -1)) / q.shape[-1] ** power  # (..., N, M)
    v = float(s.flatten().var(correction=ddof))
    return math.sqrt(v) if std else v


def scaled_score_variance_reference(q, k) -> float:
    r"""The variance of the scaled scores :math:`q_n \cdot k_m / \sqrt{d_k}` over every pair
    :math:`(n, m)` (and every leading index) of ``q [..., N, d]``, ``k [..., M, d]``, the
    population (1/count) variance. Chapter 03: 1 when the components are independent with mean 0
    and variance 1."""
    return _score_var(q, k)


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


register(
    Exercise(
        id="11.5",
        title="predict, then measure: the variance of the scaled scores",
        points=1,
        target="scaled_score_variance",
        cases=_score_var_cases,
        reference=scaled_score_variance_reference,
        atol=1e-9,
        rtol=1e-7,
        compare=within(1e-7),
        measures="the variance of q . k / sqrt(d_k)",
        gaps={
            "low": "chapter 03's argument is about independent unit-variance components, which "
            "is what a model starts from. Training is free to grow W_Q and W_K, and SmolLM2's "
            "queries and keys are larger and share directions: the scaled scores have a "
            "variance from about 3 to about 60 depending on the layer (the lecture plots all "
            "30), and the "
            "softmax is sharper than 1/sqrt(d_k) alone would make it. The scale sets where "
            "training starts, not where it ends.",
            "high": "the variance is large, but not that large: the scale still divides the "
            "d_k-fold growth of the sum, and what remains is the trained size and alignment of "
            "q and k.",
            "right": "you expected trained scores far from unit variance, and they are.",
        },
        mistakes={
            Hint(
                "you forgot the scale: this is the variance of q . k, about d_k times too big.",
                "Divide the scores by sqrt(d_k) = sqrt(q.shape[-1]) before the variance.",
            ): twin(_score_var, power=0.0),
            Hint(
                "you divided the scores by d_k, not sqrt(d_k).",
                "The scaled score is q . k / sqrt(d_k): q.shape[-1] ** 0.5.",
            ): twin(_score_var, power=1.0),
            Hint(
                "you returned the standard deviation, not the variance.",
                "Var = std^2: use .var(), or square the std.",
            ): unless_different(twin(_score_var, std=True), scaled_score_variance_reference),
            Hint(
                "you used the unbiased variance (divide by count - 1, torch.var's default).",
                "Use the population variance: .var(correction=0), or numpy's np.var.",
            ): twin(_score_var, ddof=1),
        },
        hint=Hint(
            "check which scores you take the variance of (every pair n, m, scaled) and which "
            "variance (the population's, 1/count).",
            "Every score q_n . k_m divided by sqrt(d), then the variance of them all. s = q @ "
            "k.transpose(-2, -1) / q.shape[-1] ** 0.5; return float(s.var(correction=0))",
        ),
    )
)


# --------------------------------------------------------------------------- 11.6 predict, measure


def _slow_share(x, base, context, *, half=False, fast=False, exponent=2.0, count=False):
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


def slow_pair_share_reference(x, base: float, context: int) -> float:
    r"""The share of :math:`\sum \lVert x \rVert^2` over the vectors ``x [..., d]`` that lies
    in the RoPE pairs :math:`(2i, 2i+1)` turning less than once within the context, those with
    :math:`(C - 1)\,\theta_i < 2\pi`, :math:`\theta_i = b^{-2i/d}`: a pair that never completes
    a turn cannot tell positions apart by its angle's phase over the whole context."""
    return _slow_share(x, base, context)


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


register(
    Exercise(
        id="11.6",
        title="predict, then measure: the energy in RoPE's slow pairs",
        points=1,
        target="slow_pair_share",
        cases=_slow_cases,
        reference=slow_pair_share_reference,
        atol=1e-9,
        rtol=1e-7,
        compare=within(1e-7),
        measures="the share of energy in the pairs that turn less than once",
        gaps={
            "low": "training moved the energy of queries and keys into the slow pairs, the ones "
            "whose angle barely turns over the context: there a dot product depends on what the "
            "vectors say more than on where they are. The fast pairs, which tell neighbours "
            "apart, keep a smaller share. Position is carried by a few fast pairs, content by "
            "the slow ones (the lecture's figure, per layer).",
            "high": "the slow pairs carry most of the energy, but not all: the fast pairs still "
            "hold a share, and they are what lets a head find the previous token.",
            "right": "you expected trained vectors to favour the slow pairs, and they do.",
        },
        mistakes={
            Hint(
                "you paired coordinates i and i + d/2 (the half-split layout).",
                "The course's model uses interleaved pairs (2i, 2i+1): x[..., 0::2] and "
                "x[..., 1::2].",
            ): unless_different(twin(_slow_share, half=True), slow_pair_share_reference),
            Hint(
                "you took the pairs that *do* turn at least once.",
                "Slow pairs turn less than once: (context - 1) * theta_i < 2 pi.",
            ): unless_different(twin(_slow_share, fast=True), slow_pair_share_reference),
            Hint(
                "your frequencies use the exponent i/d: they fall off twice as slowly.",
                "theta_i = base ** (-2 i / d) for pair i = 0 .. d/2 - 1.",
            ): unless_different(twin(_slow_share, exponent=1.0), slow_pair_share_reference),
            Hint(
                "you returned the share of slow *pairs*, not of the energy.",
                "Weigh each pair by its energy, sum over vectors of x[2i]^2 + x[2i+1]^2, then "
                "divide the slow pairs' sum by the total.",
            ): unless_different(twin(_slow_share, count=True), slow_pair_share_reference),
        },
        hint=Hint(
            "check which coordinates form a pair, which pairs count as slow (less than one turn "
            "within the context), and that pairs are weighed by their energy.",
            "Energy per pair summed over the vectors, a boolean mask of slow pairs, then the "
            "ratio. e = (x[..., 0::2] ** 2 + x[..., 1::2] ** 2).reshape(-1, d // 2).sum(0); "
            "theta = base ** (-2 * arange(d // 2) / d); slow = (context - 1) * theta < 2 * pi; "
            "return float(e[slow].sum() / e.sum())",
        ),
    )
)


# --------------------------------------------------------------------------- 11.7 the kernel's LSE


def _lse(
    q, k, scale, *, causal=True, use_scale=True, log_base=math.e, max_only=False, fill=-math.inf
):
    q, k = torch.as_tensor(q).double(), torch.as_tensor(k).double()
    s = (q @ k.transpose(-2, -1)) * (scale if use_scale else 1.0)  # (..., N, N)
    if causal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril()  # (N, N)
        s = s.masked_fill(~keep, fill)
    if max_only:
        return s.amax(-1)  # (..., N)
    return torch.logsumexp(s, -1) / math.log(log_base)  # (..., N)


def causal_lse_reference(q, k, scale: float) -> torch.Tensor:
    r"""The log-sum-exp of each causal row of scaled scores, ``[..., N]`` for ``q, k [..., N,
    d]``: :math:`\mathrm{LSE}_n = \log \sum_{m \le n} e^{\text{scale}\, q_n \cdot k_m}`, natural
    log (what chapter 06's kernel returns beside its output, for the backward pass)."""
    return _lse(q, k, scale)


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


register(
    Exercise(
        id="11.7",
        title="the kernel's log-sum-exp, then predict it on real queries and keys",
        points=1,
        target="causal_lse",
        cases=_lse_cases,
        reference=causal_lse_reference,
        atol=1e-6,
        rtol=1e-6,
        compare=_a_tensor("the notebook compares it with the kernel's LSE, a tensor."),
        reveals="the mean log-sum-exp over the rows",
        gaps={
            "low": "log(n + 1) is the LSE of a row of zeros, all keys alike. SmolLM2's rows are far from "
            "equal: a few keys (the first token above all) score much higher than the rest, and "
            "the LSE is close to the largest score plus a little, so it sits well above the "
            "uniform value.",
            "high": "the LSE of a row is at least its largest score and at most that plus "
            "log(n + 1): real rows with one dominant key sit near the bottom of that range.",
            "right": "you expected dominant keys to lift the LSE above log(n + 1), and they do.",
        },
        mistakes={
            Hint(
                "you summed over every key, the future ones included.",
                "Row n of the kernel's LSE runs over the keys m <= n it may see: mask the upper "
                "triangle with -inf first.",
            ): unless_different(twin(_lse, causal=False), causal_lse_reference),
            Hint(
                "your masked keys still count: a masked score of 0 adds e^0 = 1 to the sum.",
                "Fill the masked scores with -inf, whose exp is exactly 0, before the log-sum-exp.",
            ): unless_different(twin(_lse, fill=0.0), causal_lse_reference),
            Hint(
                "you forgot the scale.",
                "The scores the kernel exponentiates are scale * q . k.",
            ): unless_different(twin(_lse, use_scale=False), causal_lse_reference),
            Hint(
                "your LSE is in base 2.",
                "The kernel computes with exp2 inside but returns the natural log's LSE: "
                "torch.logsumexp, or m + log(l).",
            ): twin(_lse, log_base=2.0),
            Hint(
                "you returned the row maximum m alone.",
                "LSE = m + log(sum of exp(s - m)): the max is only its first term.",
            ): unless_different(twin(_lse, max_only=True), causal_lse_reference),
        },
        hint=Hint(
            "check which keys row n may see, what a masked key must add to the sum (nothing), "
            "and the scale.",
            "Scaled scores, the causal mask as -inf, then logsumexp over the keys. s = scale * q "
            "@ k.transpose(-2, -1); keep = ones(N, N, dtype=bool).tril(); return "
            "torch.logsumexp(s.masked_fill(~keep, -inf), dim=-1)",
        ),
    )
)
