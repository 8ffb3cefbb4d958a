"""Chapter 02's exercise checks: references pass, every known mistake fails with its hint."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.checks import CheckFailed, ch02, check, get_exercise
from course_lib.checks.core import harvest, score

IDS = ["02.1", "02.2", "02.3", "02.4", "02.5"]


def test_five_exercises_with_points():
    exercises = [get_exercise(i) for i in IDS]
    assert [e.target for e in exercises] == ["attention", "causal_mask", "padding_mask",
                                             "masked_softmax", "attention_weights"]
    assert all(1 <= e.points <= 2 for e in exercises)
    assert all(e.mistakes for e in exercises)


@pytest.mark.parametrize("exercise_id", IDS)
def test_reference_passes_visible_and_hidden(exercise_id, capsys):
    ex = get_exercise(exercise_id)
    assert check(exercise_id, ex.reference).passed
    assert check(exercise_id, ex.reference, hidden=True).passed
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id,hint", [
    (i, h) for i in IDS for h in get_exercise(i).mistakes])
def test_each_mistake_fails_with_its_hint(exercise_id, hint):
    ex = get_exercise(exercise_id)
    wrong = ex.mistakes[hint]
    failed = []
    for hidden in (False, True):
        try:
            check(exercise_id, wrong, hidden=hidden, quiet=True)
        except CheckFailed as err:
            failed.append(str(err))
    assert failed, f"the mistake {hint!r} passes the checks"
    assert any(hint in msg for msg in failed)


@pytest.mark.parametrize("exercise_id,hint", [
    (i, h) for i in IDS for h in get_exercise(i).mistakes])
def test_visible_cases_already_catch_each_mistake(exercise_id, hint):
    # a learner must see every known mistake before submitting, not only in the grader
    with pytest.raises(CheckFailed) as err:
        check(exercise_id, get_exercise(exercise_id).mistakes[hint], quiet=True)
    assert hint in str(err.value)


def test_k_dot_T_fails_visibly_on_a_batch():
    def attention(q, k, v):  # k.T reverses *all* axes: wrong for batched inputs
        s = q @ k.T / np.sqrt(q.shape[-1])
        w = np.exp(s - s.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
        return w @ v, w

    with pytest.raises(CheckFailed, match=r"batch of 2 sequences.*raised"):
        check("02.1", attention, quiet=True)


def test_naive_masked_softmax_gets_the_nan_explanation():
    with pytest.raises(CheckFailed, match="NaN"):
        check("02.4", ch02._naive_masked, quiet=True)


def test_not_implemented_is_friendly(capsys):
    def attention(q, k, v):
        raise NotImplementedError("Exercise 02.1 is not implemented yet: replace this line")

    report = check("02.1", attention)
    assert report.not_implemented and "not implemented yet" in capsys.readouterr().out


def test_float_mask_instead_of_bool_is_explained():
    def causal_mask(n_q, n_k):
        return np.tril(np.ones((n_q, n_k)))

    with pytest.raises(CheckFailed, match="boolean"):
        check("02.2", causal_mask, quiet=True)


@pytest.mark.parametrize("exercise_id", IDS)
def test_grader_round_trip(exercise_id, tmp_path):
    ex = get_exercise(exercise_id)
    harvest(exercise_id, ex.reference, seed=99, out_dir=tmp_path / "good")
    assert score(exercise_id, 99, tmp_path / "good").status == "passed"
    wrong = next(iter(ex.mistakes.values()))
    harvest(exercise_id, wrong, seed=99, out_dir=tmp_path / "bad")
    verdict = score(exercise_id, 99, tmp_path / "bad")
    assert verdict.status == "failed" and verdict.points == 0
