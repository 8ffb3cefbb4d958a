"""The exercise-check framework: every chapter's checks are a few declarations.

An exercise is declared once, in ``course_lib/checks/chNN.py``, as its reference function with
a keyword per common mistake (:mod:`course_lib.checks.declare`), its words in ``chNN.md``
(:mod:`course_lib.checks.texts`)::

    def attention_reference(q, k, v, *, scale="sqrt"):      # the defaults: the right answer
        ...

    exercise(
        "02.1", attention_reference, target="attention", title="...", points=2,
        cases=attention_cases,         # (rng, hidden) -> list[Case]: the inputs
        slips={"unscaled": dict(scale=None)},   # its text: "## 02.1/unscaled" in ch02.md
    )

which builds the :class:`Exercise` this module runs,
and used twice:

* in the notebook, ``check("02.1", numpy_attention)`` runs the learner's function on
  the visible cases and prints one line per case, or explains precisely what went wrong
  (shape, dtype, NaN, largest error and where, and which common mistake the output
  matches). A learner who has not started sees "not implemented yet", not a traceback.
* in the instructor's grader (the separate package ``course_tools``), which runs the
  learner's function on the same cases inside the learner's kernel and only *records its
  outputs*, then recomputes the references and compares (:func:`evaluate_case`) in its own
  process, so code in a submission cannot turn a failure into a pass other than by
  computing correct answers.

Outputs may be numpy arrays, torch tensors, Python numbers/bools, or tuples/lists of
those (compared element by element).
"""

from __future__ import annotations

import importlib
import math
import sys
import textwrap
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- declarations


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


# --------------------------------------------------------------------------- comparison


def to_numpy(x: Any) -> Any:
    """Tensors → numpy (detached, on CPU); tuples/lists recursively; scalars kept."""
    import sys

    torch = sys.modules.get("torch")  # not imported yet: x cannot be a tensor (and the
    if torch is not None and isinstance(x, torch.Tensor):  # grader need not import it)
        x = x.detach().cpu()
        if x.dtype in (torch.bfloat16, torch.float16):
            x = x.float()
        return x.numpy()
    if isinstance(x, (tuple, list)):
        return type(x)(to_numpy(e) for e in x)
    if isinstance(x, np.generic):
        return x.item()
    return x


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"array of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__} of {len(x)} items"
    return f"{type(x).__name__} {x!r}"[:120]


def _shape_hint(got: tuple, expected: tuple) -> str:
    if len(got) != len(expected):
        return (
            f" Your result has {len(got)} dimensions instead of {len(expected)}: "
            "did you drop or add a batch dimension, or squeeze by accident?"
        )
    if sorted(got) == sorted(expected):
        return " The same sizes in another order: did you transpose the wrong axes?"
    diff = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    if len(diff) == 1:
        i = diff[0] - len(got)
        return (
            f" Only axis {i} differs ({got[i]} vs {expected[i]}): check which "
            "dimension you reduce or multiply over there."
        )
    return ""


class Diagnosed(str):
    """A message from an exercise's ``compare`` that already says all that is wrong and how
    to fix it (e.g. the right number as a float where an int is asked for): no declared
    mistake is searched for and no general hint is added after it.

    ``cause``: what the compare recognised (a :class:`Hint`, or the exercise's own hint with
    ``label="Hint"``), added after the message at the failure's tier, as ``Likely cause:
    ...``: a compare does not know whether this is a first failure, the check does."""

    cause: str
    label: str

    def __new__(cls, text: str, cause: str = "", label: str = "Likely cause") -> Diagnosed:
        obj = super().__new__(cls, text)
        obj.cause, obj.label = cause, label
        return obj

    def render(self, full: bool) -> str:
        """The message, and its cause at the tier asked for."""
        if not self.cause:
            return str(self)
        return f"{self}\n    {self.label}: {render_hint(self.cause, full)}"


GiB = 2**30


def byte_count_message(got: Any, expected: int, float_advice: str, name: str = "") -> str | None:
    r"""Compare a byte count with the expected int; ``None`` when equal.

    A float, or a one-element tensor, is refused with ``float_advice`` (where the ``/`` came
    from); when its value is right that is the whole story (:class:`Diagnosed`). Different
    ints are shown with thousands separators and in GiB, never as ``1.71799e+10``.
    ``name`` prefixes the message (``"ring: "``) when a result holds several counts."""
    where = f"{name}: " if name else ""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        torch = sys.modules.get("torch")  # a tensor's class, without importing torch here
        numeric = (
            isinstance(got, (float, np.floating))
            or (isinstance(got, np.ndarray) and got.size == 1)
            or (torch is not None and isinstance(got, torch.Tensor) and got.numel() == 1)
        )
        if not numeric:
            return (
                f"{where}expected an int (a number of bytes), got {type(got).__name__} {got!r:.80}."
            )
        value = float(got)
        shown = f"{value:,.0f}" if math.isfinite(value) and value == int(value) else f"{value}"
        msg = (
            f"{where}expected an int (a number of bytes), got the {type(got).__name__} "
            f"{shown}. {float_advice}"
        )
        return Diagnosed(msg) if value == expected else msg
    if int(got) == int(expected):
        return None
    ratio = f"{int(got) / int(expected):.4g}" if expected else "inf"
    return (
        f"{where}expected {int(expected):,} bytes ({int(expected) / GiB:.4g} GiB), got "
        f"{int(got):,} bytes ({int(got) / GiB:.4g} GiB): {ratio} times the right size."
    )


def compare_values(
    got: Any,
    expected: Any,
    atol: float,
    rtol: float,
    check_dtype: bool = False,
    where: str = "",
    names: Sequence[str] = (),
) -> str | None:
    """None when ``got`` matches ``expected``; otherwise a precise, learner-facing message.

    ``names`` labels the items of a tuple result in the message (else "item 0", "item 1").
    """
    got, expected = to_numpy(got), to_numpy(expected)
    label = f"{where}: " if where else ""
    if isinstance(expected, (tuple, list)):
        return _compare_items(got, expected, atol, rtol, check_dtype, where, names)
    if got is None:
        return f"{label}your function returned None: did you forget the `return` statement?"
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        return _compare_arrays(got, expected, atol, rtol, check_dtype, label)
    if isinstance(expected, bool):
        if not isinstance(got, (bool, np.bool_)):
            return f"{label}expected a bool, got {_describe(got)}."
        return None if bool(got) == expected else f"{label}expected {expected}, got {got}."
    if isinstance(expected, (int, float)):
        return _compare_numbers(got, expected, atol, rtol, label)
    return None if got == expected else f"{label}expected {expected!r}, got {got!r}."


def _compare_items(got, expected, atol, rtol, check_dtype, where, names) -> str | None:
    """A tuple (or list) result, item by item: the first item that differs says why."""
    label = f"{where}: " if where else ""
    if not isinstance(got, (tuple, list)):
        return f"{label}expected a tuple of {len(expected)} items, got {_describe(got)}."
    if len(got) != len(expected):
        return f"{label}expected {len(expected)} items, got {len(got)}."
    for i, (g, e) in enumerate(zip(got, expected)):
        item = names[i] if i < len(names) and not where else f"item {i}"
        msg = compare_values(g, e, atol, rtol, check_dtype, f"{where}[{i}]" if where else item)
        if msg:
            return msg
    return None


def _compare_arrays(got, expected, atol, rtol, check_dtype, label) -> str | None:
    """An array result: its kind (not objects, not complex), its shape, then its values."""
    try:
        got_a = np.asarray(got)
    except Exception:
        return f"{label}expected {_describe(np.asarray(expected))}, got {_describe(got)}."
    exp_a = np.asarray(expected)
    if got_a.dtype == object:
        return f"{label}expected {_describe(exp_a)}, got {_describe(got)}."
    if np.iscomplexobj(got_a) and not np.iscomplexobj(exp_a):
        return (
            f"{label}your result is complex (dtype {got_a.dtype}); expected real "
            "numbers. Did you forget to take `.real` (or to convert back from the "
            "complex form)?"
        )
    if got_a.shape != exp_a.shape:
        return (
            f"{label}expected shape {tuple(exp_a.shape)}, got {tuple(got_a.shape)}."
            + _shape_hint(tuple(got_a.shape), tuple(exp_a.shape))
        )
    if exp_a.dtype == bool or got_a.dtype == bool:
        return _compare_booleans(got_a, exp_a, label)
    if check_dtype and got_a.dtype != exp_a.dtype:
        return f"{label}expected dtype {exp_a.dtype}, got {got_a.dtype}."
    if exp_a.size == 0:
        return None
    return _compare_floats(got_a.astype(np.float64), exp_a.astype(np.float64), atol, rtol, label)


def _compare_booleans(got_a: np.ndarray, exp_a: np.ndarray, label: str) -> str | None:
    """Boolean arrays (masks) of the same shape: equal entries, the first difference shown."""
    if exp_a.dtype != got_a.dtype:
        return (
            f"{label}expected a boolean array, got dtype {got_a.dtype}."
            if exp_a.dtype == bool
            else f"{label}expected dtype {exp_a.dtype}, got a boolean array."
        )
    bad = np.argwhere(got_a != exp_a)
    if len(bad):
        idx = tuple(int(i) for i in bad[0])
        return (
            f"{label}{len(bad)} of {exp_a.size} entries differ; first at index "
            f"{idx}: expected {exp_a[idx]}, got {got_a[idx]}."
        )
    return None


def _compare_floats(got_f: np.ndarray, exp_f: np.ndarray, atol, rtol, label) -> str | None:
    """float64 arrays of the same shape: NaN and inf where the expected values are finite
    (named with their likely cause), then closeness within ``atol`` and ``rtol``."""
    nan_got, nan_exp = np.isnan(got_f), np.isnan(exp_f)
    if (nan_got & ~nan_exp).any():
        idx = tuple(int(i) for i in np.argwhere(nan_got & ~nan_exp)[0])
        return (
            f"{label}your result contains NaN ({int((nan_got & ~nan_exp).sum())} "
            f"entries, first at index {idx}) where the expected values are finite. "
            "NaN usually comes from inf - inf, inf / inf or 0/0: a softmax over a "
            "row whose entries are all -inf, or exp() overflowing to inf on large "
            "inputs (subtract the row's max first)."
        )
    inf_got = np.isinf(got_f) & ~np.isinf(exp_f)
    if inf_got.any():
        idx = tuple(int(i) for i in np.argwhere(inf_got)[0])
        return (
            f"{label}your result contains inf at index {idx} where the expected "
            "value is finite: an overflow (exp of a large number?)."
        )
    close = np.isclose(got_f, exp_f, atol=atol, rtol=rtol, equal_nan=True)
    if not close.all():
        err = np.asarray(np.abs(got_f - exp_f))  # an array also for 0-d inputs
        err[np.isnan(err)] = 0.0
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape))
        return (
            f"{label}{int((~close).sum())} of {close.size} values are off. Largest "
            f"error {err[idx]:.3g} at index {idx}: expected {exp_f[idx]:.6g}, got "
            f"{got_f[idx]:.6g} (tolerance atol={atol:g}, rtol={rtol:g})."
        )
    return None


def _compare_numbers(got, expected: int | float, atol, rtol, label) -> str | None:
    """A number result (not a bool): NaN where NaN is expected, else close within tolerance."""
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        if isinstance(got, np.ndarray) and got.size == 1:
            got = got.item()
        else:
            return f"{label}expected a number, got {_describe(got)}."
    if isinstance(expected, float) and math.isnan(expected):
        return None if math.isnan(got) else f"{label}expected NaN, got {got!r}."
    if not math.isfinite(got):
        return f"{label}expected {expected!r}, got {got!r}."
    if not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
        return f"{label}expected {expected:.6g}, got {got:.6g}."
    return None


def _matches(got: Any, other: Any, atol: float, rtol: float) -> bool:
    try:
        return compare_values(got, other, atol, rtol) is None
    except Exception:
        return False


# --------------------------------------------------------------------------- running cases


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


# The placeholders of generated exercise notebooks raise NotImplementedError with this text
# (course_tools/exercises.py writes them); nbgrader's own release writes a bare
# `raise NotImplementedError()`. Any other NotImplementedError (one with a message) is a
# real error in the learner's code: torch raises one for, e.g., max() of a complex tensor.
PLACEHOLDER_MARK = "is not implemented yet"


def _is_not_implemented(err: BaseException) -> bool:
    if not isinstance(err, NotImplementedError):
        return False
    return PLACEHOLDER_MARK in str(err) or not str(err).strip()


def _checks_withheld() -> bool:
    """True in the course grader's sandbox, whose ``course_lib`` has no chapter checks."""
    import os

    return os.environ.get("COURSE_GRADING") == "1"


def _exercise_here(exercise_id: str) -> Exercise | None:
    """The exercise, or None in the grader's sandbox, which has no chapter checks (it says so)."""
    try:
        return get_exercise(exercise_id)
    except KeyError:
        if not _checks_withheld():
            raise
        print(f"(exercise {exercise_id}: the grader runs this check itself, outside this kernel)")
        return None


def _under_a_grader() -> bool:
    """True while nbgrader validates or autogrades this notebook (it sets the variable)."""
    import os

    return bool(os.environ.get("NBGRADER_EXECUTION"))


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


@dataclass
class Call:
    """What happened when a learner's function ran on one case, judged by nothing yet.

    ``output``: what it returned; or ``raised``: the exception's type name, with ``message``
    and ``frames`` (the learner's last frames, as text) and ``not_implemented`` (the
    placeholder's exception); ``exit``: it called ``sys.exit`` (the code, as text);
    ``warning``: the first RuntimeWarning it emitted where the exercise forbids them (its
    category, text and line); ``changed``: the argument it changed in place, and how, where
    the exercise forbids that (``keeps_inputs``). :func:`call_learner` makes one without the
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
    fn: Callable, case: Case, no_warnings: bool = False, keeps_inputs: bool = False
) -> Call:
    """Call the learner's function on a copy of the case and record what happened
    (with ``keeps_inputs``, also whether it changed that copy of its arguments)."""
    c = _copy_args(case)
    try:
        if no_warnings:
            out, warning = _call_watching_warnings(fn, c)
        else:
            out, warning = fn(*c.args, **c.kwargs), ""
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


def judge_call(
    ex: Exercise, case: Case, call: Call, full: bool = True
) -> tuple[Any, CaseResult | None]:
    """(output, None) for a call that returned, or (None, the failure and its diagnosis)."""
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
    call = call_learner(fn, case, bool(ex.no_warnings), bool(ex.keeps_inputs))
    return judge_call(ex, case, call, full)


def _error_hint(ex: Exercise, kind: str, message: str) -> str | None:
    """The declared hint whose pattern matches ``"TypeName: message"``, if any."""
    import re

    text = f"{kind}: {message}"
    for pattern, hint in ex.errors.items():
        if re.search(pattern, text):
            return hint
    return None


def _cases(ex: Exercise, hidden: bool, seed: int) -> list[Case]:
    return list(ex.cases(np.random.default_rng(seed), hidden))


# --------------------------------------------------------------------------- predictions

NO_PREDICTION = "no prediction written yet: write yours before you run the experiment"


def predicted_value(prediction: Any, case: Case) -> float | str:
    """The learner's prediction for one case: a number, or a message saying why there is none.

    ``prediction`` is a number (the same for every case), or a function called with the
    case's arguments (a formula in the experiment's parameters); None, ``...`` or a function
    still raising the placeholder's NotImplementedError mean "not written yet"."""
    if callable(prediction):
        c = _copy_args(case)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                prediction = prediction(*c.args, **c.kwargs)
        except Exception as err:  # the learner's prediction may raise anything
            if _is_not_implemented(err):
                return NO_PREDICTION
            return f"your prediction raised {type(err).__name__}: {err}"
    if prediction is None or prediction is Ellipsis:
        return NO_PREDICTION
    value = to_numpy(prediction)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"your prediction should be a number, got {_describe(value)}"
    return float(value)


def _verdict(guess: float, got: Any) -> tuple[str, str]:
    """(``"right on"``/``"your prediction is 6% high"``..., ``"right"``/``"high"``/``"low"``/``""``)."""
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        return "", ""
    if got == 0:
        return "", "right" if guess == 0 else ("high" if guess > 0 else "low")
    off, ratio = (guess - got) / abs(got), guess / got
    way = "high" if guess > got else "low"
    if abs(off) < 0.05:
        return "right on", "right"
    if ratio <= 0:
        return ("your prediction has the wrong sign" if ratio < 0 else "you predicted 0"), way
    if 0.1 <= ratio <= 10:
        return f"your prediction is {abs(off):.0%} {'high' if off > 0 else 'low'}", way
    factor, size = (ratio, "high") if ratio > 1 else (1 / ratio, "low")
    return f"your prediction is a factor {factor:.4g} too {size}", way


def _one_number(x: Any) -> bool:
    """Whether ``x`` is one number (a float, an int, a size-1 array or tensor)."""
    x = to_numpy(x)
    return not isinstance(x, bool) and (
        isinstance(x, (int, float)) or (isinstance(x, np.ndarray) and x.size == 1)
    )


def _why(why: str | dict[str, str], way: str) -> str:
    """The explanation for a prediction that is ``way`` (``"high"``, ``"low"``, ``"right"``)."""
    if isinstance(why, str):
        return why if way in ("high", "low") else ""
    return why.get(way, "")


def prediction_line(prediction: Any, case: Case, measured: Any) -> str:
    """``you predicted 8, measured 7.52: your prediction is 6% high``, or why there is none;
    when the prediction misses, the case's ``why`` on a second line."""
    guess = predicted_value(prediction, case)
    if isinstance(guess, str):
        return guess
    got = to_numpy(measured)
    if isinstance(got, np.ndarray) and got.size == 1:
        got = got.item()
    verdict, way = _verdict(guess, got)
    if not verdict and not way:
        return f"you predicted {guess:.4g}"
    line = f"you predicted {guess:.4g}, measured {got:.4g}" + (f": {verdict}" if verdict else "")
    why = _why(case.why, way)
    return line + (f"\n      Why: {why}" if why else "")


def reveal(
    exercise_id: str, prediction: Any, measured: Any, *args: Any, on: str = "SmolLM2"
) -> None:
    """Print the learner's prediction beside a measurement made on a real model ``on``, and
    the exercise's explanation (``gaps``) of the gap between them.

    ``prediction`` is a number, or a function of ``args`` (as for :func:`check`). Never graded:
    a prediction that is far off is where the lesson is. Where the exercises are not
    installed (the grader's sandbox has no chapter checks), it prints the numbers alone."""
    try:
        ex = get_exercise(exercise_id)
        label, gaps = ex.reveals or ex.measures or ex.title, ex.gaps
    except KeyError:
        label, gaps = f"exercise {exercise_id}", {}
    value = to_numpy(measured)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"reveal needs one measured number, got {_describe(value)}")
    head = f"{on}, {label}: measured {value:.4g}"
    guess = predicted_value(prediction, Case("the real model", tuple(args)))
    if isinstance(guess, str):
        print(f"{head}; {guess}.")
        return None
    verdict, way = _verdict(guess, float(value))
    print(f"{head}; you predicted {guess:.4g}" + (f": {verdict}." if verdict else "."))
    why = _why(gaps, way)
    if why:
        print(textwrap.fill(f"Why: {why}", width=96, initial_indent="  ", subsequent_indent="  "))
    return None


# --------------------------------------------------------------------------- in the notebook


class CheckFailed(AssertionError):
    """A check that failed. IPython shows only the message, not a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython hook: no traceback noise
        return [f"\x1b[31m{line}\x1b[0m" for line in str(self).splitlines()]


@dataclass
class CheckReport:
    exercise: Exercise
    results: list[CaseResult]

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def not_implemented(self) -> bool:
        return any(r.not_implemented for r in self.results)

    def __repr__(self) -> str:
        state = (
            "passed"
            if self.passed
            else "not implemented yet"
            if self.not_implemented
            else "not passed"
        )
        return f"<CheckReport {self.exercise.id}: {state}>"

    def _ipython_display_(self) -> None:
        """A check cell ends with check(...): its printed lines are the whole display."""


VISIBLE_SEED = 1234
HINT_TIERS = ("auto", "nudge", "full")
# Failed checks per exercise in this kernel: the second failure in a row shows fuller hints.
_FAILED_BEFORE: dict[str, int] = {}
# The last visible check of each exercise in this kernel (course_lib.progress shows them).
LAST_REPORTS: dict[str, CheckReport] = {}


def check(
    exercise_id: str,
    fn: Callable | None,
    *,
    hidden: bool = False,
    seed: int | None = None,
    quiet: bool = False,
    hints: str = "auto",
    prediction: Any = None,
) -> CheckReport | None:
    """Run an exercise's cases on the learner's function and print specific feedback.

    Passing prints one line per case. Not started yet prints a friendly note and returns.
    A wrong answer raises :class:`CheckFailed` whose message says what went wrong.
    ``hints``: "auto" gives a nudge on the first failure and the fuller hint when the same
    exercise fails again; "nudge" or "full" force one tier.
    ``prediction`` (for a "predict, then measure" exercise): the learner's prediction, a
    number or a function of the case's arguments; each case's line shows it beside the
    measurement. It is never graded: the measurement is.
    """
    if hints not in HINT_TIERS:
        raise ValueError(f"hints must be one of {HINT_TIERS}, got {hints!r}")
    ex = _exercise_here(exercise_id)
    if ex is None:
        return None
    full = hints == "full" or (hints == "auto" and _FAILED_BEFORE.get(ex.id, 0) > 0)
    head = f"Exercise {ex.id} ({ex.title})"
    if fn is None or not callable(fn):
        message = (
            f"expected a function named `{ex.target}`, got {_describe(fn)}. Run the cell "
            "that defines it first."
        )
        if not hidden:
            LAST_REPORTS[ex.id] = CheckReport(ex, [CaseResult("function", False, message)])
        raise CheckFailed(f"{head}: {message}")
    results: list[CaseResult] = []
    predicted: dict[int, str] = {}  # case index -> the prediction beside its measurement
    for case in _cases(ex, hidden, VISIBLE_SEED if seed is None else seed):
        got, failure = run_case(ex, fn, case, full)
        if failure is None:
            failure = evaluate_case(ex, case, got, full)
            if prediction is not None or (ex.measures and _one_number(got)):
                predicted[len(results)] = prediction_line(prediction, case, got)
        results.append(failure)
        if failure.not_implemented:
            break
    report = CheckReport(ex, results)
    if not hidden:
        LAST_REPORTS[ex.id] = report
    if not report.not_implemented:
        _FAILED_BEFORE[ex.id] = 0 if report.passed else _FAILED_BEFORE.get(ex.id, 0) + 1
    if report.not_implemented and (hidden or _under_a_grader()):
        # Hidden tests run only under a grader, and nbgrader's validate and autograde say
        # so in NBGRADER_EXECUTION: there a blank exercise must fail, not print a note.
        raise CheckFailed(f"✗ {head}: not implemented yet.")
    if report.not_implemented:
        print(
            f"○ {head}: not implemented yet. Replace the `raise NotImplementedError(...)` "
            f"line in `{ex.target}` with your code, run that cell, then run this check "
            "again."
        )
        return report
    if not quiet:
        for i, r in enumerate(results):
            if r.passed:
                print(f"  ✓ {r.name}" + (f": {predicted[i]}" if i in predicted else ""))
    failed = [r for r in results if not r.passed]
    if failed:
        lines = [f"✗ {head}: {len(failed)} of {len(results)} cases failed."]
        for i, r in enumerate(results):
            if not r.passed:
                lines.append(f"  ✗ {r.name}: {r.message}")
                if i in predicted:  # without the why: it explains the right measurement
                    lines.append(f"    ({predicted[i].splitlines()[0]})")
        raise CheckFailed("\n".join(lines))
    print(f"✓ {head}: all {len(results)} {'hidden ' if hidden else ''}cases passed.")
    return report


def cases_for(exercise_id: str, hidden: bool = False, seed: int = VISIBLE_SEED) -> Sequence[Case]:
    """The cases an exercise would run (for tests and authors)."""
    return _cases(get_exercise(exercise_id), hidden, seed)
