"""Chapter 00's warm-up check, and the framework features the chapters 00-02 rely on:
tiered hints, mistakes that raise, and exercises that forbid warnings."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.checks import CheckFailed, check, core, get_exercise
from course_lib.checks.ch00 import softmax_reference
from course_lib.checks.core import Case, Exercise, Hint, run_case


@pytest.fixture(autouse=True)
def _fresh_hint_tiers():
    """Each test starts as a learner who has not failed yet (first failure: the nudge)."""
    core._FAILED_BEFORE.clear()
    yield
    core._FAILED_BEFORE.clear()


def test_the_reference_passes_visible_and_hidden_cases():
    assert check("00.1", softmax_reference, quiet=True).passed
    assert check("00.1", softmax_reference, hidden=True, quiet=True).passed


def test_every_hint_has_two_tiers():
    ex = get_exercise("00.1")
    assert isinstance(ex.hint, Hint) and ex.hint.detail
    assert all(isinstance(h, Hint) and h.detail for h in ex.mistakes)


def test_wrong_axis_gets_a_nudge_first_and_the_fix_when_it_fails_again():
    def softmax(x):  # sums down the columns
        return np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)

    with pytest.raises(CheckFailed) as first:
        check("00.1", softmax)
    assert "wrong axis" in str(first.value) and "pass axis=-1" not in str(first.value)
    assert "run the check again for a fuller hint" in str(first.value)
    with pytest.raises(CheckFailed) as second:
        check("00.1", softmax)
    assert "pass axis=-1 to max and sum" in str(second.value)


def test_no_max_subtraction_fails_the_hidden_large_scores_case():
    def softmax(x):
        return np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)

    assert check("00.1", softmax, quiet=True).passed  # visible: small scores
    with pytest.raises(CheckFailed, match=r"(?s)large scores.*exp overflowed"):
        with np.errstate(all="ignore"):
            check("00.1", softmax, hidden=True, quiet=True, hints="full")


def test_a_sum_without_keepdims_is_named_even_when_it_raises():
    def softmax(x):  # (4, 5) / (4,) cannot broadcast: the twin raises the same error
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1)

    with pytest.raises(
        CheckFailed, match=r"(?s)raised ValueError.*Likely cause: the row sums lost"
    ):
        check("00.1", softmax, quiet=True)


# ------------------------------------------------------------- framework: no_warnings


def _toy(no_warnings):
    def reference(x):
        return np.where(x > 0, 1.0 / np.where(x > 0, x, 1.0), 0.0)

    return Exercise(
        id="toy.1",
        title="a safe reciprocal",
        points=1,
        target="inv",
        cases=lambda rng, hidden: [Case("with a zero", (np.array([2.0, 0.0]),))],
        reference=reference,
        no_warnings=no_warnings,
    )


def _warning_inv(x):
    return np.where(x > 0, 1.0 / x, 0.0)  # computes 1/0 first: a RuntimeWarning


def test_a_warning_fails_the_case_only_when_the_exercise_forbids_warnings():
    case = _toy(False).cases(None, False)[0]
    with np.errstate(divide="warn"), pytest.warns(RuntimeWarning, match="divide by zero"):
        out, failure = run_case(_toy(False), _warning_inv, case)  # warns, and passes
    assert failure is None and np.array_equal(out, [0.5, 0.0])
    out, failure = run_case(_toy("np.where computes both branches."), _warning_inv, case)
    assert out is None and not failure.passed
    assert "RuntimeWarning: divide by zero" in failure.message
    assert "1.0 / x" in failure.message  # the learner's line
    assert "Likely cause: np.where computes both branches." in failure.message


def test_only_runtime_warnings_fail_a_case():
    import warnings

    def inv(x):
        warnings.warn("this API is deprecated", DeprecationWarning, stacklevel=1)
        return np.where(x > 0, 1.0 / np.where(x > 0, x, 1.0), 0.0)

    case = _toy(True).cases(None, False)[0]
    with pytest.warns(DeprecationWarning):
        out, failure = run_case(_toy(True), inv, case)
    assert failure is None and np.array_equal(out, [0.5, 0.0])


def test_forbidding_warnings_survives_a_kernel_that_silenced_numpy():
    case = _toy(True).cases(None, False)[0]
    old = np.seterr(all="ignore")
    try:
        _, failure = run_case(_toy(True), _warning_inv, case)
    finally:
        np.seterr(**old)
    assert failure is not None and "divide by zero" in failure.message
