"""course_lib.checks.declare: an exercise declared as its reference with slips becomes the
runtime Exercise the checks and the grader use, with its texts by key."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.checks import CheckFailed, check, core, declare, texts
from course_lib.checks.core import Case

MD = """
## 99.1
check the factor.

Multiply by two.

## 99.1/thrice
you multiplied by three.

Two, not three.

## 99.1/added
you added two.

## 99.1/no-axis
your call named an axis.

## 99.1/keeps-inputs
you changed x.

## 99.1/gap-high
a reason it is lower.
"""


def double(x, *, factor=2, add=False):
    """The reference: 2x (a slip multiplies by 3, or adds 2)."""
    return np.asarray(x) + 2 if add else factor * np.asarray(x)


def _cases(rng, hidden):
    return [Case("three numbers", (np.array([1.0, 2.0, 3.0]),))]


@pytest.fixture
def declared(monkeypatch):
    monkeypatch.setitem(core._REGISTRY, "99.1", None)
    monkeypatch.setattr(texts, "chapter_texts", lambda ch: texts.parse(MD) if ch == "99" else {})
    monkeypatch.setattr(declare, "chapter_texts", texts.chapter_texts)
    core._REGISTRY.pop("99.1")
    return declare.exercise(
        "99.1",
        double,
        target="double",
        title="double it",
        points=1,
        cases=_cases,
        slips={"thrice": dict(factor=3), "added": dict(add=True)},
        errors={"no-axis": "axis"},
        keeps_inputs=True,
    )


def test_the_reference_and_each_slip_with_its_key(declared):
    assert declared.reference is double and declared.target == "double"
    keys = [h.key for h in declared.mistakes]
    assert keys == ["99.1/thrice", "99.1/added"]
    wrong = dict(zip(keys, declared.mistakes.values()))
    assert wrong["99.1/thrice"](np.array([1.0])).tolist() == [3.0]
    assert wrong["99.1/added"](np.array([1.0])).tolist() == [3.0]
    assert str(declared.hint) == "check the factor." and declared.hint.key == "99.1"
    assert [h.key for h in declared.errors.values()] == ["99.1/no-axis"]
    assert declared.keeps_inputs.key == "99.1/keeps-inputs"
    assert declared.gaps == {"high": "a reason it is lower."} and declared.no_warnings is False


def test_a_named_mistake_is_reported_with_its_key(declared):
    failure = core.evaluate_case(declared, _cases(None, False)[0], np.array([3.0, 6.0, 9.0]))
    assert failure.cause == "99.1/thrice" and "you multiplied by three" in failure.message
    other = core.evaluate_case(declared, _cases(None, False)[0], np.array([0.0, 0.0, 0.0]))
    assert other.cause == "99.1" and "check the factor" in other.message
    with pytest.raises(CheckFailed, match="you added two"):
        check("99.1", lambda x: x + 2, quiet=True)


def test_a_slip_equal_to_the_reference_on_an_input_is_never_named_there(declared):
    # on [1, 2, 3]: "added" gives [3, 4, 5], "thrice" [3, 6, 9]; on [2]: added == thrice == 4...
    case = Case("two", (np.array([2.0]),))
    # 2 + 2 == 2 * 2: the "added" slip equals the reference on this input, so the failure
    # [6] is named "thrice" and [5] falls back to the general hint, never to "added".
    assert core.evaluate_case(declared, case, np.array([6.0])).cause == "99.1/thrice"
    assert core.evaluate_case(declared, case, np.array([4.0])).passed


def test_a_slip_must_be_keywords_and_its_text_must_exist(declared, monkeypatch):
    core._REGISTRY.pop("99.1")
    with pytest.raises(TypeError, match="a slip is a dict of keywords"):
        declare.exercise("99.1", double, target="d", title="t", points=1, cases=_cases,
                         slips={"thrice": 3})  # fmt: skip
    with pytest.raises(KeyError, match="99.1/unknown"):
        declare.exercise("99.1", double, target="d", title="t", points=1, cases=_cases,
                         slips={"unknown": dict(factor=5)})  # fmt: skip
