"""course_tools/grading/pool.py: grading a class. The triage in the grader's process, the
job a worker reads, its signed messages read back (forgeries counted, never trusted), what
is kept when a worker dies, the progress bar, and the reaper of stray processes. One test
starts a real worker process, on a submission that needs no kernel."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from scripts import ROOT

from course_tools.grading.collect import Submission
from course_tools.grading.identity import Course
from course_tools.grading.options import build_parser
from course_tools.grading.pool import Grader, Progress, Reaper, _Heard, _worker_env, signed_lines
from course_tools.grading.protocol import sign
from course_tools.grading.sandbox import Limits, Sandbox

KEY = b"k" * 32
BLANK = (ROOT / "exercises" / "00_setup.ipynb").read_bytes()


class _NoReaper:
    def sweep(self, keep):
        return 0


@pytest.fixture(scope="module")
def course() -> Course:
    return Course.load(ROOT, check=False)


def _grader(tmp_path, course, *flags, **kw) -> Grader:
    args = build_parser().parse_args(["x", "--out", str(tmp_path), "--no-integrity-check", *flags])
    return Grader(ROOT, course, 7, args, tmp_path / "scratch", tmp_path, 1, _NoReaper(), **kw)


# --------------------------------------------------------------------------- triage


def test_an_unreadable_submission_is_an_error_without_a_worker(tmp_path, course):
    grader = _grader(tmp_path, course)
    sub = Submission(
        "class/00_setup.ipynb", "00_setup.ipynb", None, "could not read the file: gone"
    )
    res = grader.grade(0, sub)
    assert res["assignment"] == "00_setup"
    assert [(r["status"], r["feedback"]) for r in res["rows"]] == [
        ("error", ["could not read the file: gone"])
    ]
    log = (tmp_path / "grading.log").read_text()
    assert " start class/00_setup.ipynb" in log and " done  class/00_setup.ipynb error:1" in log


def test_a_blank_notebook_is_decided_by_its_worker_without_a_kernel(tmp_path, course):
    res = _grader(tmp_path, course).grade(
        0, Submission("s/00_setup.ipynb", "00_setup.ipynb", BLANK)
    )
    # read and planned in the worker (under its limits), which needed no kernel for it
    assert [r["status"] for r in res["rows"]] == ["missing"] and "seconds" in res
    assert not list((tmp_path / "scratch").glob("s*"))  # its scratch folder is gone


def test_a_link_to_the_courses_own_solution_is_not_graded(tmp_path, course):
    link = str(ROOT / "solutions" / "00_setup.ipynb")
    sub = Submission("s/00_setup.ipynb", "00_setup.ipynb", b"{}", link=link)
    (r,) = _grader(tmp_path, course).grade(0, sub)["rows"]
    assert (
        r["status"] == "error" and "symbolic link to the course's own solutions" in r["feedback"][0]
    )


def test_after_an_interruption_nothing_more_is_graded(tmp_path, course):
    grader = _grader(tmp_path, course)
    grader.kill_all()  # Ctrl-C: no worker running, none started after
    (r,) = grader.grade(0, Submission("s/00_setup.ipynb", "00_setup.ipynb", BLANK))["rows"]
    assert r["feedback"] == ["not graded: grading was interrupted"]


def test_past_the_time_cap_a_submission_waits_for_another_run(tmp_path, course):
    grader = _grader(tmp_path, course, "--max-time", "1")
    grader.deadline = time.monotonic() - 1
    (r,) = grader.grade(0, Submission("s/00_setup.ipynb", "00_setup.ipynb", BLANK))["rows"]
    assert "reached its time cap (--max-time 1 s)" in r["feedback"][0]
    assert grader.out_of_time == 1


def test_once_the_course_changed_no_submission_is_graded(tmp_path, course):
    grader = _grader(tmp_path, course)
    grader.tainted = "solutions/00_setup.ipynb"
    (r,) = grader.grade(0, Submission("s/00_setup.ipynb", "00_setup.ipynb", BLANK))["rows"]
    assert "were modified during this grading run (solutions/00_setup.ipynb)" in r["feedback"][0]


def test_the_expected_assignment_comes_from_the_option_the_folder_or_the_name(tmp_path, course):
    grader = _grader(tmp_path, course)
    expected = grader._expected
    assert expected(Submission("02_qkv_attention/bob.ipynb", "bob.ipynb")) == {
        "expected": "02_qkv_attention",
        "expected_from": "its folder",
    }
    assert expected(Submission("bob/00_setup.ipynb", "00_setup.ipynb"))["expected_from"] == (
        "its file name"
    )
    assert expected(Submission("bob/homework.ipynb", "homework.ipynb")) == {}
    chosen = _grader(tmp_path, course, "--assignment", "00_setup")._expected
    assert chosen(Submission("bob/x.ipynb", "x.ipynb"))["expected_from"] == "--assignment"


# --------------------------------------------------------------------------- the worker's job


def test_the_workers_job_carries_its_key_limits_and_sandbox(tmp_path, course):
    sandbox = Sandbox("/usr/bin/bwrap", user_namespace=False, version=(0, 9, 0))
    limits = Limits(memory=2**30, cpus=2.0, pids=99, cpu_seconds=60)
    grader = _grader(tmp_path, course, "--grader-memory", "0.5", "--timeout", "30",
                     sandbox=sandbox, limits=limits)  # fmt: skip
    job = grader._job(Submission("s/00_setup.ipynb", "00_setup.ipynb"), b"{}", tmp_path / "w")
    job = grader._worker_job(3, job, KEY)
    assert job["key"] == KEY.hex() and job["manifest"] is None  # --no-integrity-check
    assert job["grader_limits"] == {"data_bytes": 2**29, "cpu_seconds": 150}
    assert job["sandbox"] == {"bwrap": "/usr/bin/bwrap", "user_namespace": False,
                              "version": [0, 9, 0]}  # fmt: skip
    assert job["limits"]["memory"] == 2**30 and job["limits"]["pids"] == 99
    assert job["limits"]["cgroup"] is None
    assert job["scratch"] == str(tmp_path / "w") and job["notebook_b64"] == "e30="


def test_a_worker_finds_only_the_environments_own_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", "/somewhere/else")
    env = _worker_env(tmp_path)
    assert "JUPYTER_PATH" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["JUPYTER_DATA_DIR"] == str(tmp_path / "jupyter-data")


# --------------------------------------------------------------------------- the channel


class _Done:
    """A worker that has exited (poll() says so)."""

    returncode = 0

    def poll(self):
        return 0

    def kill(self):
        pass


def test_signed_lines_are_read_and_forgeries_counted_as_none():
    r, w = os.pipe()
    os.write(w, sign(KEY, {"a": 1}) + b"0" * 64 + b' {"result": {}}\n' + sign(KEY, {"b": 2}))
    os.close(w)
    assert list(signed_lines(r, _Done(), KEY)) == [{"a": 1}, None, {"b": 2}]


def test_a_process_holding_the_pipe_cannot_keep_the_grader_waiting():
    """Reading stops once the worker has exited and nothing waits, not only at end of
    file (here the write end is never closed: a learner's process could hold it)."""
    r, w = os.pipe()
    os.write(w, sign(KEY, {"result": {"x": 1}}))
    try:
        assert list(signed_lines(r, _Done(), KEY)) == [{"result": {"x": 1}}]
    finally:
        os.close(w)


def test_what_a_worker_says_is_heard_by_kind():
    r, w = os.pipe()
    for payload in (
        {"kernel_pid": 123},
        {"assignment": "00_setup"},
        {"earned": {"exercise": "00.1", "points": 1}},
        {"fatal": "internal grader error"},
        {"result": {"submission": "s"}},
    ):
        os.write(w, sign(KEY, payload))
    os.write(w, b"forged line\n")
    os.close(w)
    proc = SimpleNamespace(stdin=io.BytesIO(), poll=lambda: 0, kill=lambda: None)
    proc.stdin.close = lambda: None  # (keep what was written readable)
    heard, kernels = _Heard(), []
    heard.listen(proc, r, {"job": 1}, KEY, kernels, __import__("threading").Lock())
    assert proc.stdin.getvalue() == b'{"job": 1}'  # the job, written to the worker's stdin
    assert kernels == [123] and heard.assignment == "00_setup"
    assert heard.earned == {"00.1": {"exercise": "00.1", "points": 1}}
    assert heard.fatal == "internal grader error" and heard.result == {"submission": "s"}
    assert heard.forged == 1


def test_a_worker_that_sent_no_result_keeps_what_it_earned(tmp_path, course):
    grader = _grader(tmp_path, course, "--timeout", "10")
    sub = Submission("s/00_setup.ipynb", "00_setup.ipynb")
    heard = _Heard()
    heard.earned["00.1"] = {"exercise": "00.1", "points": 1, "status": "passed"}
    res = grader._failed(sub, SimpleNamespace(returncode=-9), heard, tmp_path)
    assert res["rows"] == [heard.earned["00.1"]]
    heard.earned.clear()
    (r,) = grader._failed(sub, SimpleNamespace(returncode=-9), heard, tmp_path)["rows"]
    assert "stopped the grading process (exit code -9)" in r["feedback"][0]
    (r,) = grader._failed(sub, SimpleNamespace(returncode=-signal.SIGXCPU), heard, tmp_path)["rows"]
    assert "more than the 130 s of CPU time the grader spends" in r["feedback"][0]
    heard.fatal = "the course's files changed since grading started: x"
    (r,) = grader._failed(sub, SimpleNamespace(returncode=3), heard, tmp_path)["rows"]
    assert r["feedback"] == [heard.fatal]


def test_a_real_worker_process_answers_on_its_signed_channel(tmp_path, course):
    """The worker process itself (``python -m course_tools.grading.worker FD``), on a
    notebook it decides without a kernel: its result comes back, its folder goes."""
    grader = _grader(tmp_path, course)
    sub = Submission("s/00_setup.ipynb", "00_setup.ipynb", BLANK)
    job = grader._job(sub, BLANK, tmp_path / "scratch" / "s000000")
    res = grader._run_worker(0, sub, job)
    assert res["submission"] == "s/00_setup.ipynb" and res["assignment"] == "00_setup"
    assert [r["status"] for r in res["rows"]] == ["missing"]
    assert "forged" not in str(res.get("flags")) and not (tmp_path / "scratch" / "s000000").exists()
    assert grader.live == {}


# --------------------------------------------------------------------------- progress


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_is_a_line_per_submission_off_a_terminal():
    stream = _Stream(tty=False)
    bar = Progress(2, stream=stream)
    bar.step("class/alice.ipynb")
    bar.step("class/bob.ipynb")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[" + "█" * 15 + "·" * 15 + "] 1/2")
    assert lines[1].endswith("class/bob.ipynb") and "] 2/2" in lines[1]


def test_progress_on_a_terminal_redraws_one_line_and_quiet_says_nothing():
    stream = _Stream(tty=True)
    bar = Progress(1, stream=stream)
    bar.step("x")
    assert stream.getvalue().startswith("\r[") and stream.getvalue().endswith("\n")
    quiet = _Stream(tty=False)
    bar = Progress(3, stream=quiet, quiet=True)
    bar.step("x")
    assert quiet.getvalue() == "" and bar.done == 1


# --------------------------------------------------------------------------- the reaper


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreaper: Linux")
def test_the_reaper_stops_children_it_was_not_asked_to_keep():
    reaper = Reaper()
    stray = subprocess.Popen(["sleep", "60"])
    kept = subprocess.Popen(["sleep", "60"])
    try:
        assert reaper.enabled
        assert {stray.pid, kept.pid} <= set(reaper.children())
        assert reaper.sweep({kept.pid}) == 1
        assert stray.pid not in reaper.children() and kept.pid in reaper.children()
    finally:
        for proc in (stray, kept):
            proc.kill()
            proc.wait()
        reaper.close()
    assert not reaper.enabled and reaper.children() == []
