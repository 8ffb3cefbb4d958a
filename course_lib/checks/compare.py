"""Comparing an output with the expected one, and saying precisely how they differ.

:func:`compare_values` returns None when a learner's output matches the reference's (numpy
arrays, torch tensors, numbers, bools, or tuples and lists of those, item by item), else a
message a learner can act on: the shape and a guess at why it differs, NaN or inf where the
expected values are finite, the largest error and where. :func:`to_numpy` brings tensors to
numpy for it. An exercise's own ``compare`` may return a :class:`Diagnosed` message, one that
already says all that is wrong; :func:`byte_count_message` is such a compare for byte counts.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .exercise import render_hint


def to_numpy(x: Any) -> Any:
    """Tensors → numpy (detached, on CPU); tuples/lists recursively; scalars kept."""
    torch = sys.modules.get("torch")  # not imported yet: x cannot be a tensor (and the
    if torch is not None and isinstance(x, torch.Tensor):  # grader need not import it)
        x = x.detach().cpu()
        if x.dtype in (torch.bfloat16, torch.float16):
            x = x.float()
        return x.numpy()
    if isinstance(x, (tuple, list)):
        return type(x)(to_numpy(e) for e in x)
    if isinstance(x, np.generic):
        return x.item()
    return x


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"array of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__} of {len(x)} items"
    return f"{type(x).__name__} {x!r}"[:120]


def _shape_hint(got: tuple, expected: tuple) -> str:
    if len(got) != len(expected):
        return (
            f" Your result has {len(got)} dimensions instead of {len(expected)}: "
            "did you drop or add a batch dimension, or squeeze by accident?"
        )
    if sorted(got) == sorted(expected):
        return " The same sizes in another order: did you transpose the wrong axes?"
    diff = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    if len(diff) == 1:
        i = diff[0] - len(got)
        return (
            f" Only axis {i} differs ({got[i]} vs {expected[i]}): check which "
            "dimension you reduce or multiply over there."
        )
    return ""


class Diagnosed(str):
    """A message from an exercise's ``compare`` that already says all that is wrong and how
    to fix it (e.g. the right number as a float where an int is asked for): no declared
    mistake is searched for and no general hint is added after it.

    ``cause``: what the compare recognised (a :class:`Hint`, or the exercise's own hint with
    ``label="Hint"``), added after the message at the failure's tier, as ``Likely cause:
    ...``: a compare does not know whether this is a first failure, the check does."""

    cause: str
    label: str

    def __new__(cls, text: str, cause: str = "", label: str = "Likely cause") -> Diagnosed:
        obj = super().__new__(cls, text)
        obj.cause, obj.label = cause, label
        return obj

    def render(self, full: bool) -> str:
        """The message, and its cause at the tier asked for."""
        if not self.cause:
            return str(self)
        return f"{self}\n    {self.label}: {render_hint(self.cause, full)}"


GiB = 2**30


def byte_count_message(got: Any, expected: int, float_advice: str, name: str = "") -> str | None:
    r"""Compare a byte count with the expected int; ``None`` when equal.

    A float, or a one-element tensor, is refused with ``float_advice`` (where the ``/`` came
    from); when its value is right that is the whole story (:class:`Diagnosed`). Different
    ints are shown with thousands separators and in GiB, never as ``1.71799e+10``.
    ``name`` prefixes the message (``"ring: "``) when a result holds several counts."""
    where = f"{name}: " if name else ""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        torch = sys.modules.get("torch")  # a tensor's class, without importing torch here
        numeric = (
            isinstance(got, (float, np.floating))
            or (isinstance(got, np.ndarray) and got.size == 1)
            or (torch is not None and isinstance(got, torch.Tensor) and got.numel() == 1)
        )
        if not numeric:
            return (
                f"{where}expected an int (a number of bytes), got {type(got).__name__} {got!r:.80}."
            )
        value = float(got)
        shown = f"{value:,.0f}" if math.isfinite(value) and value == int(value) else f"{value}"
        msg = (
            f"{where}expected an int (a number of bytes), got the {type(got).__name__} "
            f"{shown}. {float_advice}"
        )
        return Diagnosed(msg) if value == expected else msg
    if int(got) == int(expected):
        return None
    ratio = f"{int(got) / int(expected):.4g}" if expected else "inf"
    return (
        f"{where}expected {int(expected):,} bytes ({int(expected) / GiB:.4g} GiB), got "
        f"{int(got):,} bytes ({int(got) / GiB:.4g} GiB): {ratio} times the right size."
    )


def compare_values(
    got: Any,
    expected: Any,
    atol: float,
    rtol: float,
    check_dtype: bool = False,
    where: str = "",
    names: Sequence[str] = (),
) -> str | None:
    """None when ``got`` matches ``expected``; otherwise a precise, learner-facing message.

    ``names`` labels the items of a tuple result in the message (else "item 0", "item 1").
    """
    got, expected = to_numpy(got), to_numpy(expected)
    label = f"{where}: " if where else ""
    if isinstance(expected, (tuple, list)):
        return _compare_items(got, expected, atol, rtol, check_dtype, where, names)
    if got is None:
        return f"{label}your function returned None: did you forget the `return` statement?"
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        return _compare_arrays(got, expected, atol, rtol, check_dtype, label)
    if isinstance(expected, bool):
        if not isinstance(got, (bool, np.bool_)):
            return f"{label}expected a bool, got {_describe(got)}."
        return None if bool(got) == expected else f"{label}expected {expected}, got {got}."
    if isinstance(expected, (int, float)):
        return _compare_numbers(got, expected, atol, rtol, label)
    return None if got == expected else f"{label}expected {expected!r}, got {got!r}."


def _compare_items(got, expected, atol, rtol, check_dtype, where, names) -> str | None:
    """A tuple (or list) result, item by item: the first item that differs says why."""
    label = f"{where}: " if where else ""
    if not isinstance(got, (tuple, list)):
        return f"{label}expected a tuple of {len(expected)} items, got {_describe(got)}."
    if len(got) != len(expected):
        return f"{label}expected {len(expected)} items, got {len(got)}."
    for i, (g, e) in enumerate(zip(got, expected)):
        item = names[i] if i < len(names) and not where else f"item {i}"
        msg = compare_values(g, e, atol, rtol, check_dtype, f"{where}[{i}]" if where else item)
        if msg:
            return msg
    return None


def _compare_arrays(got, expected, atol, rtol, check_dtype, label) -> str | None:
    """An array result: its kind (not objects, not complex), its shape, then its values."""
    try:
        got_a = np.asarray(got)
    except Exception:
        return f"{label}expected {_describe(np.asarray(expected))}, got {_describe(got)}."
    exp_a = np.asarray(expected)
    if got_a.dtype == object:
        return f"{label}expected {_describe(exp_a)}, got {_describe(got)}."
    if np.iscomplexobj(got_a) and not np.iscomplexobj(exp_a):
        return (
            f"{label}your result is complex (dtype {got_a.dtype}); expected real "
            "numbers. Did you forget to take `.real` (or to convert back from the "
            "complex form)?"
        )
    if got_a.shape != exp_a.shape:
        return (
            f"{label}expected shape {tuple(exp_a.shape)}, got {tuple(got_a.shape)}."
            + _shape_hint(tuple(got_a.shape), tuple(exp_a.shape))
        )
    if exp_a.dtype == bool or got_a.dtype == bool:
        return _compare_booleans(got_a, exp_a, label)
    if check_dtype and got_a.dtype != exp_a.dtype:
        return f"{label}expected dtype {exp_a.dtype}, got {got_a.dtype}."
    if exp_a.size == 0:
        return None
    return _compare_floats(got_a.astype(np.float64), exp_a.astype(np.float64), atol, rtol, label)


def _compare_booleans(got_a: np.ndarray, exp_a: np.ndarray, label: str) -> str | None:
    """Boolean arrays (masks) of the same shape: equal entries, the first difference shown."""
    if exp_a.dtype != got_a.dtype:
        return (
            f"{label}expected a boolean array, got dtype {got_a.dtype}."
            if exp_a.dtype == bool
            else f"{label}expected dtype {exp_a.dtype}, got a boolean array."
        )
    bad = np.argwhere(got_a != exp_a)
    if len(bad):
        idx = tuple(int(i) for i in bad[0])
        return (
            f"{label}{len(bad)} of {exp_a.size} entries differ; first at index "
            f"{idx}: expected {exp_a[idx]}, got {got_a[idx]}."
        )
    return None


def _compare_floats(got_f: np.ndarray, exp_f: np.ndarray, atol, rtol, label) -> str | None:
    """float64 arrays of the same shape: NaN and inf where the expected values are finite
    (named with their likely cause), then closeness within ``atol`` and ``rtol``."""
    nan_got, nan_exp = np.isnan(got_f), np.isnan(exp_f)
    if (nan_got & ~nan_exp).any():
        idx = tuple(int(i) for i in np.argwhere(nan_got & ~nan_exp)[0])
        return (
            f"{label}your result contains NaN ({int((nan_got & ~nan_exp).sum())} "
            f"entries, first at index {idx}) where the expected values are finite. "
            "NaN usually comes from inf - inf, inf / inf or 0/0: a softmax over a "
            "row whose entries are all -inf, or exp() overflowing to inf on large "
            "inputs (subtract the row's max first)."
        )
    inf_got = np.isinf(got_f) & ~np.isinf(exp_f)
    if inf_got.any():
        idx = tuple(int(i) for i in np.argwhere(inf_got)[0])
        return (
            f"{label}your result contains inf at index {idx} where the expected "
            "value is finite: an overflow (exp of a large number?)."
        )
    close = np.isclose(got_f, exp_f, atol=atol, rtol=rtol, equal_nan=True)
    if not close.all():
        err = np.asarray(np.abs(got_f - exp_f))  # an array also for 0-d inputs
        err[np.isnan(err)] = 0.0
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape))
        return (
            f"{label}{int((~close).sum())} of {close.size} values are off. Largest "
            f"error {err[idx]:.3g} at index {idx}: expected {exp_f[idx]:.6g}, got "
            f"{got_f[idx]:.6g} (tolerance atol={atol:g}, rtol={rtol:g})."
        )
    return None


def _compare_numbers(got, expected: int | float, atol, rtol, label) -> str | None:
    """A number result (not a bool): NaN where NaN is expected, else close within tolerance."""
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        if isinstance(got, np.ndarray) and got.size == 1:
            got = got.item()
        else:
            return f"{label}expected a number, got {_describe(got)}."
    if isinstance(expected, float) and math.isnan(expected):
        return None if math.isnan(got) else f"{label}expected NaN, got {got!r}."
    if not math.isfinite(got):
        return f"{label}expected {expected!r}, got {got!r}."
    if not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
        return f"{label}expected {expected:.6g}, got {got:.6g}."
    return None
