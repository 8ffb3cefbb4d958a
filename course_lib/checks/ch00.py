"""Checks for chapter 00 (setup): one warm-up exercise that shows how exercises work."""

from __future__ import annotations

import numpy as np

from .core import Case, Exercise, register


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
            "exp overflowed to inf (inf / inf = NaN): subtract each row's max before np.exp; "
            "it cancels in the ratio.": lambda x: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True),
            "you normalised over the wrong axis (axis 0 instead of the last axis -1).": lambda x: (
                np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)
            ),
            "you normalised over every element at once: pass axis=-1, keepdims=True to sum.": lambda x: (
                np.exp(x) / np.exp(x).sum()
            ),
        },
        hint="softmax(x) = exp(x) / exp(x).sum(axis=-1, keepdims=True); subtract the row's max "
        "first so that exp cannot overflow.",
    )
)
