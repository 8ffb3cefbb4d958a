"""The exercise-check framework: every chapter's checks are a few declarations.

An exercise is declared once, in ``course_lib/checks/chNN.py``, as its reference function with
a keyword per common mistake (:mod:`course_lib.checks.declare`), its words in ``chNN.md``
(:mod:`course_lib.checks.texts`)::

    def attention_reference(q, k, v, *, scale="sqrt"):      # the defaults: the right answer
        ...

    exercise(
        "02.1", attention_reference, target="attention", title="...", points=2,
        cases=attention_cases,         # (rng, hidden) -> list[Case]: the inputs
        slips={"unscaled": dict(scale=None)},   # its text: "## 02.1/unscaled" in ch02.md
    )

which builds the :class:`Exercise` this module runs,
and used twice:

* in the notebook, ``check("02.1", numpy_attention)`` runs the learner's function on
  the visible cases and prints one line per case, or explains precisely what went wrong
  (shape, dtype, NaN, largest error and where, and which common mistake the output
  matches). A learner who has not started sees "not implemented yet", not a traceback.
* in the instructor's grader (the separate package ``course_tools``), which runs the
  learner's function on the same cases inside the learner's kernel and only *records its
  outputs*, then recomputes the references and compares (:func:`evaluate_case`) in its own
  process, so code in a submission cannot turn a failure into a pass other than by
  computing correct answers.

Outputs may be numpy arrays, torch tensors, Python numbers/bools, or tuples/lists of
those (compared element by element).

This module holds the notebook's :func:`check` (with its report, its failure, the hint tier
each exercise has reached in this kernel, and the last report of each exercise), and shows
under its own name what the framework's other modules hold, each a concept of its own:

* :mod:`course_lib.checks.exercise`: what an exercise is (:class:`Case`, :class:`Exercise`,
  :class:`Hint`) and the registry of exercises;
* :mod:`course_lib.checks.compare`: comparing an output with the expected one
  (:func:`compare_values`, :class:`Diagnosed`, :func:`byte_count_message`);
* :mod:`course_lib.checks.call`: running the learner's function on one case and recording
  what happened (:class:`Call`, :func:`call_learner`);
* :mod:`course_lib.checks.judge`: judging that against the reference and naming the mistake
  (:class:`CaseResult`, :func:`evaluate_case`, :func:`judge_call`, :func:`run_case`);
* :mod:`course_lib.checks.predictions`: a prediction beside a measurement
  (:func:`prediction_line`, :func:`reveal`).

``from course_lib.checks.core import X`` works for each of those names, private ones
included (the grader, the tests and :mod:`course_lib.progress` import them from here): they
are the same objects, so the one registry ``_REGISTRY`` is the same dict here and in
:mod:`course_lib.checks.exercise`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .call import (
    PLACEHOLDER_MARK,
    Call,
    _call_watching_warnings,
    _copy_args,
    _is_not_implemented,
    _student_traceback,
    _value_change,
    call_learner,
    changed_argument,
)
from .compare import (
    Diagnosed,
    GiB,
    _compare_arrays,
    _compare_booleans,
    _compare_floats,
    _compare_items,
    _compare_numbers,
    _describe,
    _shape_hint,
    byte_count_message,
    compare_values,
    to_numpy,
)
from .exercise import (
    _REGISTRY,
    CHANGED_INPUT,
    Case,
    Exercise,
    Fixed,
    Hint,
    all_exercises,
    get_exercise,
    hint_key,
    register,
    render_hint,
)
from .judge import (
    SAME_AS_REFERENCE,
    CaseResult,
    _diagnose,
    _diagnose_error,
    _error_hint,
    _general,
    _has_new_nonfinite,
    _likely,
    _matches,
    _warning_failure,
    evaluate_case,
    judge_call,
    run_case,
)
from .predictions import (
    NO_PREDICTION,
    _one_number,
    _verdict,
    _why,
    predicted_value,
    prediction_line,
    reveal,
)

__all__ = [
    # what an exercise is, and the registry (course_lib.checks.exercise)
    "CHANGED_INPUT",
    "Case",
    "Exercise",
    "Fixed",
    "Hint",
    "_REGISTRY",
    "all_exercises",
    "get_exercise",
    "hint_key",
    "register",
    "render_hint",
    # comparing outputs (course_lib.checks.compare)
    "Diagnosed",
    "GiB",
    "_compare_arrays",
    "_compare_booleans",
    "_compare_floats",
    "_compare_items",
    "_compare_numbers",
    "_describe",
    "_shape_hint",
    "byte_count_message",
    "compare_values",
    "to_numpy",
    # running the learner's function (course_lib.checks.call)
    "PLACEHOLDER_MARK",
    "Call",
    "_call_watching_warnings",
    "_copy_args",
    "_is_not_implemented",
    "_student_traceback",
    "_value_change",
    "call_learner",
    "changed_argument",
    # judging one case and naming the mistake (course_lib.checks.judge). The mutation run
    # (course_tools/mutants.py) replaces _matches under this name, and with it every
    # reference to the same function that a course_lib module holds.
    "SAME_AS_REFERENCE",
    "CaseResult",
    "_diagnose",
    "_diagnose_error",
    "_error_hint",
    "_general",
    "_has_new_nonfinite",
    "_likely",
    "_matches",
    "_warning_failure",
    "evaluate_case",
    "judge_call",
    "run_case",
    # predict, then measure (course_lib.checks.predictions)
    "NO_PREDICTION",
    "_one_number",
    "_verdict",
    "_why",
    "predicted_value",
    "prediction_line",
    "reveal",
    # the notebook's check (here)
    "HINT_TIERS",
    "LAST_REPORTS",
    "VISIBLE_SEED",
    "_FAILED_BEFORE",
    "CheckFailed",
    "CheckReport",
    "_cases",
    "_checks_withheld",
    "_exercise_here",
    "_under_a_grader",
    "cases_for",
    "check",
]


def _checks_withheld() -> bool:
    """True in the course grader's sandbox, whose ``course_lib`` has no chapter checks."""
    return os.environ.get("COURSE_GRADING") == "1"


def _exercise_here(exercise_id: str) -> Exercise | None:
    """The exercise, or None in the grader's sandbox, which has no chapter checks (it says so)."""
    try:
        return get_exercise(exercise_id)
    except KeyError:
        if not _checks_withheld():
            raise
        print(f"(exercise {exercise_id}: the grader runs this check itself, outside this kernel)")
        return None


def _under_a_grader() -> bool:
    """True while nbgrader validates or autogrades this notebook (it sets the variable)."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def _cases(ex: Exercise, hidden: bool, seed: int) -> list[Case]:
    """An exercise's visible or hidden cases, drawn from ``seed``."""
    return list(ex.cases(np.random.default_rng(seed), hidden))


class CheckFailed(AssertionError):
    """A check that failed. IPython shows only the message, not a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython hook: no traceback noise
        return [f"\x1b[31m{line}\x1b[0m" for line in str(self).splitlines()]


@dataclass
class CheckReport:
    exercise: Exercise
    results: list[CaseResult]

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def not_implemented(self) -> bool:
        return any(r.not_implemented for r in self.results)

    def __repr__(self) -> str:
        state = (
            "passed"
            if self.passed
            else "not implemented yet"
            if self.not_implemented
            else "not passed"
        )
        return f"<CheckReport {self.exercise.id}: {state}>"

    def _ipython_display_(self) -> None:
        """A check cell ends with check(...): its printed lines are the whole display."""


VISIBLE_SEED = 1234
HINT_TIERS = ("auto", "nudge", "full")
# Failed checks per exercise in this kernel: the second failure in a row shows fuller hints.
_FAILED_BEFORE: dict[str, int] = {}
# The last visible check of each exercise in this kernel (course_lib.progress shows them).
LAST_REPORTS: dict[str, CheckReport] = {}


def check(
    exercise_id: str,
    fn: Callable | None,
    *,
    hidden: bool = False,
    seed: int | None = None,
    quiet: bool = False,
    hints: str = "auto",
    prediction: Any = None,
) -> CheckReport | None:
    """Run an exercise's cases on the learner's function and print specific feedback.

    Passing prints one line per case. Not started yet prints a friendly note and returns.
    A wrong answer raises :class:`CheckFailed` whose message says what went wrong.
    ``hints``: "auto" gives a nudge on the first failure and the fuller hint when the same
    exercise fails again; "nudge" or "full" force one tier.
    ``prediction`` (for a "predict, then measure" exercise): the learner's prediction, a
    number or a function of the case's arguments; each case's line shows it beside the
    measurement. It is never graded: the measurement is.
    """
    if hints not in HINT_TIERS:
        raise ValueError(f"hints must be one of {HINT_TIERS}, got {hints!r}")
    ex = _exercise_here(exercise_id)
    if ex is None:
        return None
    full = hints == "full" or (hints == "auto" and _FAILED_BEFORE.get(ex.id, 0) > 0)
    head = f"Exercise {ex.id} ({ex.title})"
    if fn is None or not callable(fn):
        message = (
            f"expected a function named `{ex.target}`, got {_describe(fn)}. Run the cell "
            "that defines it first."
        )
        if not hidden:
            LAST_REPORTS[ex.id] = CheckReport(ex, [CaseResult("function", False, message)])
        raise CheckFailed(f"{head}: {message}")
    results: list[CaseResult] = []
    predicted: dict[int, str] = {}  # case index -> the prediction beside its measurement
    for case in _cases(ex, hidden, VISIBLE_SEED if seed is None else seed):
        got, failure = run_case(ex, fn, case, full)
        if failure is None:
            failure = evaluate_case(ex, case, got, full)
            if prediction is not None or (ex.measures and _one_number(got)):
                predicted[len(results)] = prediction_line(prediction, case, got)
        results.append(failure)
        if failure.not_implemented:
            break
    report = CheckReport(ex, results)
    if not hidden:
        LAST_REPORTS[ex.id] = report
    if not report.not_implemented:
        _FAILED_BEFORE[ex.id] = 0 if report.passed else _FAILED_BEFORE.get(ex.id, 0) + 1
    if report.not_implemented and (hidden or _under_a_grader()):
        # Hidden tests run only under a grader, and nbgrader's validate and autograde say
        # so in NBGRADER_EXECUTION: there a blank exercise must fail, not print a note.
        raise CheckFailed(f"✗ {head}: not implemented yet.")
    if report.not_implemented:
        print(
            f"○ {head}: not implemented yet. Replace the `raise NotImplementedError(...)` "
            f"line in `{ex.target}` with your code, run that cell, then run this check "
            "again."
        )
        return report
    if not quiet:
        for i, r in enumerate(results):
            if r.passed:
                print(f"  ✓ {r.name}" + (f": {predicted[i]}" if i in predicted else ""))
    failed = [r for r in results if not r.passed]
    if failed:
        lines = [f"✗ {head}: {len(failed)} of {len(results)} cases failed."]
        for i, r in enumerate(results):
            if not r.passed:
                lines.append(f"  ✗ {r.name}: {r.message}")
                if i in predicted:  # without the why: it explains the right measurement
                    lines.append(f"    ({predicted[i].splitlines()[0]})")
        raise CheckFailed("\n".join(lines))
    print(f"✓ {head}: all {len(results)} {'hidden ' if hidden else ''}cases passed.")
    return report


def cases_for(exercise_id: str, hidden: bool = False, seed: int = VISIBLE_SEED) -> Sequence[Case]:
    """The cases an exercise would run (for tests and authors)."""
    return _cases(get_exercise(exercise_id), hidden, seed)
