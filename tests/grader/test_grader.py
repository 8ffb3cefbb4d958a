"""The instructor grader ``course-grade``: full marks, zero, robustness, tampering, parallelism.

The expensive part is running notebooks, so it happens in three session-scoped grading
runs, each over a whole folder (as an instructor would run it), and the tests read the
gradebook and feedback they wrote:

* ``chapters``: every solution notebook in ``solutions/`` and every generated blank one
  in ``exercises/`` (whatever chapters exist when the tests are collected);
* ``adversarial``: one folder of broken, hostile and odd variants of chapter 00, plus a
  zip archive as a learning platform exports it;
* ``serial``: a subset of the same folder graded with ``--jobs 1``, which must give the
  same rows as the parallel run.

Each module's own unit tests (collecting, rebuilding, the report, the worker's channel, the
command line) are in tests/course_tools/grading/, at the module's mirrored path.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import grading_lab
import nbformat
import pytest
from grading_lab import grade as _grade  # the course's grader, in this process
from grading_lab import notebook_v3, sandbox_flags, strip_course_metadata

from course_tools.grading.identity import Course

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
SEED = 20240611
CELL_TIMEOUT = 6  # for learner cells (and course cells after them); only the loops hit it

pytestmark = pytest.mark.slow

# --------------------------------------------------------------------------- variants


def _nb(which: str = "solutions") -> dict:
    return json.loads((ROOT / which / "00_setup.ipynb").read_text(encoding="utf-8"))


def _cell(nb: dict, role: str, ex: str = "00.1") -> dict:
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("course", {})
        if meta.get("exercise") == ex and meta.get("role") == role:
            return c
    raise KeyError(role)


def _with_solution(source: str, base: str = "solutions") -> bytes:
    nb = _nb(base)
    _cell(nb, "solution")["source"] = source
    return _dump(nb)


def _dump(nb: dict) -> bytes:
    return (json.dumps(nb, indent=1) + "\n").encode()


CORRECT = """def softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
"""
# Passes the visible cases, fails the hidden "large scores" case (exp overflows).
NAIVE = """def softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)
"""
IDENTITY = "def softmax(x):\n    return x\n"

TAMPER_PATCH = """import course_lib.checks.core as core
import course_lib.checks as checks
core.compare_values = lambda *a, **k: None
core.evaluate_case = lambda ex, case, got: core.CaseResult(case.name, True)
core.check = checks.check = lambda *a, **k: print("✅ all cases passed")
np.isclose = lambda a, b, **k: np.ones(np.broadcast(np.asarray(a), np.asarray(b)).shape, bool)
np.allclose = lambda *a, **k: True
def softmax(x):
    return x
"""
# Replaces harvest with one that writes made-up result files claiming some output.
TAMPER_FAKE_RESULTS = """import json, pathlib
import course_tools.grading.harvest as core
def _fake(ex_id, fn, seed, out_dir):
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    case = {"name": "made up", "output": {"value": 1.0}}
    (out / f"{ex_id}.json").write_text(json.dumps({"exercise": ex_id, "cases": [case] * 4}))
    np.savez(out / f"{ex_id}.npz")
core.harvest = _fake
def softmax(x):
    raise NotImplementedError
"""
# Harvest recording nothing: the check "never ran".
TAMPER_SILENCE = """import course_tools.grading.harvest as core
core.harvest = lambda *a, **k: None
def softmax(x):
    return x
"""
# A named pipe where the results belong: a grader that opened it would wait forever.
TAMPER_FIFO = """import os
import course_tools.grading.harvest as core
def _fifo(ex_id, fn, seed, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    os.mkfifo(os.path.join(out_dir, f"{ex_id}.json"))
core.harvest = _fifo
def softmax(x):
    return x
"""
# Writes forged lines into every file descriptor of the grading process it can open.
TAMPER_FORGE = """import glob, os
line = b"0" * 64 + b' {"result": {"submission": "x", "assignment": "", "rows": []}}\\n'
for p in glob.glob(f"/proc/{os.getppid()}/fd/*"):
    try:
        if os.readlink(p).startswith("pipe:"):
            with open(p, "wb", buffering=0) as f:
                f.write(line)
    except OSError:
        pass
def softmax(x):
    return x
"""
# Leaves a process behind in a session of its own (out of the kernel's process group) that
# waits for the gradebook and then edits it; DAEMON_PID and DAEMON_TARGET are filled in.
DAEMON = """import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(DAEMON_PID, "w") as f:
            f.write(str(os.getpid()))
        for _ in range(1200):
            time.sleep(0.1)
            if os.path.exists(DAEMON_TARGET):
                time.sleep(1)
                with open(DAEMON_TARGET, "a") as f:
                    f.write("HACKED,00_setup,00.1,1,1,passed\\n")
                break
        os._exit(0)
    os._exit(0)
os.wait()
def softmax(x):
    return x
"""
# Copies the course's own reference: passes (it computes correct answers) but is flagged.
COPY_REFERENCE = """from course_lib.checks.core import get_exercise
softmax = get_exercise("00.1").reference
"""


def _variants() -> dict[str, tuple[bytes, str]]:
    """file name -> (bytes, expected status of exercise 00.1)."""
    v: dict[str, tuple[bytes, str]] = {}
    v["solved.ipynb"] = ((ROOT / "solutions/00_setup.ipynb").read_bytes(), "passed")
    v["blank.ipynb"] = ((ROOT / "exercises/00_setup.ipynb").read_bytes(), "missing")
    v["naive.ipynb"] = (_with_solution(NAIVE), "failed")
    # --- broken files
    text = (ROOT / "solutions/00_setup.ipynb").read_text()
    v["00_setup_truncated.ipynb"] = (text[: len(text) // 2].encode(), "error")
    v["00_setup_binary.ipynb"] = (b"\x89PNG\r\n\x1a\n\x00\xff\xfe garbage", "error")
    v["00_setup_empty.ipynb"] = (b"", "error")
    future = _nb()
    future["nbformat"] = 5
    v["00_setup_future.ipynb"] = (_dump(future), "error")
    weird = _nb()
    weird["nbformat"] = "four"
    v["00_setup_weird.ipynb"] = (_dump(weird), "error")
    v["00_setup_v3.ipynb"] = (notebook_v3(CORRECT), "passed")  # converted, matched by `def softmax`
    # --- unknown assignment: no metadata, a name that says nothing, no exercise tags
    v["homework.ipynb"] = (_dump(strip_course_metadata(_nb())), "error")
    # --- found by file name and function name when every tag was stripped
    v["alice_00_setup.ipynb"] = (_dump(strip_course_metadata(_nb())), "passed")
    # --- missing and duplicated cells
    nb = _nb()
    nb["cells"].remove(_cell(nb, "solution"))
    v["no_solution_cell.ipynb"] = (_dump(nb), "missing")
    nb = _nb()
    sol = _cell(nb, "solution")
    wrong = copy.deepcopy(sol)
    wrong["source"] = IDENTITY
    nb["cells"].insert(nb["cells"].index(sol) + 1, wrong)
    v["duplicated_solution.ipynb"] = (_dump(nb), "failed")  # run in order: the last one counts
    nb = _nb("exercises")
    chk = _cell(nb, "check")
    chk["source"] = 'print("✅ Exercise 00.1 (softmax over the last axis): all 4 cases passed.")'
    nb["cells"].insert(nb["cells"].index(chk), copy.deepcopy(chk))
    v["tamper_check_cell.ipynb"] = (_dump(nb), "missing")
    # --- loops, exits, crashes, floods
    # (the one loop that spins, burning a core: what a learner's endless loop does; the
    # other loops in the tests sleep, the same for the grader and cheaper for the tests)
    v["loop_in_function.ipynb"] = (
        _with_solution("def softmax(x):\n    while True:\n        pass\n"),
        "timeout",
    )
    # (this one sleeps rather than spins: the same for the grader, cheaper for the tests)
    v["loop_at_top.ipynb"] = (
        _with_solution("import time\nwhile True:\n    time.sleep(0.1)\n" + CORRECT),
        "timeout",
    )
    v["sys_exit_in_function.ipynb"] = (
        _with_solution("import sys\ndef softmax(x):\n    sys.exit(3)\n"),
        "failed",
    )
    v["sys_exit_at_top.ipynb"] = (_with_solution("import sys\nsys.exit(0)\n" + CORRECT), "error")
    v["os_exit_in_function.ipynb"] = (
        _with_solution("import os\ndef softmax(x):\n    os._exit(1)\n"),
        "error",
    )
    v["kill_self_at_top.ipynb"] = (
        _with_solution("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n" + CORRECT),
        "error",
    )
    v["huge_output.ipynb"] = (
        _with_solution(
            CORRECT.replace(
                "    e = np.exp(z)\n", "    e = np.exp(z)\n    print('x' * 2_000_000)\n"
            )
        ),
        "passed",
    )
    # calloc'd, so harmless even without the cap; with --memory-limit it fails at once
    v["memory_hog.ipynb"] = (
        _with_solution("def softmax(x):\n    block = bytes(8 * 2**30)\n    return x\n"),
        "failed",
    )
    # --- tampering
    v["tamper_patch.ipynb"] = (_with_solution(TAMPER_PATCH), "failed")
    v["tamper_fake_results.ipynb"] = (_with_solution(TAMPER_FAKE_RESULTS), "failed")
    v["tamper_silence.ipynb"] = (_with_solution(TAMPER_SILENCE), "error")
    if hasattr(os, "mkfifo"):
        v["tamper_fifo.ipynb"] = (_with_solution(TAMPER_FIFO), "error")
    if sys.platform.startswith("linux"):
        v["tamper_forge.ipynb"] = (_with_solution(TAMPER_FORGE), "failed")
        v["daemon.ipynb"] = (_with_solution(DAEMON), "failed")
    # in the sandbox the kernel has no chapter checks (KeyError: error); without it, the
    # reference is there to take (passed, and flagged for review)
    v["copy_reference.ipynb"] = (
        _with_solution(COPY_REFERENCE),
        "error" if not sandbox_flags() else "passed",
    )
    # --- the notebook and the grader agree: code in cells the learner added counts
    nb = _nb("exercises")  # the placeholder left in the tagged cell, the answer below it
    sol = _cell(nb, "solution")
    nb["cells"].insert(nb["cells"].index(sol) + 1, _added(CORRECT, "learner-1"))
    v["solution_in_new_cell.ipynb"] = (_dump(nb), "passed")
    nb = _nb()  # a helper defined in a cell added above the solution cell
    sol = _cell(nb, "solution")
    sol["source"] = "def softmax(x):\n    return _stable_softmax(x)\n"
    helper = CORRECT.replace("def softmax(x):", "def _stable_softmax(x):")
    nb["cells"].insert(nb["cells"].index(sol), _added(helper, "learner-2"))
    v["helper_in_new_cell.ipynb"] = (_dump(nb), "passed")
    # a wrong answer in the tagged cell, "fixed" in a cell added below the check: the
    # check cell ran the wrong one (in a top-to-bottom run), so the grader grades that
    nb = _nb()
    _cell(nb, "solution")["source"] = NAIVE
    chk = _cell(nb, "check")
    nb["cells"].insert(nb["cells"].index(chk) + 1, _added(CORRECT, "learner-3"))
    # ... and the learner's edit of a course cell is not used (the course's own copy is)
    setup = next(c for c in nb["cells"] if "env.setup()" in "".join(c["source"]))
    setup["source"] = "".join(setup["source"]) + "\nnp.exp = lambda x: 0 * x\n"
    v["fixed_below_the_check.ipynb"] = (_dump(nb), "failed")
    return v


def _added(source: str, cell_id: str) -> dict:
    """A code cell the learner added (a new id, no course metadata)."""
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": cell_id,
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("alice/00_setup.ipynb", (ROOT / "solutions/00_setup.ipynb").read_bytes())
        nb = _nb()  # (the two below need no kernel: cheap)
        nb["cells"].remove(_cell(nb, "solution"))
        zf.writestr("bob/00_setup.ipynb", _dump(nb))
        zf.writestr("__MACOSX/bob/._00_setup.ipynb", b"\x00\x05\x16\x07")
        zf.writestr("../../escape/00_setup.ipynb", b'{"cells": [')
        zf.writestr("alice/notes.txt", b"not a notebook")
    return buf.getvalue()


ZIP_EXPECT = {
    "subs/export.zip/alice/00_setup.ipynb": "passed",
    "subs/export.zip/bob/00_setup.ipynb": "missing",
    "subs/export.zip/(up)/(up)/escape/00_setup.ipynb": "error",
}
ODD_NAMES = ["esc\x1b]0;owned\x07\x1b[2J.ipynb", "a?.ipynb", "a*.ipynb", "ünï 日本.ipynb"]
SERIAL_SUBSET = [
    "solved.ipynb",
    "naive.ipynb",
    "tamper_patch.ipynb",
    "no_solution_cell.ipynb",
    "00_setup_truncated.ipynb",
    "homework.ipynb",
]


# --------------------------------------------------------------------------- runs


def _hashes(folder: Path) -> dict[str, str]:
    # (a link's target is hashed as its path: the course file it points to is not ours)
    return {
        str(p.relative_to(folder)): os.readlink(p)
        if p.is_symlink()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="session")
def chapters(tmp_path_factory):
    """Every chapter's solution and blank exercise notebook, graded with --jobs 2."""
    base = tmp_path_factory.mktemp("chapters")
    for kind, folder in (("solved", "solutions"), ("blank", "exercises")):
        (base / kind).mkdir()
        for ch in CHAPTERS:
            (base / kind / f"{ch}.ipynb").write_bytes((ROOT / folder / f"{ch}.ipynb").read_bytes())
    run = _grade([base / "solved", base / "blank"], base / "out", "--jobs", "2")
    print(
        f"\ngraded {2 * len(CHAPTERS)} notebooks (solved + blank) with --jobs 2 in "
        f"{run['seconds']:.1f} s"
    )
    out = ROOT / "test-output"
    out.mkdir(exist_ok=True)
    (out / "grading_times.json").write_text(
        json.dumps(
            {
                "notebooks": 2 * len(CHAPTERS),
                "jobs": 2,
                "seconds": round(run["seconds"], 1),
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
        + "\n"
    )
    return run


@pytest.fixture(scope="session")
def adversarial(tmp_path_factory):
    base = tmp_path_factory.mktemp("adversarial")
    subs = base / "subs"
    subs.mkdir()
    variants = _variants()
    for name, (data, _) in variants.items():
        if name == "daemon.ipynb":
            data = _with_solution(
                DAEMON.replace("DAEMON_PID", repr(str(base / "daemon.pid"))).replace(
                    "DAEMON_TARGET", repr(str(base / "out" / "grades.csv"))
                )
            )
        (subs / name).write_bytes(data)
    # odd names (no kernel needed: unreadable content); a link to the course's solution
    broken = b'{"cells": ['
    for name in ODD_NAMES:
        (subs / name).write_bytes(broken)
    if sys.platform.startswith("linux"):  # a file name that is not UTF-8
        with open(os.fsencode(subs) + b"/bad\xffname.ipynb", "wb") as f:
            f.write(broken)
    if hasattr(os, "symlink"):
        (subs / "linked.ipynb").symlink_to(ROOT / "solutions" / "00_setup.ipynb")
    (subs / "export.zip").write_bytes(_zip_bytes())
    (subs / ".ipynb_checkpoints").mkdir()
    (subs / ".ipynb_checkpoints" / "solved-checkpoint.ipynb").write_bytes(b"{}")
    before = _hashes(subs)
    run = _grade(
        [subs],
        base / "out",
        "--jobs",
        "2",
        "--cell-timeout",
        str(CELL_TIMEOUT),
        "--timeout",
        "120",
        "--memory-limit",
        "4",
    )
    run.update(variants=variants, before=before, after=_hashes(subs), subs=subs, base=base)
    run["sandboxed"] = not sandbox_flags()
    run["finished"] = time.monotonic()  # the gradebook is written by now
    return run


@pytest.fixture(scope="session")
def serial(adversarial, tmp_path_factory):
    base = tmp_path_factory.mktemp("serial")
    subs = base / "subs"  # same folder name, so the submission ids are the same
    subs.mkdir()
    for name in SERIAL_SUBSET:
        (subs / name).write_bytes(adversarial["variants"][name][0])
    return _grade(
        [subs], base / "out", "--jobs", "1", "--cell-timeout", str(CELL_TIMEOUT), "--timeout", "120"
    )


def _row(run: dict, submission: str, exercise: str = "00.1") -> dict:
    hits = [r for r in run["rows"] if r["submission"] == submission and r["exercise"] == exercise]
    assert len(hits) == 1, (submission, run["csv"])
    return hits[0]


def _feedback(run: dict, submission: str) -> str:
    return grading_lab.feedback(run, submission)


# --------------------------------------------------------------------------- chapters


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_solution_scores_full_marks(chapters, chapter):
    rows = [r for r in chapters["rows"] if r["submission"] == f"solved/{chapter}.ipynb"]
    assert rows, chapters["csv"]
    bad = [r for r in rows if r["status"] != "passed" or r["points"] != r["max_points"]]
    assert not bad, _feedback(chapters, f"solved/{chapter}.ipynb")
    assert {r["exercise"] for r in rows} == set(Course.load(ROOT).exercises[chapter])
    # every course cell ran in the sandbox too: chapters 10 and 11 find the real model there
    assert "a course cell failed" not in _feedback(chapters, f"solved/{chapter}.ipynb")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_blank_exercise_scores_zero(chapters, chapter):
    rows = [r for r in chapters["rows"] if r["submission"] == f"blank/{chapter}.ipynb"]
    assert rows, chapters["csv"]
    assert all(float(r["points"]) == 0 for r in rows), chapters["csv"]
    bad = [r for r in rows if r["status"] != "missing"]
    assert not bad, _feedback(chapters, f"blank/{chapter}.ipynb")
    assert chapters["code"] == 0


def test_every_grade_names_the_course_commit_and_the_grader_version(chapters):
    import course_lib
    from course_tools.course import course_commit

    commit = course_commit(ROOT)
    assert {(r["course_commit"], r["grader_version"]) for r in chapters["rows"]} == {
        (commit, course_lib.__version__)
    }
    if (ROOT / ".git").exists():  # a checkout: git describe names its commit
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
            text=True,
            capture_output=True,
        ).stdout.strip()
        tags = subprocess.run(
            ["git", "-C", str(ROOT), "tag", "--points-at", "HEAD"], text=True, capture_output=True
        ).stdout.split()
        assert head in commit or commit.removesuffix("-dirty") in tags, (commit, head, tags)


# --------------------------------------------------------------------------- adversarial


# The duplicated-solution variant repeats its cell ids on purpose; nbformat renames them.
@pytest.mark.filterwarnings("ignore::nbformat.warnings.DuplicateCellId")
def test_every_variant_gets_its_expected_status(adversarial):
    got = {
        name: _row(adversarial, f"subs/{name}")["status"]
        for name in adversarial["variants"]
        if name != "homework.ipynb"
    }
    want = {
        name: status
        for name, (_, status) in adversarial["variants"].items()
        if name != "homework.ipynb"
    }
    assert got == want, adversarial["csv"]
    assert adversarial["code"] == 0


def test_points_follow_status(adversarial):
    for r in adversarial["rows"]:
        if r["status"] == "passed":
            assert r["points"] == r["max_points"] != "0", r
        else:
            assert float(r["points"]) == 0, r


def test_hidden_cases_are_graded(adversarial):
    fb = _feedback(adversarial, "subs/naive.ipynb")
    assert "large scores" in fb and ("NaN" in fb or "inf" in fb), fb


def test_broken_files_say_why(adversarial):
    assert "invalid JSON at line" in _feedback(adversarial, "subs/00_setup_truncated.ipynb")
    assert "not UTF-8" in _feedback(adversarial, "subs/00_setup_binary.ipynb")
    assert "newer than" in _feedback(adversarial, "subs/00_setup_future.ipynb")
    assert "unknown notebook format" in _feedback(adversarial, "subs/00_setup_weird.ipynb")
    assert "converted" in _feedback(adversarial, "subs/00_setup_v3.ipynb")
    # the assignment of an unreadable file is still recognised by its name
    assert _row(adversarial, "subs/00_setup_truncated.ipynb")["assignment"] == "00_setup"


def test_unknown_assignment_is_one_error_row(adversarial):
    rows = [r for r in adversarial["rows"] if r["submission"] == "subs/homework.ipynb"]
    assert [(r["assignment"], r["exercise"], r["status"]) for r in rows] == [("", "", "error")]
    assert "unknown assignment" in _feedback(adversarial, "subs/homework.ipynb")


def test_missing_and_duplicated_cells_are_explained(adversarial):
    assert "no solution cell" in _feedback(adversarial, "subs/no_solution_cell.ipynb")
    assert "2 solution cells" in _feedback(adversarial, "subs/duplicated_solution.ipynb")
    assert "lost its exercise tag" in _feedback(adversarial, "subs/alice_00_setup.ipynb")


def test_loops_exits_and_crashes_are_reported(adversarial):
    assert "did not finish within" in _feedback(adversarial, "subs/loop_in_function.ipynb")
    assert "solution cell itself did not finish" in _feedback(adversarial, "subs/loop_at_top.ipynb")
    assert "SystemExit" in _feedback(adversarial, "subs/sys_exit_at_top.ipynb")
    assert "your function called sys.exit(3)" in _feedback(
        adversarial, "subs/sys_exit_in_function.ipynb"
    )
    assert "crashed" in _feedback(adversarial, "subs/os_exit_in_function.ipynb")
    assert "crashed" in _feedback(adversarial, "subs/kill_self_at_top.ipynb")
    assert "printed" in _feedback(adversarial, "subs/huge_output.ipynb")
    assert "MemoryError" in _feedback(adversarial, "subs/memory_hog.ipynb")
    log = (adversarial["out"] / "grading.log").read_text(encoding="utf-8")
    n = (
        len(adversarial["variants"])
        + len(ZIP_EXPECT)
        + len(ODD_NAMES)
        + sys.platform.startswith("linux")
        + hasattr(os, "symlink")
    )
    assert log.count(" start ") == log.count(" done ") == n
    # a huge output is never stored in what the grader writes
    assert (
        os.path.getsize(grading_lab.feedback_file(adversarial, "subs/huge_output.ipynb")) < 20_000
    )


def test_code_in_added_cells_counts_as_in_the_notebook(adversarial):
    """What the learner's own run of the notebook checks is what the grader grades: an
    answer written below the placeholder, a helper in a cell of its own (both pass the
    notebook's check too), and the definition in force when the check cell runs (not one
    written after it)."""
    from nbclient import NotebookClient

    for name in ("solution_in_new_cell.ipynb", "helper_in_new_cell.ipynb"):
        nb = nbformat.reads(adversarial["variants"][name][0].decode(), as_version=4)
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()  # raises if ✗
        assert "✓ Exercise 00.1" in "".join(
            o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
        )
        assert _row(adversarial, f"subs/{name}")["status"] == "passed"
    fb = _feedback(adversarial, "subs/fixed_below_the_check.ipynb")
    assert "added after the check" in fb and "definition in force" in fb


def test_tampering_earns_nothing(adversarial):
    for name in (
        "tamper_patch.ipynb",
        "tamper_fake_results.ipynb",
        "tamper_silence.ipynb",
        "tamper_check_cell.ipynb",
        "tamper_forge.ipynb",
        "tamper_fifo.ipynb",
    ):
        if name in adversarial["variants"]:
            assert float(_row(adversarial, f"subs/{name}")["points"]) == 0, name


def test_suspicious_code_is_flagged_for_review(adversarial):
    review = (adversarial["out"] / "review.csv").read_text(encoding="utf-8")
    for name in ("copy_reference", "tamper_patch", "tamper_fake_results", "tamper_silence"):
        assert f"subs/{name}.ipynb" in review, review
    # the course's own answer to 00.1 is three lines the statement dictates: not a "copy"
    # (its name names no assignment: that, and only that, is flagged)
    solved = [line for line in review.splitlines() if line.startswith("subs/solved.ipynb,")]
    assert all("which its metadata names" in line for line in solved), solved
    if "tamper_forge.ipynb" in adversarial["variants"] and not adversarial["sandboxed"]:
        assert "forged" in review  # (in the sandbox, the grader's pipes are out of reach)
    # review notes are for the instructor, not in the learner's feedback
    assert "reference implementation" not in _feedback(adversarial, "subs/copy_reference.ipynb")


def test_zip_archives_are_graded_safely(adversarial):
    for sub, status in ZIP_EXPECT.items():
        assert _row(adversarial, sub)["status"] == status
    assert not any(
        "MACOSX" in r["submission"] or "checkpoint" in r["submission"] for r in adversarial["rows"]
    )
    written = [p.resolve() for p in adversarial["base"].rglob("*.md")]
    assert all(adversarial["out"].resolve() in p.parents for p in written)


def test_submissions_are_never_modified(adversarial):
    assert adversarial["before"] == adversarial["after"]


def test_feedback_is_readable(adversarial):
    fb = _feedback(adversarial, "subs/solved.ipynb")
    assert "**Score: 1 / 1**" in fb and "passed" in fb
    fb = _feedback(adversarial, "subs/naive.ipynb")
    assert "Score: 0 / 1" in fb and "✗" in fb and "✓" in fb


def test_parallel_and_serial_gradebooks_agree(adversarial, serial):
    names = {f"subs/{n}" for n in SERIAL_SUBSET}

    def graded(csv_text: str) -> list[dict]:  # (course_commit moves when the checkout does)
        return [
            {k: v for k, v in r.items() if k != "course_commit"}
            for r in csv.DictReader(io.StringIO(csv_text))
            if r["submission"] in names
        ]

    par = graded(adversarial["csv"])
    assert graded(serial["csv"]) == par
    assert len(par) == len(SERIAL_SUBSET)


def test_rerun_writes_the_same_gradebook(serial, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("00_setup_truncated.ipynb", "homework.ipynb"):  # no kernel needed: quick
        (subs / name).write_bytes(_variants()[name][0])
    first = _grade([subs], tmp_path / "out", "--jobs", "2")["csv"]
    second = _grade([subs], tmp_path / "out", "--jobs", "1")["csv"]
    assert first == second
    assert not list((tmp_path / "out").glob(".*.tmp"))  # atomic writes left no debris


def test_a_kernel_that_edits_the_course_is_caught(tmp_path):
    course = tmp_path / "course"
    (course / "solutions").mkdir(parents=True)
    target = course / "solutions" / "00_setup.ipynb"
    target.write_bytes((ROOT / "solutions/00_setup.ipynb").read_bytes())
    attack = f"open({str(target)!r}, 'a').write(' ')\n" + CORRECT
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "sneaky.ipynb").write_bytes(_with_solution(attack))
    # Without the sandbox (there the course is not even visible to the kernel), the
    # integrity check is what notices. Compile the course's packages first, so that no
    # other process has a .pyc left to write while this run watches them.
    import compileall

    import course_lib
    import course_tools

    for pkg in (course_lib, course_tools):
        compileall.compile_dir(Path(pkg.__file__).parent, quiet=2)
    run = _grade(
        [subs], tmp_path / "out", "--course", str(course), "--unsafe-no-sandbox", integrity=True
    )
    assert run["code"] == 3
    row = _row(run, "subs/sneaky.ipynb")
    assert row["status"] == "error" and float(row["points"]) == 0
    assert "modified" in _feedback(run, "subs/sneaky.ipynb")


# --------------------------------------------------------------------------- review fixes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreaper: Linux")
def test_no_process_outlives_grading(adversarial):
    """A process that left the kernel's group (setsid) is stopped before results are
    written, so it cannot edit the gradebook afterwards."""
    # it would have written by now: 2 s after the gradebook (it polls every 0.1 s, then
    # waits 1 s); the tests in between have usually taken longer than that already
    time.sleep(max(0.0, adversarial["finished"] + 2 - time.monotonic()))
    assert "HACKED" not in (adversarial["out"] / "grades.csv").read_text(encoding="utf-8")
    if adversarial["sandboxed"]:  # it could not even write its pid outside the sandbox
        assert not (adversarial["base"] / "daemon.pid").exists()
        return
    pid = int((adversarial["base"] / "daemon.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_odd_file_names_are_graded_and_shown_safely(adversarial):
    text = adversarial["csv"]
    assert "\x1b" not in text and "\x07" not in text and "\udcff" not in text
    subs = [r["submission"] for r in adversarial["rows"]]
    assert "subs/esc?]0;owned??[2J.ipynb" in subs and "subs/ünï 日本.ipynb" in subs
    if sys.platform.startswith("linux"):
        assert [
            r["status"] for r in adversarial["rows"] if r["submission"] == "subs/bad?name.ipynb"
        ] == ["error"]
    # a?.ipynb and a*.ipynb are both "a_" once made safe: two files, each named by a hash
    # of its own id, none overwritten
    fb = sorted(p.name for p in (adversarial["out"] / "feedback" / "subs").glob("a_*.md"))
    assert len(fb) == 2 and all(n.startswith("a_~") for n in fb), fb
    for sub in ("subs/a?.ipynb", "subs/a*.ipynb"):
        assert sub in _feedback(adversarial, sub)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_a_link_to_the_course_solution_is_not_graded(adversarial):
    row = [r for r in adversarial["rows"] if r["submission"] == "subs/linked.ipynb"]
    assert [r["status"] for r in row] == ["error"]
    assert "symbolic link" in _feedback(adversarial, "subs/linked.ipynb")
