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
    "induction_scores",
    "previous_token_scores",
    "random_period_tokens",
    "repeated_random_tokens",
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
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"expected weights [B, H, N, N], got {tuple(weights.shape)}")
    n = weights.shape[-1]
    if not 1 <= period < n:
        raise ValueError(f"period must be in [1, N={n}), got {period}")
    queries = torch.arange(period, n)  # (N-T,)
    keys = queries - period + 1  # (N-T,)
    return weights[:, :, queries, keys].mean(dim=(0, 2))  # (H,)


def previous_token_scores(weights: torch.Tensor) -> torch.Tensor:
    r"""Per-head mean weight on the previous token: :math:`\frac{1}{B(N-1)}\sum P_{b,n,n-1}`."""
    if weights.ndim != 4:
        raise ValueError(f"expected weights [B, H, N, Nk], got {tuple(weights.shape)}")
    n = weights.shape[-2]
    queries = torch.arange(1, n)  # (N-1,)
    return weights[:, :, queries, queries - 1].mean(dim=(0, 2))  # (H,)


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
