"""course_tools/grading/worker.py: one submission's grading, from the job to its rows: the
triage that needs no kernel, the verdicts of a kernel's work flowing into the rows, the notes
on failing course cells, and its own memory limit named. No kernel starts here: where a kernel
would run, a stand-in runs the harvest cells in this process (the recorded outputs and the
scoring are the real ones)."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import numpy as np
import pytest
from grading_lab import ROOT, dump, notebook, with_solutions

from course_lib.checks.core import get_exercise
from course_tools.grading import worker
from course_tools.grading.harvest import harvest
from course_tools.grading.identity import Course
from course_tools.grading.run import CellOutcome
from course_tools.grading.worker import _course_cell_notes, _over_memory, grade

NAIVE = """def softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)
"""


@pytest.fixture(scope="module")
def course() -> Course:
    return Course.load(ROOT, check=False)


def _plan(*roles):
    return SimpleNamespace(roles=list(roles))


EX = get_exercise("00.1")


# --------------------------------------------------------------------------- notes and limits


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
    monkeypatch.setattr(worker, "execute", _stand_in_kernel(_naive))
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
    monkeypatch.setattr(worker, "execute", _stand_in_kernel(EX.reference))
    res = grade(_job(tmp_path, with_solutions({"00.1": NAIVE})), course=course)
    assert [(r["status"], r["points"]) for r in res["rows"]] == [("passed", 1)]


def test_a_failure_of_the_kernels_machinery_keeps_what_was_scored(tmp_path, course, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel spec")

    monkeypatch.setattr(worker, "execute", broken)
    res = grade(_job(tmp_path, with_solutions({"00.1": NAIVE})), course=course)
    assert res["notes"][-1].startswith("grading stopped early: RuntimeError: no kernel spec")
    assert [r["status"] for r in res["rows"]] == ["error"]


def test_judging_one_exercise_is_bounded_by_cpu_time_not_by_the_clock():
    """A check slowed by what a learner returned stops at its own bound (JUDGE_CPU_SECONDS in
    the worker); waiting costs no CPU, so a loaded machine cannot trip it."""
    import time

    from course_tools.grading.worker import JudgingTooLong, within_cpu

    with pytest.raises(JudgingTooLong):
        within_cpu(0.2, lambda: sum(i * i for i in range(10**10)))
    assert within_cpu(0.2, lambda: time.sleep(0.5) or "slept") == "slept"
    assert within_cpu(5, lambda: 7) == 7
