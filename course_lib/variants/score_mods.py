r"""Score modifications as functions: FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx)``.

A ``mask_mod`` (``course_lib.variants.mask_mods``) says *whether* query :math:`i` may attend to key
:math:`j`; a ``score_mod`` changes the score itself, before the softmax:

.. math::

    S_{bhij} = \mathrm{score\_mod}\!\left(\mathrm{scale}\cdot q_{bhi}^\top k_{bhj},\;
    b, h, i, j\right), \qquad P = \mathrm{softmax}(S), \quad O = PV.

Two that current models use:

* :func:`alibi`: :math:`S - m_h (i - j)`, a per-head linear distance penalty (Press et al.,
  2022; slopes from ``course_lib.variants.alibi``);
* :func:`soft_cap`: :math:`c \tanh(S / c)`, which keeps every score in :math:`(-c, c)`
  (Gemma Team, 2024, "Gemma 2: Improving Open Language Models at a Practical Size", caps
  attention scores at :math:`c = 50`). Unlike ALiBi it is not an additive bias, so no
  ``mask`` tensor can express it: it needs a hook on the score, which is what
  ``score_mod`` is.

Like ``mask_mod`` s, these use tensor operations only, so they run both inside
FlexAttention (0-dimensional indices) and on whole score tensors (:func:`apply_score_mod`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .mask_mods import index_grids

__all__ = ["ScoreMod", "alibi", "apply_score_mod", "soft_cap"]

ScoreMod = Callable[..., torch.Tensor]


def alibi(slopes: torch.Tensor) -> ScoreMod:
    r"""ALiBi as a ``score_mod``: :math:`S_{ij} - m_h\,(i - j)` with ``slopes [H]``."""
    slopes = torch.as_tensor(slopes)
    if slopes.ndim != 1 or not slopes.is_floating_point():
        raise ValueError(
            f"expected floating-point slopes of shape [H], got dtype "
            f"{slopes.dtype} and shape {tuple(slopes.shape)}"
        )

    def score_mod(score, b, h, q_idx, kv_idx):
        m = slopes.to(device=score.device, dtype=score.dtype)[h]  # this head's slope
        return score - m * (q_idx - kv_idx).to(score.dtype)

    score_mod.__name__ = score_mod.__qualname__ = "alibi"
    return score_mod


def soft_cap(cap: float) -> ScoreMod:
    r"""Logit soft-capping as a ``score_mod``: :math:`c \tanh(S / c)`.

    Close to the identity for :math:`|S| \ll c` (:math:`\tanh x \approx x`), and never
    beyond :math:`\pm c`: scores stay bounded however large :math:`q^\top k` grows, which
    Gemma 2 uses to keep training stable. A bound is not a small bound: with :math:`c = 50`
    one key can still take almost all of a row's weight (chapter 08 measures it).
    """
    cap = float(cap)
    if not cap > 0:
        raise ValueError(f"cap must be a positive number, got {cap!r}")

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    score_mod.__name__ = score_mod.__qualname__ = f"soft_cap_{cap:g}"
    return score_mod


def apply_score_mod(scores: torch.Tensor, score_mod: ScoreMod) -> torch.Tensor:
    """``score_mod`` applied to every entry of ``scores [B, H, Nq, Nk]`` in one call."""
    if scores.ndim != 4:
        raise ValueError(f"expected scores of shape [B, H, Nq, Nk], got {tuple(scores.shape)}")
    b, h, q, kv = index_grids(*scores.shape, device=scores.device)
    out = score_mod(scores, b, h, q, kv)
    if not isinstance(out, torch.Tensor) or out.shape != scores.shape:
        raise ValueError(
            f"score_mod {getattr(score_mod, '__name__', score_mod)!r} must "
            f"return a tensor shaped like the scores {tuple(scores.shape)}, got "
            f"{getattr(out, 'shape', type(out).__name__)}"
        )
    return out  # (B, H, Nq, Nk)
