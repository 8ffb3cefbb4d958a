"""A hostile class, round 3: the notebook and the grade agree, and the limits hold.

Each submission below once got through an edge of the grader (issue 31): an answer in a
cell of its own below the placeholder, a partial answer raising ``NotImplementedError``, a
2,000-term expression, a chapter saved under another chapter's name, a copy dodging the
flag, oversized records, archives, messages and files. Every one is graded in the real
sandbox, in one shared run (``--jobs 2 --partial``), among honest submissions, and each
test asserts: no unearned points, no harm to another submission, the gradebook written,
the row blaming the submission (never the grader), the earned points kept.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

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

from course_tools.grading import analysis, identity, plan
from course_tools.grading.harvest import MAX_MESSAGE
from course_tools.grading.scoring import score, zip_problem

pytestmark = pytest.mark.slow

CORRECT = source(cell(notebook(), "solution", "00.1"))
PLACEHOLDER = source(cell(notebook("00_setup", "exercises"), "solution", "00.1"))
WRONG = "def softmax(x):\n    return x * 0.0\n"
HELPER_USER = "def softmax(x):\n    return _normalised_exp(x)\n"
HELPER = """def _normalised_exp(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""


def _arranged(cells: list[tuple[str, str]]) -> bytes:
    """The exercise notebook of chapter 00 with cells added by the learner: ``cells`` are
    (where, source) with where "above", "solution" (the tagged cell's new source),
    "below" (between the tagged cell and the check) or "after" (after the check)."""
    nb = notebook("00_setup", "exercises")
    tagged = cell(nb, "solution", "00.1")
    check = cell(nb, "check", "00.1")
    out = []
    for c in nb["cells"]:
        if c is check:
            out += [_added(src, i) for i, (w, src) in enumerate(cells) if w == "below"]
        if c is tagged:
            out += [_added(src, i) for i, (w, src) in enumerate(cells) if w == "above"]
            for w, src in cells:
                if w == "solution":
                    c = dict(c, source=src)
        out.append(c)
        if c is check:
            out += [_added(src, i) for i, (w, src) in enumerate(cells) if w == "after"]
    nb["cells"] = out
    return dump(nb)


def _added(src: str, i: int) -> dict:
    return {
        "cell_type": "code",
        "id": f"learner-added-{i}",
        "metadata": {},
        "source": src,
        "outputs": [],
        "execution_count": None,
    }


def _in_notebook(data: bytes, ex_id: str = "00.1") -> str:
    """What the notebook's own check says after a top-to-bottom run up to it: passed,
    not implemented, or failed (run here, as the learner's Jupyter would)."""
    from course_lib.checks.core import CheckFailed, get_exercise

    nb = json.loads(data)
    ns: dict = {}
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("course", {})
        if c["cell_type"] != "code" or meta.get("role") in ("colab", "progress"):
            continue
        if meta.get("role") == "check" and meta.get("exercise") == ex_id:
            target = get_exercise(ex_id).target
            try:
                report = ns["check"](ex_id, ns.get(target), quiet=True)
            except CheckFailed:
                return "failed"
            return "passed" if report.passed else "not implemented"
        exec(compile(source(c), "<cell>", "exec"), ns)
    raise AssertionError("no check cell")


ARRANGEMENTS = {
    # the placeholder left in the tagged cell, the answer in a new cell just below it
    "below": [("below", CORRECT)],
    # the answer in a new cell above the tagged cell, whose placeholder then replaces it
    "above": [("above", CORRECT)],
    # the tagged cell calls a helper the learner defined in a cell of its own
    "helper": [("above", HELPER), ("solution", HELPER_USER)],
    # a right answer, checked; then a broken redefinition after the check
    "redefined_after": [("solution", CORRECT), ("after", WRONG)],
}
EXPECTED = {"below": "passed", "above": "missing", "helper": "passed", "redefined_after": "passed"}

# --------------------------------------------------------------------------- attacks

# Right on vectors and matrices, raises on 3-D input (a bare NotImplementedError, or a
# ValueError): with --partial both earn 1 of the 2 cases drawn from the seed.
SOME_CASES = """def softmax(x):
    if x.ndim == 3:
        raise {error}
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""

LONG_EXPRESSION = CORRECT + "\n_pad = " + " + ".join(["0"] * 2000) + "\n"

# Replaces the harvest with one that records 3 MB in the `missing` field.
HUGE_MISSING = """
import json as _json, os as _os
def _fake(exercise_id, fn, inputs, out_dir):
    _os.makedirs(out_dir, exist_ok=True)
    open(_os.path.join(out_dir, exercise_id + ".json"), "w").write(
        _json.dumps({"exercise": exercise_id, "missing": "M" * 3_000_000}))
import course_tools.grading.harvest as _r
_r.harvest = _fake
def softmax(x):
    return x
"""

# Replaces the harvest with one that records a results archive of 70,000 empty entries.
MANY_ENTRIES = """
import json as _json, os as _os, zipfile as _zf
def _fake(exercise_id, fn, inputs, out_dir):
    _os.makedirs(out_dir, exist_ok=True)
    with _zf.ZipFile(_os.path.join(out_dir, exercise_id + ".npz"), "w") as z:
        for i in range(70_000):
            z.writestr(f"e{i}", b"")
    open(_os.path.join(out_dir, exercise_id + ".json"), "w").write(
        _json.dumps({"exercise": exercise_id, "cases": []}))
import course_tools.grading.harvest as _r
_r.harvest = _fake
def softmax(x):
    return x
"""

# 60 MB in one write to stdout, after a right answer: over the cap on one kernel message.
BIG_PRINT = CORRECT + "\nimport sys as _sys\n_sys.stdout.write('x' * 60_000_000)\n"

# Writes 4 files of 100 MB into the working folder, then answers right.
FILL_DISK = (
    """
for _i in range(4):
    with open(f"fill{_i}.bin", "wb") as _f:
        for _ in range(100):
            _f.write(b"\\0" * 2**20)
"""
    + CORRECT
)

# Writes under / and fills /dev/shm (a tmpfs), then answers right.
WRITE_ROOT = (
    """
_log = []
for _p in ("/x", "/opt/x", "/dev/shm/x"):
    try:
        with open(_p, "wb") as _f:
            for _ in range(1200):
                _f.write(b"\\0" * 2**20)
        _log.append("WROTE " + _p)
    except OSError as _e:
        _log.append(f"refused {_p}: {_e.strerror}")
"""
    + CORRECT.replace("def softmax(x", "def _softmax(x")
    + """
def softmax(x):
    if any(l.startswith("WROTE") for l in _log):
        raise RuntimeError(" | ".join(_log))
    return _softmax(x)
"""
)

# Reaches the registry of references through a function's globals, with built names.
GLOBALS_REACH = """def softmax(x):
    reg = check.__globals__["_REG" + "ISTRY"]
    return getattr(reg["00" + ".1"], "refer" + "ence")(x)
"""


@pytest.fixture(scope="session")
def round3(tmp_path_factory):
    require_sandbox()
    base = tmp_path_factory.mktemp("round3")
    subs = base / "subs"
    (subs / "02_qkv_attention").mkdir(parents=True)
    files = {f"arr_{k}.ipynb": _arranged(v) for k, v in ARRANGEMENTS.items()}
    files |= {
        "a_honest.ipynb": (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
        "some_notimpl.ipynb": with_solutions(
            {"00.1": SOME_CASES.format(error="NotImplementedError()")}
        ),
        "some_valueerror.ipynb": with_solutions({"00.1": SOME_CASES.format(error="ValueError")}),
        "long_expression.ipynb": with_solutions({"00.1": LONG_EXPRESSION}),
        "huge_missing.ipynb": with_solutions({"00.1": HUGE_MISSING}),
        "many_entries.ipynb": with_solutions({"00.1": MANY_ENTRIES}),
        "big_print.ipynb": with_solutions({"00.1": BIG_PRINT}),
        "fill_disk.ipynb": with_solutions({"00.1": FILL_DISK}),
        "write_root.ipynb": with_solutions({"00.1": WRITE_ROOT}),
        # a solved chapter 00, saved under chapter 02's name and in chapter 02's folder
        "02_qkv_attention.ipynb": (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
        "02_qkv_attention/bob.ipynb": (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
        "z_honest.ipynb": (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
    }
    for name, data in files.items():
        (subs / name).write_bytes(data)
    run = grade(
        [subs],
        base / "out",
        "--jobs",
        "2",
        "--partial",
        "--cell-timeout",
        "60",
        "--timeout",
        "300",
        "--disk-limit",
        "0.25",
    )
    run["files"] = files
    return run


def _blames_submission(run: dict, sub: str) -> None:
    assert rows_of(run, sub), run["csv"]
    assert not blames_the_grader(feedback(run, sub)), feedback(run, sub)


def _honest_are_unharmed(run: dict) -> None:
    for sub in ("subs/a_honest.ipynb", "subs/z_honest.ipynb"):
        r = row(run, sub)
        assert (r["status"], r["points"]) == ("passed", "1"), feedback(run, sub)


# --------------------------------------------------------------------------- 1. arrangements


@pytest.mark.parametrize("arrangement", list(ARRANGEMENTS))
def test_the_grader_grades_the_definition_the_check_cell_saw(round3, arrangement):
    sub = f"subs/arr_{arrangement}.ipynb"
    r = row(round3, sub)
    notebook_says = _in_notebook(round3["files"][f"arr_{arrangement}.ipynb"])
    agree = {"passed": "passed", "not implemented": "missing", "failed": "failed"}
    assert agree[notebook_says] == r["status"] == EXPECTED[arrangement], feedback(round3, sub)
    assert float(r["points"]) == (1.0 if r["status"] == "passed" else 0.0)
    _blames_submission(round3, sub)
    if arrangement == "above":  # the feedback says why the answer above did not count
        assert "replaces it" in feedback(round3, sub)
    if arrangement == "redefined_after":
        assert "after the check" in feedback(round3, sub)
    _honest_are_unharmed(round3)


# --------------------------------------------------------------------------- 2. status


def test_partial_credit_counts_every_passed_case_whatever_the_others_raised(round3):
    for sub in ("subs/some_notimpl.ipynb", "subs/some_valueerror.ipynb"):
        r = row(round3, sub)
        # 00.1's grader cases: two written out (not counted for partial credit), two
        # drawn from the seed, of which the 3-D one raised: 1 of 2
        assert (r["status"], r["points"]) == ("failed", "0.5"), feedback(round3, sub)
        assert "1 of 2 cases drawn from the grader's seed passed" in feedback(round3, sub)
        assert "2 of the 2 written-out cases" in feedback(round3, sub)
        assert "3 of 4 in all" in feedback(round3, sub)
        _blames_submission(round3, sub)


def test_missing_only_when_no_case_ran_to_a_result(tmp_path):
    """All or nothing: a function that returns on some cases and raises NotImplementedError
    on others has failed, not gone missing; one that raises on every case is missing."""
    from course_lib.checks.core import cases_for

    cases = list(cases_for("00.1", False, 1))
    some = {"cases": [{"name": "a", "output": {"value": 1.0}}, _not_impl()]}
    none_ran = {"cases": [_not_impl(), _not_impl()]}
    for record, status in ((some, "failed"), (none_ran, "missing")):
        (tmp_path / "00.1.json").write_text(json.dumps(record))
        assert score("00.1", cases, tmp_path).status == status


def _not_impl() -> dict:
    return {
        "name": "b",
        "raised": {"type": "NotImplementedError", "message": "", "not_implemented": True},
    }


# --------------------------------------------------------------------------- 3. analysis


def test_a_long_expression_costs_no_grade(round3):
    r = row(round3, "subs/long_expression.ipynb")
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(round3, r["submission"])
    _blames_submission(round3, "subs/long_expression.ipynb")


def test_every_analysis_of_learner_source_is_bounded():
    """No recursion on deep trees, no quadratic regex on long words, and a failure of the
    analysis costs the flag only."""
    deep = "x = " + "(" * 90 + "1" + ")" * 90 + " + " + " + ".join(["0"] * 2000) + "\nprint(x)"
    assert len(analysis.canonical_tokens(deep)) > 4000  # an explicit stack: no RecursionError
    assert analysis.similarity(deep, "print(1)") < 0.01  # bounded by the lengths, not compared
    long_word = "a" * 200_000
    assert analysis.suspicious(long_word) == []  # linear patterns (seconds, not hours, if not)
    assert analysis.safe_flags(lambda: 1 / 0) == (
        [],
        [
            "the copy and pattern checks could not read this code (ZeroDivisionError); "
            "they were skipped"
        ],
    )


# --------------------------------------------------------------------------- 4. assignment


def test_the_expected_assignment_is_graded_and_a_mismatch_flagged(round3):
    chapter_02 = {
        c["metadata"]["course"]["exercise"]
        for c in notebook("02_qkv_attention")["cells"]
        if c.get("metadata", {}).get("course", {}).get("role") == "solution"
    }
    for sub in ("subs/02_qkv_attention.ipynb", "subs/02_qkv_attention/bob.ipynb"):
        rows = rows_of(round3, sub)
        assert {r["assignment"] for r in rows} == {"02_qkv_attention"}, rows
        # every exercise of the expected chapter has a row, and the other chapter's work earns none
        assert {r["exercise"] for r in rows} == chapter_02, rows
        assert all(float(r["points"]) == 0 for r in rows), rows
        text = feedback(round3, sub)
        assert "00_setup" in text and "02_qkv_attention" in text, text
        assert round3["results"][sub]["flags"], round3["results"][sub]
        _blames_submission(round3, sub)
    review = (round3["out"] / "review.csv").read_text(encoding="utf-8")
    assert "02_qkv_attention/bob.ipynb" in review


def test_the_assignment_option_wins_over_the_metadata():
    course = identity.Course.load(ROOT, check=False)
    nb, _ = identity.parse_notebook((ROOT / "solutions" / "00_setup.ipynb").read_bytes())
    assert identity.identify(nb, "00_setup.ipynb", course, expected="02_qkv_attention") == (
        "02_qkv_attention",
        "expected",
    )
    assert identity.expected_assignment("class/02_qkv_attention/alice.ipynb", course) == (
        "02_qkv_attention"
    )
    assert identity.expected_assignment("class/alice/hw_2024_01.ipynb", course) is None


# --------------------------------------------------------------------------- 5. copy flag


def _plan_flags(sources: dict[str, str], assignment: str) -> dict:
    course = identity.Course.load(ROOT, check=False)
    nb, _ = identity.parse_notebook(with_solutions(sources, assignment))
    dirs = {e: f"/nowhere/{e}" for e in course.exercises[assignment]}
    return plan.rebuild(nb, assignment, course, dirs).flags


def test_the_copy_flag_reads_source_as_python_does():
    ref = source(cell(notebook("02_qkv_attention"), "solution", "02.1"))
    region = analysis.solution_region(ref)
    dead = "\n    if False:\n        print('nothing')\n    _unused = 1 + 1\n    pass\n"
    padded = ref.replace(region.splitlines()[0], region.splitlines()[0] + dead, 1)
    flags = _plan_flags({"02.1": padded}, "02_qkv_attention")
    assert any("course's own solution" in f for f in flags.get("02.1", [])), flags
    # full-width letters (Python reads them as ASCII) still name a reference
    wide = "def softmax(x):\n    return ｓｏｆｔｍａｘ_reference(x)\n"
    assert any("reference" in f for f in analysis.suspicious(wide)), analysis.suspicious(wide)
    # the registry reached through a function's globals, with names built at run time
    flags = _plan_flags({"00.1": GLOBALS_REACH}, "00_setup")["00.1"]
    assert any("__globals__" in f for f in flags), flags
    assert any("built at run time" in f for f in flags), flags


def test_no_copy_flag_on_code_the_statement_dictates():
    own = """def softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    w = np.exp(shifted)
    return w / w.sum(axis=-1, keepdims=True)
"""
    assert "00.1" not in _plan_flags({"00.1": own}, "00_setup")
    # an exercise long enough to compare: an honest answer in another style is no copy
    honest = """def attention(q, k, v):
    n = q.shape[-1]
    logits = np.einsum("...qd,...kd->...qk", q, k) / n ** 0.5
    logits -= logits.max(-1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("...qk,...kd->...qd", p, v)
    return out, p
"""
    assert "02.1" not in _plan_flags({"02.1": honest}, "02_qkv_attention")


# --------------------------------------------------------------------------- 6. sizes


def test_a_huge_missing_field_is_capped(round3):
    sub = "subs/huge_missing.ipynb"
    r = row(round3, sub)
    assert float(r["points"]) == 0 and r["status"] == "missing", r
    assert len(feedback(round3, sub)) < 20 * MAX_MESSAGE
    assert len(json.dumps(round3["results"][sub])) < 20 * MAX_MESSAGE
    _blames_submission(round3, sub)


def test_archive_entries_are_counted_from_the_end_record(round3, tmp_path, monkeypatch):
    sub = "subs/many_entries.ipynb"
    r = row(round3, sub)
    assert (r["status"], float(r["points"])) == ("error", 0), r
    assert "entries" in feedback(round3, sub), feedback(round3, sub)
    _blames_submission(round3, sub)
    # the count comes from the end record: the central directory is never parsed
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(5000):
            zf.writestr(f"e{i}", b"")
    (tmp_path / "r.npz").write_bytes(buf.getvalue())
    monkeypatch.setattr(zipfile, "ZipFile", None)
    assert "5000 entries" in zip_problem(tmp_path / "r.npz", max_entries=1000)


def test_an_oversized_kernel_message_is_refused(round3):
    from course_tools.grading import run as run_mod

    sub = "subs/big_print.ipynb"
    r = row(round3, sub)
    # the 60 MB message never reached the grader (a 3 MB one is counted and noted): the
    # kernel broke its channel, and that cell is the learner's
    assert (r["status"], r["points"]) == ("error", "0"), feedback(round3, sub)
    text = feedback(round3, sub)
    assert "32 MB" in text and "printed" not in text, text
    _blames_submission(round3, sub)
    assert run_mod.MAX_KERNEL_MESSAGE < 60_000_000
    _honest_are_unharmed(round3)


def test_writes_in_the_box_are_bounded(round3):
    sub = "subs/fill_disk.ipynb"
    r = row(round3, sub)
    assert (r["status"], float(r["points"])) == ("error", 0), feedback(round3, sub)
    assert "working folder" in feedback(round3, sub), feedback(round3, sub)
    _blames_submission(round3, sub)
    sub = "subs/write_root.ipynb"
    r = row(round3, sub)
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(round3, sub)


def test_root_is_read_only_and_shm_sized_without_cgroups():
    """The box's / and /dev/shm, checked with bubblewrap alone (no cgroup involved)."""
    require_sandbox()
    import subprocess

    from course_tools.grading.sandbox import SHM_BYTES, Sandbox

    box = Sandbox.find()
    mb = SHM_BYTES // 2**20 + 50
    cmd = box.command(
        [
            "/bin/sh",
            "-c",
            "touch /x 2>&1; touch /opt/x 2>&1; "
            f"dd if=/dev/zero of=/dev/shm/x bs=1M count={mb} 2>&1; echo DONE",
        ],
        rw=[],
        cwd="/",
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    assert out.count("Read-only file system") == 2, out
    assert "No space left" in out, out


def test_a_missing_path_for_the_results_is_bounded_too(tmp_path: Path):
    """A record's `missing` field read in the grader's process is capped (no kernel)."""
    from course_lib.checks.core import cases_for

    (tmp_path / "00.1.json").write_text(json.dumps({"missing": "M" * 3_000_000}))
    v = score("00.1", list(cases_for("00.1", False, 1)), tmp_path)
    assert v.status == "missing" and sum(map(len, v.feedback)) <= MAX_MESSAGE + 100
