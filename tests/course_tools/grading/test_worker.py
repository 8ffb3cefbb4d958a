"""course_tools/grading/worker.py: one submission's grading, its rows and limits, its signed
channel, and the verdicts drawn from a kernel's cell outcomes. No kernel starts here: the
grader's triage needs none, and where a kernel would run, a stand-in runs the harvest cells
in this process (the recorded outputs and the scoring are the real ones)."""

from __future__ import annotations

import base64
import os
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
from grading_lab import ROOT, dump, notebook, with_solutions

from course_lib.checks.core import get_exercise
from course_tools.grading import run as run_module
from course_tools.grading import worker
from course_tools.grading.rebuild import Course
from course_tools.grading.results import Verdict, harvest
from course_tools.grading.run import CellOutcome
from course_tools.grading.worker import (
    _course_cell_notes,
    _harvest_failure,
    _over_memory,
    _solution_cell_failure,
    _verdict_for,
    changed_files,
    course_files,
    grade,
    hash_files,
    results_problem,
    row,
    sign,
    verify,
    whole_submission_rows,
)

NAIVE = """def softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)
"""


@pytest.fixture(scope="module")
def course() -> Course:
    return Course.load(ROOT, check=False)


# --------------------------------------------------------------------------- the channel


def test_result_channel_rejects_forgeries():
    key = os.urandom(32)
    line = sign(key, {"result": {"a": 1}})
    assert verify(key, line) == {"result": {"a": 1}}
    assert verify(os.urandom(32), line) is None
    assert verify(key, line.replace(b"1", b"2")) is None
    assert verify(key, b"garbage\n") is None


def test_a_signed_line_is_one_line_of_mac_and_json():
    key = b"k" * 32
    line = sign(key, {"b": "two\nlines", "a": 1})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    mac, body = line.decode().rstrip("\n").split(" ", 1)
    assert len(mac) == 64 and body == '{"a": 1, "b": "two\\nlines"}'
    assert verify(key, b"\xff\xfe not utf-8\n") is None
    assert verify(key, line.replace(b'"a": 1', b'"a": 1,')) is None  # signed text, edited


# --------------------------------------------------------------------------- rows


def test_a_row_keeps_bounded_feedback_and_only_known_statuses():
    r = row("s", "00_setup", "00.1", 0, 1, "failed", ["x" * 10_000] * 500, "t", ["d"] * 300)
    assert len(r["feedback"]) == worker.MAX_FEEDBACK_LINES
    assert {len(f) for f in r["feedback"]} == {worker.MAX_FEEDBACK_LINE}
    assert len(r["diagnoses"]) == worker.MAX_FEEDBACK_LINES
    assert list(r) == [
        *("submission", "assignment", "exercise", "points", "max_points", "status"),
        *("feedback", "title", "diagnoses"),
    ]
    with pytest.raises(AssertionError):
        row("s", "a", "e", 0, 1, "maybe", [])


def test_a_submission_that_cannot_be_graded_gets_a_row_per_exercise(course):
    rows = whole_submission_rows("s", "00_setup", course, "error", "not a notebook")
    assert [r["exercise"] for r in rows] == course.exercises["00_setup"]
    ex = get_exercise("00.1")
    assert (rows[0]["max_points"], rows[0]["title"]) == (ex.points, ex.title)
    assert all(r["status"] == "error" and r["feedback"] == ["not a notebook"] for r in rows)
    (unknown,) = whole_submission_rows("s", None, course, "error", "which one?")
    assert (unknown["assignment"], unknown["exercise"], unknown["max_points"]) == ("", "", 0)


# --------------------------------------------------------------------------- integrity


def test_changed_files_are_the_added_removed_and_edited_ones():
    old = {"a": "1", "b": "2", "c": "3"}
    assert changed_files(old, {"a": "1", "b": "9", "d": "4"}) == ["b", "c", "d"]
    assert changed_files(old, dict(old)) == []


def test_a_file_that_cannot_be_read_hashes_as_missing(tmp_path):
    (tmp_path / "a").write_bytes(b"a")
    got = hash_files([tmp_path / "a", tmp_path / "gone"])
    assert got[str(tmp_path / "gone")] == "missing" and len(got[str(tmp_path / "a")]) == 64


def test_the_verdicts_depend_on_the_packages_and_the_solutions(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "00_setup.ipynb").write_text("{}")
    (tmp_path / "solutions" / "notes.txt").write_text("not a notebook")
    files = course_files(tmp_path)
    names = {f.name for f in files}
    assert tmp_path.resolve() / "solutions" / "00_setup.ipynb" in files
    assert "notes.txt" not in names and {"core.py", "worker.py", "ch00.py"} <= names


# --------------------------------------------------------------------------- recorded outputs


def test_recorded_outputs_are_bounded_by_what_they_unpack_to(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "MAX_RESULT_BYTES", 2**20)
    monkeypatch.setattr(worker, "MAX_RECORD_BYTES", 2**18)

    ok = tmp_path / "ok"
    ok.mkdir()
    np.savez(ok / "00.1.npz", c0=np.zeros(10))
    assert results_problem(ok) is None
    bomb = tmp_path / "bomb"  # a small file that unpacks to 4 MB (past the limit)
    bomb.mkdir()
    with zipfile.ZipFile(bomb / "00.1.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("c0.npy", bytes(4 * 2**20))
    assert (bomb / "00.1.npz").stat().st_size < 2**16
    assert "MB" in results_problem(bomb)
    big = tmp_path / "big"
    big.mkdir()
    (big / "00.1.json").write_bytes(b" " * 2**19)
    assert "MB" in results_problem(big)


def test_only_a_folder_of_few_regular_files_is_read(tmp_path):
    assert results_problem(tmp_path / "never-made") is None
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert "replaced by something else" in results_problem(tmp_path / "link")
    (tmp_path / "real" / "sub").mkdir()
    assert results_problem(tmp_path / "real") == "the results folder holds a non-file (sub)"
    many = tmp_path / "many"
    many.mkdir()
    for i in range(101):
        (many / f"{i}.json").write_text("{}")
    assert results_problem(many) == "the results folder holds more than 100 files"


# --------------------------------------------------------------------------- verdicts


def test_a_harvest_that_timed_out_or_died_decides_the_verdict():
    assert _harvest_failure(None, 10) is None
    assert _harvest_failure(CellOutcome("ok"), 10) is None
    status, points, why = _harvest_failure(CellOutcome("timeout", "the cell did not finish"), 7)
    assert (status, points) == ("timeout", 0) and "within 7 s" in why[0]
    total = _harvest_failure(CellOutcome("timeout", "reached its total time limit of 9 s"), 7)
    assert "still running when the notebook reached its total time limit" in total[2][0]
    stopped = _harvest_failure(CellOutcome("died", "the kernel was stopped: too big"), 7)
    assert stopped == ("error", 0, ["while your function ran on the grader's tests, "
                                    "the kernel was stopped: too big"])  # fmt: skip
    crashed = _harvest_failure(CellOutcome("died", "segfault"), 7)
    assert crashed[0] == "error" and "kernel crashed" in crashed[2][0]


def test_a_solution_cell_that_hung_or_crashed_decides_the_verdict():
    outcomes = [CellOutcome("ok"), CellOutcome("timeout", "180 s"), CellOutcome("died", "x")]
    assert _solution_cell_failure(outcomes, [0]) is None
    assert _solution_cell_failure(outcomes, [1])[0] == "timeout"
    assert (
        "solution cell itself did not finish (180 s)" in _solution_cell_failure(outcomes, [1])[2][0]
    )
    assert (
        "kernel crashed while your solution cell ran" in _solution_cell_failure(outcomes, [2])[2][0]
    )


def _plan(*roles):
    return SimpleNamespace(roles=list(roles))


EX = get_exercise("00.1")
ROLES = (("course", None), ("solution", "00.1"), ("harvest", "00.1"))


def test_a_passed_exercise_still_names_the_exception_its_cell_raised():
    outcomes = [CellOutcome("ok"), CellOutcome("error", "NameError: q"), CellOutcome("ok")]
    verdicts = {"00.1": Verdict("00.1", 1, 1, "passed", ["✓ all"])}
    status, points, feedback = _verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert (status, points) == ("passed", 1)
    assert feedback[0].startswith("your solution cell raised NameError: q: the function")


def test_a_raising_cell_whose_function_failed_is_an_error():
    outcomes = [CellOutcome("ok"), CellOutcome("error", "NameError: q"), CellOutcome("ok")]
    verdicts = {"00.1": Verdict("00.1", 0, 1, "failed", ["✗ a case"])}
    got = _verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert got == ("error", 0, ["your solution cell raised NameError: q", "✗ a case"])


def test_a_check_that_never_ran_is_an_error_saying_why():
    outcomes = [
        CellOutcome("ok"),
        CellOutcome("ok"),
        CellOutcome("skipped", "reached its time limit"),
    ]
    assert _verdict_for(EX, _plan(*ROLES), outcomes, {}, 10) == (
        "timeout",
        0,
        ["your function was never checked: reached its time limit"],
    )
    outcomes[2] = CellOutcome("ok")
    status, _, feedback = _verdict_for(EX, _plan(*ROLES), outcomes, {}, 10)
    assert status == "error" and "the check of this exercise did not run" in feedback[0]


def test_sys_exit_in_the_function_is_named():
    outcomes = [CellOutcome("ok"), CellOutcome("ok"), CellOutcome("error", "SystemExit: 3")]
    verdicts = {"00.1": Verdict("00.1", 0, 1, "error", ["no results"])}
    status, _, feedback = _verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert status == "error" and "must return its result, not call sys.exit()" in feedback[0]


def test_an_untouched_placeholder_is_missing_and_says_so():
    outcomes = [CellOutcome("ok")] * 3
    verdicts = {"00.1": Verdict("00.1", 0, 1, "missing", ["not implemented", "case: not implemented yet", "other"])}  # fmt: skip
    status, _, feedback = _verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert status == "missing" and feedback[1:] == ["other"]
    assert "`softmax` still raises NotImplementedError" in feedback[0]


def test_failing_course_cells_are_noted_once_per_kind():
    roles = [("course", None), ("solution", "00.1"), *[("course", None)] * 13]
    outcomes = [CellOutcome("error", "boom"), CellOutcome("ok")]
    outcomes += [CellOutcome("timeout", "10 s")] * 2 + [CellOutcome("ok")]
    outcomes += [CellOutcome("error", f"E{i}") for i in range(10)]
    notes = _course_cell_notes(_plan(*roles), outcomes)
    assert len(notes) == 10  # at most ten kinds
    assert notes[0].startswith("a course cell failed while grading (error: boom)")
    assert "does your code replace a name the course's cells use" in notes[1]
    assert notes[1].endswith("(2 cells)")


def test_the_grading_process_out_of_memory_names_its_limit():
    assert "more than the 1.5 GB of memory" in _over_memory(
        {"grader_limits": {"data_bytes": 1.5 * 2**30}}
    )


# --------------------------------------------------------------------------- grade(): triage


def _job(tmp_path, data: bytes, name: str = "00_setup.ipynb", **kw) -> dict:
    return {
        "root": str(ROOT),
        "submission": f"class/{name}",
        "name": name,
        "notebook_b64": base64.b64encode(data).decode(),
        "scratch": str(tmp_path / "scratch"),
        "seed": 11,
        "cell_timeout": 10,
        "timeout": 60,
        "output_limit": 0,
        "threads": 1,
        **kw,
    }


def test_triage_decides_a_blank_notebook_without_a_kernel(tmp_path, course):
    said = []
    data = (ROOT / "exercises" / "00_setup.ipynb").read_bytes()
    res = grade(_job(tmp_path, data), said.append, course=course, kernel=False)
    assert said == [{"assignment": "00_setup"}]
    assert res["assignment"] == "00_setup" and res["seconds"] >= 0
    assert [(r["exercise"], r["status"]) for r in res["rows"]] == [("00.1", "missing")]
    assert "not implemented yet" in res["rows"][0]["feedback"][-1]
    assert "which its metadata names" in res["flags"]["*"][0]  # nothing said which it is


def test_triage_leaves_a_started_exercise_to_a_kernel(tmp_path, course):
    data = with_solutions({"00.1": NAIVE})
    assert grade(_job(tmp_path, data), course=course, kernel=False) is None


def test_an_unreadable_file_is_an_error_per_exercise_of_its_named_assignment(tmp_path, course):
    res = grade(_job(tmp_path, b'{"cells": ['), course=course, kernel=False)
    assert res["assignment"] == "00_setup"
    assert [r["status"] for r in res["rows"]] == ["error"]
    assert "invalid JSON at line 1" in res["rows"][0]["feedback"][0]


def test_an_unknown_assignment_is_one_error_row(tmp_path, course):
    nb = notebook()
    nb["metadata"].pop("course")
    for c in nb["cells"]:
        c["metadata"].pop("course", None)
        c["metadata"].pop("nbgrader", None)
    res = grade(_job(tmp_path, dump(nb), name="homework.ipynb"), course=course, kernel=False)
    (r,) = res["rows"]
    assert (r["assignment"], r["exercise"], r["status"]) == ("", "", "error")
    assert "unknown assignment" in r["feedback"][0] and "homework.ipynb" in r["feedback"][0]


def test_a_notebook_handed_in_for_another_assignment_is_graded_as_expected_and_flagged(
    tmp_path, course
):
    data = (ROOT / "exercises" / "00_setup.ipynb").read_bytes()  # its metadata: 00_setup
    job = _job(tmp_path, data, expected="02_qkv_attention", expected_from="its folder")
    res = grade(job, course=course, kernel=False)
    assert res["assignment"] == "02_qkv_attention"
    assert {r["exercise"] for r in res["rows"]} == set(course.exercises["02_qkv_attention"])
    assert res["flags"]["*"][0].startswith("handed in as 02_qkv_attention (its folder), but")
    assert any("hand in the right one" in n for n in res["notes"])


# --------------------------------------------------------------------------- grade(): a kernel's work


def _stand_in_kernel(fn):
    """An ``execute`` that runs no kernel: every harvest cell records ``fn``'s outputs on
    the grader's inputs (as the harvest cell does in a kernel), every other cell is ok."""

    def execute(nb, roles, place, *, cell_timeout, total_timeout, on_kernel, on_cell):
        on_kernel(4242)
        outcomes = []
        for i, (role, ex_id) in enumerate(roles):
            if role == "harvest":
                harvest(ex_id, fn, place.inputs / f"{ex_id}.pkl", place.box / f"results-{ex_id}")
            outcomes.append(CellOutcome("ok"))
            on_cell(i, outcomes[-1])
        return outcomes

    return execute


def _naive(x):  # right on small scores, NaN on the hidden large ones
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("partial", [False, True])
def test_partial_credit_flows_from_the_job_to_the_verdict(tmp_path, course, monkeypatch, partial):
    """``--partial`` (the job's ``partial``) changes the score of the same recorded outputs:
    all or nothing without it, the share of the drawn cases passed with it."""
    monkeypatch.setattr(run_module, "execute", _stand_in_kernel(_naive))
    said = []
    job = _job(tmp_path, with_solutions({"00.1": NAIVE}), partial=partial)
    res = grade(job, said.append, course=course)
    (r,) = res["rows"]
    assert r["status"] == "failed" and r["max_points"] == 1
    assert {"kernel_pid": 4242} in said
    if partial:
        assert 0 < r["points"] < 1 and any(f.startswith("partial credit:") for f in r["feedback"])
        earned = [p["earned"] for p in said if "earned" in p]  # reported as soon as scored
        assert [e["points"] for e in earned] == [r["points"]]
    else:
        assert r["points"] == 0 and not any("earned" in p for p in said)
    assert not (tmp_path / "scratch" / "box" / "results-00.1").exists()  # deleted once read


def test_a_correct_function_passes_and_its_outputs_are_scored_here(tmp_path, course, monkeypatch):
    monkeypatch.setattr(run_module, "execute", _stand_in_kernel(EX.reference))
    res = grade(_job(tmp_path, with_solutions({"00.1": NAIVE})), course=course)
    assert [(r["status"], r["points"]) for r in res["rows"]] == [("passed", 1)]


def test_a_failure_of_the_kernels_machinery_keeps_what_was_scored(tmp_path, course, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel spec")

    monkeypatch.setattr(run_module, "execute", broken)
    res = grade(_job(tmp_path, with_solutions({"00.1": NAIVE})), course=course)
    assert res["notes"][-1].startswith("grading stopped early: RuntimeError: no kernel spec")
    assert [r["status"] for r in res["rows"]] == ["error"]
