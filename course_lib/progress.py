"""Where you stand across the course: every exercise passed, failing (and why) or not started.

    make progress                        # in a terminal, in the course folder
    python -m course_lib.progress        # the same (or: python -m course_lib.progress WORK_DIR)
    progress.show()                      # in any notebook: the same table
    progress.show("02_qkv_attention")    # the last cell of each exercise notebook: this
                                         # chapter, from the checks you ran in this kernel

For the whole course it checks your copies in ``work/`` **without changing them**: each copy
runs in a fresh Python process of its own, with a time limit. The notebook that runs is
rebuilt as the grader rebuilds a submission: the course's own exercise notebook with your
solution cells in it (found by the exercise id in their metadata, else by the function they
define), so an edited or deleted check cell changes nothing. Each exercise is then checked
on its visible cases, exactly as its check cell does: the verdicts are the ones the check
cells print (the grader adds hidden cases on top). What you have not saved is not in the
file yet: save the notebook (Ctrl-S) first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PASSED, FAILING, NOT_STARTED, NOT_CHECKED = "passed", "failing", "not started", "not checked"
MARKS = {PASSED: "✓", FAILING: "✗", NOT_STARTED: "○", NOT_CHECKED: "?"}
WORK_SUFFIX = "_exercises"  # work/02_qkv_attention_exercises.ipynb (tools/bootstrap.py)
NOTEBOOK_TIMEOUT_S = 600.0  # one copy, all its exercises
EXERCISE_TIMEOUT_S = 120.0  # one solution cell or one exercise's cases (where SIGALRM exists)
LEADS = ("Likely cause:", "Hint:")  # what a check's message says about the mistake


@dataclass
class Row:
    """One exercise's verdict."""

    assignment: str
    exercise: str
    title: str
    status: str
    points: int
    max_points: int
    reason: str = ""
    source: str = ""  # the copy it came from (or "this notebook")


# --------------------------------------------------------------------------- the course


def course_root() -> Path | None:
    """The course folder (it holds exercises/): the current directory or one above it (a
    notebook in work/ runs there), or COURSE_ROOT. Never where course_lib is installed."""
    given = os.environ.get("COURSE_ROOT")
    if given and (Path(given) / "exercises").is_dir():
        return Path(given).resolve()
    here = Path.cwd().resolve()
    for folder in [here, *here.parents]:  # the course, or its learner's edition
        if (folder / "exercises").is_dir() and (
            (folder / "solutions").is_dir() or (folder / "notebooks").is_dir()
        ):
            return folder
    return None


def exercises_of(assignment: str) -> list:
    """The exercises of an assignment (``02_qkv_attention``), in order."""
    from .checks.core import all_exercises

    chapter = assignment[:2]
    return [ex for ex in all_exercises().values() if ex.chapter == chapter]


def assignments(root: Path | None) -> list[str]:
    """Every assignment of the course: the exercise notebooks' names."""
    if root is not None and (root / "exercises").is_dir():
        return sorted(p.stem for p in (root / "exercises").glob("*.ipynb"))
    from .checks.core import all_exercises

    return sorted({f"{ex.chapter}" for ex in all_exercises().values()})


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def assignment_of(path: Path, known: list[str]) -> str | None:
    """Which assignment a copy is: its metadata, else its file name (as the grader does)."""
    try:
        meta = _read(path).get("metadata", {}).get("course", {})
        claimed = meta.get("assignment") if isinstance(meta, dict) else None
    except (OSError, ValueError, AttributeError):
        claimed = None
    if claimed in known:
        return claimed
    stem = path.stem.removesuffix(WORK_SUFFIX)
    if stem in known:
        return stem
    inside = [a for a in known if a in path.name]
    return max(inside, key=len) if inside else None


def find_copies(work: Path, known: list[str]) -> dict[str, Path]:
    """{assignment: the learner's copy}; the copy named as `make lab` names it wins a tie,
    then the most recently saved one."""
    found: dict[str, list[Path]] = {}
    for path in sorted(work.glob("*.ipynb")) if work.is_dir() else []:
        assignment = assignment_of(path, known)
        if assignment:
            found.setdefault(assignment, []).append(path)
    chosen = {}
    for assignment, paths in found.items():
        canonical = [p for p in paths if p.name == f"{assignment}{WORK_SUFFIX}.ipynb"]
        chosen[assignment] = canonical[0] if canonical else max(paths, key=os.path.getmtime)
    return chosen


# --------------------------------------------------------------------------- verdicts


def one_line(text: str) -> str:
    """A message on one line, in full: its lines joined, colour codes removed."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text))
    return " ".join(s.strip() for s in text.splitlines() if s.strip())


def reason_of(case: str, message: str) -> str:
    """A failed case's reason on one line, in full, leading with what the check named as the
    likely cause (or its hint): "Likely cause: ... (case 'x': expected ..., got ...)"."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(message))
    lines = [s.strip() for s in text.splitlines() if s.strip()]
    for i, line in enumerate(lines):
        if line.startswith(LEADS):
            cause = " ".join([line, *lines[i + 1 :]])
            rest = " ".join(lines[:i])
            return f"{cause} ({case}: {rest})" if rest else f"{cause} ({case})"
    return one_line(f"{case}: {text}")


def verdict_of_results(results: list) -> tuple[str, str]:
    """(status, reason) from a check's case results (course_lib.checks.core.CaseResult)."""
    if any(r.not_implemented for r in results):
        return NOT_STARTED, ""
    failed = [r for r in results if not r.passed]
    if results and not failed:
        return PASSED, ""
    if not results:
        return FAILING, "no cases ran"
    first = failed[0]
    return FAILING, reason_of(first.name, first.message)


def run_visible_cases(exercise_id: str, fn) -> tuple[str, str]:
    """Check ``fn`` on the exercise's visible cases, as its check cell does; print nothing."""
    from .checks.core import VISIBLE_SEED, _cases, evaluate_case, get_exercise, run_case

    ex = get_exercise(exercise_id)
    if fn is None or not callable(fn):
        return FAILING, f"no function named `{ex.target}` was defined"
    results = []
    for case in _cases(ex, False, VISIBLE_SEED):
        got, failure = run_case(ex, fn, case, full=False)
        if failure is None:
            try:
                failure = evaluate_case(ex, case, got, full=False)
            except Exception as err:  # a reference that chokes on odd input
                from .checks.core import CaseResult

                failure = CaseResult(case.name, False, f"could not compare: {err}")
        results.append(failure)
        if failure.not_implemented:
            break
    return verdict_of_results(results)


# --------------------------------------------------------------------------- one copy, in a child


def _cell_meta(cell: dict) -> dict:
    meta = cell.get("metadata", {}).get("course")
    return meta if isinstance(meta, dict) else {}


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


# ------------------------------- a learner's solution cells: for `make progress` and the grader


def grade_id(assignment: str, exercise_id: str, role: str = "solution") -> str:
    """nbgrader's ``grade_id`` of an exercise's cell (the one format, written here)."""
    return f"{assignment}-{exercise_id}-{role}".replace(".", "_")


def defines(source: str, name: str) -> bool:
    """True when a cell binds ``name`` at its top level (def, class, assignment, import)."""
    import ast

    lines = ["" if ln.lstrip().startswith(("%", "!", "?")) else ln for ln in source.splitlines()]
    try:
        body = ast.parse("\n".join(lines)).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return bool(re.search(rf"^[ \t]*def[ \t]+{re.escape(name)}[ \t]*\(", source, re.M))
    for node in body:
        bound = [getattr(node, "name", None)]  # def, class
        bound += [a.asname or a.name.split(".")[0] for a in getattr(node, "names", [])]
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        bound += [n.id for t in targets if t for n in ast.walk(t) if isinstance(n, ast.Name)]
        if name in bound and not isinstance(node, (ast.For, ast.AsyncFor, ast.Global)):
            return True
    return False


@dataclass
class Found:
    """``cells`` (code, in order), ``chosen`` (the one the check cell saw), ``how`` they were
    found, and ``kind``: the cell type of a tagged cell that is no longer code."""

    cells: list
    chosen: dict | None
    how: str
    kind: str = ""


def _tagged(cells: list, exercise_id: str, role: str) -> list:
    meta = [(c, _cell_meta(c)) for c in cells]
    return [c for c, m in meta if str(m.get("exercise")) == exercise_id and m.get("role") == role]


def find_solution_cells(cells: list, assignment: str, exercise_id: str, target: str) -> Found:
    """The learner's solution cells of one exercise (by exercise id, else nbgrader's
    ``grade_id``, else the last code cell defining ``target``), and the one that counts.
    Several may keep the tag (JupyterLab's Duplicate copies metadata): the one the check
    cell saw counts. Of those above the check cell (all, if none is), an untouched
    placeholder is left out when another has code; then the one run last before the
    check cell (execution counts, when saved), else the last one (a top-to-bottom run)."""
    cells = [c for c in cells if isinstance(c, dict)]
    found, how = _tagged(cells, exercise_id, "solution"), "exercise id"
    if not found:
        gid, how = grade_id(assignment, exercise_id), "nbgrader grade_id"
        found = [
            c for c in cells if (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == gid
        ]
    if not found:
        how = "function name"
        found = [
            c
            for c in cells
            if c.get("cell_type") == "code"
            and _cell_meta(c).get("role") not in ("check", "statement")
            and defines(_source(c), target)
        ][-1:]
    code = [c for c in found if c.get("cell_type") == "code"]
    if not code:
        return Found([], None, how, str(found[0].get("cell_type")) if found else "")
    if len(code) == 1:
        return Found(code, code[0], how)
    place = {id(c): i for i, c in enumerate(cells)}
    check = (_tagged(cells, exercise_id, "check") or [None])[0]
    above = [c for c in code if check is None or place[id(c)] < place[id(check)]] or code
    from .checks.core import PLACEHOLDER_MARK

    started = [c for c in above if PLACEHOLDER_MARK not in _source(c)] or above
    ran_at = _count(check) if check is not None else -1
    runs = [(_count(c), i) for i, c in enumerate(started) if -1 < _count(c) < ran_at]
    return Found(code, started[max(runs)[1]] if runs else started[-1], how)


def _count(cell: dict) -> int:
    n = cell.get("execution_count")
    return n if isinstance(n, int) and not isinstance(n, bool) else -1


def solution_cells(copy_nb: dict, assignment: str, ex) -> list[str]:
    """The source of the exercise's solution cell that counts (:func:`find_solution_cells`)."""
    found = find_solution_cells(copy_nb.get("cells", []), assignment, ex.id, ex.target)
    return [_source(found.chosen)] if found.chosen is not None else []


class _Alarm(BaseException):
    """Raised in the child when a cell runs past EXERCISE_TIMEOUT_S (not an Exception, so a
    learner's `except Exception` cannot swallow it)."""


def _with_alarm(seconds: float, fn, *args):
    import signal

    if not hasattr(signal, "SIGALRM"):  # Windows: the parent's time limit still applies
        return fn(*args)

    def ring(signum, frame):
        raise _Alarm()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _error_line(result) -> str:
    err = result.error_in_exec or result.error_before_exec
    return one_line(f"{type(err).__name__}: {err}") if err is not None else ""


def probe(copy: Path, base: Path, assignment: str, out: Path, limit: float) -> None:
    """Run in a child process: the rebuilt notebook, one JSON line per exercise into ``out``."""
    from IPython.core.interactiveshell import InteractiveShell

    from .checks.core import PLACEHOLDER_MARK, get_exercise

    copy_nb, base_nb = _read(copy.resolve()), _read(base.resolve())
    shell = InteractiveShell.instance()
    out_file = open(out, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the whole run)

    def record(ex_id: str, status: str, reason: str = "") -> None:
        out_file.write(json.dumps({"exercise": ex_id, "status": status, "reason": reason}) + "\n")
        out_file.flush()

    def run(src: str, learner: bool) -> str:
        """Run one cell; '' when fine, else a one-line error. The learner's cells have a time
        limit ('timeout'); the course's own cells only the parent's (an import of torch on a
        busy machine may take long, and must not be interrupted)."""
        if not learner:
            return _error_line(shell.run_cell(src, store_history=False, silent=True))
        try:
            result = _with_alarm(limit, shell.run_cell, src, False, True)
        except _Alarm:
            return "timeout"
        if isinstance(result.error_in_exec, _Alarm):
            return "timeout"
        return _error_line(result)

    broken = setup = ""  # the first course cell that failed; a package it could not import
    solution_error: dict[str, str] = {}
    for i, cell in enumerate(base_nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        meta = _cell_meta(cell)
        role, ex_id = meta.get("role"), meta.get("exercise")
        if role in ("colab", "progress"):
            continue
        if role == "solution" and ex_id is not None:
            ex = get_exercise(str(ex_id))
            sources = solution_cells(copy_nb, assignment, ex)
            if not sources:
                solution_error[ex.id] = "no solution cell for it in your copy (deleted?)"
            for src in sources:
                err = run(src, learner=True)
                if err:
                    solution_error[ex.id] = err
        elif role == "check" and ex_id is not None:
            ex = get_exercise(str(ex_id))
            err = solution_error.get(ex.id, "")
            if err and PLACEHOLDER_MARK in err:
                record(ex.id, NOT_STARTED)
                continue
            if err == "timeout":
                record(ex.id, FAILING, f"your solution cell ran past {limit:g} s")
                continue
            try:
                status, reason = _with_alarm(
                    limit, run_visible_cases, ex.id, shell.user_ns.get(ex.target)
                )
            except _Alarm:
                status, reason = FAILING, f"your function ran past {limit:g} s (infinite loop?)"
            if status == FAILING and setup:  # the course's packages, not the learner's work
                status, reason = NOT_CHECKED, setup
            elif status != PASSED and err:
                reason = f"your solution cell raised {err}"
            elif status != PASSED and broken and not reason:
                reason = broken
            record(ex.id, status, reason)
        else:
            err = run(_source(cell), learner=False)
            if err and not broken:
                broken = one_line(f"cell {i} of the notebook failed: {err}")
            if err.startswith("ModuleNotFoundError") and not setup:
                setup = f"set-up problem, not your work ({err}): fix it with `{_install()}`"
    out_file.close()


def _install() -> str:
    """The one command that installs the course's packages into this Python."""
    return f'"{sys.executable}" -m pip install -e "{course_root() or "."}"'


def untouched(copy: Path, base: Path, assignment: str) -> bool:
    """Every exercise's solution cell (the one that counts) is the blank's placeholder, as
    copied: each verdict is "not started", known from the file without running it."""
    from .checks.core import PLACEHOLDER_MARK

    cells = [_read(p).get("cells", []) for p in (copy, base)]
    for ex in exercises_of(assignment):
        mine, blank = (find_solution_cells(c, assignment, ex.id, ex.target).chosen for c in cells)
        text = _source(blank) if blank is not None else ""
        if mine is None or PLACEHOLDER_MARK not in text or _source(mine) != text:
            return False
    return True


def check_copy(
    copy: Path, base: Path, assignment: str, timeout: float = NOTEBOOK_TIMEOUT_S
) -> list[Row]:
    """Check one learner copy in a child process (none for an untouched copy); never writes
    to the copy."""
    exercises = exercises_of(assignment)
    copy, base = Path(copy).expanduser().resolve(), Path(base).expanduser().resolve()
    if untouched(copy, base, assignment):
        return not_started(assignment, "", str(copy))
    with tempfile.TemporaryDirectory(prefix="course-progress-") as tmp:
        out = Path(tmp) / "verdicts.jsonl"
        out.touch()
        env = {"OMP_NUM_THREADS": "1", **os.environ, "MPLBACKEND": "Agg", "COURSE_PROGRESS": "1"}
        env.update(IPYTHONDIR=str(Path(tmp) / "ipython"), PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable, "-m", "course_lib.progress", "--probe", str(copy), str(base)]
        cmd += [assignment, str(out), str(min(EXERCISE_TIMEOUT_S, timeout / 2))]  # + start-up
        quiet: dict[str, Any] = {k: subprocess.DEVNULL for k in ("stdin", "stdout", "stderr")}
        timed_out = False
        try:
            subprocess.run(cmd, cwd=copy.parent, env=env, timeout=timeout, **quiet)
        except subprocess.TimeoutExpired:
            timed_out = True
        verdicts = {}
        for line in out.read_text(encoding="utf-8").splitlines():
            try:
                v = json.loads(line)
                verdicts[v["exercise"]] = v
            except (ValueError, KeyError):
                continue
    rows, first_missing = [], True
    for ex in exercises:
        v = verdicts.get(ex.id)
        if v is None:
            why = "an earlier cell stopped the run" if first_missing else ""
            if timed_out and first_missing:
                why = f"the copy did not finish within {timeout:g} s"
            status = FAILING if timed_out and first_missing else NOT_CHECKED
            first_missing = False
            rows.append(Row(assignment, ex.id, ex.title, status, 0, ex.points, why, str(copy)))
            continue
        points = ex.points if v["status"] == PASSED else 0
        rows.append(
            Row(assignment, ex.id, ex.title, v["status"], points, ex.points, v["reason"], str(copy))
        )
    return rows


def not_started(assignment: str, why: str, source: str = "") -> list[Row]:
    return [
        Row(assignment, ex.id, ex.title, NOT_STARTED, 0, ex.points, why, source)
        for ex in exercises_of(assignment)
    ]


def course_progress(
    work: Path | None = None, root: Path | None = None, jobs: int | None = None
) -> list[Row]:
    """Every exercise of the course, from the learner's copies in ``work``."""
    root = Path(root).resolve() if root else course_root()
    # absolute: each copy is checked in a child whose working directory is the copy's folder
    work = Path(work) if work is not None else (root / "work" if root else Path("work"))
    work = work.expanduser().resolve()
    known = assignments(root)
    copies = find_copies(work, known)
    jobs = jobs or max(1, min(4, os.cpu_count() or 1))

    def one(assignment: str) -> list[Row]:
        copy = copies.get(assignment)
        if copy is None:
            return not_started(assignment, f"no copy in {work.name}/ yet")
        base = root / "exercises" / f"{assignment}.ipynb" if root else copy
        return check_copy(copy, base if base.exists() else copy, assignment)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, known))
    return [row for rows in results for row in rows]


def chapter_progress(assignment: str) -> list[Row]:
    """This chapter's exercises, from the checks run in this kernel (their last run)."""
    from .checks.core import LAST_REPORTS

    rows = []
    for ex in exercises_of(assignment):
        report = LAST_REPORTS.get(ex.id)
        if report is None:
            status, reason = NOT_CHECKED, "its check cell has not run in this kernel"
        else:
            status, reason = verdict_of_results(report.results)
        points = ex.points if status == PASSED else 0
        rows.append(
            Row(assignment, ex.id, ex.title, status, points, ex.points, reason, "this notebook")
        )
    return rows


# --------------------------------------------------------------------------- the table


def table(rows: list[Row]) -> str:
    """The progress table as text (monospace: a terminal or a notebook's output)."""
    if not rows:
        return "No exercises found."
    got = sum(r.points for r in rows)
    total = sum(r.max_points for r in rows)
    done = sum(r.status == PASSED for r in rows)
    title_w = min(40, max(len(r.title) for r in rows))
    lines = [
        f"{'chapter':<26} {'exercise':<{title_w + 6}} {'points':>6}  status",
        "-" * (26 + title_w + 6 + 8 + 30),
    ]
    previous = None
    for r in rows:
        chapter = r.assignment if r.assignment != previous else ""
        previous = r.assignment
        title = r.title if len(r.title) <= title_w else r.title[: title_w - 1] + "…"
        status = f"{MARKS.get(r.status, ' ')} {r.status}" + (f": {r.reason}" if r.reason else "")
        lines.append(
            f"{chapter:<26} {r.exercise:<5} {title:<{title_w}} {r.points:>3}/{r.max_points:<2}  "
            f"{status}"
        )
    lines.append("")
    lines.append(f"{done} of {len(rows)} exercises passed; {got} of {total} points.")
    return "\n".join(lines)


def show(assignment: str | None = None, work: str | Path | None = None) -> list[Row]:
    """Print the progress table and return its rows.

    ``show()``: the whole course, from the copies in work/ (a minute or so: each copy runs).
    ``show("02_qkv_attention")``: that chapter, from the checks run in this kernel.
    """
    if os.environ.get("COURSE_GRADING") == "1" or os.environ.get("COURSE_PROGRESS") == "1":
        print("(progress table skipped while grading)")
        return []
    if assignment is not None:
        rows = chapter_progress(assignment)
        print(table(rows))
        print(
            "\nThe whole course, from your saved copies in work/: `make progress` in a "
            "terminal, or `progress.show()`."
        )
        return rows
    t0 = time.monotonic()
    rows = course_progress(Path(work) if work is not None else None)
    print(table(rows))
    print(
        f"\n(checked your saved copies in {time.monotonic() - t0:.0f} s; your files were not changed)"
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--probe"]:
        copy, base, assignment, out, limit = argv[1:6]
        probe(Path(copy), Path(base), assignment, Path(out), float(limit))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.progress",
        description="Check your exercise copies (without changing them) and print where "
        "you stand: passed, failing (and why) or not started, with points.",
    )
    parser.add_argument("work", nargs="?", type=Path, default=None, help="default: work/")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--jobs", type=int, default=None, help="copies checked at once")
    args = parser.parse_args(argv)
    root = course_root()
    work = (args.work or (root / "work" if root else Path("work"))).expanduser()
    if not work.is_dir():
        print(
            f"No {work}/ folder yet: `make lab` makes your copies of the exercises there.",
            file=sys.stderr,
        )
    rows = course_progress(work, root, args.jobs)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(f"Your exercises in {work}/ (checked without changing them):\n")
        print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
