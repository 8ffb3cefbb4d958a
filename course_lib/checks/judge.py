"""Judging one case: a learner's output against the reference, and which mistake it was.

:func:`evaluate_case` compares one recorded output with the reference, run here on a fresh
copy of the case, and returns a :class:`CaseResult`; when they differ, :func:`_diagnose`
names the declared mistake (a wrong twin of the reference) whose output the learner's
matches, else the exercise's general hint, at the tier asked for (nudge, or nudge and
detail). :func:`judge_call` turns a :class:`~course_lib.checks.call.Call` that raised, exited,
warned or changed its input into its failure; :func:`run_case` calls and judges at once.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .call import Call, _copy_args, call_learner
from .compare import Diagnosed, compare_values, to_numpy
from .exercise import CHANGED_INPUT, Case, Exercise, hint_key, render_hint
from .rules import watch_for


@dataclass
class CaseResult:
    """One case's verdict. ``cause``: the key of what the checks recognised in a failure
    (``"02.1/unscaled"`` for a named mistake, ``"02.1"`` for the exercise's general hint),
    "" when they recognised nothing: the grader and the class report count these keys."""

    name: str
    passed: bool
    message: str = ""
    not_implemented: bool = False
    cause: str = ""


def _matches(got: Any, other: Any, atol: float, rtol: float) -> bool:
    """Whether ``got`` equals ``other`` within the tolerances (a comparison that raises: no).
    The mutation run replaces it, by its name in :mod:`course_lib.checks.core`."""
    try:
        return compare_values(got, other, atol, rtol) is None
    except Exception:
        return False


def _has_new_nonfinite(wrong: Any, expected: Any) -> bool:
    """True when ``wrong`` is NaN/inf somewhere ``expected`` is finite (or shapes differ)."""
    wrong, expected = to_numpy(wrong), to_numpy(expected)
    if isinstance(expected, (tuple, list)) and isinstance(wrong, (tuple, list)):
        return any(_has_new_nonfinite(w, e) for w, e in zip(wrong, expected))
    try:
        w = np.asarray(wrong, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        return bool((~np.isfinite(w) & np.isfinite(np.broadcast_to(e, w.shape))).any())
    except (TypeError, ValueError):
        return False


def _likely(hint: str, ex: Exercise, full: bool, default: str = "") -> tuple[str, str]:
    """("\n    Likely cause: <hint>", its key)."""
    return f"\n    Likely cause: {render_hint(hint, full)}", hint_key(hint, ex.id, default)


def _general(ex: Exercise, full: bool) -> tuple[str, str]:
    """The exercise's general hint, when no named mistake explains a failure."""
    if not ex.hint:
        return "", ""
    return f"\n    Hint: {render_hint(ex.hint, full)}", hint_key(ex.hint, ex.id)


SAME_AS_REFERENCE = 1e-9  # a twin this close to the reference on an input explains nothing


def _diagnose(
    ex: Exercise, case: Case, got: Any, expected: Any, full: bool = True
) -> tuple[str, str]:
    """Name the declared mistake whose output the learner's output matches, if any:
    (the text to add to the failure, its key).

    A twin whose output agrees with the reference on this input is never named here: its
    mistake makes no difference on it, so it cannot explain the failure. Twins whose output
    is finite where the reference is finite are tried first: a twin that overflows to NaN
    "matches" every other NaN-producing mistake too, so it is only named when no finite twin
    matches.
    """
    outputs = []
    for hint, wrong in ex.mistakes.items():
        c = _copy_args(case)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                out = wrong(*c.args, **c.kwargs)
        except Exception:
            continue
        if not _matches(out, expected, SAME_AS_REFERENCE, 0.0):
            outputs.append((hint, out))
    finite = [(h, o) for h, o in outputs if not _has_new_nonfinite(o, expected)]
    nonfinite = [(h, o) for h, o in outputs if _has_new_nonfinite(o, expected)]
    for hint, wrong_out in finite + nonfinite:
        if _matches(got, wrong_out, ex.atol, ex.rtol):
            return _likely(hint, ex, full)
    return _general(ex, full)


def evaluate_case(ex: Exercise, case: Case, got: Any, full: bool = True) -> CaseResult:
    """Compare one recorded output with the reference (run here, on a fresh copy).

    ``full`` shows both tiers of a :class:`Hint` (the grader's feedback); the notebook's
    first failure shows the nudge only."""
    c = _copy_args(case)
    expected = ex.reference(*c.args, **c.kwargs)
    if ex.compare is not None:
        msg = ex.compare(got, expected, case)
    else:
        msg = compare_values(got, expected, ex.atol, ex.rtol, ex.check_dtype, names=ex.outputs)
    if msg is None:
        return CaseResult(case.name, True)
    if isinstance(msg, Diagnosed):
        cause = hint_key(msg.cause, ex.id) if msg.cause else ""
        return CaseResult(case.name, False, msg.render(full), cause=cause)
    text, cause = _diagnose(ex, case, got, expected, full)
    return CaseResult(case.name, False, msg + text, cause=cause)


def _diagnose_error(
    ex: Exercise, case: Case, kind: str, message: str, full: bool
) -> tuple[str, str]:
    """Name the declared mistake whose twin raises the same exception (type name ``kind``,
    text ``message``) as the learner's code: (text, key)."""
    for hint, wrong in ex.mistakes.items():
        c = _copy_args(case)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                wrong(*c.args, **c.kwargs)
        except Exception as twin_err:
            if type(twin_err).__name__ == kind and str(twin_err) == message:
                return _likely(hint, ex, full)
    return _general(ex, full)


def _warning_failure(ex: Exercise, case: Case, warning: str, got: Any, full: bool) -> CaseResult:
    """A failure for a forbidden warning (``warning``: its category, text and line); names a
    mistake whose output ``got`` matches."""
    msg = f"your function emitted a warning, which this exercise does not allow: {warning}"
    try:  # a wrong output that matches a known mistake: name that mistake
        c = _copy_args(case)
        expected = ex.reference(*c.args, **c.kwargs)
        if compare_values(got, expected, ex.atol, ex.rtol, ex.check_dtype) is not None:
            named, cause = _diagnose(ex, case, got, expected, full)
            if "Likely cause" in named:
                return CaseResult(case.name, False, msg + named, cause=cause)
    except Exception:  # the feedback must never crash on odd outputs
        pass
    hint = ex.no_warnings if isinstance(ex.no_warnings, str) else ex.hint
    if not hint:
        return CaseResult(case.name, False, msg)
    text, cause = _likely(hint, ex, full, "no-warnings" if hint is ex.no_warnings else "")
    return CaseResult(case.name, False, msg + text, cause=cause)


def judge_call(
    ex: Exercise, case: Case, call: Call, full: bool = True
) -> tuple[Any, CaseResult | None]:
    """(output, None) for a call that returned, or (None, the failure and its diagnosis)."""
    if call.broke:  # a rule of the statement broken: the case fails whatever it returned
        msg = f"your function breaks a rule of the exercise's statement: {call.how}."
        hint = ex.rule_texts.get(call.broke)
        if not hint:
            return None, CaseResult(case.name, False, msg, cause=f"{ex.id}/{call.broke}")
        text, cause = _likely(hint, ex, full, call.broke)
        return None, CaseResult(case.name, False, msg + text, cause=cause)
    if call.exit is not None:
        return None, CaseResult(case.name, False, f"your function called sys.exit({call.exit})")
    if call.not_implemented:
        return None, CaseResult(case.name, False, "not implemented yet", not_implemented=True)
    if call.raised:
        msg = f"your function raised {call.raised}: {call.message}{call.frames}"
        hint = _error_hint(ex, call.raised, call.message)  # a declared pattern first,
        if hint:  # then a wrong twin that raises the same exception
            text, cause = _likely(hint, ex, full, "error")
        else:
            text, cause = _diagnose_error(ex, case, call.raised, call.message, full)
        return None, CaseResult(case.name, False, msg + text, cause=cause)
    if call.changed:
        hint = ex.keeps_inputs if isinstance(ex.keeps_inputs, str) else CHANGED_INPUT
        text, cause = _likely(hint, ex, full, "keeps-inputs")
        msg = f"the call changed its argument {call.changed}."
        return None, CaseResult(case.name, False, msg + text, cause=cause)
    if call.warning:
        return None, _warning_failure(ex, case, call.warning, call.output, full)
    return call.output, None


def run_case(
    ex: Exercise, fn: Callable, case: Case, full: bool = True
) -> tuple[Any, CaseResult | None]:
    """Call the learner's function on a copy of the case; (output, None) or (None, failure)."""
    watch = watch_for(ex.rules, case)
    call = call_learner(fn, case, bool(ex.no_warnings), bool(ex.keeps_inputs), watch)
    return judge_call(ex, case, call, full)


def _error_hint(ex: Exercise, kind: str, message: str) -> str | None:
    """The declared hint whose pattern matches ``"TypeName: message"``, if any."""
    text = f"{kind}: {message}"
    for pattern, hint in ex.errors.items():
        if re.search(pattern, text):
            return hint
    return None
