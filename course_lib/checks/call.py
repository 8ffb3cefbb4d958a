"""Running a learner's function on one case, and recording what happened.

:func:`call_learner` calls it on a copy of the case's arguments (:func:`_copy_args`) and
returns a :class:`Call`: what it returned, or what it raised (the placeholder's
``NotImplementedError`` apart, :data:`PLACEHOLDER_MARK`), whether it called ``sys.exit``,
its first ``RuntimeWarning`` and, where asked, which argument it changed in place
(:func:`changed_argument`). Nothing here knows the exercise's reference: the grader records a
Call in the learner's kernel and judges it in its own process (:mod:`course_lib.checks.judge`).
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .compare import to_numpy
from .exercise import Case
from .rules import Watch, watched

# The placeholders of generated exercise notebooks raise NotImplementedError with this text
# (course_tools/exercises.py writes them); nbgrader's own release writes a bare
# `raise NotImplementedError()`. Any other NotImplementedError (one with a message) is a
# real error in the learner's code: torch raises one for, e.g., max() of a complex tensor.
PLACEHOLDER_MARK = "is not implemented yet"


def _is_not_implemented(err: BaseException) -> bool:
    if not isinstance(err, NotImplementedError):
        return False
    return PLACEHOLDER_MARK in str(err) or not str(err).strip()


def _student_traceback(err: BaseException, limit: int = 3) -> str:
    """The last few frames of a learner's exception, without course_lib's frames."""
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if "course_lib" not in f.filename.replace("\\", "/")
    ]
    lines = [f"line {f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames[-limit:]]
    where = ("\n      " + "\n      ".join(lines)) if lines else ""
    return f"{type(err).__name__}: {err}{where}"


def _copy_args(case: Case) -> Case:
    """A deep copy of a case, so a learner's in-place edit cannot corrupt the reference."""
    import copy

    return Case(case.name, copy.deepcopy(case.args), copy.deepcopy(case.kwargs))


@dataclass
class Call:
    """What happened when a learner's function ran on one case, judged by nothing yet.

    ``output``: what it returned; or ``raised``: the exception's type name, with ``message``
    and ``frames`` (the learner's last frames, as text) and ``not_implemented`` (the
    placeholder's exception); ``exit``: it called ``sys.exit`` (the code, as text);
    ``warning``: the first RuntimeWarning it emitted where the exercise forbids them (its
    category, text and line); ``changed``: the argument it changed in place, and how, where
    the exercise forbids that (``keeps_inputs``); ``broke``: the rule of the statement it broke
    (:mod:`course_lib.checks.rules`, its name) and ``how``. :func:`call_learner` makes one without the
    exercise (so without its reference); :func:`judge_call` turns it into feedback with it.
    The grader records a Call in the learner's kernel and judges it in its own process."""

    output: Any = None
    raised: str = ""
    message: str = ""
    frames: str = ""
    not_implemented: bool = False
    exit: str | None = None
    warning: str = ""
    changed: str = ""
    broke: str = ""
    how: str = ""


def _call_watching_warnings(fn: Callable, c: Case) -> tuple[Any, str]:
    """``fn(*c.args, **c.kwargs)`` and its first RuntimeWarning as text ("" when none)."""
    # under="ignore": exp of a very negative number is 0, correctly and silently
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="warn", under="ignore"):
        warnings.simplefilter("always")
        out = fn(*c.args, **c.kwargs)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    for w in caught:  # other warnings pass through, as they would without the check
        if not issubclass(w.category, RuntimeWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not runtime:
        return out, ""
    import linecache

    first = runtime[0]
    line = linecache.getline(first.filename, first.lineno).strip()
    where = f" (line {first.lineno}: {line})" if line else ""
    return out, f"{first.category.__name__}: {first.message}{where}"


def call_learner(
    fn: Callable,
    case: Case,
    no_warnings: bool = False,
    keeps_inputs: bool = False,
    watch: Watch | None = None,
) -> Call:
    """Call the learner's function on a copy of the case and record what happened
    (with ``keeps_inputs``, also whether it changed that copy of its arguments; with a
    ``watch``, the first rule of the statement it broke)."""
    c = _copy_args(case)
    watch = watch or Watch()
    try:
        if no_warnings:
            (out, warning), breach = watched(lambda: _call_watching_warnings(fn, c), watch)
        else:
            out, breach = watched(lambda: fn(*c.args, **c.kwargs), watch)
            warning = ""
    except SystemExit as err:  # sys.exit() inside the function fails this case only
        return Call(exit=repr(err.code))
    except Exception as err:  # learner code may raise anything
        text = _student_traceback(err)
        head = f"{type(err).__name__}: {err}"
        return Call(
            raised=type(err).__name__,
            message=str(err),
            frames=text[len(head) :] if text.startswith(head) else "",
            not_implemented=_is_not_implemented(err),
        )
    changed = changed_argument(fn, case, c) if keeps_inputs else ""
    if breach is not None:
        return Call(output=out, warning=warning, changed=changed, broke=breach.rule, how=breach.how)
    return Call(output=out, warning=warning, changed=changed)


def _value_change(before: Any, after: Any) -> str:
    """How ``after`` differs from ``before`` (arrays, tensors, lists, dicts), "" if not."""
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)):
        if len(before) != len(after):
            return f"its length went from {len(before)} to {len(after)}"
        for i, (b, a) in enumerate(zip(before, after)):
            how = _value_change(b, a)
            if how:
                return f"item {i}: {how}"
        return ""
    if isinstance(before, dict) and isinstance(after, dict):
        if set(before) != set(after):
            return "its keys changed"
        return next(
            (f"[{k!r}]: {h}" for k in before if (h := _value_change(before[k], after[k]))), ""
        )
    b, a = to_numpy(before), to_numpy(after)
    if not isinstance(b, np.ndarray) or not isinstance(a, np.ndarray):
        return ""
    if b.shape != a.shape:
        return f"its shape went from {tuple(b.shape)} to {tuple(a.shape)}"
    try:
        same = np.asarray(b == a, dtype=bool)
        if np.issubdtype(b.dtype, np.inexact):
            same |= np.isnan(b) & np.isnan(a)
    except (TypeError, ValueError):  # arrays of objects: not the kind of input checked here
        return ""
    differ = int((~same).sum())
    return f"{differ} of {b.size} values changed" if differ else ""


def changed_argument(fn: Callable, before: Case, after: Case) -> str:
    """Which argument of ``fn`` differs between ``before`` and ``after`` (its copy after the
    call), and how: ``"`out`: 96 of 192 values changed"``; "" when none changed."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    for i, (b, a) in enumerate(zip(before.args, after.args)):
        how = _value_change(b, a)
        if how:
            return f"`{params[i]}`: {how}" if i < len(params) else f"number {i + 1}: {how}"
    for name, b in before.kwargs.items():
        how = _value_change(b, after.kwargs.get(name))
        if how:
            return f"`{name}`: {how}"
    return ""
