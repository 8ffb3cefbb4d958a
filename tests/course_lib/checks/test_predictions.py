"""Predict, then measure: a learner's prediction beside the measurement, never graded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.checks.call import PLACEHOLDER_MARK
from course_lib.checks.exercise import Case, get_exercise
from course_lib.checks.predictions import NO_PREDICTION, predicted_value, prediction_line, reveal


def test_a_prediction_is_a_number_or_a_function_of_the_cases_arguments():
    case = Case("c", (3.0,), {"times": 2})
    assert predicted_value(7, case) == 7.0 and isinstance(predicted_value(7, case), float)
    assert predicted_value(lambda q, times: q * times, case) == 6.0
    assert predicted_value(torch.tensor([2.5]), case) == 2.5
    assert predicted_value(np.float32(1.5), case) == 1.5


def test_a_missing_or_broken_prediction_says_why_there_is_none():
    case = Case("c", (3.0,))

    def blank(q):
        raise NotImplementedError(f"Exercise 06.7 {PLACEHOLDER_MARK}: replace this line")

    assert predicted_value(None, case) == predicted_value(..., case) == NO_PREDICTION
    assert predicted_value(blank, case) == NO_PREDICTION
    assert predicted_value(lambda q: 1 / 0, case).startswith("your prediction raised Zero")
    assert predicted_value("about seven", case).endswith(
        "should be a number, got str 'about seven'"
    )
    assert "should be a number" in predicted_value(True, case)


def test_prediction_line_says_high_low_or_a_factor():
    case = Case("c")
    assert prediction_line(1.02, case, 1.0).endswith("right on")
    assert prediction_line(1.5, case, 1.0).endswith("your prediction is 50% high")
    assert prediction_line(0.5, case, 1.0).endswith("your prediction is 50% low")
    assert prediction_line(1000.0, case, 1.0).endswith("a factor 1000 too high")
    assert prediction_line(0.01, case, 1.0).endswith("a factor 100 too low")
    assert prediction_line(-1.0, case, 1.0).endswith("the wrong sign")
    assert prediction_line(None, case, 1.0).startswith("no prediction written yet")


def test_a_missed_prediction_shows_the_cases_why_for_its_direction():
    case = Case("c", why={"high": "it is lower because A.", "low": "it is higher because B."})
    assert prediction_line(2.0, case, 1.0).endswith("Why: it is lower because A.")
    assert prediction_line(0.5, case, 1.0).endswith("Why: it is higher because B.")
    assert "Why" not in prediction_line(1.01, case, 1.0)  # right on: nothing to explain
    plain = Case("c", why="one reason.")
    assert prediction_line(3.0, plain, 1.0).endswith("Why: one reason.")
    assert "Why" not in prediction_line(1.0, plain, 1.0)


def test_reveal_prints_the_gap_on_the_real_model_and_its_explanation(capsys):
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


def test_reveal_of_an_exercise_not_installed_prints_the_numbers_alone(capsys):
    reveal("99.9", 2.0, 4.0, on="a model")
    assert capsys.readouterr().out == (
        "a model, exercise 99.9: measured 4; you predicted 2: your prediction is 50% low.\n"
    )
