"""What an exercise is: hints in two tiers, the declarations, and the one registry."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.checks import core, exercise
from course_lib.checks.exercise import (
    CHANGED_INPUT,
    Case,
    Exercise,
    Hint,
    all_exercises,
    get_exercise,
    hint_key,
    register,
    render_hint,
)


def test_a_hint_shows_its_nudge_then_its_detail():
    hint = Hint("your rows do not sum to 1.", "normalise over axis=-1.", key="99.1/axis")
    assert hint == "your rows do not sum to 1." and hint.detail == "normalise over axis=-1."
    assert render_hint(hint, full=True) == "your rows do not sum to 1. normalise over axis=-1."
    nudge = render_hint(hint, full=False)
    assert "axis=-1" not in nudge and "run the check again for a fuller hint" in nudge
    assert render_hint("a plain string has one tier.", full=False) == "a plain string has one tier."
    assert CHANGED_INPUT.detail and "clone" in CHANGED_INPUT.detail.lower()


def test_a_hint_key_is_its_own_else_under_the_exercise():
    assert hint_key(Hint("n", key="02.1/unscaled"), "02.1") == "02.1/unscaled"
    assert hint_key("a plain hint", "02.1", "changed-input") == "02.1/changed-input"
    assert hint_key("a plain hint", "02.1") == "02.1"


def test_an_unknown_exercise_is_a_key_error():
    with pytest.raises(KeyError, match="unknown exercise"):
        get_exercise("99.9")
    with pytest.raises(KeyError, match="no checks module for chapter '98'"):
        get_exercise("98.1")


def test_registry_refuses_duplicate_ids():
    ex = get_exercise("00.1")
    assert register(ex) is ex  # the same exercise again: nothing changes
    twin = Exercise(ex.id, ex.title, ex.points, ex.target, ex.cases, ex.reference)
    with pytest.raises(ValueError, match="registered twice"):
        register(twin)


def test_the_registry_is_one_dict_whichever_module_names_it():
    """Tests and tools reach the registry as ``core._REGISTRY``: the same dict."""
    assert core._REGISTRY is exercise._REGISTRY
    assert core.get_exercise is get_exercise and core.Exercise is Exercise


def test_every_declared_exercise_is_consistent():
    exercises = all_exercises()
    assert "00.1" in exercises
    for ex_id, ex in exercises.items():
        assert ex_id == ex.id and ex.points > 0 and ex.target.isidentifier()
        assert ex.chapter == ex_id.split(".")[0]
        rng = np.random.default_rng(0)
        visible, hidden = ex.cases(rng, False), ex.cases(rng, True)
        assert visible and hidden, f"{ex_id} needs visible and hidden cases"
        names = [c.name for c in visible + hidden]
        assert len(set(names)) == len(names), f"{ex_id}: case names must be unique"
        for case in visible:
            assert isinstance(case, Case)
