"""Comparing an output with the expected one: messages a learner can act on."""

from __future__ import annotations

import numpy as np
import torch

from course_lib.checks.compare import (
    Diagnosed,
    byte_count_message,
    compare_values,
    to_numpy,
)
from course_lib.checks.exercise import Hint


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


def test_to_numpy_brings_tensors_and_their_containers_to_numpy():
    out = to_numpy((torch.ones(2, dtype=torch.float16), [np.float32(1.5)], 3))
    assert isinstance(out, tuple) and out[0].dtype == np.float32 and out[1] == [1.5]
    assert out[2] == 3 and isinstance(out[1][0], float)


def test_none_return_and_tuples():
    assert "forget the `return`" in compare_values(None, np.ones(2), 1e-6, 1e-6)
    assert "expected 2 items, got 1" in compare_values((1.0,), (1.0, 2.0), 1e-6, 1e-6)
    assert compare_values((np.ones(2), 3.0), (np.ones(2), 3.0), 1e-6, 1e-6) is None
    assert "expected a boolean array" in compare_values(np.ones(2), np.ones(2, bool), 0, 0)


def test_tuple_items_are_named_in_feedback():
    msg = compare_values(
        (np.zeros(2), np.ones(2)), (np.zeros(2), np.zeros(2)), 1e-6, 1e-6, names=("out", "lse")
    )
    assert msg.startswith("lse: ")
    assert compare_values((1.0, 2.0), (1.0, 3.0), 1e-6, 1e-6).startswith("item 1: ")


def test_a_diagnosed_message_adds_its_cause_at_the_tier_asked_for():
    cause = Hint("only the last entry is wrong.", "Loop over every entry, the last too.")
    msg = Diagnosed("expected 2, got 1.", cause=cause)
    assert msg.render(full=False).endswith(
        "Likely cause: only the last entry is wrong. (Fix it, "
        "or run the check again for a fuller hint.)"
    )
    assert msg.render(full=True).endswith("Loop over every entry, the last too.")
    assert Diagnosed("all that is wrong.").render(full=True) == "all that is wrong."


def test_byte_counts_as_floats_say_only_that_when_the_value_is_right():
    """A float (or a one-element tensor or array: what the grader records) equal to the
    expected count is refused with the advice alone; a wrong float or int gets the usual
    diagnosis (a plain message), shown with separators and in GiB."""
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
