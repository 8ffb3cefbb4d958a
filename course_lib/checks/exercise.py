"""What an exercise is, and where exercises are kept.

* :class:`Hint`: a hint in two tiers (a nudge, then a detail), :func:`render_hint` and
  :func:`hint_key` (what a hint diagnoses, ``"02.1/unscaled"``);
* :class:`Case`: one input to an exercise's function; :class:`Exercise`: its id, points,
  reference, cases, named mistakes and hints (:mod:`course_lib.checks.declare` builds one
  from a chapter's reference function and texts);
* the registry: :func:`register`, :func:`get_exercise` (which imports a chapter's checks on
  first use) and :func:`all_exercises`. There is one registry, ``_REGISTRY``, a dict that
  :mod:`course_lib.checks.core` shows under the same name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .rules import Rule


class Hint(str):
    """A hint in two tiers: a *nudge* (the string itself) and a *detail* (often the formula).

    The first time a learner's check of an exercise fails, only the nudge is shown, so that
    they can find the fix themselves; a repeated failure of the same exercise, or
    ``check(..., hints="full")``, adds the detail. The grader's feedback shows both. A plain
    string is a hint with no second tier. Use it for ``Exercise.hint`` and for the keys of
    ``Exercise.mistakes``::

        mistakes={Hint("your rows do not sum to 1.", "normalise over axis=-1 (the keys)."): twin}
    """

    detail: str
    key: str  # what it diagnoses, "02.1/unscaled" (course_lib.checks.texts), or ""

    def __new__(cls, nudge: str, detail: str = "", key: str = "") -> Hint:
        obj = super().__new__(cls, nudge)
        obj.detail, obj.key = detail, key
        return obj

    def render(self, full: bool) -> str:
        if full and self.detail:
            return f"{self} {self.detail}"
        if self.detail:
            return f"{self} (Fix it, or run the check again for a fuller hint.)"
        return str(self)


def render_hint(hint: str, full: bool) -> str:
    """A hint's text at the tier asked for (plain strings have one tier)."""
    return hint.render(full) if isinstance(hint, Hint) else str(hint)


def hint_key(hint: str, exercise_id: str, default: str = "") -> str:
    """What ``hint`` diagnoses, as a key: its own (``"02.1/unscaled"``), else ``default``
    under the exercise (``"02.1/changed-input"``), else the exercise's id."""
    key = getattr(hint, "key", "")
    return key or (f"{exercise_id}/{default}" if default else exercise_id)


# What an exercise with ``keeps_inputs=True`` says when a call changed one of its arguments.
CHANGED_INPUT = Hint(
    "your function changed its input in place: the caller's tensor must stay as it was.",
    "Clone it first (x = x.clone(), or x.copy() for a numpy array), then change and return "
    "the copy.",
)


@dataclass
class Case:
    """One input to an exercise's function: ``fn(*args, **kwargs)``."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    # Why the measurement of this case is what it is, shown under a prediction that misses
    # it: one text, or {"high": ..., "low": ...} for a prediction above or below it.
    why: str | dict[str, str] = ""
    # True for a case whose inputs are written out in the chapter's code, the same for
    # every seed: a learner can compute its answer without writing the function, so the
    # grader's partial credit counts it apart (``course-grade --partial``)
    fixed: bool = False


@dataclass
class Fixed(Case):
    """A case whose inputs are written out in the chapter's code (see ``Case.fixed``)."""

    fixed: bool = True


@dataclass
class Exercise:
    r"""An exercise's id, points, what the learner writes, and how to check it.

    ``cases(rng, hidden)`` returns the inputs: visible cases when ``hidden`` is False,
    extra (larger, edge) cases when True. ``reference`` is the correct function.
    ``mistakes`` maps a learner-facing hint to a *wrong* function that reproduces a
    common mistake; when a learner's output matches one, the hint is shown.
    ``compare`` replaces the default array comparison when an exercise needs it: it gets
    ``(got, expected, case)`` and returns None when fine or a message when not.
    ``outputs`` names the items of a function that returns a tuple (``("output",
    "weights")``), so feedback says "weights: ..." instead of "item 1: ...".
    ``errors`` maps a regular expression to a hint for mistakes that *raise* instead of
    returning a wrong value (a wrong twin cannot name those): when the learner's
    exception, written ``"TypeName: message"``, matches the pattern (``re.search``), the
    hint is shown as the likely cause instead of the generic ``hint``.
    Hints (``hint`` and the keys of ``mistakes``) may be :class:`Hint`\ s with two tiers.
    A mistake twin may also *raise*: when the learner's function raises the same exception
    (type and message), that mistake's hint is shown. ``no_warnings``: when true, a
    ``RuntimeWarning`` emitted during the learner's call (numpy's "invalid value encountered
    in divide", say: an inf - inf or a 0 / 0 happened) fails the case; a string (or
    :class:`Hint`) says why it happened. Other warnings (deprecations) never fail a case.
    ``measures``: set for a "predict, then measure" exercise, it names the measured quantity
    ("the mean largest weight"); the learner's function runs an experiment and returns that
    number, graded within a tolerance (``compare=kit.within(...)``), and
    ``check(..., prediction=...)`` shows the learner's prediction beside each measurement,
    and a case's ``why`` under a prediction that misses it. ``gaps``: for a measurement the
    notebook then makes on a real model (:func:`reveal`), why it differs from a prediction
    that is too ``"high"`` or too ``"low"`` (and ``"right"``: what a close one got right);
    ``reveals`` names that measurement when it is not ``measures`` (an exercise whose function
    returns a tensor, whose real-model measurement is a number computed from it).
    ``keeps_inputs``: when true, a call that changes one of its arguments in place (writes
    into a tensor or array it was given, or grows a list) fails and says which argument,
    even when the result is right: the caller's data is not the function's to change. A
    :class:`Hint` says how to fix it for this exercise; otherwise :data:`CHANGED_INPUT`.
    """

    id: str
    title: str
    points: int
    target: str
    cases: Callable[[np.random.Generator, bool], list[Case]]
    reference: Callable[..., Any]
    atol: float = 1e-5
    rtol: float = 1e-4
    mistakes: dict[str, Callable[..., Any]] = field(default_factory=dict)
    hint: str = ""
    compare: Callable[[Any, Any, Case], str | None] | None = None
    check_dtype: bool = False
    outputs: tuple[str, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    no_warnings: bool | str = False
    measures: str = ""
    gaps: dict[str, str] = field(default_factory=dict)
    reveals: str = ""
    keeps_inputs: bool | str = False
    # what the statement forbids (course_lib.checks.rules), each rule's hint by its name
    rules: tuple[Rule, ...] = ()
    rule_texts: dict[str, str] = field(default_factory=dict)

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]


_REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the registry (ids are unique)."""
    if exercise.id in _REGISTRY and _REGISTRY[exercise.id] is not exercise:
        raise ValueError(f"exercise id {exercise.id!r} is registered twice")
    _REGISTRY[exercise.id] = exercise
    return exercise


def get_exercise(exercise_id: str) -> Exercise:
    """Look an exercise up by id, importing its chapter's module on first use."""
    if exercise_id not in _REGISTRY:
        chapter = str(exercise_id).split(".")[0]
        try:
            importlib.import_module(f"course_lib.checks.ch{chapter}")
        except ModuleNotFoundError as err:
            raise KeyError(
                f"unknown exercise {exercise_id!r}: no checks module for chapter {chapter!r}"
            ) from err
    if exercise_id not in _REGISTRY:
        raise KeyError(f"unknown exercise {exercise_id!r}")
    return _REGISTRY[exercise_id]


def all_exercises() -> dict[str, Exercise]:
    """Every registered exercise, after importing every chapter's checks module."""
    pkg = Path(__file__).parent
    for path in sorted(pkg.glob("ch*.py")):
        importlib.import_module(f"course_lib.checks.{path.stem}")
    return dict(sorted(_REGISTRY.items()))
