"""What every exercise of every chapter promises, checked once for all of them.

Chapter-specific behaviour lives in tests/test_checks_chNN.py; these are the promises the
framework makes to learners and instructors about any exercise declared with it.
"""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.checks import CheckFailed, check
from course_lib.checks.core import PLACEHOLDER_MARK, all_exercises, get_exercise
from course_tools.grading.results import grader_cases, harvest, score, write_inputs

IDS = sorted(all_exercises())


def _failure(ex_id, fn, hidden=False) -> str | None:
    try:
        with np.errstate(all="ignore"):  # the wrong twins overflow on purpose
            check(ex_id, fn, hidden=hidden, quiet=True)
    except CheckFailed as failure:
        return str(failure)
    return None


@pytest.mark.parametrize("ex_id", IDS)
def test_reference_passes_visible_and_hidden_cases(ex_id, capsys):
    ex = get_exercise(ex_id)
    assert check(ex_id, ex.reference).passed
    assert check(ex_id, ex.reference, hidden=True).passed
    assert "all" in capsys.readouterr().out


@pytest.mark.parametrize("ex_id", IDS)
def test_every_declared_mistake_fails_and_is_named(ex_id):
    """A learner who makes a known mistake is told which one, by the first hint named."""
    ex = get_exercise(ex_id)
    assert ex.mistakes, f"{ex_id} declares no common mistakes to diagnose"
    for hint, wrong in ex.mistakes.items():
        messages = [m for m in (_failure(ex_id, wrong), _failure(ex_id, wrong, hidden=True)) if m]
        assert messages, f"{ex_id}: the mistake {hint[:60]!r}... passes every check"
        named = [h for h in ex.mistakes if any(h in m for m in messages)]
        assert named, f"{ex_id}: {hint[:60]!r}... is caught but not named: {messages}"
        assert hint in named, f"{ex_id}: {hint[:60]!r}... is named as {named[0][:60]!r}"


# The warm-up exercise keeps one mistake (an overflowing softmax) that only the hidden
# cases catch: chapter 00 uses it to show why grading runs hidden cases.
HIDDEN_ONLY = {("00.1", "exp overflowed")}


@pytest.mark.parametrize("ex_id", IDS)
def test_the_visible_cases_already_catch_each_mistake(ex_id):
    """A learner sees a known mistake in the notebook, not first in the grader's report."""
    ex = get_exercise(ex_id)
    for hint, wrong in ex.mistakes.items():
        if any(ex_id == i and hint.startswith(h) for i, h in HIDDEN_ONLY):
            continue
        message = _failure(ex_id, wrong)
        assert message, f"{ex_id}: {hint[:60]!r}... passes the visible checks"
        assert hint in message, f"{ex_id}: visible checks do not name {hint[:60]!r}..."


@pytest.mark.parametrize("ex_id", IDS)
def test_the_hidden_cases_alone_catch_and_name_each_mistake(ex_id):
    """A grader (or the notebook's hidden check) running the hidden cases alone rejects every
    known mistake and names it: the hidden set does not lean on the visible one."""
    ex = get_exercise(ex_id)
    for hint, wrong in ex.mistakes.items():
        message = _failure(ex_id, wrong, hidden=True)
        assert message, f"{ex_id}: {hint[:60]!r}... passes the hidden checks"
        assert hint in message, f"{ex_id}: hidden checks do not name {hint[:60]!r}..."


@pytest.mark.parametrize("ex_id", IDS)
def test_a_blank_exercise_says_not_implemented(ex_id, capsys):
    def blank(*args, **kwargs):
        raise NotImplementedError(f"Exercise {ex_id} {PLACEHOLDER_MARK}: replace this line")

    report = check(ex_id, blank)
    assert report.not_implemented and not report.passed
    assert "not implemented yet" in capsys.readouterr().out
    with pytest.raises(CheckFailed):  # under a grader the hidden checks fail it
        check(ex_id, blank, hidden=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("ex_id", IDS)
def test_grader_protocol_round_trip(ex_id, tmp_path):
    ex = get_exercise(ex_id)
    cases = grader_cases(ex_id, 7)  # the grader's cases; only their inputs reach the kernel
    write_inputs(cases, tmp_path / "inputs.pkl", ex_id)
    harvest(ex_id, ex.reference, tmp_path / "inputs.pkl", tmp_path / "ok")
    verdict = score(ex_id, cases, tmp_path / "ok")
    assert verdict.status == "passed" and verdict.points == ex.points
    for i, wrong in enumerate(ex.mistakes.values()):
        harvest(ex_id, wrong, tmp_path / "inputs.pkl", tmp_path / f"w{i}")
        assert score(ex_id, cases, tmp_path / f"w{i}").status == "failed"
