"""Judging one case: the verdict on a learner's output, and the mistake it is named as."""

from __future__ import annotations

import numpy as np

from course_lib.checks.call import Call
from course_lib.checks.compare import Diagnosed, compare_values
from course_lib.checks.core import cases_for, get_exercise
from course_lib.checks.exercise import CHANGED_INPUT, Case, Exercise, Hint
from course_lib.checks.judge import CaseResult, evaluate_case, judge_call, run_case

SOFTMAX = get_exercise("00.1")
ROWS = Case("two rows", (np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 5.0]]),))


def wrong_axis(x):
    return np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)


def _row_sums(rng, hidden):
    return [Case("a row", (np.array([1.0, 3.0]),))]


def normalise(x):
    return x / x.sum()


def _exercise(**declared) -> Exercise:
    """A small exercise, not registered: normalise a row to sum to 1."""
    return Exercise("99.5", "normalise", 1, "normalise", _row_sums, normalise, **declared)


def test_a_right_output_passes_and_a_wrong_one_says_why():
    got = SOFTMAX.reference(*ROWS.args)
    assert evaluate_case(SOFTMAX, ROWS, got) == CaseResult("two rows", True)
    failed = evaluate_case(SOFTMAX, ROWS, got[::-1])
    assert not failed.passed and "values are off" in failed.message


def test_a_common_mistake_is_named_with_its_key():
    result = evaluate_case(SOFTMAX, ROWS, wrong_axis(*ROWS.args), full=False)
    assert "Likely cause: you normalised over the wrong axis" in result.message
    assert "pass axis=-1 to max and sum" not in result.message  # the nudge only
    assert result.cause == "00.1/axis-0"
    full = evaluate_case(SOFTMAX, ROWS, wrong_axis(*ROWS.args), full=True)
    assert "pass axis=-1 to max and sum" in full.message


def test_a_nan_producing_twin_does_not_name_the_wrong_mistake():
    def naive(x):  # overflows on the hidden case with scores near 1000
        return np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)

    large = cases_for("00.1", hidden=True)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        result = evaluate_case(SOFTMAX, large, naive(*large.args))
    assert "wrong axis" not in result.message and "exp overflowed" in result.message
    assert result.cause == "00.1/overflow"


def test_an_unnamed_mistake_gets_the_general_hint():
    ex = _exercise(mistakes={"you returned x.": lambda x: x}, hint=Hint("divide.", "x / x.sum()"))
    result = evaluate_case(ex, _row_sums(None, False)[0], np.array([0.5, 0.5]), full=False)
    assert "Hint: divide." in result.message and "x / x.sum()" not in result.message
    assert result.cause == "99.5"
    named = evaluate_case(ex, _row_sums(None, False)[0], np.array([1.0, 3.0]))
    assert "Likely cause: you returned x." in named.message and named.cause == "99.5"


def test_a_diagnosed_compare_adds_no_general_hint():
    cause = Hint("only the last entry is wrong.", "Loop over every entry.", key="99.5/last")

    def compare(got, expected, case):
        msg = compare_values(got, expected, 1e-9, 0.0)
        return msg and Diagnosed(msg, cause=cause)

    ex = _exercise(compare=compare, hint="a general hint.")
    result = evaluate_case(ex, _row_sums(None, False)[0], np.array([0.25, 0.5]), full=False)
    assert "Likely cause: only the last entry is wrong." in result.message
    assert "general hint" not in result.message and result.cause == "99.5/last"


def test_a_call_that_raised_is_named_by_a_declared_pattern_or_a_twin_that_raises_alike():
    case = _row_sums(None, False)[0]

    def unpacks(x):
        a, b, c = x
        return x

    ex = _exercise(
        errors={r"ValueError: not enough values": "you unpacked three values from a row of two."},
        hint="a general hint.",
    )
    call = Call(raised="ValueError", message="not enough values to unpack (expected 3, got 2)")
    got, failure = judge_call(ex, case, call)
    assert got is None and failure is not None
    assert failure.message.startswith("your function raised ValueError: not enough values")
    assert "Likely cause: you unpacked three values" in failure.message
    assert failure.cause == "99.5/error"
    twin = _exercise(mistakes={"you unpacked three values.": unpacks}, hint="a general hint.")
    _, failure = run_case(twin, unpacks, case)
    assert failure is not None and "Likely cause: you unpacked three values." in failure.message
    _, failure = judge_call(twin, case, Call(raised="KeyError", message="'q'"))
    assert failure is not None and "Hint: a general hint." in failure.message


def test_a_call_that_exited_was_blank_or_changed_its_input_fails_and_says_so():
    case = _row_sums(None, False)[0]
    ex = _exercise()
    _, exited = judge_call(ex, case, Call(exit="3"))
    assert exited == CaseResult("a row", False, "your function called sys.exit(3)")
    _, blank = judge_call(ex, case, Call(not_implemented=True, raised="NotImplementedError"))
    assert blank is not None and blank.not_implemented and blank.message == "not implemented yet"
    _, changed = judge_call(ex, case, Call(output=1.0, changed="`x`: 2 of 2 values changed"))
    assert changed is not None and changed.message.startswith(
        "the call changed its argument `x`: 2 of 2 values changed."
    )
    assert f"Likely cause: {CHANGED_INPUT}" in changed.message
    assert changed.cause == "99.5/keeps-inputs"
    assert judge_call(ex, case, Call(output=0.5)) == (0.5, None)


def test_a_forbidden_warning_fails_and_names_why_it_happened():
    case = _row_sums(None, False)[0]
    ex = _exercise(no_warnings=Hint("a row summing to 0 was divided by 0.", "Guard the sum."))
    warning = "RuntimeWarning: invalid value encountered in divide"
    _, failure = judge_call(ex, case, Call(output=normalise(*case.args), warning=warning))
    assert failure is not None and not failure.passed
    assert "emitted a warning, which this exercise does not allow" in failure.message
    assert "Likely cause: a row summing to 0 was divided by 0." in failure.message
    assert failure.cause == "99.5/no-warnings"


def test_run_case_returns_the_output_of_a_call_that_returned_else_its_failure():
    """A returned output is judged next, by :func:`evaluate_case` (the grader in its own
    process); a call that raised is judged at once."""
    got, failure = run_case(SOFTMAX, wrong_axis, ROWS)
    assert failure is None and np.array_equal(got, wrong_axis(*ROWS.args))
    got, failure = run_case(SOFTMAX, lambda x: x.nonexistent_method(), ROWS)
    assert got is None and failure is not None and "AttributeError" in failure.message
