r"""What the chapter check files share, so that each holds its cases, mistakes and hints.

:mod:`course_lib.checks.core` runs an exercise; this module holds the small pieces that
several chapters' declarations are built from:

* inputs: :func:`randn` (a float64 tensor of normal draws), :func:`softmax_rows` (rows of
  attention weights), ``DT`` and ``NEG_INF``;
* comparisons for ``Exercise.compare``: :func:`byte_compare` (a byte count, or a tuple of
  named counts, must be an int), :func:`with_note` (the usual comparison plus a diagnosis
  of one tell-tale pattern), :func:`refuse_complex`, :func:`integer_compare`, and
  :func:`within` (a measurement graded within a tolerance, for "predict, then measure");
* error patterns for ``Exercise.errors``: ``BROADCAST_ERROR`` (torch's message when two
  tensors' sizes do not line up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .core import (
    Case,
    Diagnosed,
    byte_count_message,
    compare_values,
    to_numpy,
)

DT = torch.float64
NEG_INF = -math.inf

# torch's message when elementwise operands do not broadcast (a missing [..., None] or
# keepdim=True, say); add `r" at non-singleton dimension 1"` and the like to narrow it.
BROADCAST_ERROR = r"size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"


# --------------------------------------------------------------------------- inputs


def randn(rng: np.random.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    """A float64 tensor of shape ``shape`` with i.i.d. N(0, std²) entries drawn from ``rng``."""
    return torch.from_numpy(rng.normal(scale=std, size=shape)).to(DT)


def softmax_rows(rng: np.random.Generator, shape: Sequence[int], scale: float = 1.0):
    """Rows of attention weights: the softmax of N(0, scale²) scores over the last axis."""
    return torch.softmax(torch.tensor(rng.normal(scale=scale, size=shape)), -1)


# --------------------------------------------------------------------------- comparisons

Compare = Callable[[Any, Any, Case], "str | None"]


def byte_compare(float_advice: str, names: Sequence[str] = ()) -> Compare:
    """A ``compare`` for byte counts: ints, shown with thousands separators and in GiB.

    ``float_advice`` says where a float came from (a ``/``). With ``names`` the result is a
    tuple of that many counts, each named in the message (``("ring", "ulysses")``)."""

    def compare(got: Any, expected: Any, case: Case) -> str | None:
        if not names:
            return byte_count_message(got, expected, float_advice)
        if not isinstance(got, (tuple, list)) or len(got) != len(names):
            return (
                f"expected a tuple ({', '.join(names)}) of {len(names)} ints, got "
                f"{type(got).__name__} {got!r:.80}"
            )
        for name, g, e in zip(names, got, expected):
            msg = byte_count_message(g, e, float_advice, name=name)
            if msg is not None:
                return msg
        return None

    return compare


def with_note(atol: float, rtol: float, note: Callable[[Any, Any, Case], str | None]) -> Compare:
    """The usual comparison; when it fails, ``note(got, expected, case)`` may add a
    diagnosis of a tell-tale pattern that no wrong twin reproduces (right but imprecise,
    wrong only in the last block...). A note that is a :class:`~.core.Diagnosed` with a
    ``cause`` ends the diagnosis there, its cause shown at the failure's tier (a nudge
    first): ``Diagnosed("", cause=Hint("only the last tile is wrong.", "Launch ..."))``."""

    def compare(got: Any, expected: Any, case: Case) -> str | None:
        msg = compare_values(got, expected, atol, rtol)
        if msg is None:
            return None
        extra = note(got, expected, case)  # a note may start on its own line ("\n    ...")
        text = msg + (extra if extra and extra[0].isspace() else f" {extra}" if extra else "")
        if isinstance(extra, Diagnosed):
            return Diagnosed(text, extra.cause, extra.label)
        return text

    return compare


def refuse_complex(atol: float, rtol: float, advice: str) -> Compare:
    """The usual comparison, refusing a complex result (numpy would drop its imaginary part
    silently) with ``advice``."""

    def compare(got: Any, expected: Any, case: Case) -> str | None:
        if (isinstance(got, torch.Tensor) and got.is_complex()) or np.iscomplexobj(got):
            return f"your result is complex (dtype {got.dtype}), {advice}"
        return compare_values(got, expected, atol, rtol)

    return compare


def integer_compare(what: str, advice: str, accept_lists: bool = False) -> Compare:
    """A 1-D result of integers (indices): a tensor or array of an integer dtype, or, with
    ``accept_lists``, a Python list or tuple of ints. ``what`` names them in the messages
    ("positions"), ``advice`` says how to build them."""

    def compare(got: Any, expected: Any, case: Case) -> str | None:
        if accept_lists and isinstance(got, (list, tuple)):
            if not all(isinstance(g, (int, np.integer)) and not isinstance(g, bool) for g in got):
                kinds = sorted({type(g).__name__ for g in got})
                return f"expected a list of int {what}, got a list of {', '.join(kinds)}."
            got = np.asarray(got, dtype=np.int64).reshape(len(got))
        got = to_numpy(got)
        if not isinstance(got, np.ndarray):
            return f"expected a 1-D tensor of integer {what}, got {type(got).__name__}: {advice}"
        if not np.issubdtype(got.dtype, np.integer):
            return f"expected integer {what}, got dtype {got.dtype}: {advice}"
        want = np.asarray(to_numpy(expected))
        if got.shape != want.shape:
            return f"expected shape {want.shape}, got {got.shape}."
        if np.array_equal(got, want):
            return None
        return f"expected {want.tolist()}, got {got.tolist()}."

    return compare


def within(tolerance: float, relative: bool = True, unit: str = "") -> Compare:
    """A ``compare`` for a *measured* number: right when within ``tolerance`` of the
    reference's measurement (a fraction of it when ``relative``, else absolute). Used by
    the "predict, then measure" exercises, whose experiments are random."""

    def compare(got: Any, expected: Any, case: Case) -> str | None:
        got = to_numpy(got)
        if isinstance(got, np.ndarray) and got.size == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"expected a number (your measurement), got {type(got).__name__} {got!r:.60}."
        if not math.isfinite(got):
            return f"your measurement is {got!r}: the experiment produced no finite number."
        allowed = tolerance * abs(expected) if relative else tolerance
        if abs(got - expected) <= allowed:
            return None
        how = f"a relative {tolerance:.2g}" if relative else f"{tolerance:g}{unit}"
        if relative and tolerance >= 0.01:
            how = f"{tolerance:.0%} of it"
        digits = 4 if abs(got - expected) > 1e-3 * abs(expected) else 8
        return (
            f"your measurement {got:.{digits}g}{unit} is off: the same experiment gives "
            f"{expected:.{digits}g}{unit} (allowed: within {how})."
        )

    return compare
