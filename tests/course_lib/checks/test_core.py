"""The check framework: feedback a learner can act on, and the grader's protocol."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.checks import CheckFailed, check, compare_values
from course_lib.checks.ch00 import softmax_reference
from course_lib.checks.core import (
    Case,
    Exercise,
    all_exercises,
    get_exercise,
    register,
)


def softmax_ok(x):
    return softmax_reference(x)


# ----------------------------------------------------------------------- compare_values


def test_shape_mismatch_names_both_shapes_and_suggests_a_transpose():
    msg = compare_values(np.zeros((2, 4, 8, 16)), np.zeros((2, 4, 16, 8)), 1e-6, 1e-6)
    assert "expected shape (2, 4, 16, 8), got (2, 4, 8, 16)" in msg
    assert "transpose" in msg


def test_missing_dimension_is_explained():
    msg = compare_values(np.zeros((4, 8)), np.zeros((1, 4, 8)), 1e-6, 1e-6)
    assert "2 dimensions instead of 3" in msg


def test_nan_is_reported_with_its_likely_cause():
    got = np.array([[0.5, 0.5], [np.nan, np.nan]])
    msg = compare_values(got, np.array([[0.5, 0.5], [0.0, 0.0]]), 1e-6, 1e-6)
    assert "NaN" in msg and "(1, 0)" in msg and "-inf" in msg


def test_largest_error_and_its_index_are_reported():
    exp = np.arange(6.0).reshape(2, 3)
    got = exp.copy()
    got[1, 2] += 0.5
    msg = compare_values(got, exp, 1e-6, 1e-6)
    assert "Largest error 0.5 at index (1, 2)" in msg


def test_complex_results_are_refused_not_silently_cast():
    msg = compare_values(np.ones(3) + 1j, np.ones(3), 1e-6, 1e-6)
    assert "complex" in msg and ".real" in msg


def test_torch_and_numpy_compare_equal():
    assert compare_values(torch.ones(2, 3), np.ones((2, 3)), 1e-6, 1e-6) is None
    assert (
        compare_values(torch.ones(2, 3, dtype=torch.bfloat16), np.ones((2, 3)), 1e-6, 1e-6) is None
    )


def test_none_return_and_tuples():
    assert "forget the `return`" in compare_values(None, np.ones(2), 1e-6, 1e-6)
    assert "expected 2 items, got 1" in compare_values((1.0,), (1.0, 2.0), 1e-6, 1e-6)
    assert compare_values((np.ones(2), 3.0), (np.ones(2), 3.0), 1e-6, 1e-6) is None
    assert "expected a boolean array" in compare_values(np.ones(2), np.ones(2, bool), 0, 0)


# ----------------------------------------------------------------------- check() in a notebook


def test_a_correct_function_passes(capsys):
    report = check("00.1", softmax_ok)
    assert report.passed
    assert "✓ Exercise" in capsys.readouterr().out


def test_a_common_mistake_is_named():
    def wrong_axis(x):
        return np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)

    with pytest.raises(CheckFailed, match="wrong axis"):
        check("00.1", wrong_axis)


def test_not_started_prints_a_friendly_note_not_a_traceback(capsys):
    def softmax(x):
        raise NotImplementedError("Exercise 00.1 is not implemented yet")

    report = check("00.1", softmax)
    assert report.not_implemented and not report.passed
    assert "not implemented yet" in capsys.readouterr().out


def test_a_real_not_implemented_error_is_a_bug_not_a_blank():
    def softmax(x):
        raise NotImplementedError("max_all not implemented for 'ComplexFloat'")

    with pytest.raises(CheckFailed, match="ComplexFloat"):
        check("00.1", softmax)


def test_an_exception_in_learner_code_is_reported_with_its_line():
    def softmax(x):
        return x.nonexistent_method()

    with pytest.raises(CheckFailed) as info:
        check("00.1", softmax)
    assert "AttributeError" in str(info.value) and "nonexistent_method" in str(info.value)


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


def test_unknown_exercise_and_non_function():
    with pytest.raises(KeyError, match="unknown exercise"):
        get_exercise("99.9")
    with pytest.raises(CheckFailed, match="expected a function named `softmax`"):
        check("00.1", 42)


def test_registry_refuses_duplicate_ids():
    ex = get_exercise("00.1")
    twin = Exercise(ex.id, ex.title, ex.points, ex.target, ex.cases, ex.reference)
    with pytest.raises(ValueError, match="registered twice"):
        register(twin)


def test_every_declared_exercise_is_consistent():
    exercises = all_exercises()
    assert "00.1" in exercises
    for ex_id, ex in exercises.items():
        assert ex_id == ex.id and ex.points > 0 and ex.target.isidentifier()
        rng = np.random.default_rng(0)
        visible, hidden = ex.cases(rng, False), ex.cases(rng, True)
        assert visible and hidden, f"{ex_id} needs visible and hidden cases"
        names = [c.name for c in visible + hidden]
        assert len(set(names)) == len(names), f"{ex_id}: case names must be unique"
        for case in visible:
            assert isinstance(case, Case)


# ----------------------------------------------------------------------- hidden checks


def test_hidden_checks_fail_a_blank_exercise_for_autograders():
    def softmax(x):
        raise NotImplementedError("Exercise 00.1 is not implemented yet: replace this line")

    with pytest.raises(CheckFailed, match="not implemented yet"):
        check("00.1", softmax, hidden=True)


def test_a_nan_producing_twin_does_not_name_the_wrong_mistake():
    def naive(x):  # overflows on the hidden case with scores near 1000
        return np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)

    with pytest.raises(CheckFailed) as info, np.errstate(over="ignore", invalid="ignore"):
        check("00.1", naive, hidden=True)
    assert "wrong axis" not in str(info.value)
    assert "exp overflowed" in str(info.value)


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


def test_tuple_items_are_named_in_feedback():
    from course_lib.checks import core

    msg = core.compare_values(
        (np.zeros(2), np.ones(2)), (np.zeros(2), np.zeros(2)), 1e-6, 1e-6, names=("out", "lse")
    )
    assert msg.startswith("lse: ")
    assert core.compare_values((1.0, 2.0), (1.0, 3.0), 1e-6, 1e-6).startswith("item 1: ")


def test_byte_counts_as_floats_say_only_that_when_the_value_is_right():
    """A float (or a one-element tensor or array: what the grader records) equal to the
    expected count is refused with the advice alone; a wrong float or int gets the usual
    diagnosis (a plain message), shown with separators and in GiB."""
    from course_lib.checks.core import Diagnosed, byte_count_message

    advice = "use //."
    for got in (2.0**34, np.float64(2.0**34), torch.tensor(2.0**34), np.array(2.0**34)):
        msg = byte_count_message(got, 2**34, advice)
        assert isinstance(msg, Diagnosed), type(got)
        assert msg.startswith("expected an int (a number of bytes), got the ") and "use //." in msg
        assert "17,179,869,184" in msg and "e+10" not in msg
    wrong = byte_count_message(3.5, 2**34, advice)
    assert not isinstance(wrong, Diagnosed) and "got the float 3.5" in wrong
    assert byte_count_message(2**34, 2**34, advice) is None
    assert byte_count_message(np.int64(2**34), 2**34, advice) is None
    off = byte_count_message(2**35, 2**34, advice, name="ring")
    assert off.startswith("ring: expected 17,179,869,184 bytes (16 GiB), got 34,359,738,368 bytes")
    assert "2 times the right size" in off and not isinstance(off, Diagnosed)
    assert "got str" in byte_count_message("big", 2**34, advice)
    assert "got bool" in byte_count_message(True, 1, advice)


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


def test_prediction_line_says_high_low_or_a_factor():
    from course_lib.checks.core import prediction_line

    case = Case("c")
    assert prediction_line(1.02, case, 1.0).endswith("right on")
    assert prediction_line(1.5, case, 1.0).endswith("your prediction is 50% high")
    assert prediction_line(0.5, case, 1.0).endswith("your prediction is 50% low")
    assert prediction_line(1000.0, case, 1.0).endswith("a factor 1000 too high")
    assert prediction_line(0.01, case, 1.0).endswith("a factor 100 too low")
    assert prediction_line(-1.0, case, 1.0).endswith("the wrong sign")
    assert prediction_line(None, case, 1.0).startswith("no prediction written yet")


def test_a_missed_prediction_shows_the_cases_why_for_its_direction():
    from course_lib.checks.core import prediction_line

    case = Case("c", why={"high": "it is lower because A.", "low": "it is higher because B."})
    assert prediction_line(2.0, case, 1.0).endswith("Why: it is lower because A.")
    assert prediction_line(0.5, case, 1.0).endswith("Why: it is higher because B.")
    assert "Why" not in prediction_line(1.01, case, 1.0)  # right on: nothing to explain
    plain = Case("c", why="one reason.")
    assert prediction_line(3.0, plain, 1.0).endswith("Why: one reason.")
    assert "Why" not in prediction_line(1.0, plain, 1.0)


def test_reveal_prints_the_gap_on_the_real_model_and_its_explanation(capsys):
    from course_lib.checks import reveal

    ex = get_exercise("11.5")
    reveal("11.5", 1.0, 6.7)
    out = capsys.readouterr().out
    assert "measured 6.7; you predicted 1: your prediction is 85% low." in out
    assert " ".join(ex.gaps["low"].split()[:6]) in " ".join(out.split())
    reveal("11.5", lambda q: q * 2, 6.7, 3.3)  # a function of the arguments
    assert "you predicted 6.6: right on." in capsys.readouterr().out
    reveal("11.5", None, 6.7)
    assert "no prediction written yet" in capsys.readouterr().out
    with pytest.raises(TypeError, match="one measured number"):
        reveal("11.5", 1.0, torch.ones(3))
