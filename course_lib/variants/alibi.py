r"""ALiBi: attention with linear biases instead of position embeddings.

Press, Smith and Lewis (2022, "Train Short, Test Long: Attention with Linear Biases Enables
Input Length Extrapolation") add no position embedding at all. Each head :math:`h` adds to
its scores a penalty proportional to the distance between query and key,

.. math::

    S_{ij} = \frac{q_i^\top k_j}{\sqrt{d_h}} - m_h\,(i - j), \qquad j \le i,

with a fixed (not learned) slope :math:`m_h` per head. The slopes form a geometric
sequence: for :math:`H` a power of two, :math:`m_h = 2^{-8h/H}`, :math:`h = 1..H`
(:math:`\tfrac12, \tfrac14, \dots, \tfrac1{256}` for 8 heads), so some heads look only at
the last few tokens and others far back. For other head counts the paper takes the slopes
of the closest power of two below :math:`H` and fills up with every other slope of the
next power of two (:func:`alibi_slopes`). BLOOM (BigScience Workshop, 2022) and MPT use
ALiBi.

Because the penalty only grows with distance, a model trained on short sequences meets
nothing new on longer ones: far keys are simply penalised more. Chapter 08 measures what
that buys against RoPE (``course_lib.experiments.extrapolation``).
"""

from __future__ import annotations

import math

import torch

__all__ = ["alibi_bias", "alibi_slopes"]


def _power_of_two_slopes(n: int) -> list[float]:
    # m_h = 2^(-8h/n) for h = 1..n: the geometric sequence that starts and has ratio 2^(-8/n)
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    r"""The ALiBi slopes ``[H]`` of the paper's recipe, for any number of heads.

    * :math:`H = 2^a`: :math:`m_h = 2^{-8h/H}`, :math:`h = 1, \dots, H`.
    * otherwise, with :math:`P = 2^{\lfloor \log_2 H \rfloor}` the closest power of two
      below: the :math:`P` slopes of :math:`P` heads, then the first :math:`H - P` of the
      slopes of :math:`2P` heads taken at odd :math:`h` (every other one:
      :math:`2^{-8 \cdot 1/2P}, 2^{-8 \cdot 3/2P}, \dots`), which fall *between* the first
      ones, so the set keeps spanning short and long ranges.

    ``alibi_slopes(8)`` is :math:`[2^{-1}, 2^{-2}, \dots, 2^{-8}]`; ``alibi_slopes(12)`` is
    the 8 slopes of 8 heads followed by :math:`2^{-0.5}, 2^{-1.5}, 2^{-2.5}, 2^{-3.5}`.
    """
    if isinstance(num_heads, bool) or int(num_heads) != num_heads or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    n = int(num_heads)
    p = 2 ** int(math.floor(math.log2(n)))
    slopes = _power_of_two_slopes(p)
    if p < n:
        slopes += _power_of_two_slopes(2 * p)[0::2][: n - p]
    return torch.tensor(slopes, dtype=dtype)  # (H,)


def alibi_bias(
    num_heads: int,
    n_q: int,
    n_k: int | None = None,
    *,
    slopes: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    r"""The additive ALiBi bias ``[H, Nq, Nk]``: :math:`-m_h\,(i - j)`.

    Pass it as a float mask to ``course_lib.attention.scaled_dot_product_attention`` (it is
    added to the scaled scores) together with ``is_causal=True``; entries with
    :math:`j > i` are positive and must be masked out by the causal mask.
    ``slopes`` defaults to :func:`alibi_slopes`.
    """
    n_k = n_q if n_k is None else n_k
    slopes = alibi_slopes(num_heads, dtype=dtype) if slopes is None else slopes.to(dtype)
    if slopes.shape != (int(num_heads),):
        raise ValueError(f"expected slopes of shape [H] = [{num_heads}], got {tuple(slopes.shape)}")
    i = torch.arange(int(n_q), dtype=dtype)[:, None]  # (Nq, 1)
    j = torch.arange(int(n_k), dtype=dtype)[None, :]  # (1, Nk)
    return -slopes[:, None, None] * (i - j)  # (H, Nq, Nk)
