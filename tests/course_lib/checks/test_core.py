"""The notebook's check(): feedback a learner can act on, hint tiers, and what core shows.

The framework's parts have their own tests: test_exercise.py (declarations, the registry),
test_compare.py (messages on outputs), test_call.py and test_judge.py (one case, run and
judged), test_predictions.py (a prediction beside a measurement).
"""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.checks import (
    CheckFailed,
    call,
    check,
    compare,
    compare_values,
    core,
    exercise,
    judge,
    predictions,
)
from course_lib.checks.ch00 import softmax_reference


def softmax_ok(x):
    return softmax_reference(x)


# ----------------------------------------------------------------------- what core shows


def test_every_name_core_held_is_still_importable_from_it_as_the_same_object():
    """The grader, the tests and course_lib.progress import from core: each name there is the
    very object its module holds (one registry, one function to replace in a mutation run)."""
    homes = (exercise, compare, call, judge, predictions)
    for name in core.__all__:
        held = [m.__name__ for m in homes if name in vars(m)]
        assert held or name in vars(core), name
        for m in homes:
            assert vars(m).get(name, core.__dict__[name]) is core.__dict__[name], (m, name)
    assert core._REGISTRY is exercise._REGISTRY
    assert {"_FAILED_BEFORE", "LAST_REPORTS", "VISIBLE_SEED", "check", "cases_for"} <= set(
        core.__all__
    )


def test_the_hint_tier_is_read_through_core(monkeypatch):
    """Tests start a learner afresh by replacing ``core._FAILED_BEFORE``: check() reads it there."""
    monkeypatch.setattr(core, "_FAILED_BEFORE", {"00.1": 1})
    with (
        pytest.raises(CheckFailed, match="Subtract each row's max"),  # the detail at once
        np.errstate(over="ignore", invalid="ignore"),
    ):
        check("00.1", lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True), hidden=True)
    assert core._FAILED_BEFORE == {"00.1": 2}


def test_cases_for_draws_the_same_cases_from_the_same_seed():
    first, again = core.cases_for("00.1", True, 7), core.cases_for("00.1", True, 7)
    assert [c.name for c in first] == [c.name for c in again]
    assert all(np.array_equal(a.args[0], b.args[0]) for a, b in zip(first, again))
    assert [c.name for c in core.cases_for("00.1")] == [
        c.name for c in core._cases(core.get_exercise("00.1"), False, core.VISIBLE_SEED)
    ]


# ----------------------------------------------------------------------- check() in a notebook


def test_a_correct_function_passes(capsys):
    report = check("00.1", softmax_ok)
    assert report.passed
    assert "✓ Exercise" in capsys.readouterr().out


def test_not_started_prints_a_friendly_note_not_a_traceback(capsys):
    def softmax(x):
        raise NotImplementedError("Exercise 00.1 is not implemented yet")

    report = check("00.1", softmax)
    assert report.not_implemented and not report.passed
    assert "not implemented yet" in capsys.readouterr().out


def test_check_failed_renders_without_a_traceback_in_ipython():
    err = CheckFailed("line one\nline two")
    assert len(err._render_traceback_()) == 2


def test_hidden_cases_catch_an_overflowing_softmax(capsys):
    def naive(x):
        return np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)

    check("00.1", naive)  # the visible cases are small numbers: it passes
    with pytest.raises(CheckFailed, match="NaN"), np.errstate(over="ignore", invalid="ignore"):
        check("00.1", naive, hidden=True)


def test_learner_editing_inputs_in_place_cannot_corrupt_the_reference():
    def softmax(x):
        out = softmax_reference(x)
        x[...] = 0.0  # vandalise the input
        return out

    assert check("00.1", softmax, quiet=True).passed


def test_an_exercise_that_keeps_its_inputs_names_an_argument_changed_in_place():
    """``keeps_inputs``: a right result computed by writing into an argument fails, and the
    message names the argument and how much of it changed; other exercises allow it."""
    from course_lib.checks import core

    ex = core.register(
        core.Exercise(
            id="99.2",
            title="inputs kept",
            points=1,
            target="normalise",
            cases=lambda rng, hidden: [
                core.Case("an array and a list", (np.array([1.0, 3.0]), [np.ones(2)]))
            ],
            reference=lambda x, extra: x / x.sum(),
            mistakes={"you returned x unchanged.": lambda x, extra: x},
            hint=core.Hint("each entry is divided by the same number.", "x / x.sum()"),
            keeps_inputs=True,
        )
    )

    def in_place(x, extra):
        x /= x.sum()
        return x

    def grows_the_list(x, extra):
        extra.append(x)
        return x / x.sum()

    try:
        with pytest.raises(CheckFailed) as info:
            check("99.2", in_place, hints="nudge")
        message = str(info.value)
        assert "the call changed its argument `x`: 2 of 2 values changed" in message
        assert f"Likely cause: {core.CHANGED_INPUT}" in message
        assert core.CHANGED_INPUT.detail not in message
        with pytest.raises(CheckFailed, match="`extra`: its length went from 1 to 2"):
            check("99.2", grows_the_list)
        assert check("99.2", lambda x, extra: x / x.sum()).passed
        ex.keeps_inputs = False
        assert check("99.2", in_place).passed
    finally:
        core._REGISTRY.pop("99.2")


def test_a_compare_that_recognises_a_cause_shows_it_in_tiers():
    """A ``compare`` returns :class:`Diagnosed` with a ``cause``: the check renders it at the
    failure's tier, the nudge first."""
    from course_lib.checks import core

    cause = core.Hint("only the last entry is wrong.", "Loop over every entry, the last too.")

    def compare(got, expected, case):
        msg = compare_values(got, expected, 1e-9, 0.0)
        return msg and core.Diagnosed(msg, cause=cause)

    core.register(
        core.Exercise(
            id="99.3",
            title="a recognised cause",
            points=1,
            target="double",
            cases=lambda rng, hidden: [core.Case("three entries", (np.arange(3.0),))],
            reference=lambda x: 2 * x,
            compare=compare,
            mistakes={"you returned x.": lambda x: x},
            hint=core.Hint("double each entry.", "2 * x"),
        )
    )
    try:
        core._FAILED_BEFORE.pop("99.3", None)
        wrong = lambda x: np.concatenate([2 * x[:-1], x[-1:]])  # noqa: E731
        with pytest.raises(CheckFailed) as first:
            check("99.3", wrong)
        assert "Likely cause: only the last entry is wrong." in str(first.value)
        assert "Loop over every entry" not in str(first.value)
        assert "Hint:" not in str(first.value)  # diagnosed: no general hint after it
        with pytest.raises(CheckFailed, match="Loop over every entry, the last too."):
            check("99.3", wrong)
    finally:
        core._REGISTRY.pop("99.3")


def test_an_unknown_exercise_and_a_non_function():
    with pytest.raises(KeyError, match="unknown exercise"):
        check("99.9", softmax_ok)
    with pytest.raises(CheckFailed, match="expected a function named `softmax`"):
        check("00.1", 42)


# ----------------------------------------------------------------------- hidden checks


def test_hidden_checks_fail_a_blank_exercise_for_autograders():
    def softmax(x):
        raise NotImplementedError("Exercise 00.1 is not implemented yet: replace this line")

    with pytest.raises(CheckFailed, match="not implemented yet"):
        check("00.1", softmax, hidden=True)


def test_hints_come_in_tiers_nudge_first_then_the_detail(capsys):
    """A first failure shows the nudge; the same exercise failing again adds the detail."""
    from course_lib.checks import core

    hint = core.Hint("your weights do not sum to 1 over the keys.", "normalise with axis=-1.")
    ex = core.register(
        core.Exercise(
            id="99.1",
            title="tiers",
            points=1,
            target="f",
            cases=lambda rng, hidden: [core.Case("a row", (np.array([1.0, 3.0]),))],
            reference=lambda x: x / x.sum(),
            mistakes={hint: lambda x: x},
        )
    )
    core._FAILED_BEFORE.pop(ex.id, None)
    with pytest.raises(core.CheckFailed) as first:
        core.check("99.1", lambda x: x)
    assert "your weights do not sum to 1" in str(first.value)
    assert "axis=-1" not in str(first.value) and "fuller hint" in str(first.value)
    with pytest.raises(core.CheckFailed) as second:
        core.check("99.1", lambda x: x)
    assert "normalise with axis=-1." in str(second.value)
    core.check("99.1", lambda x: x / x.sum())  # a pass resets the tier
    with pytest.raises(core.CheckFailed) as again:
        core.check("99.1", lambda x: x)
    assert "axis=-1" not in str(again.value)
    with pytest.raises(core.CheckFailed) as asked:
        core.check("99.1", lambda x: x, hints="full")
    assert "axis=-1" in str(asked.value)
    with pytest.raises(ValueError, match="hints"):
        core.check("99.1", lambda x: x, hints="all")
    core._REGISTRY.pop("99.1")


# ----------------------------------------------------------------------- predict, then measure


def test_a_prediction_is_shown_beside_each_measurement(capsys):
    from course_lib.checks.ch06 import rescale_count_reference

    def predicted(n_scores, block_size, rows, seed):
        return 7.0

    check("06.7", rescale_count_reference, prediction=predicted)
    out = capsys.readouterr().out
    assert "you predicted 7, measured 7.46: your prediction is 6% low" in out  # H_1024 = 7.51
    assert "you predicted 7, measured 3.3" in out and "% high" in out  # H_16 = 3.38
    assert "all 2 cases passed" in out


def test_a_missing_or_broken_prediction_is_said_and_never_graded(capsys):
    from course_lib.checks.ch06 import rescale_count_reference
    from course_lib.checks.core import PLACEHOLDER_MARK

    def blank(*args):
        raise NotImplementedError(f"Exercise 06.7 {PLACEHOLDER_MARK}: replace this line")

    assert check("06.7", rescale_count_reference, prediction=blank).passed
    assert "no prediction written yet" in capsys.readouterr().out
    assert check("06.7", rescale_count_reference, prediction="about seven").passed
    assert "should be a number, got str" in capsys.readouterr().out
    assert check("06.7", rescale_count_reference, prediction=lambda *a: 1 / 0).passed
    assert "your prediction raised ZeroDivisionError" in capsys.readouterr().out


def test_a_failed_measurement_still_shows_the_prediction():
    def off(n_scores, block_size, rows, seed):
        return 100.0

    with pytest.raises(CheckFailed) as failure:
        check("06.7", off, prediction=7.5, quiet=True)
    msg = str(failure.value)
    assert "your measurement 100 is off" in msg and "(you predicted 7.5, measured 100" in msg
