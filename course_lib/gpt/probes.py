r"""Looking inside a trained model: repeated random tokens and the heads that copy them.

A *previous-token head* attends from each token to the one before it; an *induction head*
attends from a token to the token that followed its previous occurrence, and so predicts a
repeated sequence (Olsson et al., 2022, "In-context Learning and Induction Heads"). The
scores here take a layer's attention weights ``[B, H, N, N]`` and return one number per
head; they work on any model whose weights can be read, the course's or a real one.
"""

from __future__ import annotations

import torch

__all__ = [
    "duplicate_token_scores",
    "induction_scores",
    "previous_token_scores",
    "random_period_tokens",
    "repeated_random_tokens",
    "top_heads",
    "uniform_induction_score",
]


def repeated_random_tokens(
    batch_size: int,
    period: int,
    vocab_size: int,
    *,
    copies: int = 2,
    generator: torch.Generator | None = None,
    low: int = 0,
) -> torch.Tensor:
    """Random tokens in ``[low, vocab_size)`` repeated ``copies`` times: ``[B, copies·period]``.

    The first copy is unpredictable; from the second on, every token can be predicted by
    looking up where the current token occurred before and copying its successor: the
    job of an induction head.
    """
    first = torch.randint(low, vocab_size, (batch_size, period), generator=generator)  # (B, T)
    return first.repeat(1, copies)  # (B, copies*T)


def induction_scores(weights: torch.Tensor, period: int) -> torch.Tensor:
    r"""Per-head induction score of attention weights ``[B, H, N, N]`` on repeated tokens.

    On a sequence that repeats with period :math:`T` (:math:`t_{n} = t_{n-T}`), an
    induction head at query :math:`n` attends to key :math:`n - T + 1`: the token *after*
    the previous occurrence of the current token, which is the token to copy next
    (Olsson et al., 2022, "In-context Learning and Induction Heads"). The score is the
    mean weight on that key over every query that has one, :math:`n \ge T`:

    .. math:: s_h = \frac{1}{B\,(N - T)} \sum_b \sum_{n=T}^{N-1} P^{(h)}_{b,\,n,\,n-T+1}

    Returns ``[H]``: 1 for a perfect induction head, about :math:`1/n` for uniform attention.
    """
    return _mean_weight_back(weights, period, period - 1)  # (H,): key n - T + 1


def _mean_weight_back(weights: torch.Tensor, period: int, back: int) -> torch.Tensor:
    r"""Per-head mean weight from query :math:`n` on key :math:`n - back`, over :math:`n \ge T`,
    of weights ``[B, H, N, N]`` on tokens repeating with period :math:`T`. Returns ``[H]``."""
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"expected weights [B, H, N, N], got {tuple(weights.shape)}")
    n = weights.shape[-1]
    if not 1 <= period < n:
        raise ValueError(f"period must be in [1, N={n}), got {period}")
    queries = torch.arange(period, n)  # (N-T,)
    return weights[:, :, queries, queries - back].mean(dim=(0, 2))  # (H,)


def previous_token_scores(weights: torch.Tensor) -> torch.Tensor:
    r"""Per-head mean weight on the previous token: :math:`\frac{1}{B(N-1)}\sum P_{b,n,n-1}`."""
    if weights.ndim != 4:
        raise ValueError(f"expected weights [B, H, N, Nk], got {tuple(weights.shape)}")
    n = weights.shape[-2]
    queries = torch.arange(1, n)  # (N-1,)
    return weights[:, :, queries, queries - 1].mean(dim=(0, 2))  # (H,)


def duplicate_token_scores(weights: torch.Tensor, period: int) -> torch.Tensor:
    r"""Per-head duplicate-token score of attention weights ``[B, H, N, N]`` on repeated tokens.

    A *duplicate-token head* attends from a token to its own previous occurrence, key
    :math:`n - T` (Wang et al., 2022, "Interpretability in the Wild", found such heads in GPT-2
    small); an induction head looks one further, at :math:`n - T + 1`. The score is the mean
    weight on key :math:`n - T` over the queries :math:`n \ge T`. Returns ``[H]``.
    """
    return _mean_weight_back(weights, period, period)  # (H,): key n - T


def uniform_induction_score(period: int, copies: int = 2) -> float:
    r"""The induction score of uniform causal attention: the baseline a real head must beat.

    A causal query at position :math:`n` sees :math:`n + 1` keys, so uniform attention puts
    :math:`1/(n+1)` on each; averaged over the queries :math:`n = T, \dots, cT - 1` of
    :func:`induction_scores`: :math:`\frac{1}{(c-1)T}\sum_n \frac{1}{n+1}`, about
    :math:`\ln 2 / T` for two copies.
    """
    if period < 1 or copies < 2:
        raise ValueError(f"need period >= 1 and copies >= 2, got {period}, {copies}")
    n = torch.arange(period, copies * period, dtype=torch.float64)  # (N-T,)
    return float((1.0 / (n + 1)).mean())


def top_heads(scores: torch.Tensor, k: int = 5) -> list[tuple[int, int, float]]:
    """The ``k`` highest of per-head scores ``[L, H]``: ``(layer, head, score)``, strongest first,
    the score as a float rounded to three decimals."""
    if scores.ndim != 2:
        raise ValueError(f"expected scores [L, H], got {tuple(scores.shape)}")
    flat = scores.flatten()  # (L*H,)
    order = flat.argsort(descending=True)[: int(k)]
    heads = scores.shape[1]
    return [(int(i) // heads, int(i) % heads, round(float(flat[i]), 3)) for i in order]


def random_period_tokens(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    *,
    min_period: int,
    max_period: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Rows of random tokens that repeat with a random period each: ``[B, N]``.

    Row :math:`b` draws a period :math:`T_b \\in [\\text{min}, \\text{max}]` and
    :math:`T_b` random tokens, repeated to fill ``seq_len``. Because the period varies,
    "copy the token :math:`T` positions back" is no solution: a model must find where the
    current token occurred before, by content (an induction head).
    """
    periods = torch.randint(min_period, max_period + 1, (batch_size,), generator=generator)  # (B,)
    first = torch.randint(0, vocab_size, (batch_size, max_period), generator=generator)  # (B, Tmax)
    n = torch.arange(seq_len)  # (N,)
    return first.gather(1, n[None, :] % periods[:, None])  # (B, N)


# =========================================================================== induction heads

# The induction-head experiment: a 2-layer attention-only model on rows that repeat with a
# random period (so that "copy from T back" is no solution). With this recipe the heads
# formed after 1300 to 1700 steps for seeds 0, 1, 2 (a sudden drop of the loss: the phase
