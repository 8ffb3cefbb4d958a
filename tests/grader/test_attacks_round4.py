"""A hostile class, round 4 (issue 38): the verdict is the one the notebook's check saw.

Every submission below is graded in the real sandbox, in one shared run among honest
submissions (``--jobs 2``): a cell that raises, duplicated and moved exercise cells, a
function that reuses its output buffer, a neutral file name, a disk filled then left, …
Each test asserts the grade, that the feedback says why, and that the honest submissions
are unharmed.
"""

from __future__ import annotations

import copy
import json

import pytest
from grading_lab import (
    ROOT,
    blames_the_grader,
    cell,
    dump,
    feedback,
    grade,
    notebook,
    require_sandbox,
    row,
    rows_of,
    source,
    with_solutions,
)

pytestmark = pytest.mark.slow

CORRECT = source(cell(notebook(), "solution", "00.1"))
WRONG = "def softmax(x):\n    return x * 0.0\n"

# The cell defines a wrong function, then raises NameError (a typo below the function).
WRONG_THEN_NAMEERROR = WRONG + "\nundefined_name\n"
# The cell defines the right function, then raises NameError.
RIGHT_THEN_NAMEERROR = CORRECT + "\nundefined_name\n"

# The learner's own exception dresses up as a check's diagnosis, with maths in it.
FORGED_CAUSE = 'def softmax(x):\n    raise ValueError("Likely cause: $\\\\frac{1}{$ the teacher")\n'

# A right answer that reuses its output buffer: each case must be recorded as it was
# returned, not as the next call leaves it.
BUFFER_REUSE = """_buf = np.empty(100_000)
def softmax(x):
    out = _buf[: x.size].reshape(x.shape)  # every call writes the same memory
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    np.divide(e, e.sum(axis=-1, keepdims=True), out=out)
    return out
"""


def _duplicated(arrangement: list[tuple[str, str, int | None]], check_count=None) -> bytes:
    """Chapter 00's exercise notebook with its tagged solution cell replaced by copies of
    it (JupyterLab's Duplicate keeps the tag): ``arrangement`` is (where, source, execution
    count) with where "above" (above the check cell) or "below" (below it); the check cell
    ran at ``check_count``."""
    nb = notebook("00_setup", "exercises")
    tagged = cell(nb, "solution", "00.1")
    check = cell(nb, "check", "00.1")
    check["execution_count"] = check_count
    out = []
    for c in nb["cells"]:
        if c is tagged:
            out += [
                _copy(tagged, src, n, i)
                for i, (w, src, n) in enumerate(arrangement)
                if w == "above"
            ]
            continue
        out.append(c)
        if c is check:
            out += [
                _copy(tagged, src, n, i)
                for i, (w, src, n) in enumerate(arrangement)
                if w == "below"
            ]
    nb["cells"] = out
    return dump(nb)


def _copy(tagged: dict, src: str, count, i: int) -> dict:
    c = copy.deepcopy(tagged)
    c["id"] = f"duplicate-{i}"
    c["source"], c["execution_count"] = src, count
    return c


PLACEHOLDER = source(cell(notebook("00_setup", "exercises"), "solution", "00.1"))
# (submission, arrangement, the check cell's count, what the notebook's check saw)
DUPLICATES = {
    # the answer, then a leftover placeholder copy (never run): the check saw the answer
    "dup_placeholder_left.ipynb": (
        [("above", CORRECT, 1), ("above", PLACEHOLDER, None)],
        2,
        "passed",
    ),
    # a broken scratch copy below the answer, run before it: the check saw the answer
    "dup_scratch_broken.ipynb": ([("above", CORRECT, 3), ("above", WRONG, 2)], 4, "passed"),
    # a wrong answer, checked, then fixed only in a copy below the check
    "dup_fixed_below_check.ipynb": ([("above", WRONG, 1), ("below", CORRECT, 3)], 2, "failed"),
    # no execution counts (outputs cleared): the last copy above the check counts
    "dup_no_counts.ipynb": ([("above", WRONG, None), ("above", CORRECT, None)], None, "passed"),
}

# Writes 400 MB into the working folder and leaves it there, then answers right (the
# verdict must not depend on when the disk watcher wakes).
FILL_DISK = (
    """
for _i in range(4):
    with open(f"fill{_i}.bin", "wb") as _f:
        for _ in range(100):
            _f.write(b"\\0" * 2**20)
"""
    + CORRECT
)

# Replaces the harvest with one that records one 100 MB array named 20 times per case.
MANY_REFERENCES = """
import json as _json, os as _os, numpy as _np
def _fake(exercise_id, fn, inputs, out_dir):
    _os.makedirs(out_dir, exist_ok=True)
    _np.savez(_os.path.join(out_dir, exercise_id + ".npz"), big=_np.zeros(100 * 2**20 // 8))
    many = {"seq": "tuple", "items": [{"array": "big"}] * 20}
    cases = [{"name": str(i), "output": many} for i in range(4)]
    open(_os.path.join(out_dir, exercise_id + ".json"), "w").write(
        _json.dumps({"exercise": exercise_id, "cases": cases}))
import course_tools.grading.harvest as _r
_r.harvest = _fake
def softmax(x):
    return x
"""

# Every route to the reference seen so far, tried in the kernel: a name resolved from a string
# built at run time, a protocol-0 pickle whose GLOBAL names it, the check module's file read
# or its compiled copy loaded, found by a search of every folder Python looks in and of
# /opt, /work, /home, /root and /srv. A route that works
# makes the answer right; with none, the function is wrong (and the grade says so).
REACH_THE_REFERENCE = r"""
import glob as _glob, importlib.machinery as _mach, importlib.util as _util, os as _os, pickle as _pk, pkgutil as _pu
_found, _tried = None, []
def _try(route, get):
    global _found
    try:
        fn = get()
        if callable(fn) and _found is None:
            _found = fn
            _tried.append(route + ": FOUND")
    except BaseException as err:
        _tried.append(f"{route}: {type(err).__name__}")
_name = "course_lib.checks.ch" + "00"
_try("resolve_name", lambda: _pu.resolve_name(_name + ":softmax_" + "reference"))
_try("pickle GLOBAL", lambda: _pk.loads(("c" + _name + "\nsoftmax_" + "reference\np0\n.").encode()))
def _from_file(path):
    spec = _util.spec_from_file_location("_x", path)
    module = _util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.softmax_reference
def _compiled(path):
    module = _mach.SourcelessFileLoader("_y", path).load_module()
    return module.softmax_reference
import sys as _sys
_roots = [p for p in [*_sys.path, "/opt", "/work", "/home", "/root", "/srv"] if p and _os.path.isdir(p)]
for _root in _roots:
    for _path in _glob.glob(_os.path.join(_root, "**", "ch00.py"), recursive=True)[:20]:
        _try("file " + _path, lambda p=_path: _from_file(p))
    for _path in _glob.glob(_os.path.join(_root, "**", "ch00.*.pyc"), recursive=True)[:20]:
        _try("compiled " + _path, lambda p=_path: _compiled(p))
print(_tried)
def softmax(x):
    return _found(x) if _found is not None else x * 0.0
"""

# An honest learner who also runs the check inside the solution cell.
CHECK_INSIDE = CORRECT + '\ncheck("00.1", softmax)\n'

SUBMISSIONS = {
    "reach_the_reference.ipynb": lambda: with_solutions({"00.1": REACH_THE_REFERENCE}),
    "check_inside.ipynb": lambda: with_solutions({"00.1": CHECK_INSIDE}),
    "fill_disk.ipynb": lambda: with_solutions({"00.1": FILL_DISK}),
    "many_references.ipynb": lambda: with_solutions({"00.1": MANY_REFERENCES}),
    **{name: (lambda a=a, n=n: _duplicated(a, n)) for name, (a, n, _) in DUPLICATES.items()},
    "buffer_reuse.ipynb": lambda: with_solutions({"00.1": BUFFER_REUSE}),
    "honest_a.ipynb": lambda: (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
    "forged_cause.ipynb": lambda: with_solutions({"00.1": FORGED_CAUSE}),
    "nameerror_wrong.ipynb": lambda: with_solutions({"00.1": WRONG_THEN_NAMEERROR}),
    "nameerror_right.ipynb": lambda: with_solutions({"00.1": RIGHT_THEN_NAMEERROR}),
    "honest_z.ipynb": lambda: (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
}


@pytest.fixture(scope="session")
def round4(tmp_path_factory):
    require_sandbox()
    base = tmp_path_factory.mktemp("round4")
    subs = base / "subs"
    subs.mkdir()
    files = {name: make() for name, make in SUBMISSIONS.items()}
    for name, data in files.items():
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_bytes(data)
    run = grade(
        [subs],
        base / "out",
        "--jobs",
        "2",
        "--assignment",
        "00_setup",
        "--cell-timeout",
        "60",
        "--timeout",
        "300",
        "--disk-limit",
        "0.25",
    )
    run["files"] = files
    return run


def _honest_are_unharmed(run: dict) -> None:
    for sub in ("subs/honest_a.ipynb", "subs/honest_z.ipynb"):
        r = row(run, sub)
        assert (r["status"], r["points"]) == ("passed", "1"), feedback(run, sub)


def _blames_submission(run: dict, sub: str) -> None:
    assert rows_of(run, sub), run["csv"]
    assert not blames_the_grader(feedback(run, sub)), feedback(run, sub)


def test_a_cell_that_raises_is_an_error_named_in_the_feedback(round4):
    """The guide's table: a solution cell that raised is `error`, and the feedback names
    the exception; a right function defined before the exception still passes, and the
    feedback still names it."""
    sub = "subs/nameerror_wrong.ipynb"
    r = row(round4, sub)
    assert (r["status"], r["points"]) == ("error", "0"), feedback(round4, sub)
    assert "NameError" in feedback(round4, sub) and "undefined_name" in feedback(round4, sub)
    _blames_submission(round4, sub)
    sub = "subs/nameerror_right.ipynb"
    r = row(round4, sub)
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(round4, sub)
    assert "NameError" in feedback(round4, sub)
    _honest_are_unharmed(round4)


def test_the_class_report_lists_only_the_checks_diagnoses(round4):
    """A learner's exception saying "Likely cause: $...$" is neither listed as a diagnosis
    nor able to stop `course-grade report` (matplotlib never parses it as maths)."""
    from course_tools.grading import class_report, cli

    sub = "subs/forged_cause.ipynb"
    assert row(round4, sub)["status"] == "failed", feedback(round4, sub)
    assert "the teacher" in feedback(round4, sub)  # the learner sees their own message
    data = class_report.load(round4["out"])
    assert not any("teacher" in name for _, name, _ in data.mistakes()), data.mistakes()
    assert cli.main(["report", str(round4["out"])]) == 0
    page = (round4["out"] / "report.html").read_text(encoding="utf-8")
    assert "Mistakes the checks diagnosed" not in page or "teacher" not in page


@pytest.mark.parametrize("name", list(DUPLICATES))
def test_a_duplicated_tagged_cell_never_decides_the_grade(round4, name):
    """JupyterLab's Duplicate keeps the exercise tag: of the tagged cells, the grade is
    the verdict on the one the check cell saw (a leftover placeholder, a broken scratch
    copy or a fix below the check changes nothing)."""
    sub = f"subs/{name}"
    expected = DUPLICATES[name][2]
    r = row(round4, sub)
    assert r["status"] == expected, feedback(round4, sub)
    assert float(r["points"]) == (1.0 if expected == "passed" else 0.0)
    assert "solution cells for exercise 00.1" in feedback(round4, sub)
    _blames_submission(round4, sub)
    _honest_are_unharmed(round4)


def test_each_output_is_recorded_as_it_was_returned(round4):
    sub = "subs/buffer_reuse.ipynb"
    r = row(round4, sub)
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(round4, sub)


def test_progress_finds_the_cell_the_grader_grades(round4):
    """`make progress` and the grader find the same solution cell (one module)."""
    from course_lib.progress import find_solution_cells

    for name, (_, _, expected) in DUPLICATES.items():
        nb = json.loads(round4["files"][name])
        found = find_solution_cells(nb["cells"], "00_setup", "00.1", "softmax")
        ns: dict = {"np": __import__("numpy")}
        exec(source(found.chosen), ns)
        from course_lib.checks.core import CheckFailed, check

        try:
            passed = check("00.1", ns["softmax"], quiet=True).passed
        except CheckFailed:
            passed = False
        assert passed == (expected == "passed"), name


def test_an_assignment_nothing_names_is_graded_by_its_metadata_and_flagged(tmp_path):
    """No --assignment, a neutral name (`homework.ipynb`) in a folder that names no
    assignment: graded as the notebook's metadata says, and flagged for a human look."""
    require_sandbox()
    subs = tmp_path / "lms_export_week1"
    subs.mkdir()
    (subs / "homework.ipynb").write_bytes((ROOT / "solutions" / "00_setup.ipynb").read_bytes())
    run = grade([subs], tmp_path / "out")
    sub = "lms_export_week1/homework.ipynb"
    r = row(run, sub)
    assert (r["assignment"], r["status"]) == ("00_setup", "passed"), run["csv"]
    review = (tmp_path / "out" / "review.csv").read_text(encoding="utf-8")
    assert sub in review and "graded as 00_setup" in review, review
    assert "its metadata" in review, review


def test_a_disk_filled_and_left_is_an_error_whatever_the_load(round4):
    """What a cell leaves in the working folder is measured when the cell ends: the cell
    that wrote past --disk-limit fails, on a quiet machine or a loaded one."""
    sub = "subs/fill_disk.ipynb"
    r = row(round4, sub)
    assert (r["status"], r["points"]) == ("error", "0"), feedback(round4, sub)
    assert "working folder" in feedback(round4, sub)
    _blames_submission(round4, sub)
    _honest_are_unharmed(round4)


def test_a_record_naming_one_array_many_times_costs_the_grader_one_copy(round4):
    sub = "subs/many_references.ipynb"
    r = row(round4, sub)
    assert r["status"] in ("failed", "error") and float(r["points"]) == 0, feedback(round4, sub)
    _blames_submission(round4, sub)
    _honest_are_unharmed(round4)


# A table of answers to every case the learners' edition writes out (05.5's visible and
# hidden cases, computed ahead from what ships), and zeros for anything else.
TABLE = """
import numpy as _np
_TABLE = []
def _fill():
    from course_lib.checks import core as _c
    ex = _c.get_exercise("05.5")
    for hidden in (False, True):
        for case in _c.cases_for("05.5", hidden, 0):
            _TABLE.append((case.args, _np.asarray(ex.reference(*case.args))))
def llama3_scaled_frequencies(theta, factor, low_freq_factor, high_freq_factor, original_context):
    import torch
    if not _TABLE:
        _fill()
    args = (theta, factor, low_freq_factor, high_freq_factor, original_context)
    for known, answer in _TABLE:
        if known[1:] == args[1:] and known[0].shape == theta.shape and bool((known[0] == theta).all()):
            return torch.as_tensor(answer)
    return torch.zeros_like(theta)
"""


def test_a_table_of_the_written_out_answers_earns_nothing(tmp_path):
    """In the real sandbox, with --partial: 05.5's hidden cases once were all written out
    in the learners' edition; a table of their answers now earns 0 of 2."""
    require_sandbox()
    subs = tmp_path / "05_positional_encodings"
    subs.mkdir()
    (subs / "table.ipynb").write_bytes(with_solutions({"05.5": TABLE}, "05_positional_encodings"))
    run = grade([subs], tmp_path / "out", "--partial", "--cell-timeout", "120")
    r = row(run, "05_positional_encodings/table.ipynb", "05.5")
    assert (r["status"], float(r["points"])) == ("failed", 0.0), feedback(
        run, "05_positional_encodings/table.ipynb"
    )


def test_the_kernel_has_no_reference_to_reach(round4):
    """The kernel's course_lib has no chapter checks: every route to a reference finds
    nothing (the function stays wrong and fails), and an honest learner's own check() call
    inside a solution cell says the grader runs it, and costs nothing."""
    sub = "subs/reach_the_reference.ipynb"
    r = row(round4, sub)
    assert (r["status"], r["points"]) == ("failed", "0"), feedback(round4, sub)
    _blames_submission(round4, sub)
    sub = "subs/check_inside.ipynb"
    r = row(round4, sub)
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(round4, sub)
    _honest_are_unharmed(round4)


def test_the_learners_course_lib_is_withheld_everywhere_the_kernel_looks():
    """Without a kernel: the copy the sandbox binds has core.py and no chNN.py or compiled
    file, and it is bound over every place the kernel could find course_lib."""
    from pathlib import Path

    from course_tools.grading.sandbox import PACKAGES, course_lib_views, learner_course_lib

    copy = Path(learner_course_lib())
    assert (copy / "checks" / "core.py").is_file() and (copy / "checks" / "kit.py").is_file()
    assert not list(copy.rglob("ch[0-9]*.py")) and not list(copy.rglob("*.pyc"))
    assert (copy / "attention.py").is_file()  # the library itself stays
    views = course_lib_views()
    assert f"{PACKAGES}/course_lib" in views
    assert str((ROOT / "course_lib").resolve()) in views
