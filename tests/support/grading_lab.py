"""Helpers shared by the grader's tests: notebooks with a given solution, a grading run
read back, and whether this machine has the sandbox.

(A module of tests/, which pytest puts on sys.path; not a test file itself.)
"""

from __future__ import annotations

import copy
import csv
import json
import os
import time
from pathlib import Path

import pytest

from course_tools.grading import cli
from course_tools.grading.report import feedback_path
from course_tools.grading.sandbox import Sandbox, SandboxUnavailable

ROOT = Path(__file__).resolve().parents[2]
SEED = 20240611


def sandbox_problem() -> str | None:
    """Why kernels cannot be sandboxed here (None when they can)."""
    try:
        Sandbox.find()
    except SandboxUnavailable as err:
        return str(err)
    return None


def require_sandbox() -> None:
    """Skip (or, where CI demands the sandbox with COURSE_REQUIRE_SANDBOX=1, fail) a test
    whose attacks must only ever run inside it."""
    problem = sandbox_problem()
    if problem is None:
        return
    if os.environ.get("COURSE_REQUIRE_SANDBOX"):
        pytest.fail(f"COURSE_REQUIRE_SANDBOX is set but: {problem}")
    pytest.skip(f"no sandbox on this machine ({problem}); CI installs bubblewrap")


def sandbox_flags() -> list[str]:
    """Run the sandbox when there is one; else (a laptop without bubblewrap) the runs whose
    submissions harm nothing outside their kernel go on without it."""
    if sandbox_problem() is None:
        return []
    if os.environ.get("COURSE_REQUIRE_SANDBOX"):
        pytest.fail(f"COURSE_REQUIRE_SANDBOX is set but: {sandbox_problem()}")
    return ["--unsafe-no-sandbox"]


def harvested(ex_id: str, fn, seed: int, out_dir: Path, fingerprint: str = "") -> list:
    """What the grader and a harvest cell do together, in this process: the grader writes
    the inputs of its cases, the "kernel" runs ``fn`` on them; the grader's own cases."""
    from course_tools.grading.cases import grader_cases
    from course_tools.grading.harvest import harvest, write_inputs

    cases = grader_cases(ex_id, seed, fingerprint)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_inputs(cases, out / "inputs.pkl", ex_id)
    harvest(ex_id, fn, out / "inputs.pkl", out)
    return cases


def notebook(assignment: str = "00_setup", which: str = "solutions") -> dict:
    return json.loads((ROOT / which / f"{assignment}.ipynb").read_text(encoding="utf-8"))


def cell(nb: dict, role: str, ex: str) -> dict:
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("course", {})
        if meta.get("exercise") == ex and meta.get("role") == role:
            return c
    raise KeyError((role, ex))


def source(c: dict) -> str:
    s = c["source"]
    return "".join(s) if isinstance(s, list) else s


def dump(nb: dict) -> bytes:
    return (json.dumps(nb, indent=1) + "\n").encode()


def with_solutions(sources: dict[str, str], assignment: str = "00_setup") -> bytes:
    """The course's solved notebook with some solution cells replaced."""
    nb = notebook(assignment)
    for ex, src in sources.items():
        cell(nb, "solution", ex)["source"] = src
    return dump(nb)


def grade(inputs: list[Path], out: Path, *extra: str, integrity: bool = False) -> dict:
    """Run course-grade in this process; the gradebook, feedback folder and timing."""
    flags = [] if integrity else ["--no-integrity-check"]
    if "--unsafe-no-sandbox" not in extra:
        flags += sandbox_flags()
    t0 = time.monotonic()
    code = cli.main(
        [*map(str, inputs), "--out", str(out), "--seed", str(SEED), "--quiet", *flags, *extra]
    )
    secs = time.monotonic() - t0
    return read_run(out, code=code, seconds=secs)


def read_run(out: Path, **extra) -> dict:
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    results = {}
    if (out / "results.jsonl").exists():
        for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                results[r["submission"]] = r
    return {
        "rows": rows,
        "out": out,
        "csv": (out / "grades.csv").read_text(encoding="utf-8"),
        "results": results,
        **extra,
    }


def row(run: dict, submission: str, exercise: str = "00.1") -> dict:
    hits = [r for r in run["rows"] if r["submission"] == submission and r["exercise"] == exercise]
    assert len(hits) == 1, (submission, exercise, run["csv"])
    return hits[0]


def rows_of(run: dict, submission: str) -> list[dict]:
    return [r for r in run["rows"] if r["submission"] == submission]


def feedback_file(run: dict, submission: str) -> Path:
    """The submission's feedback file, as grades.csv names it (its `feedback` column)."""
    with open(run["out"] / "grades.csv", newline="", encoding="utf-8") as f:
        named = {r["feedback"] for r in csv.DictReader(f) if r["submission"] == submission}
    assert len(named) <= 1, (submission, named)
    if named:
        return run["out"] / named.pop()
    return feedback_path(run["out"], submission)


def feedback(run: dict, submission: str) -> str:
    return feedback_file(run, submission).read_text(encoding="utf-8")


def blames_the_grader(text: str) -> bool:
    """Feedback that puts the fault on the grader rather than on the submission."""
    return "internal grader error" in text or "could not start a grading process" in text


def notebook_v3(source: str) -> bytes:
    """A notebook in the old nbformat 3 layout: an import cell, then ``source``."""
    nb = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {"name": ""},
        "worksheets": [
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "input": "import numpy as np",
                        "language": "python",
                        "outputs": [],
                        "metadata": {},
                        "collapsed": False,
                    },
                    {
                        "cell_type": "code",
                        "input": source,
                        "language": "python",
                        "outputs": [],
                        "metadata": {},
                        "collapsed": False,
                    },
                ],
                "metadata": {},
            }
        ],
    }
    return dump(nb)


def strip_course_metadata(nb: dict) -> dict:
    """``nb`` without the course's and nbgrader's cell metadata (a notebook from elsewhere)."""
    nb = copy.deepcopy(nb)
    nb["metadata"].pop("course", None)
    for c in nb["cells"]:
        c.get("metadata", {}).pop("course", None)
        c.get("metadata", {}).pop("nbgrader", None)
    return nb


def readable_tree(folder: Path) -> dict[str, bytes]:
    """Every file a run leaves for people to read, by path (not the run's own records)."""
    skip = {"run.json", "results.jsonl", "grading.log", ".grader-seed"}
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in skip
    }
