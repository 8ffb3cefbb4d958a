"""`make progress`: the learner's copies checked without being changed, on blank, partial and
complete copies, with the verdicts the check cells give."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from course_lib import progress as P
from course_lib.checks import core

ROOT = Path(__file__).resolve().parents[2]


def copy_exercises(work: Path, assignment: str) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    dest = work / f"{assignment}_exercises.ipynb"
    shutil.copy2(ROOT / "exercises" / f"{assignment}.ipynb", dest)
    return dest


def solution_source(assignment: str, ex_id: str) -> str:
    nb = nbformat.read(ROOT / "solutions" / f"{assignment}.ipynb", as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("course") or {}
        if meta.get("exercise") == ex_id and meta.get("role") == "solution":
            return cell.source
    raise KeyError(ex_id)


def set_solution(copy: Path, ex_id: str, source: str) -> None:
    nb = nbformat.read(copy, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("course") or {}
        if meta.get("exercise") == ex_id and meta.get("role") == "solution":
            cell.source = source
    nbformat.write(nb, copy)


def by_id(rows) -> dict[str, P.Row]:
    return {r.exercise: r for r in rows}


@pytest.mark.slow
def test_blank_copies_are_not_started(tmp_path):
    copy = copy_exercises(tmp_path / "work", "02_qkv_attention")
    rows = P.check_copy(copy, ROOT / "exercises" / "02_qkv_attention.ipynb", "02_qkv_attention")
    declared = sorted(e for e in core.all_exercises() if e.startswith("02."))
    assert [r.exercise for r in rows] == declared
    assert {r.status for r in rows} == {P.NOT_STARTED}
    assert sum(r.points for r in rows) == 0
    assert sum(r.max_points for r in rows) == sum(
        core.get_exercise(r.exercise).points for r in rows
    )


@pytest.mark.slow
def test_a_partial_copy(tmp_path):
    copy = copy_exercises(tmp_path / "work", "02_qkv_attention")
    set_solution(copy, "02.1", solution_source("02_qkv_attention", "02.1"))
    set_solution(  # a wrong answer: every key visible
        copy,
        "02.2",
        "import numpy as np\n\n\ndef causal_mask(n_q, n_k=None):\n"
        "    n_k = n_q if n_k is None else n_k\n    return np.ones((n_q, n_k), dtype=bool)\n",
    )
    set_solution(copy, "02.3", "def padding_mask(lengths, n_k):\n    return (\n")  # syntax
    nb = nbformat.read(copy, as_version=4)  # the learner deleted 02.4's check cell
    nb.cells = [
        c
        for c in nb.cells
        if (c.metadata.get("course") or {}) != {"exercise": "02.4", "role": "check"}
    ]
    nbformat.write(nb, copy)
    before = copy.read_bytes(), copy.stat().st_mtime_ns

    rows = by_id(
        P.check_copy(copy, ROOT / "exercises" / "02_qkv_attention.ipynb", "02_qkv_attention")
    )
    assert (copy.read_bytes(), copy.stat().st_mtime_ns) == before, "the copy was changed"
    assert rows["02.1"].status == P.PASSED and rows["02.1"].points == 2
    assert rows["02.2"].status == P.FAILING and rows["02.2"].points == 0
    assert "differ" in rows["02.2"].reason or "expected" in rows["02.2"].reason
    assert "\n" not in rows["02.2"].reason and not rows["02.2"].reason.endswith("…")
    assert rows["02.3"].status == P.FAILING and "SyntaxError" in rows["02.3"].reason
    assert rows["02.4"].status == P.NOT_STARTED  # checked from the course's own check cell
    assert rows["02.5"].status == P.NOT_STARTED


@pytest.mark.slow
def test_complete_copies_pass_and_the_table_adds_up(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for assignment in ("00_setup", "02_qkv_attention"):
        shutil.copy2(ROOT / "solutions" / f"{assignment}.ipynb", work / f"{assignment}.ipynb")
    rows = P.course_progress(work, ROOT, jobs=2)
    mine = [r for r in rows if r.assignment in ("00_setup", "02_qkv_attention")]
    assert mine and all(r.status == P.PASSED for r in mine), [
        (r.exercise, r.status, r.reason) for r in mine
    ]
    others = [r for r in rows if r not in mine]
    assert others and all(r.status == P.NOT_STARTED and "no copy" in r.reason for r in others)
    text = P.table(rows)
    got = sum(r.max_points for r in mine)
    total = sum(r.max_points for r in rows)
    assert f"{len(mine)} of {len(rows)} exercises passed; {got} of {total} points." in text
    assert "✓ passed" in text and "○ not started" in text


@pytest.mark.slow
def test_an_endless_function_is_stopped(tmp_path):
    # 30 s: half for the function, half for starting the kernel on a loaded CI machine.
    # (It sleeps rather than spins: the alarm stops either, and no core is burnt for 15 s.)
    copy = copy_exercises(tmp_path / "work", "00_setup")
    set_solution(
        copy, "00.1", "import time\ndef softmax(x):\n    while True:\n        time.sleep(0.1)\n"
    )
    rows = P.check_copy(copy, ROOT / "exercises" / "00_setup.ipynb", "00_setup", timeout=30)
    assert rows[0].status == P.FAILING and "ran past" in rows[0].reason, rows


def test_verdicts_match_the_check_cell():
    """progress says what check() says, on the same function."""
    wrong = lambda x: np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)  # noqa: E731
    status, reason = P.run_visible_cases("00.1", wrong)
    with pytest.raises(core.CheckFailed) as failure:
        core.check("00.1", wrong, hints="nudge")
    first = next(line for line in str(failure.value).splitlines() if line.startswith("  ✗"))
    assert status == P.FAILING
    # the reason leads with the check's likely cause, in full, then the case that showed it
    message = str(failure.value)
    cause = next(line.strip() for line in message.splitlines() if "Likely cause:" in line)
    assert reason.startswith(cause), (reason, cause)
    assert "wrong axis" in reason and "4 rows of 5 scores" in reason
    assert first.split("✗", 1)[1].strip().split(":")[0] in reason
    right = lambda x: (
        np.exp(x - x.max(-1, keepdims=True))
        / np.exp(  # noqa: E731
            x - x.max(-1, keepdims=True)
        ).sum(-1, keepdims=True)
    )
    assert P.run_visible_cases("00.1", right) == (P.PASSED, "")


def test_show_in_a_notebook_uses_this_kernels_checks(capsys, monkeypatch):
    monkeypatch.delenv("COURSE_GRADING", raising=False)
    monkeypatch.delenv("COURSE_PROGRESS", raising=False)
    core.LAST_REPORTS.pop("00.1", None)
    rows = P.show("00_setup")
    assert rows[0].status == P.NOT_CHECKED
    with pytest.raises(core.CheckFailed):
        core.check("00.1", lambda x: x)
    assert P.show("00_setup")[0].status == P.FAILING
    core.check("00.1", lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True))
    rows = P.show("00_setup")
    assert rows[0].status == P.PASSED and rows[0].points == rows[0].max_points
    assert "1 of 1 exercises passed" in capsys.readouterr().out
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert P.show("00_setup") == []


def test_copies_are_recognised_like_the_grader_does(tmp_path):
    known = ["00_setup", "02_qkv_attention"]
    work = tmp_path / "work"
    a = copy_exercises(work, "02_qkv_attention")
    renamed = work / "my attempt.ipynb"  # metadata says which it is
    shutil.copy2(ROOT / "exercises" / "00_setup.ipynb", renamed)
    assert P.assignment_of(a, known) == "02_qkv_attention"
    assert P.assignment_of(renamed, known) == "00_setup"
    found = P.find_copies(work, known)
    assert found == {"02_qkv_attention": a, "00_setup": renamed}


@pytest.mark.slow
def test_the_command_line(tmp_path):
    copy_exercises(tmp_path / "work", "00_setup")
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.progress", str(tmp_path / "work"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows[0]["exercise"] == "00.1" and rows[0]["status"] == P.NOT_STARTED


def test_the_reason_is_whole_in_table_and_json():
    long_cause = "Likely cause: " + "a very long explanation of the mistake " * 6 + "(the end)."
    reason = P.reason_of("a case", "values differ: expected 1, got 2\n    " + long_cause)
    assert reason.startswith(long_cause.strip()) and "(the end)." in reason
    assert reason.endswith("(a case: values differ: expected 1, got 2)")
    row = P.Row("00_setup", "00.1", "softmax", P.FAILING, 0, 1, reason)
    assert reason in P.table([row])
    assert P.reason_of("c", "no cause here") == "c: no cause here"


@pytest.mark.slow
@pytest.mark.parametrize("form", ["work", "./work", "work/", "~"])
def test_the_command_line_takes_any_path_form(tmp_path, form, monkeypatch):
    """`python -m course_lib.progress work` (what --help shows) from the course folder."""
    course = tmp_path / "course"
    for folder in ("exercises", "solutions"):
        (course / folder).mkdir(parents=True)
        shutil.copy2(ROOT / folder / "00_setup.ipynb", course / folder / "00_setup.ipynb")
    work = course / "work"
    copy = copy_exercises(work, "00_setup")
    set_solution(copy, "00.1", solution_source("00_setup", "00.1"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(work))
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.progress", form, "--json"],
        capture_output=True,
        text=True,
        cwd=course,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["exercise"], r["status"]) for r in rows] == [("00.1", P.PASSED)], rows


def test_an_untouched_copy_is_not_started_without_a_process(tmp_path, monkeypatch):
    """Every chapter's blank copy: "not started" is read from the file (issue 37, item 4)."""

    def no_process(*args, **kwargs):
        raise AssertionError("make progress started a process for an untouched copy")

    monkeypatch.setattr(P.subprocess, "run", no_process)
    known = P.assignments(ROOT)
    for assignment in known:
        copy = copy_exercises(tmp_path / "work", assignment)
        base = ROOT / "exercises" / f"{assignment}.ipynb"
        assert P.untouched(copy, base, assignment), assignment
    rows = P.course_progress(tmp_path / "work", ROOT, jobs=1)
    assert {r.status for r in rows} == {P.NOT_STARTED} and len(rows) == len(core.all_exercises())


def test_a_touched_copy_is_checked(tmp_path):
    base = ROOT / "exercises" / "02_qkv_attention.ipynb"
    copy = copy_exercises(tmp_path / "work", "02_qkv_attention")
    set_solution(copy, "02.3", "def padding_mask(lengths, n_k):\n    return None\n")
    assert not P.untouched(copy, base, "02_qkv_attention")
    nb = nbformat.read(copy, as_version=4)  # a deleted solution cell is no blank either
    nb.cells = [c for c in nb.cells if (c.metadata.get("course") or {}).get("role") != "solution"]
    nbformat.write(nb, copy)
    assert not P.untouched(copy, base, "02_qkv_attention")


@pytest.mark.slow
def test_the_shortcut_gives_the_verdicts_the_run_gives(tmp_path, monkeypatch):
    copy = copy_exercises(tmp_path / "work", "00_setup")
    base = ROOT / "exercises" / "00_setup.ipynb"
    quick = P.check_copy(copy, base, "00_setup")
    monkeypatch.setattr(P, "untouched", lambda *a: False)
    ran = P.check_copy(copy, base, "00_setup")
    assert [(r.exercise, r.status, r.points) for r in quick] == [
        (r.exercise, r.status, r.points) for r in ran
    ]


@pytest.mark.slow
def test_a_missing_package_is_a_set_up_problem(tmp_path):
    """A course cell that cannot import its package: the learner's failing answer is
    "not checked", with the one command that installs the course's packages."""
    work = tmp_path / "work"
    copy = copy_exercises(work, "00_setup")
    base = tmp_path / "00_setup.ipynb"
    nb = nbformat.read(ROOT / "exercises" / "00_setup.ipynb", as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("import course_package_not_installed"))
    nbformat.write(nb, base)
    set_solution(copy, "00.1", "def softmax(x):\n    return x\n")
    rows = P.check_copy(copy, base, "00_setup")
    row = by_id(rows)["00.1"]
    assert row.status == P.NOT_CHECKED, row
    assert "set-up problem" in row.reason and "course_package_not_installed" in row.reason
    assert "-m pip install -e" in row.reason
