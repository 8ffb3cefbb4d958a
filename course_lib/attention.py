"""Scaled dot-product attention, in torch and in numpy, with masks that never produce NaN.

Given queries :math:`Q \\in \\mathbb{R}^{N_q \\times d_k}`, keys
:math:`K \\in \\mathbb{R}^{N_k \\times d_k}` and values :math:`V \\in \\mathbb{R}^{N_k \\times d_v}`,

.. math::

    \\mathrm{Attention}(Q, K, V) = \\mathrm{softmax}\\!\\left(\\frac{Q K^\\top}{\\sqrt{d_k}}
    + M\\right) V,

where the mask :math:`M` holds :math:`0` where query :math:`i` may attend to key :math:`j`
and :math:`-\\infty` where it may not (Vaswani et al., 2017, "Attention Is All You Need").

Conventions (the same as ``torch.nn.functional.scaled_dot_product_attention``):

* batch dimensions lead: ``q [..., Nq, d_k]``, ``k [..., Nk, d_k]``, ``v [..., Nk, d_v]``;
* a boolean ``mask`` broadcastable to ``[..., Nq, Nk]`` is **True where attending is
  allowed**; a floating-point mask is *added* to the scores;
* ``is_causal=True`` keeps key ``j`` for query ``i`` when ``j <= i``, aligned top-left
  (``torch.ones(Nq, Nk).tril()``) even when ``Nq != Nk``;
* ``scale`` defaults to :math:`1/\\sqrt{d_k}`.

A query row whose keys are *all* masked gets zero weights and a zero output, never NaN
(a plain softmax of an all-:math:`-\\infty` row is NaN; PyTorch's SDPA returns zeros there
since release 2.5, October 2024, and returned NaN before). Both functions return
``(output, weights)`` so the weights can be plotted and inspected (:func:`plot_attention`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .validation import validate_attention

__all__ = [
    "causal_mask",
    "masked_softmax",
    "numpy_attention",
    "numpy_causal_mask",
    "numpy_masked_softmax",
    "padding_mask",
    "plot_attention",
    "scaled_dot_product_attention",
]


# --------------------------------------------------------------------------- masks


def causal_mask(n_q: int, n_k: int | None = None, *, device=None) -> torch.Tensor:
    r"""The boolean causal mask ``[n_q, n_k]``: True where key :math:`j \le` query :math:`i`.

    .. math:: M_{ij} = [\, j \le i \,]

    Aligned top-left like torch's ``is_causal`` (query 0 sees key 0 only), also when
    ``n_q != n_k``. ``n_k`` defaults to ``n_q``.
    """
    n_k = n_q if n_k is None else n_k
    if int(n_q) < 0 or int(n_k) < 0:
        raise ValueError(f"causal_mask needs non-negative sizes, got n_q={n_q}, n_k={n_k}")
    return torch.ones(int(n_q), int(n_k), dtype=torch.bool, device=device).tril()  # (Nq, Nk)


def numpy_causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    """:func:`causal_mask` as a numpy boolean array ``[n_q, n_k]``."""
    n_k = n_q if n_k is None else n_k
    if int(n_q) < 0 or int(n_k) < 0:
        raise ValueError(f"causal_mask needs non-negative sizes, got n_q={n_q}, n_k={n_k}")
    return np.tril(np.ones((int(n_q), int(n_k)), dtype=bool))  # (Nq, Nk)


def padding_mask(lengths, n_k: int | None = None) -> torch.Tensor:
    r"""Key-padding mask ``[B, 1, n_k]`` from sequence lengths ``[B]``: True for real tokens.

    .. math:: M_{b, j} = [\, j < \mathrm{len}_b \,]

    The singleton query axis lets it broadcast against scores ``[B, Nq, Nk]``; add a
    head axis with ``mask[:, None]`` for ``[B, H, Nq, Nk]``. ``n_k`` defaults to the
    longest length; lengths must be integers in ``[0, n_k]``.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"expected lengths of shape [B], got {tuple(lengths.shape)}")
    if lengths.numel() == 0:
        lengths = lengths.long()  # torch.as_tensor([]) is float32
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"expected integer lengths, got dtype {lengths.dtype}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    if n_k is None:
        if lengths.numel() == 0:
            raise ValueError("give n_k when lengths is empty (B = 0)")
        n_k = int(lengths.max())
    n_k = int(n_k)
    if lengths.numel() and int(lengths.max()) > n_k:
        raise ValueError(
            f"a length exceeds the number of keys n_k={n_k}: got lengths {lengths.tolist()}"
        )
    positions = torch.arange(n_k, device=lengths.device)  # (Nk,)
    return (positions[None, :] < lengths[:, None])[:, None, :]  # (B, 1, Nk)


# --------------------------------------------------------------------------- softmax


def masked_softmax(
    scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1
) -> torch.Tensor:
    r"""Softmax that ignores masked entries and gives all-zero rows when everything is masked.

    .. math::

        w_j = \frac{[\,M_j\,]\, e^{s_j - m}}{\sum_{l} [\,M_l\,]\, e^{s_l - m}},
        \qquad m = \max_{l:\,M_l} s_l,

    and :math:`w = 0` when no :math:`M_l` is true (or every score is :math:`-\infty`).
    The plain ``softmax`` of an all-:math:`-\infty` row computes :math:`e^{-\infty - (-\infty)}`
    = NaN; here such rows are detected from the row max and set to zero, so values *and
    gradients* stay finite.

    Cost: the exponentials and the normalisation run in ``torch.softmax``, one fused kernel
    that reads the scores and writes the weights without N×N temporaries; written out
    step by step (max, subtract, exp, sum, divide: :func:`numpy_masked_softmax` is that
    readable version) the same softmax writes three fresh N×N arrays; chapter 02, section 4,
    times both. Only a batch that has a fully masked row takes a second, NaN-safe path (on
    a GPU, the ``if`` below waits for the row max).
    """
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(
                "expected a boolean mask (True = keep), got "
                f"{getattr(mask, 'dtype', type(mask).__name__)}: use mask.bool() "
                "for 0/1 masks"
            )
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., Nq, Nk)
    row_max = scores.amax(dim=dim, keepdim=True)  # (..., Nq, 1)
    empty = row_max == float("-inf")  # (..., Nq, 1): every key of the row is masked
    if not bool(empty.any()):
        return torch.softmax(scores, dim=dim)  # (..., Nq, Nk): subtracts the row max inside
    # all-(-inf) rows: give them finite scores (softmax would return NaN), then zero them
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=dim)  # (..., Nq, Nk)
    return weights.masked_fill(empty, 0.0)  # (..., Nq, Nk); gradients through them: 0


def numpy_masked_softmax(
    scores: np.ndarray, mask: np.ndarray | None = None, axis: int = -1
) -> np.ndarray:
    """:func:`masked_softmax` for numpy arrays (fully masked rows give zeros)."""
    scores = np.asarray(scores)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)  # (..., Nq, Nk)
    row_max = scores.max(axis=axis, keepdims=True)  # (..., Nq, 1)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # (..., Nq, 1)
    e = np.exp(scores - row_max)  # (..., Nq, Nk)
    denom = e.sum(axis=axis, keepdims=True)  # (..., Nq, 1)
    return e / np.maximum(denom, np.finfo(e.dtype).tiny)  # (..., Nq, Nk)


# --------------------------------------------------------------------------- torch


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention with its weights: ``(output [..., Nq, d_v], weights [..., Nq, Nk])``.

    ``q [..., Nq, d_k]``, ``k [..., Nk, d_k]``, ``v [..., Nk, d_v]``; batch dimensions
    broadcast. ``mask``: boolean, broadcastable to ``[..., Nq, Nk]``, True = may attend
    (a float mask is added to the scores instead). ``is_causal`` adds the top-left causal
    mask (combined with ``mask`` by logical AND when both are given). ``scale`` defaults
    to :math:`1/\sqrt{d_k}`. ``dropout_p > 0`` zeroes weights with probability ``p`` and
    rescales the rest by :math:`1/(1-p)`; the returned weights are the ones actually used,
    so ``output == weights @ v`` always holds. Rows with every key masked give zeros.
    """
    mask, scale, dropout_p = validate_attention(q, k, v, mask, scale, dropout_p)
    n_q, n_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale

    # s_ij = (scale * q_i) . k_j  (+ m_ij for a float mask); scaling q touches Nq x d_k
    # numbers instead of the Nq x Nk scores
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., Nq, Nk)
    if mask is not None and mask.dtype != torch.bool:
        scores = scores + mask.to(scores.dtype)  # (..., Nq, Nk)

    # keep[i, j] = may query i attend to key j? (boolean mask AND causal triangle)
    keep = mask if mask is not None and mask.dtype == torch.bool else None
    if is_causal:
        tri = causal_mask(n_q, n_k, device=scores.device)  # (Nq, Nk)
        keep = tri if keep is None else keep & tri  # (..., Nq, Nk)

    # w_ij = softmax_j(s_ij) over the allowed keys; all-masked rows -> 0
    weights = masked_softmax(scores, keep)  # (..., Nq, Nk)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)  # (..., Nq, Nk)

    # o_i = sum_j w_ij v_j
    output = weights @ v.to(weights.dtype)  # (..., Nq, d_v)
    return output, weights


# --------------------------------------------------------------------------- numpy


def numpy_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r""":func:`scaled_dot_product_attention` for numpy arrays: ``(output, weights)``.

    Same shapes, mask convention (boolean, True = may attend; a float mask is added),
    top-left ``is_causal``, default scale :math:`1/\sqrt{d_k}`, and zeros for fully
    masked rows. ``rng`` drives dropout (a fresh default generator when None).
    """
    mask, scale, dropout_p = validate_attention(q, k, v, mask, scale, dropout_p, numpy=True)
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    n_q, n_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale

    # s_ij = scale * q_i . k_j  (+ m_ij for a float mask)
    scores = (q @ np.swapaxes(k, -1, -2)) * scale  # (..., Nq, Nk)
    if mask is not None and mask.dtype != bool:
        scores = scores + mask  # (..., Nq, Nk)

    # keep[i, j] = may query i attend to key j? (boolean mask AND causal triangle)
    keep = mask if mask is not None and mask.dtype == bool else None
    if is_causal:
        tri = numpy_causal_mask(n_q, n_k)  # (Nq, Nk)
        keep = tri if keep is None else keep & tri  # (..., Nq, Nk)

    # w_ij = softmax_j(s_ij); all-masked rows -> 0
    weights = numpy_masked_softmax(scores, keep)  # (..., Nq, Nk)
    if dropout_p > 0.0:
        rng = np.random.default_rng() if rng is None else rng
        drop = rng.random(weights.shape) < dropout_p  # (..., Nq, Nk)
        weights = np.where(drop, 0.0, weights / (1.0 - dropout_p)).astype(weights.dtype)

    # o_i = sum_j w_ij v_j
    output = weights @ v  # (..., Nq, d_v)
    return output, weights


# --------------------------------------------------------------------------- plotting


def plot_attention(
    weights,
    q_tokens=None,
    k_tokens=None,
    *,
    ax=None,
    title=None,
    annotate: bool | None = None,
    colorbar: bool = True,
):
    """Heatmap of attention weights ``[Nq, Nk]`` with token labels; returns the axes.

    Rows are queries, columns keys; each row sums to 1 (or 0 when fully masked).
    ``annotate`` writes the numbers in the cells (default: when the matrix is small).
    """
    import matplotlib.pyplot as plt

    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    weights = np.asarray(weights)
    if weights.ndim != 2:
        raise ValueError(f"expected weights of shape [Nq, Nk], got {weights.shape}")
    n_q, n_k = weights.shape
    for name, toks, n in (("q_tokens", q_tokens, n_q), ("k_tokens", k_tokens, n_k)):
        if toks is not None and len(toks) != n:
            raise ValueError(
                f"{name} has {len(toks)} labels but the weights {weights.shape} "
                f"have {n} {'rows' if name == 'q_tokens' else 'columns'}"
            )
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * n_k + 2.0, 0.4 * n_q + 1.2))
    im = ax.imshow(weights, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(
        range(n_k),
        k_tokens if k_tokens is not None else range(n_k),
        rotation=60 if k_tokens is not None else 0,
        ha="right" if k_tokens is not None else "center",
    )
    ax.set_yticks(range(n_q), q_tokens if q_tokens is not None else range(n_q))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.grid(False)
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = n_q * n_k <= 64
    if annotate:
        for i in range(n_q):
            for j in range(n_k):
                ax.text(
                    j,
                    i,
                    f"{weights[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if weights[i, j] < 0.6 else "black",
                )
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046)
    return ax
