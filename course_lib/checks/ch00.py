"""Checks for chapter 00 (setup): one warm-up exercise that shows how exercises work."""

from __future__ import annotations

import numpy as np

from .core import Case, Exercise, Hint, register


def softmax_reference(x: np.ndarray) -> np.ndarray:
    r"""Softmax over the last axis, :math:`\mathrm{softmax}(x)_i = e^{x_i - m} / \sum_j e^{x_j - m}`
    with :math:`m = \max_j x_j` subtracted so that no exponential overflows."""
    z = x - x.max(axis=-1, keepdims=True)  # (..., n)
    e = np.exp(z)  # (..., n)
    return e / e.sum(axis=-1, keepdims=True)  # (..., n)


def _softmax_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("a vector of 3 scores", (np.array([1.0, 2.0, 3.0]),)),
            Case("a batch of 4 rows of 5 scores", (rng.normal(size=(4, 5)),)),
        ]
    return [
        Case(
            "large scores (1000, 1001, 1002): needs max subtraction",
            (np.array([1000.0, 1001.0, 1002.0]),),
        ),
        Case("a (2, 3, 7) batch", (rng.normal(scale=5.0, size=(2, 3, 7)),)),
    ]


def _no_keepdims(x: np.ndarray) -> np.ndarray:
    """The sum without keepdims: (B, n) / (B,) broadcasts along the wrong axis."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # (..., n)
    return e / e.sum(axis=-1)  # (..., n) / (...,): only right when the shapes happen to align


register(
    Exercise(
        id="00.1",
        title="softmax over the last axis",
        points=1,
        target="softmax",
        cases=_softmax_cases,
        reference=softmax_reference,
        atol=1e-8,
        rtol=1e-6,
        mistakes={
            Hint(
                "exp overflowed to inf, and inf / inf is NaN: large scores need care.",
                "Subtract each row's max before np.exp: x - x.max(axis=-1, keepdims=True). "
                "The factor e^(-max) cancels in the ratio, so the result is unchanged.",
            ): lambda x: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True),
            Hint(
                "you normalised over the wrong axis (axis 0, down the columns).",
                "Each row (the last axis) must sum to 1: pass axis=-1 to max and sum.",
            ): lambda x: np.exp(x) / np.exp(x).sum(axis=0, keepdims=True),
            Hint(
                "you normalised over every element at once: the whole array sums to 1, "
                "not each row.",
                "Pass axis=-1, keepdims=True to the sum (and to the max).",
            ): lambda x: np.exp(x) / np.exp(x).sum(),
            Hint(
                "the row sums lost their axis: summed over the last axis they have shape "
                "(...,), and dividing an (..., n) array by them broadcasts along the wrong axis "
                "(or fails).",
                "Keep the axis: e.sum(axis=-1, keepdims=True) has shape (..., 1).",
            ): _no_keepdims,
        },
        hint=Hint(
            "compare one row of your result with the statement's definition: which axis is "
            "normalised, does each row sum to 1, and what happens to very large entries?",
            "softmax(x) = exp(x) / (the sum of exp(x) over the last axis), with each row's max "
            "subtracted first. z = x - x.max(axis=-1, keepdims=True); e = np.exp(z); return e / "
            "e.sum(axis=-1, keepdims=True).",
        ),
    )
)
