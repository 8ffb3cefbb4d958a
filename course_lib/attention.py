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
(a plain softmax of an all-:math:`-\\infty` row is NaN; older PyTorch versions' SDPA returned
NaN there, recent ones return zeros). Both functions return
``(output, weights)`` so the weights can be plotted and inspected (:func:`plot_attention`).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F

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
    = NaN; here the max is replaced by 0 on such rows and the sum is clamped away from 0,
    so values *and gradients* stay finite.
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
    row_max = torch.where(
        torch.isfinite(row_max), row_max, torch.zeros_like(row_max)
    ).detach()  # (..., Nq, 1)
    e = torch.exp(scores - row_max)  # (..., Nq, Nk); exp(-inf) = 0 at masked keys
    denom = e.sum(dim=dim, keepdim=True)  # (..., Nq, 1); 0 on fully masked rows
    tiny = torch.finfo(e.dtype).tiny if e.is_floating_point() else 1e-38
    return e / denom.clamp_min(tiny)  # (..., Nq, Nk); 0 / tiny = 0 on fully masked rows


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


# --------------------------------------------------------------------------- validation


def _shape(x) -> tuple:
    return tuple(int(s) for s in x.shape)


def _check_qkv(q, k, v) -> tuple:
    """Validate shapes; return the scores' shape ``[..., Nq, Nk]``.

    Shapes are plain tuples, so numpy's ``broadcast_shapes`` serves torch too (torch's
    own imports sympy on first use: seconds on a slow machine).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            what = {"q": "[..., Nq, d_k]", "k": "[..., Nk, d_k]", "v": "[..., Nk, d_v]"}[name]
            raise ValueError(
                f"expected {name} of shape {what} (at least 2 dimensions), got {_shape(x)}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the last dimension d_k: expected q [..., Nq, d_k] "
            f"and k [..., Nk, d_k], got q {_shape(q)} and k {_shape(k)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys Nk: expected k "
            f"[..., Nk, d_k] and v [..., Nk, d_v], got k {_shape(k)} and "
            f"v {_shape(v)}"
        )
    try:
        batch = tuple(
            np.broadcast_shapes(tuple(q.shape[:-2]), tuple(k.shape[:-2]), tuple(v.shape[:-2]))
        )
    except (RuntimeError, ValueError) as err:
        raise ValueError(
            f"the batch dimensions of q, k and v do not broadcast: got q "
            f"{_shape(q)}, k {_shape(k)}, v {_shape(v)}"
        ) from err
    return batch + (int(q.shape[-2]), int(k.shape[-2]))


def _check_mask(mask, scores_shape: tuple) -> None:
    try:
        np.broadcast_shapes(tuple(mask.shape), scores_shape)
    except (RuntimeError, ValueError) as err:
        raise ValueError(
            f"mask of shape {_shape(mask)} does not broadcast to the scores' "
            f"shape [..., Nq, Nk] = {scores_shape}"
        ) from err


def _as_scalar(x):
    """A Python float from a real number or a 0-dim array/tensor; None if it is not one."""
    if isinstance(x, bool):
        return None
    if isinstance(x, numbers.Real):
        return float(x)
    if isinstance(x, np.ndarray) and x.ndim == 0 and np.issubdtype(x.dtype, np.number):
        return float(x)
    if isinstance(x, torch.Tensor) and x.ndim == 0 and x.dtype != torch.bool and not x.is_complex():
        return float(x)
    return None


def _check_scale_dropout(scale, dropout_p) -> tuple[float | None, float]:
    """Validate ``scale`` and ``dropout_p``; return them as Python floats."""
    if scale is not None:
        value = _as_scalar(scale)
        if value is None or not math.isfinite(value):
            raise ValueError(f"scale must be a finite number or None, got {scale!r}")
        scale = value
    p = _as_scalar(dropout_p)
    if p is None or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    return scale, p


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
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"expected {name} to be a torch.Tensor, got {type(x).__name__} "
                "(use numpy_attention for numpy arrays)"
            )
    scores_shape = _check_qkv(q, k, v)
    scale, dropout_p = _check_scale_dropout(scale, dropout_p)
    n_q, n_k = scores_shape[-2], scores_shape[-1]
    d_k = q.shape[-1]

    # s_ij = scale * q_i . k_j
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Nq, Nk)

    # keep[i, j] = may query i attend to key j?
    keep = None
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            mask = torch.as_tensor(mask, device=scores.device)
        _check_mask(mask, scores_shape)
        if not (mask.dtype == torch.bool or mask.is_floating_point()):
            raise TypeError(
                f"expected a boolean mask (True = may attend) or a float mask to "
                f"add, got dtype {mask.dtype}: use mask.bool() for 0/1 masks"
            )
        if mask.dtype == torch.bool:
            keep = mask  # (..., Nq, Nk) broadcastable
        else:
            scores = scores + mask.to(scores.dtype)  # (..., Nq, Nk) additive float mask
    if is_causal:
        tri = causal_mask(n_q, n_k, device=scores.device)  # (Nq, Nk)
        keep = tri if keep is None else keep & tri  # (..., Nq, Nk)

    # w_ij = softmax_j(s_ij) over the allowed keys; all-masked rows -> 0
    weights = masked_softmax(scores, keep)  # (..., Nq, Nk)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=float(dropout_p), training=True)  # (..., Nq, Nk)

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
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    scores_shape = _check_qkv(q, k, v)
    scale, dropout_p = _check_scale_dropout(scale, dropout_p)
    n_q, n_k = scores_shape[-2], scores_shape[-1]
    d_k = q.shape[-1]

    # s_ij = scale * q_i . k_j
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    scores = (q @ np.swapaxes(k, -1, -2)) * scale  # (..., Nq, Nk)

    keep = None
    if mask is not None:
        mask = np.asarray(mask)
        _check_mask(mask, scores_shape)
        if not (mask.dtype == bool or np.issubdtype(mask.dtype, np.floating)):
            raise TypeError(
                f"expected a boolean mask (True = may attend) or a float mask to "
                f"add, got dtype {mask.dtype}: use mask.astype(bool) for 0/1 masks"
            )
        if mask.dtype == bool:
            keep = mask  # (..., Nq, Nk) broadcastable
        else:
            scores = scores + mask  # (..., Nq, Nk) additive float mask
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
