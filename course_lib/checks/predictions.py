"""Predict, then measure: a learner's prediction beside the measurement.

A "predict, then measure" exercise (``Exercise.measures``) has the learner's function run an
experiment and return one number; ``check(..., prediction=...)`` shows the learner's
prediction beside each measurement (:func:`prediction_line`), and a case's ``why`` under a
prediction that misses it. :func:`reveal` does the same for a measurement the notebook then
makes on a real model, with the exercise's explanation (``gaps``) of the gap. A prediction is
never graded: the measurement is.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from typing import Any

import numpy as np

from .call import _copy_args, _is_not_implemented
from .compare import _describe, to_numpy
from .exercise import Case, get_exercise

NO_PREDICTION = "no prediction written yet: write yours before you run the experiment"


def predicted_value(prediction: Any, case: Case) -> float | str:
    """The learner's prediction for one case: a number, or a message saying why there is none.

    ``prediction`` is a number (the same for every case), or a function called with the
    case's arguments (a formula in the experiment's parameters); None, ``...`` or a function
    still raising the placeholder's NotImplementedError mean "not written yet"."""
    if callable(prediction):
        c = _copy_args(case)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                prediction = prediction(*c.args, **c.kwargs)
        except Exception as err:  # the learner's prediction may raise anything
            if _is_not_implemented(err):
                return NO_PREDICTION
            return f"your prediction raised {type(err).__name__}: {err}"
    if prediction is None or prediction is Ellipsis:
        return NO_PREDICTION
    value = to_numpy(prediction)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"your prediction should be a number, got {_describe(value)}"
    return float(value)


def _verdict(guess: float, got: Any) -> tuple[str, str]:
    """(``"right on"``/``"your prediction is 6% high"``..., ``"right"``/``"high"``/``"low"``/``""``)."""
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        return "", ""
    if got == 0:
        return "", "right" if guess == 0 else ("high" if guess > 0 else "low")
    off, ratio = (guess - got) / abs(got), guess / got
    way = "high" if guess > got else "low"
    if abs(off) < 0.05:
        return "right on", "right"
    if ratio <= 0:
        return ("your prediction has the wrong sign" if ratio < 0 else "you predicted 0"), way
    if 0.1 <= ratio <= 10:
        return f"your prediction is {abs(off):.0%} {'high' if off > 0 else 'low'}", way
    factor, size = (ratio, "high") if ratio > 1 else (1 / ratio, "low")
    return f"your prediction is a factor {factor:.4g} too {size}", way


def _one_number(x: Any) -> bool:
    """Whether ``x`` is one number (a float, an int, a size-1 array or tensor)."""
    x = to_numpy(x)
    return not isinstance(x, bool) and (
        isinstance(x, (int, float)) or (isinstance(x, np.ndarray) and x.size == 1)
    )


def _why(why: str | dict[str, str], way: str) -> str:
    """The explanation for a prediction that is ``way`` (``"high"``, ``"low"``, ``"right"``)."""
    if isinstance(why, str):
        return why if way in ("high", "low") else ""
    return why.get(way, "")


def prediction_line(prediction: Any, case: Case, measured: Any) -> str:
    """``you predicted 8, measured 7.52: your prediction is 6% high``, or why there is none;
    when the prediction misses, the case's ``why`` on a second line."""
    guess = predicted_value(prediction, case)
    if isinstance(guess, str):
        return guess
    got = to_numpy(measured)
    if isinstance(got, np.ndarray) and got.size == 1:
        got = got.item()
    verdict, way = _verdict(guess, got)
    if not verdict and not way:
        return f"you predicted {guess:.4g}"
    line = f"you predicted {guess:.4g}, measured {got:.4g}" + (f": {verdict}" if verdict else "")
    why = _why(case.why, way)
    return line + (f"\n      Why: {why}" if why else "")


def reveal(
    exercise_id: str, prediction: Any, measured: Any, *args: Any, on: str = "SmolLM2"
) -> None:
    """Print the learner's prediction beside a measurement made on a real model ``on``, and
    the exercise's explanation (``gaps``) of the gap between them.

    ``prediction`` is a number, or a function of ``args`` (as for :func:`check`). Never graded:
    a prediction that is far off is where the lesson is. Where the exercises are not
    installed (the grader's sandbox has no chapter checks), it prints the numbers alone."""
    try:
        ex = get_exercise(exercise_id)
        label, gaps = ex.reveals or ex.measures or ex.title, ex.gaps
    except KeyError:
        label, gaps = f"exercise {exercise_id}", {}
    value = to_numpy(measured)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"reveal needs one measured number, got {_describe(value)}")
    head = f"{on}, {label}: measured {value:.4g}"
    guess = predicted_value(prediction, Case("the real model", tuple(args)))
    if isinstance(guess, str):
        print(f"{head}; {guess}.")
        return None
    verdict, way = _verdict(guess, float(value))
    print(f"{head}; you predicted {guess:.4g}" + (f": {verdict}." if verdict else "."))
    why = _why(gaps, way)
    if why:
        print(textwrap.fill(f"Why: {why}", width=96, initial_indent="  ", subsequent_indent="  "))
    return None
