"""Running a learner's function on one case: what the call did, recorded without judging it."""

from __future__ import annotations

import linecache
import sys
import warnings

import numpy as np
import pytest

from course_lib.checks.call import (
    PLACEHOLDER_MARK,
    Call,
    _copy_args,
    call_learner,
    changed_argument,
)
from course_lib.checks.exercise import Case


def test_a_call_that_returns_records_its_output_and_leaves_the_case_as_it_was():
    case = Case("a row", (np.array([1.0, 3.0]),))

    def vandal(x):
        x[...] = 0.0  # writes into its copy of the input
        return x + 1

    call = call_learner(vandal, case)
    assert call == Call(output=call.output) and np.array_equal(call.output, [1.0, 1.0])
    assert np.array_equal(case.args[0], [1.0, 3.0])  # the case itself is untouched
    copy = _copy_args(case)
    assert copy.args[0] is not case.args[0] and np.array_equal(copy.args[0], case.args[0])


def test_the_placeholder_is_not_implemented_yet_and_a_real_not_implemented_error_is_a_bug():
    case = Case("c", (1.0,))

    def blank(x):
        raise NotImplementedError(f"Exercise 00.1 {PLACEHOLDER_MARK}: replace this line")

    def bare(x):
        raise NotImplementedError()

    def real(x):
        raise NotImplementedError("max_all not implemented for 'ComplexFloat'")

    assert call_learner(blank, case).not_implemented
    assert call_learner(bare, case).not_implemented  # nbgrader's own placeholder
    bug = call_learner(real, case)
    assert not bug.not_implemented and bug.raised == "NotImplementedError"
    assert "ComplexFloat" in bug.message


def test_an_exception_is_recorded_with_the_learners_own_lines():
    cell = "def softmax(x):\n    return x.nonexistent_method()\n"
    name = "<a notebook cell>"
    linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)  # as IPython does
    namespace: dict = {}
    exec(compile(cell, name, "exec"), namespace)
    call = call_learner(namespace["softmax"], Case("c", (np.ones(2),)))
    assert call.raised == "AttributeError" and "nonexistent_method" in call.message
    assert call.frames.strip() == "line 2 in softmax: return x.nonexistent_method()"
    assert "course_lib" not in call.frames  # the framework's own frames are left out


def test_sys_exit_fails_the_call_not_the_caller():
    call = call_learner(lambda x: sys.exit(3), Case("c", (1,)))
    assert call.exit == "3" and call.output is None


def test_a_runtime_warning_is_recorded_only_where_the_exercise_forbids_them():
    case = Case("c", (np.array([0.0, 1.0]),))

    def divide(x):
        return x / x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert call_learner(divide, case).warning == ""
    watched = call_learner(divide, case, no_warnings=True)
    assert watched.warning.startswith("RuntimeWarning: invalid value encountered in divide")
    assert "return x / x" in watched.warning


def test_other_warnings_pass_through_untouched():
    def deprecated(x):
        warnings.warn("old", DeprecationWarning, stacklevel=1)
        return x

    with pytest.warns(DeprecationWarning, match="old"):
        call = call_learner(deprecated, Case("c", (1.0,)), no_warnings=True)
    assert call.warning == "" and call.output == 1.0


def test_an_argument_changed_in_place_is_named_with_how_it_changed():
    case = Case("two arguments", (np.array([1.0, 3.0]), [np.ones(2)]), {"scale": np.ones(3)})

    def in_place(x, extra, scale):
        x /= x.sum()
        return x

    def grows_the_list(x, extra, scale):
        extra.append(x)
        return x

    def scales(x, extra, scale):
        scale[0] = 2.0
        return x

    def keeps(x, extra, scale):
        return x / x.sum()

    changed = call_learner(in_place, case, keeps_inputs=True).changed
    assert changed == "`x`: 2 of 2 values changed"
    assert call_learner(in_place, case).changed == ""  # only checked where asked
    assert call_learner(grows_the_list, case, keeps_inputs=True).changed == (
        "`extra`: its length went from 1 to 2"
    )
    assert call_learner(scales, case, keeps_inputs=True).changed == "`scale`: 1 of 3 values changed"
    assert call_learner(keeps, case, keeps_inputs=True).changed == ""


def test_changed_argument_counts_nan_as_unchanged_and_numbers_unnamed_arguments():
    before = Case("c", (np.array([np.nan, 1.0]), {"k": np.zeros(2)}))
    after = _copy_args(before)
    assert changed_argument(max, before, after) == ""  # NaN == NaN here; max has no signature
    after.args[1]["k"][1] = 5.0
    assert changed_argument(max, before, after) == "number 2: ['k']: 1 of 2 values changed"
