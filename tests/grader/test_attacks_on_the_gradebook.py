"""A hostile class, round 4: the gradebook itself (issue 38, items 5 and 6).

A fault while recording one submission is that submission's ``error`` row, with the
cause, and the run completes; feedback file names are unique by construction (a hash of
the whole submission id where making a name safe changed it, never an order a learner
controls), ``grades.csv`` names each learner's file, and a legal 240-character file name
is graded like any other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_lab import ROOT, feedback, feedback_file, grade, require_sandbox, rows_of

from course_tools.grading import report
from course_tools.grading.report import Gradebook, feedback_path, feedback_paths

SOLVED = (ROOT / "solutions" / "00_setup.ipynb").read_bytes()
BLANK = (ROOT / "exercises" / "00_setup.ipynb").read_bytes()
LONG = "x" * (240 - len("00_setup.ipynb")) + "00_setup.ipynb"  # 240 characters


def test_a_sanitised_name_never_takes_a_clean_one(tmp_path):
    """``kim#00_setup`` and ``kim_00_setup`` look alike once made safe: the clean one keeps
    its name, the other gets a hash of its own id, whichever order they come in."""
    clean, odd = "c/kim_00_setup.ipynb", "c/kim#00_setup.ipynb"
    for order in ([clean, odd], [odd, clean]):
        paths = feedback_paths(tmp_path, order)
        assert paths[clean] == tmp_path / "feedback" / "c" / "kim_00_setup.md"
        assert paths[odd].name.startswith("kim_00_setup~") and paths[odd] != paths[clean]
    # the same id always gets the same file, alone or in a class
    assert feedback_path(tmp_path, odd) == feedback_paths(tmp_path, [clean, odd])[odd]


def test_names_differing_in_case_are_all_hashed_whatever_the_order(tmp_path):
    ids = ["s/A.ipynb", "s/a.ipynb"]
    one, two = feedback_paths(tmp_path, ids), feedback_paths(tmp_path, ids[::-1])
    assert one == two
    assert len({str(p).casefold() for p in one.values()}) == 2
    assert all("~" in p.name for p in one.values())


def test_a_folder_never_takes_a_feedback_file_name(tmp_path):
    ids = ["s/x.ipynb", "s/x.md/y.ipynb"]
    paths = feedback_paths(tmp_path, ids)
    file, inside = paths["s/x.ipynb"], paths["s/x.md/y.ipynb"]
    assert file.name == "x.md"
    assert file not in inside.parents and inside.parent.name == "x.md_"


def test_long_names_fit_the_file_system(tmp_path):
    for sub in (f"s/{LONG}", "s/" + "é" * 200 + ".ipynb", "s/" + "d" * 250 + "/a.ipynb"):
        path = feedback_path(tmp_path, sub)
        assert all(len(p.encode()) <= 255 for p in path.relative_to(tmp_path).parts), path
        report.atomic_write(path, "ok\n")  # its temporary name fits too
        assert path.read_text() == "ok\n"


def _result(sub: str, status: str = "passed") -> dict:
    return {
        "submission": sub,
        "assignment": "00_setup",
        "notes": [],
        "flags": {},
        "rows": [
            {
                "submission": sub,
                "assignment": "00_setup",
                "exercise": "00.1",
                "points": 1 if status == "passed" else 0,
                "max_points": 1,
                "status": status,
                "feedback": [],
                "title": "t",
            }
        ],
    }


def test_a_fault_while_recording_is_that_submissions_error(tmp_path, monkeypatch):
    """The disk refuses one learner's feedback file: that learner's row is `error` with
    the cause, the next learner is recorded as usual."""
    ids = ["s/bad.ipynb", "s/good.ipynb"]
    book = Gradebook(tmp_path, {}, ids)
    real = report.atomic_write

    def refuse(path, text):
        if Path(path).name == "bad.md":
            raise OSError(36, "File name too long")
        return real(path, text)

    monkeypatch.setattr(report, "atomic_write", refuse)
    book.add(_result("s/bad.ipynb"))
    book.add(_result("s/good.ipynb"))
    monkeypatch.setattr(report, "atomic_write", real)
    book.finish()
    rows = {r["submission"]: r for r in report.sorted_rows(book.results)}
    assert rows["s/bad.ipynb"]["status"] == "error" and rows["s/bad.ipynb"]["points"] == 0
    assert "File name too long" in rows["s/bad.ipynb"]["feedback"][0]
    assert rows["s/good.ipynb"]["status"] == "passed"
    journal = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["submission"] for r in journal] == ids


@pytest.mark.slow
def test_a_class_of_colliding_and_long_names_is_graded_to_the_end(tmp_path):
    """In the real sandbox: look-alike names, a folder and a file whose feedback paths
    would collide, a 240-character name; every submission gets its rows and its own
    feedback file (named in grades.csv), and run.json says the run completed."""
    require_sandbox()
    subs = tmp_path / "c"
    (subs / "x.md").mkdir(parents=True)
    files = {
        "kim_00_setup.ipynb": SOLVED,  # the honest one, graded in a kernel
        "kim#00_setup.ipynb": BLANK,
        "x.ipynb": BLANK,
        "x.md/00_setup.ipynb": BLANK,
        LONG: BLANK,
    }
    for name, data in files.items():
        (subs / name).write_bytes(data)
    run = grade([subs], tmp_path / "out", "--assignment", "00_setup", "--jobs", "2")
    assert run["code"] == 0, run["csv"]
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert info["complete"] is True and info["graded"] == len(files)
    named = set()
    for name in files:
        sub = f"c/{name}"
        rows = rows_of(run, sub)
        assert len(rows) == 1, (sub, run["csv"])
        path = feedback_file(run, sub)
        assert path.is_file() and path not in named, path
        named.add(path)
        assert name[-40:] in feedback(run, sub)  # the file names its own submission
    honest = rows_of(run, "c/kim_00_setup.ipynb")[0]
    assert (honest["status"], honest["points"]) == ("passed", "1"), run["csv"]
    assert honest["feedback"] == "feedback/c/kim_00_setup.md"
    assert rows_of(run, "c/kim#00_setup.ipynb")[0]["status"] == "missing"


# --------------------------------------------------------------------------- the grader's own limits


def test_the_disk_verdict_does_not_wait_for_the_watcher(tmp_path):
    """The verdict is measured at the end of the cell, not when a watcher thread wakes: a
    watcher that never wakes (here: once an hour) changes nothing."""
    from course_tools.grading.run import _DiskGuard

    box = tmp_path / "box"
    box.mkdir()
    guard = _DiskGuard([box], limit=2**20, pid=None, period=3600)
    try:
        (box / "small.bin").write_bytes(b"\1" * 1000)
        assert guard.check() == ""
        (box / "big.bin").write_bytes(b"\1" * (3 * 2**20))
        assert "more than" in guard.check() and "working folder" in guard.reason
        assert not list(box.iterdir())  # the files were deleted
        assert guard.looks == 2  # both looks were the synchronous ones
    finally:
        guard.stop()


def test_the_grading_process_limits_itself_and_not_its_kernels():
    """--grader-memory: past it, an allocation in the grading process fails (the
    submission's error); the limit is lifted in a kernel's process before it starts."""
    import subprocess
    import sys

    code = """
import numpy as np
from course_tools.grading.sandbox import lift_own_limits
from course_tools.grading.worker import _limit_self
_limit_self({"data_bytes": 400 * 2**20, "cpu_seconds": 600})
try:
    np.ones(2**30, dtype=np.uint8)
    print("allocated")
except MemoryError:
    print("refused")
lift_own_limits()
np.ones(2**30, dtype=np.uint8)
print("lifted")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["refused", "lifted"], out.stderr


def test_an_array_named_many_times_is_read_once(tmp_path, monkeypatch):
    import numpy as np

    from course_lib.checks.core import cases_for
    from course_tools.grading import scoring as results

    cases = list(cases_for("00.1", False, 1))
    np.savez(tmp_path / "00.1.npz", big=np.zeros(1000))
    many = {"seq": "tuple", "items": [{"array": "big"}] * 20}
    record = {"cases": [{"name": c.name, "output": many} for c in cases]}
    (tmp_path / "00.1.json").write_text(json.dumps(record))
    reads = []
    real = results._Loaded.__getitem__

    def counting(self, name):
        if name not in self.cache:
            reads.append(name)
        return real(self, name)

    monkeypatch.setattr(results._Loaded, "__getitem__", counting)
    v = results.score("00.1", cases, tmp_path)
    assert v.status == "failed" and reads == ["big"]
