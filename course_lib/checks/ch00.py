r"""Checks for chapter 00 (setup): one warm-up exercise that shows how exercises work.

* 00.1 ``softmax(x)``: the softmax over the last axis, with each row's max subtracted first
"""

from __future__ import annotations

import numpy as np

from .core import Case, Fixed
from .declare import exercise


def softmax_reference(x: np.ndarray, *, shift=True, axis=-1, keepdims=True) -> np.ndarray:
    r"""Softmax over the last axis, :math:`\mathrm{softmax}(x)_i = e^{x_i - m} / \sum_j e^{x_j - m}`
    with :math:`m = \max_j x_j` subtracted so that no exponential overflows."""
    z = x - x.max(axis=-1, keepdims=True) if shift else x  # (..., n)
    e = np.exp(z)  # (..., n)
    return e / e.sum(axis=axis, keepdims=keepdims)  # (..., n)


def _softmax_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("a vector of 3 scores", (np.array([1.0, 2.0, 3.0]),)),
            Case("a batch of 4 rows of 5 scores", (rng.normal(size=(4, 5)),)),
        ]
    return [
        Fixed(
            "large scores (1000, 1001, 1002): needs max subtraction",
            (np.array([1000.0, 1001.0, 1002.0]),),
        ),
        Case("a (2, 3, 7) batch", (rng.normal(scale=5.0, size=(2, 3, 7)),)),
    ]


exercise(
    "00.1",
    softmax_reference,
    target="softmax",
    title="softmax over the last axis",
    points=1,
    cases=_softmax_cases,
    atol=1e-8,
    rtol=1e-6,
    slips={
        "overflow": dict(shift=False),
        "axis-0": dict(shift=False, axis=0),
        "every-element": dict(shift=False, axis=None),
        "no-keepdims": dict(keepdims=False),
    },
)
