"""The exercise-check framework: every chapter's checks are a few declarations.

An exercise is declared once, in ``course_lib/checks/chNN.py``::

    register(Exercise(
        id="02.1", title="Attention in numpy", points=2, target="numpy_attention",
        cases=my_cases,            # (rng, hidden) -> list[Case]: the inputs
        reference=my_reference,    # the correct function, run on the same inputs
        mistakes={"you forgot to divide by sqrt(d_k)": unscaled_version},
    ))

and used twice:

* in the notebook, ``check("02.1", numpy_attention)`` runs the learner's function on
  the visible cases and prints one line per case, or explains precisely what went wrong
  (shape, dtype, NaN, largest error and where, and which common mistake the output
  matches). A learner who has not started sees "not implemented yet", not a traceback.
* in the instructor grader, :func:`harvest` runs the learner's function inside the
  student's kernel and only *records its outputs*; :func:`score` then recomputes the
  references and compares in the grader's own process, so code in a submission cannot
  turn a failure into a pass other than by computing correct answers.

Outputs may be numpy arrays, torch tensors, Python numbers/bools, or tuples/lists of
those (compared element by element).
"""

from __future__ import annotations

import importlib
import json
import math
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- declarations


@dataclass
class Case:
    """One input to an exercise's function: ``fn(*args, **kwargs)``."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


@dataclass
class Exercise:
    """An exercise's id, points, what the learner writes, and how to check it.

    ``cases(rng, hidden)`` returns the inputs: visible cases when ``hidden`` is False,
    extra (larger, edge) cases when True. ``reference`` is the correct function.
    ``mistakes`` maps a learner-facing hint to a *wrong* function that reproduces a
    common mistake; when a learner's output matches one, the hint is shown.
    ``compare`` replaces the default array comparison when an exercise needs it: it gets
    ``(got, expected, case)`` and returns None when fine or a message when not.
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
            raise KeyError(f"unknown exercise {exercise_id!r}: no checks module for "
                           f"chapter {chapter!r}") from err
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


def _to_numpy(x: Any) -> Any:
    """Tensors → numpy (detached, on CPU); tuples/lists recursively; scalars kept."""
    try:
        import torch

        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            if x.dtype in (torch.bfloat16, torch.float16):
                x = x.float()
            return x.numpy()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(x, (tuple, list)):
        return type(x)(_to_numpy(e) for e in x)
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
        return (f" Your result has {len(got)} dimensions instead of {len(expected)}: "
                "did you drop or add a batch dimension, or squeeze by accident?")
    if sorted(got) == sorted(expected):
        return " The same sizes in another order: did you transpose the wrong axes?"
    diff = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    if len(diff) == 1:
        i = diff[0] - len(got)
        return (f" Only axis {i} differs ({got[i]} vs {expected[i]}): check which "
                "dimension you reduce or multiply over there.")
    return ""


def compare_values(got: Any, expected: Any, atol: float, rtol: float,
                   check_dtype: bool = False, where: str = "") -> str | None:
    """None when ``got`` matches ``expected``; otherwise a precise, learner-facing message."""
    got, expected = _to_numpy(got), _to_numpy(expected)
    label = f"{where}: " if where else ""
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            return (f"{label}expected a tuple of {len(expected)} items, got "
                    f"{_describe(got)}.")
        if len(got) != len(expected):
            return f"{label}expected {len(expected)} items, got {len(got)}."
        for i, (g, e) in enumerate(zip(got, expected)):
            msg = compare_values(g, e, atol, rtol, check_dtype, f"{where}[{i}]" if where
                                 else f"item {i}")
            if msg:
                return msg
        return None
    if got is None:
        return (f"{label}your function returned None: did you forget the `return` "
                "statement?")
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        try:
            got_a = np.asarray(got)
        except Exception:
            return f"{label}expected {_describe(np.asarray(expected))}, got {_describe(got)}."
        exp_a = np.asarray(expected)
        if got_a.dtype == object:
            return f"{label}expected {_describe(exp_a)}, got {_describe(got)}."
        if np.iscomplexobj(got_a) and not np.iscomplexobj(exp_a):
            return (f"{label}your result is complex (dtype {got_a.dtype}); expected real "
                    "numbers. Did you forget to take `.real` (or to convert back from the "
                    "complex form)?")
        if got_a.shape != exp_a.shape:
            return (f"{label}expected shape {tuple(exp_a.shape)}, got {tuple(got_a.shape)}."
                    + _shape_hint(tuple(got_a.shape), tuple(exp_a.shape)))
        if exp_a.dtype == bool or got_a.dtype == bool:
            if exp_a.dtype != got_a.dtype:
                return (f"{label}expected a boolean array, got dtype {got_a.dtype}."
                        if exp_a.dtype == bool else
                        f"{label}expected dtype {exp_a.dtype}, got a boolean array.")
            bad = np.argwhere(got_a != exp_a)
            if len(bad):
                idx = tuple(int(i) for i in bad[0])
                return (f"{label}{len(bad)} of {exp_a.size} entries differ; first at index "
                        f"{idx}: expected {exp_a[idx]}, got {got_a[idx]}.")
            return None
        if check_dtype and got_a.dtype != exp_a.dtype:
            return f"{label}expected dtype {exp_a.dtype}, got {got_a.dtype}."
        if exp_a.size == 0:
            return None
        got_f = got_a.astype(np.float64)
        exp_f = exp_a.astype(np.float64)
        nan_got, nan_exp = np.isnan(got_f), np.isnan(exp_f)
        if (nan_got & ~nan_exp).any():
            idx = tuple(int(i) for i in np.argwhere(nan_got & ~nan_exp)[0])
            return (f"{label}your result contains NaN ({int((nan_got & ~nan_exp).sum())} "
                    f"entries, first at index {idx}) where the expected values are finite. "
                    "NaN usually comes from inf - inf, inf / inf or 0/0: a softmax over a "
                    "row whose entries are all -inf, or exp() overflowing to inf on large "
                    "inputs (subtract the row's max first).")
        inf_got = np.isinf(got_f) & ~np.isinf(exp_f)
        if inf_got.any():
            idx = tuple(int(i) for i in np.argwhere(inf_got)[0])
            return (f"{label}your result contains inf at index {idx} where the expected "
                    "value is finite: an overflow (exp of a large number?).")
        close = np.isclose(got_f, exp_f, atol=atol, rtol=rtol, equal_nan=True)
        if not close.all():
            err = np.asarray(np.abs(got_f - exp_f))  # an array also for 0-d inputs
            err[np.isnan(err)] = 0.0
            idx = np.unravel_index(int(np.argmax(err)), err.shape)
            idx = tuple(int(i) for i in idx)
            return (f"{label}{int((~close).sum())} of {close.size} values are off. Largest "
                    f"error {err[idx]:.3g} at index {idx}: expected {exp_f[idx]:.6g}, got "
                    f"{got_f[idx]:.6g} (tolerance atol={atol:g}, rtol={rtol:g}).")
        return None
    if isinstance(expected, bool):
        if not isinstance(got, (bool, np.bool_)):
            return f"{label}expected a bool, got {_describe(got)}."
        return None if bool(got) == expected else f"{label}expected {expected}, got {got}."
    if isinstance(expected, (int, float)):
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
    return None if got == expected else f"{label}expected {expected!r}, got {got!r}."


def _matches(got: Any, other: Any, atol: float, rtol: float) -> bool:
    try:
        return compare_values(got, other, atol, rtol) is None
    except Exception:
        return False


# --------------------------------------------------------------------------- running cases


@dataclass
class CaseResult:
    name: str
    passed: bool
    message: str = ""
    not_implemented: bool = False


# The placeholders of generated exercise notebooks raise NotImplementedError with this text
# (course_lib/grading/generate.py writes them). Any other NotImplementedError is a real
# error in the learner's code: torch raises one for, e.g., max() of a complex tensor.
PLACEHOLDER_MARK = "is not implemented yet"


def _is_not_implemented(err: BaseException) -> bool:
    return isinstance(err, NotImplementedError) and PLACEHOLDER_MARK in str(err)


def _student_traceback(err: BaseException, limit: int = 3) -> str:
    """The last few frames of a learner's exception, without course_lib's frames."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if "course_lib" not in f.filename.replace("\\", "/")]
    lines = [f"line {f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames[-limit:]]
    where = ("\n      " + "\n      ".join(lines)) if lines else ""
    return f"{type(err).__name__}: {err}{where}"


def _copy_args(case: Case) -> Case:
    """A deep copy of a case, so a learner's in-place edit cannot corrupt the reference."""
    import copy

    return Case(case.name, copy.deepcopy(case.args), copy.deepcopy(case.kwargs))


def _has_new_nonfinite(wrong: Any, expected: Any) -> bool:
    """True when ``wrong`` is NaN/inf somewhere ``expected`` is finite (or shapes differ)."""
    wrong, expected = _to_numpy(wrong), _to_numpy(expected)
    if isinstance(expected, (tuple, list)) and isinstance(wrong, (tuple, list)):
        return any(_has_new_nonfinite(w, e) for w, e in zip(wrong, expected))
    try:
        w = np.asarray(wrong, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        return bool((~np.isfinite(w) & np.isfinite(np.broadcast_to(e, w.shape))).any())
    except (TypeError, ValueError):
        return False


def _diagnose(ex: Exercise, case: Case, got: Any, expected: Any) -> str:
    """Name the declared mistake whose output the learner's output matches, if any.

    Twins whose output is finite where the reference is finite are tried first: a twin
    that overflows to NaN "matches" every other NaN-producing mistake too, so it is only
    named when no finite twin matches (declare the overflow mistake before such twins).
    """
    outputs = []
    for hint, wrong in ex.mistakes.items():
        c = _copy_args(case)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                outputs.append((hint, wrong(*c.args, **c.kwargs)))
        except Exception:
            continue
    finite = [(h, o) for h, o in outputs if not _has_new_nonfinite(o, expected)]
    nonfinite = [(h, o) for h, o in outputs if _has_new_nonfinite(o, expected)]
    for hint, wrong_out in finite + nonfinite:
        if _matches(got, wrong_out, ex.atol, ex.rtol):
            return f"\n    Likely cause: {hint}"
    return f"\n    Hint: {ex.hint}" if ex.hint else ""


def evaluate_case(ex: Exercise, case: Case, got: Any) -> CaseResult:
    """Compare one recorded output with the reference (run here, on a fresh copy)."""
    c = _copy_args(case)
    expected = ex.reference(*c.args, **c.kwargs)
    if ex.compare is not None:
        msg = ex.compare(got, expected, case)
    else:
        msg = compare_values(got, expected, ex.atol, ex.rtol, ex.check_dtype)
    if msg is None:
        return CaseResult(case.name, True)
    return CaseResult(case.name, False, msg + _diagnose(ex, case, got, expected))


def run_case(ex: Exercise, fn: Callable, case: Case) -> tuple[Any, CaseResult | None]:
    """Call the learner's function on a copy of the case; (output, None) or (None, failure)."""
    c = _copy_args(case)
    try:
        return fn(*c.args, **c.kwargs), None
    except SystemExit as err:  # sys.exit() inside the function fails this case only
        return None, CaseResult(case.name, False,
                                f"your function called sys.exit({err.code!r})")
    except Exception as err:  # learner code may raise anything
        if _is_not_implemented(err):
            return None, CaseResult(case.name, False, "not implemented yet",
                                    not_implemented=True)
        msg = "your function raised " + _student_traceback(err)
        if ex.hint:
            msg += f"\n    Hint: {ex.hint}"
        return None, CaseResult(case.name, False, msg)


def _cases(ex: Exercise, hidden: bool, seed: int) -> list[Case]:
    return list(ex.cases(np.random.default_rng(seed), hidden))


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
        state = ("passed" if self.passed else
                 "not implemented yet" if self.not_implemented else "not passed")
        return f"<CheckReport {self.exercise.id}: {state}>"

    def _ipython_display_(self) -> None:
        """A check cell ends with check(...): its printed lines are the whole display."""


VISIBLE_SEED = 1234


def check(exercise_id: str, fn: Callable | None, *, hidden: bool = False,
          seed: int | None = None, quiet: bool = False) -> CheckReport:
    """Run an exercise's cases on the learner's function and print specific feedback.

    Passing prints one line per case. Not started yet prints a friendly note and returns.
    A wrong answer raises :class:`CheckFailed` whose message says what went wrong.
    """
    ex = get_exercise(exercise_id)
    head = f"Exercise {ex.id} ({ex.title})"
    if fn is None or not callable(fn):
        raise CheckFailed(f"{head}: expected a function named `{ex.target}`, got "
                          f"{_describe(fn)}. Run the cell that defines it first.")
    results = []
    for case in _cases(ex, hidden, VISIBLE_SEED if seed is None else seed):
        got, failure = run_case(ex, fn, case)
        if failure is None:
            failure = evaluate_case(ex, case, got)
        results.append(failure)
        if failure.not_implemented:
            break
    report = CheckReport(ex, results)
    if report.not_implemented and hidden:
        # Hidden tests run only under a grader (nbgrader's autograder, say): there a blank
        # exercise must fail, not print a friendly note.
        raise CheckFailed(f"✗ {head}: not implemented yet.")
    if report.not_implemented:
        print(f"⏳ {head}: not implemented yet. Replace the `raise NotImplementedError(...)` "
              f"line in `{ex.target}` with your code, run that cell, then run this check "
              "again.")
        return report
    if not quiet:
        for r in results:
            if r.passed:
                print(f"  ✓ {r.name}")
    failed = [r for r in results if not r.passed]
    if failed:
        lines = [f"✗ {head}: {len(failed)} of {len(results)} cases failed."]
        for r in failed:
            lines.append(f"  ✗ {r.name}: {r.message}")
        raise CheckFailed("\n".join(lines))
    print(f"✅ {head}: all {len(results)} {'hidden ' if hidden else ''}cases passed.")
    return report


# --------------------------------------------------------------------------- in the grader


def _flatten(x: Any, prefix: str, arrays: dict, spec: list) -> Any:
    """Turn an output into JSON-able structure with arrays stored separately."""
    x = _to_numpy(x)
    if isinstance(x, (tuple, list)):
        return {"seq": type(x).__name__, "items": [_flatten(e, f"{prefix}_{i}", arrays, spec)
                                                   for i, e in enumerate(x)]}
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return {"repr": repr(x)[:200]}
        arrays[prefix] = x
        return {"array": prefix}
    if x is None or isinstance(x, (bool, int, float, str)):
        if isinstance(x, float) and not math.isfinite(x):
            return {"float": repr(x)}
        return {"value": x}
    return {"repr": f"{type(x).__name__}: {repr(x)[:200]}"}


def _unflatten(node: dict, arrays: Any) -> Any:
    if "seq" in node:
        items = [_unflatten(e, arrays) for e in node["items"]]
        return tuple(items) if node["seq"] == "tuple" else items
    if "array" in node:
        return arrays[node["array"]]
    if "float" in node:
        return float(node["float"])
    if "value" in node:
        return node["value"]
    return _Unreadable(node.get("repr", "?"))


class _Unreadable:
    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def harvest(exercise_id: str, fn: Any, seed: int, out_dir: str | Path) -> None:
    """Run inside the student's kernel: record the learner's outputs, decide nothing.

    Writes ``<out_dir>/<id>.json`` (per-case status) and ``<out_dir>/<id>.npz`` (arrays).
    Visible and hidden cases are both run, with the grader's secret ``seed``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ex = get_exercise(exercise_id)
    record: dict[str, Any] = {"exercise": ex.id, "cases": []}
    arrays: dict[str, np.ndarray] = {}
    if fn is None or not callable(fn):
        record["missing"] = f"no function named `{ex.target}` was defined"
    else:
        cases = _cases(ex, False, seed) + _cases(ex, True, seed + 1)
        for i, case in enumerate(cases):
            got, failure = run_case(ex, fn, case)
            entry: dict[str, Any] = {"name": case.name}
            if failure is not None:
                entry["error"] = failure.message
                entry["not_implemented"] = failure.not_implemented
            else:
                try:
                    entry["output"] = _flatten(got, f"c{i}", arrays, [])
                except Exception as err:  # pragma: no cover - defensive
                    entry["error"] = f"could not record the output: {err}"
            record["cases"].append(entry)
    np.savez(out / f"{ex.id}.npz", **arrays)
    (out / f"{ex.id}.json").write_text(json.dumps(record))


@dataclass
class Verdict:
    exercise: str
    points: float
    max_points: int
    status: str  # passed | failed | error | timeout | missing
    feedback: list[str]


MAX_RESULT_BYTES = 256 * 2**20


def _result_file_problem(path: Path) -> str | None:
    """A result file must be a plain file of sane size (a planted FIFO would hang us)."""
    import os
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return f"{path.name} is not a regular file: results were tampered with"
    if st.st_size > MAX_RESULT_BYTES:
        return f"{path.name} is {st.st_size} bytes, over the {MAX_RESULT_BYTES} byte limit"
    if path.suffix == ".npz":  # a zip: bound what it unpacks to, not its size on disk
        import zipfile

        try:
            with zipfile.ZipFile(path) as zf:
                unpacked = sum(i.file_size for i in zf.infolist())
        except (zipfile.BadZipFile, OSError, ValueError):
            return f"{path.name} is not a readable archive"
        if unpacked > MAX_RESULT_BYTES:
            return (f"{path.name} unpacks to {unpacked} bytes, over the {MAX_RESULT_BYTES} "
                    "byte limit")
    return None


def score(exercise_id: str, seed: int, out_dir: str | Path) -> Verdict:
    """Run in the grader's own process: recompute references and judge the recorded outputs."""
    ex = get_exercise(exercise_id)
    out = Path(out_dir)
    jpath, npath = out / f"{ex.id}.json", out / f"{ex.id}.npz"
    if not jpath.exists():
        return Verdict(ex.id, 0, ex.points, "error",
                       ["the check for this exercise never ran (an earlier cell failed, the "
                        "kernel died or the time limit was reached)"])
    for path in (jpath, npath):
        problem = _result_file_problem(path)
        if problem:
            return Verdict(ex.id, 0, ex.points, "error", [problem])
    try:
        record = json.loads(jpath.read_text())
        arrays = np.load(npath, allow_pickle=False) if npath.exists() else {}
    except Exception as err:
        return Verdict(ex.id, 0, ex.points, "error", [f"unreadable results: {err}"])
    if record.get("missing"):
        return Verdict(ex.id, 0, ex.points, "missing", [record["missing"]])
    cases = _cases(ex, False, seed) + _cases(ex, True, seed + 1)
    recorded = record.get("cases", [])
    if len(recorded) != len(cases):
        return Verdict(ex.id, 0, ex.points, "error",
                       [f"expected results for {len(cases)} cases, found {len(recorded)}"])
    feedback, passed, not_impl = [], 0, 0
    for case, entry in zip(cases, recorded):
        if "error" in entry:
            not_impl += bool(entry.get("not_implemented"))
            feedback.append(f"✗ {case.name}: {entry['error']}")
            continue
        try:
            got = _unflatten(entry["output"], arrays)
            result = evaluate_case(ex, case, got)
        except Exception as err:
            result = CaseResult(case.name, False, f"could not compare: {err}")
        if result.passed:
            passed += 1
            feedback.append(f"✓ {case.name}")
        else:
            feedback.append(f"✗ {case.name}: {result.message}")
    if passed == len(cases):
        return Verdict(ex.id, ex.points, ex.points, "passed", feedback)
    if not_impl:
        return Verdict(ex.id, 0, ex.points, "missing", ["not implemented"] + feedback)
    return Verdict(ex.id, 0, ex.points, "failed", feedback)


def cases_for(exercise_id: str, hidden: bool = False, seed: int = VISIBLE_SEED) -> Sequence[Case]:
    """The cases an exercise would run (for tests and authors)."""
    return _cases(get_exercise(exercise_id), hidden, seed)
