r"""Checks for chapter 11 (the course's claims, tested on a real model).

Two "predict, then measure" exercises, each a function the learner writes; the checks run on
small arrays made here (no model), the notebook then runs the same function on SmolLM2:

* 11.1 ``first_token_share(weights)``: the mean attention weight on key 0 over the queries
  :math:`n \ge 1` of ``weights [B, H, N, N]`` (the "attention sink" of Xiao et al., 2023)
* 11.2 ``kept_pairs(n, window, sinks)``: how many (query, key) pairs a causal sliding window
  of :math:`W` keys that always keeps the first :math:`S` keys lets through
"""

from __future__ import annotations

import numpy as np
import torch

from .core import Case, Exercise, Hint, register
from .kit import twin, unless_different, within

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
            "average the weight on key 0 over the queries 1 .. N-1, every head and row.",
            "return float(weights[:, :, 1:, 0].mean())",
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
            "build the [N, N] boolean mask and count its True entries.",
            "i = arange(n); keep = (i[None] <= i[:, None]) & ((i[:, None] - i[None] < window) "
            "| (i[None] < sinks)); return int(keep.sum())",
        ),
    )
)
