"""course_tools/grading/scoring.py: the verdict the grader draws, in its own process, from
the outputs a harvest cell recorded (round trips: harvest then score, claims ignored, partial
credit, placeholders, the mistakes named), the recorded files read safely (FIFOs, links,
compressed bombs, bounded folders), and the verdicts drawn from a kernel's cell outcomes. No
kernel starts here: the harvest runs in this process."""

from __future__ import annotations

import json
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
from grading_lab import harvested

from course_lib.checks import CheckFailed, check
from course_lib.checks.ch00 import softmax_reference
from course_lib.checks.core import get_exercise
from course_tools.grading import scoring
from course_tools.grading.cases import grader_cases
from course_tools.grading.run import CellOutcome
from course_tools.grading.scoring import (
    Verdict,
    _harvest_failure,
    _solution_cell_failure,
    results_problem,
    score,
    verdict_for,
)


def softmax_ok(x):
    return softmax_reference(x)


# --------------------------------------------------------------------------- harvest, then score


def test_harvest_then_score_passes_a_correct_function(tmp_path):
    cases = harvested("00.1", softmax_ok, 99, tmp_path)
    verdict = score("00.1", cases, tmp_path)
    assert verdict.status == "passed" and verdict.points == verdict.max_points == 1


def test_score_judges_in_its_own_process_and_ignores_claims(tmp_path):
    def wrong(x):
        return np.zeros_like(x)

    cases = harvested("00.1", wrong, 5, tmp_path)
    # A tampered record that claims success changes nothing: score recomputes everything.
    rec = json.loads((tmp_path / "00.1.json").read_text())
    rec["status"] = "passed"
    (tmp_path / "00.1.json").write_text(json.dumps(rec))
    verdict = score("00.1", cases, tmp_path)
    assert verdict.status == "failed" and verdict.points == 0


def test_outputs_recorded_for_other_inputs_fail(tmp_path):
    harvested("00.1", softmax_ok, 1, tmp_path)
    assert score("00.1", grader_cases("00.1", 2), tmp_path).status == "failed"


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
def test_partial_credit_is_the_share_of_cases_passed(tmp_path):
    def naive(x):  # right on small scores, NaN on the hidden large ones
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)

    cases = harvested("00.1", naive, 5, tmp_path)
    whole = score("00.1", cases, tmp_path)
    part = score("00.1", cases, tmp_path, partial=True)
    ok = [line.startswith("✓") for line in part.feedback[: len(cases)]]
    assert whole.points == 0 and whole.status == part.status == "failed"
    assert 0 < sum(ok) < len(cases)
    # the drawn cases' share times the declared written-out cases' share
    drawn = [k for k, c in zip(ok, cases) if not c.fixed]
    written = [k for k, c in zip(ok, cases) if c.fixed]
    assert drawn and written  # 00.1 declares both kinds
    share = sum(drawn) / len(drawn) * sum(written) / len(written)
    assert part.points == round(part.max_points * share, 2)


def test_missing_and_not_implemented_and_never_ran(tmp_path):
    cases = harvested("00.1", None, 3, tmp_path / "a")
    assert score("00.1", cases, tmp_path / "a").status == "missing"

    def softmax(x):
        raise NotImplementedError("Exercise 00.1 is not implemented yet: replace this line")

    harvested("00.1", softmax, 3, tmp_path / "b")
    assert score("00.1", cases, tmp_path / "b").status == "missing"
    assert score("00.1", cases, tmp_path / "c").status == "error"


def test_nbgraders_placeholder_counts_as_not_started(tmp_path):
    def softmax(x):  # what nbgrader's release writes in a solution region
        # YOUR CODE HERE
        raise NotImplementedError()

    cases = harvested("00.1", softmax, 3, tmp_path)
    assert score("00.1", cases, tmp_path).status == "missing"
    report = check("00.1", softmax)
    assert report.not_implemented and not report.passed

    def torch_style(x):  # a real NotImplementedError, with a message: the learner's bug
        raise NotImplementedError("max() is not implemented for complex tensors")

    harvested("00.1", torch_style, 3, tmp_path / "t")
    assert score("00.1", cases, tmp_path / "t").status == "failed"


def test_under_nbgrader_an_unstarted_check_fails(monkeypatch):
    def softmax(x):
        raise NotImplementedError("Exercise 00.1 is not implemented yet: replace this line")

    assert check("00.1", softmax).not_implemented  # a note for the learner, no error
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")  # nbgrader validate sets it
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check("00.1", softmax)


def test_sys_exit_in_learner_code_fails_the_case_only(tmp_path):
    import sys

    def softmax(x):
        sys.exit(3)

    with pytest.raises(CheckFailed, match=r"sys.exit\(3\)"):
        check("00.1", softmax)
    cases = harvested("00.1", softmax, 4, tmp_path)
    assert score("00.1", cases, tmp_path).status == "failed"


def test_the_grader_fails_an_answer_that_changes_its_input_as_the_check_does(tmp_path):
    """11.4 keeps its inputs: a mean ablation written into `out` gives the right values and
    passes a grader that compares outputs only; the grader records the change in the kernel
    and fails it with the check's words, as the notebook's check does."""
    from course_lib.gpt.transparent import mean_ablate

    def in_place(out, heads):
        for h in heads:
            out[:, h] = out[:, h].mean(dim=(0, 1), keepdim=True)
        return out

    with pytest.raises(CheckFailed, match="changed"):
        check("11.4", in_place, quiet=True)
    cases = harvested("11.4", in_place, 3, tmp_path)
    verdict = score("11.4", cases, tmp_path)
    assert verdict.status == "failed" and verdict.points == 0
    assert any("changed its argument `out`" in line for line in verdict.feedback)
    cases = harvested("11.4", mean_ablate, 3, tmp_path / "copy")
    assert score("11.4", cases, tmp_path / "copy").status == "passed"


def test_a_named_mistake_is_recorded_by_its_key_and_the_report_names_it(tmp_path):
    """The gradebook's diagnoses are keys the checks set, never text re-read from feedback;
    the class report turns a key back into the mistake's nudge."""
    from course_tools.grading import class_report

    def wrong_axis(x):
        return softmax_reference(x, axis=0, shift=False)  # the 00.1/axis-0 slip, as a learner

    cases = harvested("00.1", wrong_axis, 7, tmp_path)
    verdict = score("00.1", cases, tmp_path)
    assert verdict.status == "failed" and verdict.diagnoses
    # one key per failed case; on huge scores the same slip also overflows, named as such
    assert "00.1/axis-0" in verdict.diagnoses, verdict.diagnoses
    assert set(verdict.diagnoses) <= {"00.1/axis-0", "00.1/overflow"}, verdict.diagnoses
    named = class_report.mistake_name("00.1", class_report._GRADER + "00.1/axis-0")
    assert named == "you normalised over the wrong axis (axis 0, down the columns).", named
    # a learner's own text that looks like a key is not a diagnosis
    assert class_report.mistake_name("00.1", "00.1/axis-0") is None


# --------------------------------------------------------------------------- recorded outputs


def test_a_planted_fifo_is_refused_not_read(tmp_path):
    import os

    cases = harvested("00.1", softmax_ok, 8, tmp_path)
    (tmp_path / "00.1.npz").unlink()
    os.mkfifo(tmp_path / "00.1.npz")
    verdict = score("00.1", cases, tmp_path)
    assert verdict.status == "error" and "not a regular file" in verdict.feedback[0]


def test_a_fifo_swapped_in_after_a_look_cannot_stall_the_grader(tmp_path, monkeypatch):
    """No look-then-open window (#45, item 6): the files are opened without blocking and
    without following links, then checked through that descriptor. Here the path-based
    looks would be lied to (a FIFO reported as a file) and must not be used at all."""
    import os
    import stat as stat_module

    cases = harvested("00.1", softmax_ok, 8, tmp_path)
    regular = os.stat(tmp_path / "00.1.json")
    (tmp_path / "00.1.npz").unlink()
    os.mkfifo(tmp_path / "00.1.npz")
    assert stat_module.S_ISFIFO(os.lstat(tmp_path / "00.1.npz").st_mode)
    monkeypatch.setattr(os, "lstat", lambda *a, **k: regular)  # what a racing look would see
    monkeypatch.setattr(os, "stat", lambda *a, **k: regular)
    verdict = score("00.1", cases, tmp_path)  # returns at once: the FIFO is never read
    assert verdict.status == "error" and "not a regular file" in verdict.feedback[0]
    monkeypatch.undo()
    link = tmp_path / "00.1.json"
    target = tmp_path / "elsewhere.json"
    link.rename(target)
    link.symlink_to(target)  # a link to a file the kernel wrote elsewhere
    assert "not a regular file" in score("00.1", cases, tmp_path).feedback[0]


def test_a_compressed_bomb_is_refused_before_it_is_unpacked(tmp_path, monkeypatch):
    cases = harvested("00.1", softmax_ok, 8, tmp_path)
    npz = tmp_path / "00.1.npz"
    np.savez_compressed(npz, c0=np.zeros(2**20))  # 8 MiB of zeros, a few KiB on disk
    monkeypatch.setattr(scoring, "MAX_RESULT_BYTES", 2**20)  # the real limit is 256 MiB
    assert npz.stat().st_size < 2**20
    verdict = score("00.1", cases, tmp_path)
    assert verdict.status == "error" and "unpacks to" in verdict.feedback[0]


def test_recorded_outputs_are_bounded_by_what_they_unpack_to(tmp_path, monkeypatch):
    monkeypatch.setattr(scoring, "MAX_RESULT_BYTES", 2**20)
    monkeypatch.setattr(scoring, "MAX_RECORD_BYTES", 2**18)

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
    status, points, feedback = verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert (status, points) == ("passed", 1)
    assert feedback[0].startswith("your solution cell raised NameError: q: the function")


def test_a_raising_cell_whose_function_failed_is_an_error():
    outcomes = [CellOutcome("ok"), CellOutcome("error", "NameError: q"), CellOutcome("ok")]
    verdicts = {"00.1": Verdict("00.1", 0, 1, "failed", ["✗ a case"])}
    got = verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert got == ("error", 0, ["your solution cell raised NameError: q", "✗ a case"])


def test_a_check_that_never_ran_is_an_error_saying_why():
    outcomes = [
        CellOutcome("ok"),
        CellOutcome("ok"),
        CellOutcome("skipped", "reached its time limit"),
    ]
    assert verdict_for(EX, _plan(*ROLES), outcomes, {}, 10) == (
        "timeout",
        0,
        ["your function was never checked: reached its time limit"],
    )
    outcomes[2] = CellOutcome("ok")
    status, _, feedback = verdict_for(EX, _plan(*ROLES), outcomes, {}, 10)
    assert status == "error" and "the check of this exercise did not run" in feedback[0]


def test_sys_exit_in_the_function_is_named():
    outcomes = [CellOutcome("ok"), CellOutcome("ok"), CellOutcome("error", "SystemExit: 3")]
    verdicts = {"00.1": Verdict("00.1", 0, 1, "error", ["no results"])}
    status, _, feedback = verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert status == "error" and "must return its result, not call sys.exit()" in feedback[0]


def test_an_untouched_placeholder_is_missing_and_says_so():
    outcomes = [CellOutcome("ok")] * 3
    verdicts = {"00.1": Verdict("00.1", 0, 1, "missing", ["not implemented", "case: not implemented yet", "other"])}  # fmt: skip
    status, _, feedback = verdict_for(EX, _plan(*ROLES), outcomes, verdicts, 10)
    assert status == "missing" and feedback[1:] == ["other"]
    assert "`softmax` still raises NotImplementedError" in feedback[0]


# --------------------------------------------------------------------------- statement rules


def _torch_softmax(scores, temperature=1.0):
    import torch

    return torch.softmax(scores / temperature, dim=-1)


def test_a_function_that_breaks_a_rule_earns_nothing_even_with_partial_credit(tmp_path):
    """03.2 answered with torch.softmax: right on every case, and no point, partial or not;
    the verdict names the rule and what the kernel saw."""
    ref = get_exercise("03.2").reference
    assert score("03.2", harvested("03.2", ref, 3, tmp_path / "ok"), tmp_path / "ok").points == 1
    cases = harvested("03.2", _torch_softmax, 3, tmp_path / "r")
    for partial in (False, True):
        v = score("03.2", cases, tmp_path / "r", partial=partial)
        assert (v.status, v.points) == ("failed", 0), v
        assert v.broke == ["03.2/no-softmax: it called `softmax`"]
        assert "03.2/no-softmax" in v.diagnoses
        assert any("breaks the statement's rules (03.2/no-softmax)" in f for f in v.feedback)


def test_a_breach_the_kernel_reports_counts_only_as_one_of_the_exercises_rules(tmp_path):
    """The kernel's record is the learner's to forge: a rule the exercise does not have is
    ignored (no learner-chosen key reaches the class report), and a forged real one only
    loses the learner the points."""
    ref = get_exercise("03.2").reference
    cases = harvested("03.2", ref, 3, tmp_path)
    record = json.loads((tmp_path / "03.2.json").read_text())
    record["cases"][0]["broke"] = {"rule": "made-up", "how": "Likely cause: the teacher"}
    (tmp_path / "03.2.json").write_text(json.dumps(record))
    v = score("03.2", cases, tmp_path)
    assert v.status == "passed" and v.broke == [] and v.diagnoses == []
    record["cases"][0]["broke"] = {"rule": "no-softmax", "how": "it called `softmax`"}
    (tmp_path / "03.2.json").write_text(json.dumps(record))
    v = score("03.2", cases, tmp_path, partial=True)
    assert (v.status, v.points, v.diagnoses) == ("failed", 0, ["03.2/no-softmax"])


def test_a_plans_breach_fails_a_passing_verdict(tmp_path):
    ex = get_exercise("03.2")
    plan = SimpleNamespace(roles=[("solution", "03.2"), ("harvest", "03.2")], breaches={})
    outcomes = [CellOutcome("ok", ""), CellOutcome("ok", "")]
    passed = {"03.2": Verdict("03.2", 1, 1, "passed", ["✓ a case"])}
    assert verdict_for(ex, plan, outcomes, passed, 60)[:2] == ("passed", 1)
    plan.breaches = {"03.2": ["`torch.softmax` (line 2)"]}
    status, points, feedback = verdict_for(ex, plan, outcomes, passed, 60)
    assert (status, points) == ("failed", 0)
    assert feedback[0].startswith("no points: the statement forbids what your function uses")
