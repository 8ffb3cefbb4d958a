"""Grade one submission in a process of its own: ``python -m course_tools.grading.worker FD``.

The command-line tool decides what it can without a kernel (:func:`grade` with
``kernel=False``) and starts one worker per remaining submission (``--jobs`` at a time).
The worker

1. reads its job (and a one-time key) from stdin and checks that the course's files are
   the ones the grader started with;
2. parses the submission, finds its assignment, rebuilds the notebook
   (:mod:`course_tools.grading.rebuild`), draws the grader's cases (from the seed and the
   learner code's fingerprint) and writes only their inputs where the kernel can read
   them; imports everything scoring needs (:func:`warm_up`); then runs the notebook in a
   sandboxed kernel (:mod:`course_tools.grading.run`);
3. right after each harvest cell, scores the recorded outputs here, in the grader's own
   process (:func:`course_tools.grading.results.score`), deletes them, and reports an
   exercise's earned points at once;
4. sends its result to the parent on file descriptor FD, each line signed with the key
   (HMAC-SHA256): a kernel that finds that pipe cannot forge a verdict.

In the sandbox a kernel cannot see this process at all; without it, a kernel that kills
this process costs its submission the exercises not yet scored, and the others go on.
"""

from __future__ import annotations

import sys

# jsonschema (imported by nbformat) imports the optional package rfc3987_syntax, which
# compiles a grammar at import time: over a second of CPU per process, for a URI format
# check nbformat never uses. The grader's processes skip it.
# (A None entry blocks the import, as documented; typeshed types sys.modules as modules only.)
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import base64  # noqa: E402
import hashlib  # noqa: E402
import hmac  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import site  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

STATUSES = ("passed", "failed", "error", "timeout", "missing")
MAX_RESULT_BYTES = 256 * 2**20  # what the grader reads of one exercise's recorded outputs
MAX_RECORD_BYTES = 16 * 2**20  # its .json: names and small values (arrays are in the .npz)
MAX_FEEDBACK_LINES = 200  # what a row keeps of its feedback: lines, and characters each
MAX_FEEDBACK_LINE = 5000


# --------------------------------------------------------------------------- integrity


def _hook_files() -> list[Path]:
    """Files Python runs at every start-up: a kernel that planted one would run code in
    every later worker and kernel."""
    files: list[Path] = []
    for d in sorted({*site.getsitepackages(), site.getusersitepackages()}):
        if Path(d).is_dir():
            files += sorted(Path(d).glob("*.pth"))
            files += [
                Path(d) / n
                for n in ("sitecustomize.py", "usercustomize.py")
                if (Path(d) / n).exists()
            ]
    return files


def course_files(root: Path) -> list[Path]:
    """The files a verdict depends on: every file of the packages ``course_lib`` and
    ``course_tools`` (sources, compiled ``__pycache__/*.pyc``, data: a file planted there
    changes the list), and the course's solution notebooks."""
    import course_lib
    import course_tools

    files: set[Path] = set()
    for init in (course_lib.__file__, course_tools.__file__):
        folder = Path(init).resolve().parent
        files |= {f for f in folder.rglob("*") if f.is_file() or f.is_symlink()}
    files |= set(Path(root).resolve().glob("solutions/*.ipynb"))
    return sorted(files)


def hash_files(paths) -> dict[str, str]:
    out = {}
    for f in paths:
        try:
            out[str(f)] = hashlib.sha256(Path(f).read_bytes()).hexdigest()
        except OSError:
            out[str(f)] = "missing"
    return out


def manifest(root: Path) -> dict[str, str]:
    """sha256 of the course files (:func:`course_files`, listed afresh: a new file counts)
    and of the start-up hooks present now."""
    return hash_files(sorted({*map(str, course_files(root)), *map(str, _hook_files())}))


def changed_files(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


# --------------------------------------------------------------------------- rows


def row(
    submission: str,
    assignment: str,
    exercise: str,
    points: float,
    max_points: float,
    status: str,
    feedback: list[str],
    title: str = "",
    diagnoses: list[str] | None = None,
) -> dict:
    """One gradebook row; ``diagnoses``: the checks' own diagnoses of a failure (made in
    the grader's process, see :class:`course_tools.grading.results.Verdict`)."""
    assert status in STATUSES, status
    feedback = [str(f)[:MAX_FEEDBACK_LINE] for f in list(feedback)[:MAX_FEEDBACK_LINES]]
    return {
        "submission": submission,
        "assignment": assignment,
        "exercise": exercise,
        "points": points,
        "max_points": max_points,
        "status": status,
        "feedback": list(feedback),
        "title": title,
        "diagnoses": [str(d)[:MAX_FEEDBACK_LINE] for d in (diagnoses or [])[:MAX_FEEDBACK_LINES]],
    }


def whole_submission_rows(
    sub_id: str, assignment: str | None, course, status: str, reason: str
) -> list[dict]:
    """Rows for a submission that could not be graded at all: one per exercise if its
    assignment is known, else a single row with an empty exercise."""
    from course_lib.checks.core import get_exercise

    if assignment and assignment in course.exercises:
        rows = []
        for ex_id in course.exercises[assignment]:
            ex = get_exercise(ex_id)
            rows.append(row(sub_id, assignment, ex_id, 0, ex.points, status, [reason], ex.title))
        return rows
    return [row(sub_id, assignment or "", "", 0, 0, status, [reason])]


# --------------------------------------------------------------------------- grading


def results_problem(folder: Path) -> str | None:
    """Why the recorded outputs in ``folder`` must not be read, or None.

    The kernel wrote them, so they are untrusted: only regular files (no links, pipes or
    devices, which could make the grader read forever) of a bounded total size.
    """
    import stat

    if not folder.exists():
        return None
    if folder.is_symlink() or not folder.is_dir():
        return "the results folder was replaced by something else"
    import zipfile

    from .results import zip_problem

    total = 0
    for n, f in enumerate(folder.iterdir()):
        if n >= 100:
            return "the results folder holds more than 100 files"
        st = os.lstat(f)
        if not stat.S_ISREG(st.st_mode):
            return f"the results folder holds a non-file ({f.name})"
        total += st.st_size
        if f.suffix == ".json" and st.st_size > MAX_RECORD_BYTES:
            return (
                f"the recorded results ({f.name}) take {st.st_size / 2**20:.0f} MB, more "
                f"than the {MAX_RECORD_BYTES / 2**20:.0f} MB the grader reads"
            )
        if f.suffix == ".npz":  # a zip: what it unpacks to counts, not its size on disk
            problem = zip_problem(f)  # (its entries counted from the end record first)
            if problem:
                return problem
            with zipfile.ZipFile(f) as zf:
                total += sum(i.file_size for i in zf.infolist()) - st.st_size
    if total > MAX_RESULT_BYTES:
        return (
            f"your function's outputs take {total / 2**20:.0f} MB, more than the "
            f"{MAX_RESULT_BYTES / 2**20:.0f} MB the grader reads"
        )
    return None


def _harvest_failure(h, cell_timeout) -> tuple[str, float, list[str]] | None:
    """The verdict when the harvest cell itself timed out or its kernel died."""
    if h is None:
        return None
    if h.status == "timeout":
        if "total time limit" in h.message:
            why = (
                "your function was still running when the notebook reached "
                f"its total time limit ({h.message})"
            )
        else:
            why = (
                f"your function did not finish within {cell_timeout:g} s on the "
                "grader's tests: an infinite loop, or far too slow"
            )
        return "timeout", 0, [why]
    if h.status == "died":
        if "was stopped" in h.message or "connection" in h.message:
            return "error", 0, [f"while your function ran on the grader's tests, {h.message}"]
        return (
            "error",
            0,
            [
                "the kernel crashed while your function ran on the grader's tests "
                "(os._exit, sys.exit from native code, a segfault, or running out "
                "of memory)"
            ],
        )
    return None


def _solution_cell_failure(outcomes, sol_cells) -> tuple[str, float, list[str]] | None:
    """The verdict when one of the exercise's own cells hung or crashed its kernel."""
    for i in sol_cells:
        o = outcomes[i]
        if o.status == "timeout":
            return (
                "timeout",
                0,
                [
                    f"your solution cell itself did not finish ({o.message}): "
                    "is there an infinite loop outside the function?"
                ],
            )
        if o.status == "died" and ("was stopped" in o.message or "connection" in o.message):
            return "error", 0, [f"in your solution cell: {o.message}"]
        if o.status == "died":
            return (
                "error",
                0,
                [
                    "the kernel crashed while your solution cell ran (os._exit, a "
                    "signal, a crash in native code, or out of memory)"
                ],
            )
    return None


def _scored_verdict(ex, v, h, errored) -> tuple[str, float, list[str]]:
    """The verdict from the score of the recorded outputs, with the cells' errors."""
    if (
        errored
        and v.status in ("missing", "error", "failed")
        and not any("not implemented" in f for f in v.feedback)
    ):
        # the cell raised (a NameError, say) and the function did not pass: `error`, as the
        # guide's table says, with the exception named first
        return "error", 0, [f"your solution cell raised {errored[-1].message}"] + v.feedback
    if v.status == "error" and h is not None and h.status == "error":
        if h.message.startswith(("SystemExit", "KeyboardInterrupt")):
            return (
                "error",
                0,
                [
                    f"your function stopped the program ({h.message}): it must "
                    "return its result, not call sys.exit() or exit()"
                ],
            )
        return "error", 0, [f"the check of this exercise could not run: {h.message}"] + v.feedback
    if v.status == "missing" and v.feedback[:1] == ["not implemented"]:
        rest = [f for f in v.feedback[1:] if not f.endswith("not implemented yet")]
        return (
            "missing",
            0,
            [
                f"not implemented yet: `{ex.target}` still raises "
                "NotImplementedError (the placeholder line)"
            ]
            + rest,
        )
    return v.status, v.points, v.feedback


def _verdict_for(ex, plan, outcomes, verdicts, cell_timeout) -> tuple[str, float, list[str]]:
    """Combine the score of the recorded outputs with what happened to the cells."""
    ex_id = ex.id
    sol_cells = [
        i for i, (r, e) in enumerate(plan.roles) if r in ("solution", "learner") and e == ex_id
    ]
    harvest = [i for i, (r, e) in enumerate(plan.roles) if r == "harvest" and e == ex_id]
    v = verdicts.get(ex_id)
    errored = [outcomes[i] for i in sol_cells if outcomes[i].status == "error"]
    if v is not None and v.status == "passed":
        # the check saw a working definition; the exception the cell raised is still named
        raised = [
            f"your solution cell raised {o.message}: the function it defined passed, but "
            "a top-to-bottom run of your notebook stops at that cell"
            for o in errored[-1:]
        ]
        return "passed", v.points, raised + v.feedback
    h = outcomes[harvest[0]] if harvest else None
    failed = _harvest_failure(h, cell_timeout) or _solution_cell_failure(outcomes, sol_cells)
    if failed:
        return failed
    if h is not None and h.status == "skipped":
        status = "timeout" if "time limit" in h.message else "error"
        return status, 0, [f"your function was never checked: {h.message}"]
    if v is None:
        msg = h.message if h is not None and h.message else "no results were recorded"
        extra = [f"your solution cell raised {errored[-1].message}"] if errored else []
        return "error", 0, extra + [f"the check of this exercise did not run: {msg}"]
    return _scored_verdict(ex, v, h, errored)


def warm_up(exercise_ids: list[str]) -> None:
    """Import, before any learner code runs, everything scoring will use: each exercise's
    checks and references, numpy's archive reading and writing, the comparisons. Run on
    one case of each exercise with the reference as the "learner"."""
    import io
    import zipfile  # noqa: F401

    import numpy as np

    from course_lib.checks.core import cases_for, evaluate_case, get_exercise

    from .results import _flatten, _unflatten

    for ex_id in exercise_ids:
        ex = get_exercise(ex_id)
        try:
            case = cases_for(ex_id, False, 0)[0]
            got = ex.reference(*case.args, **case.kwargs)
            arrays: dict = {}
            node = _flatten(got, "c0", arrays)
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            buf.seek(0)
            with np.load(buf, allow_pickle=False) as loaded:
                evaluate_case(ex, case, _unflatten(node, loaded))
        except Exception:  # a warm-up is best effort: scoring reports real problems
            pass


def grade(job: dict, send=None, course=None, kernel: bool = True) -> dict | None:
    """Grade one submission described by ``job``; return its result (rows, notes, flags).

    The stages: read the submission and find its assignment (:func:`_read`), rebuild it
    from the course's copy (:func:`_rebuild`), run it in a kernel, scoring each harvest
    as it finishes (:func:`_run`), then turn scores and cell outcomes into rows
    (:func:`_exercise_rows`) and notes (:func:`_course_cell_notes`).

    ``send(payload)`` (when given) reports progress to the grader: the assignment once
    known, each kernel's pid, each exercise's row as soon as it is scored, so a crash of
    this process later loses nothing already earned. With ``kernel=False`` (the grader's
    triage, in its own process), a submission that needs a kernel returns None instead.
    """
    from .rebuild import Course
    from .run import CellOutcome

    send = send or (lambda payload: None)
    t0 = time.monotonic()
    course = course or Course.load(Path(job["root"]), check=False)
    result = {"submission": job["submission"], "assignment": "", "rows": [], "notes": []}
    result["flags"] = {}

    def finish(rows):
        result["rows"] = rows
        result["seconds"] = round(time.monotonic() - t0, 2)
        return result

    nb, early = _read(job, course, result, send)
    if early is not None:
        return finish(early)
    plan, where = _rebuild(job, nb, result["assignment"], course)
    if plan.needs_kernel and not kernel:
        return None
    result["flags"] = plan.flags
    result["notes"] += plan.notes.pop("*", [])
    for why in (result.pop("unstated", None), result.pop("mismatch", None)):
        if why:
            plan.flags.setdefault("*", []).insert(0, why)
    verdicts: dict = {}
    outcomes: list = [CellOutcome("skipped", "not run") for _ in plan.roles]
    if plan.needs_kernel:
        outcomes = _run(job, plan, where, verdicts, send, result["notes"])
    rows = _exercise_rows(job, plan, outcomes, verdicts)
    result["notes"] += _course_cell_notes(plan, outcomes)
    return finish(rows)


def _read(job: dict, course, result: dict, send) -> tuple[object, list[dict] | None]:
    """Stage 1: the submission's notebook and assignment (set in ``result``), or the rows
    of a submission that cannot be graded at all."""
    from .rebuild import (
        SubmissionError,
        assignment_from_name,
        claimed_assignment,
        identify,
        parse_notebook,
    )

    sub_id, name = job["submission"], job["name"]
    data = (
        base64.b64decode(job["notebook_b64"])
        if "notebook_b64" in job
        else Path(job["notebook"]).read_bytes()
    )
    try:
        nb, notes = parse_notebook(data)
    except SubmissionError as err:
        assignment = assignment_from_name(name, course)
        result["assignment"] = assignment or ""
        return None, whole_submission_rows(sub_id, assignment, course, err.status, err.reason)
    result["notes"] += notes
    assignment, how = identify(nb, name, course, job.get("expected"))
    if assignment is None:
        known = ", ".join(course.notebooks) or "none"
        reason = (
            f"unknown assignment: neither the notebook's metadata nor its file name "
            f"{name!r} nor its exercise ids match one of this course's assignments ({known})"
        )
        return None, whole_submission_rows(sub_id, None, course, "error", reason)
    result["assignment"] = assignment
    send({"assignment": assignment})
    if assignment in course.broken:
        reason = (
            "the course's own copy of this assignment "
            f"could not be read, so nothing was graded: {course.broken[assignment]}"
        )
        return None, whole_submission_rows(sub_id, assignment, course, "error", reason)
    claimed = claimed_assignment(nb, course)
    if claimed and claimed != assignment:
        result["mismatch"] = (
            f"handed in as {assignment} ({job.get('expected_from') or 'its name'}), but the "
            f"notebook's metadata says it is {claimed}: graded as {assignment}"
        )
        result["notes"].append(
            result["mismatch"] + "; if the wrong notebook was handed in, hand in the right one"
        )
    elif how not in ("metadata", "expected"):
        result["notes"].append(f"assignment {assignment} recognised by its {how}")
    if how != "expected":  # nothing the instructor controls said which assignment this is
        result["unstated"] = (
            f"graded as {assignment}, which its {how} names: no --assignment was given and "
            "neither its file name nor its folder names an assignment; check that it is "
            "the one handed in for (grade with --assignment, or name the folder)"
        )
    return nb, None


@dataclass
class _Where:
    """A submission's scratch folders: the kernel's working folder ``box`` (writable in
    the sandbox), the cases' inputs (read-only there), and per exercise the input file and
    the folder its harvest writes."""

    scratch: Path
    box: Path
    inputs_dir: Path
    harvest_dirs: dict[str, str]
    inputs: dict[str, str]


def _rebuild(job: dict, nb, assignment: str, course):
    """Stage 2: the notebook to run (:func:`course_tools.grading.rebuild.rebuild`) and
    where its files go."""
    from .rebuild import rebuild

    scratch = Path(job["scratch"])
    box, inputs_dir = scratch / "box", scratch / "inputs"
    exercises = course.exercises[assignment]
    where = _Where(
        scratch,
        box,
        inputs_dir,
        {e: str(box / f"results-{e}") for e in exercises},
        {e: str(inputs_dir / f"{e}.pkl") for e in exercises},
    )
    return rebuild(nb, assignment, course, where.harvest_dirs, where.inputs), where


def _kernel_place(job: dict, where: _Where):
    """Where and with which limits the kernels run: the sandbox the grader found (or
    none), the environment, the limits (and cgroups) it chose."""
    from .run import KernelPlace, kernel_env
    from .sandbox import CgroupSet, Limits, Sandbox
    from .sandbox import kernel_env as sandbox_env

    root = Path(job["root"])
    threads = int(job.get("threads", 1))
    sandbox = None
    if job.get("sandbox"):
        how = job["sandbox"]
        sandbox = Sandbox(
            how["bwrap"], how["user_namespace"], version=tuple(how["version"]), hide=[root]
        )
        env = sandbox_env(threads, hide=[root])
    else:
        env = kernel_env(threads, where.scratch / "private")
    lim = dict(job.get("limits") or {})
    cg = lim.pop("cgroup", None)
    limits = Limits(**lim)
    if cg:
        limits.cgroup = CgroupSet.from_json(cg)
    return KernelPlace(
        box=where.box,
        channels=where.scratch / "channels",
        env=env,
        inputs=where.inputs_dir,
        sandbox=sandbox,
        limits=limits,
    )


def _run(job: dict, plan, where: _Where, verdicts: dict, send, notes: list[str]) -> list:
    """Stage 3: run the rebuilt notebook in a kernel; right after each harvest cell, score
    what it recorded (here, never in the kernel), delete it and report earned points."""
    from course_lib.checks.core import get_exercise

    from .results import Verdict, fixed_cases, grader_cases, score, write_inputs
    from .run import CellOutcome, execute

    harvested = [e for r, e in plan.roles if r == "harvest"]
    warm_up(harvested)  # everything scoring needs, imported before learner code runs
    where.box.mkdir(parents=True, exist_ok=True)
    where.inputs_dir.mkdir(parents=True, exist_ok=True)
    cases, fixed = {}, {}
    partial = bool(job.get("partial"))
    for ex_id in harvested:
        cases[ex_id] = grader_cases(ex_id, int(job["seed"]), plan.fingerprint)
        write_inputs(cases[ex_id], where.inputs[ex_id], ex_id)
        if partial:  # the written-out cases earn no partial credit on their own
            fixed[ex_id] = fixed_cases(ex_id, cases[ex_id], int(job["seed"]), plan.fingerprint)

    def on_cell(i, outcome):
        role, ex_id = plan.roles[i]
        if role != "harvest":
            return
        folder = where.harvest_dirs[ex_id]
        ex = get_exercise(ex_id)
        problem = results_problem(Path(folder))
        if problem:
            verdicts[ex_id] = Verdict(ex_id, 0, ex.points, "error", [problem])
        else:
            try:
                verdicts[ex_id] = score(ex_id, cases[ex_id], folder, partial, fixed.get(ex_id))
            except MemoryError:  # the grader's own limit for one submission
                verdicts[ex_id] = Verdict(ex_id, 0, ex.points, "error", [_over_memory(job)])
        shutil.rmtree(folder, ignore_errors=True)
        v = verdicts[ex_id]
        if v.status == "passed" or v.points:  # earned: the grader keeps it whatever follows
            earned = row(
                job["submission"],
                plan.assignment,
                ex_id,
                v.points,
                ex.points,
                v.status,
                v.feedback,
                ex.title,
            )
            send({"earned": earned})

    try:
        return execute(
            plan.nb,
            plan.roles,
            _kernel_place(job, where),
            cell_timeout=float(job["cell_timeout"]),
            total_timeout=float(job["timeout"]),
            on_kernel=lambda pid: send({"kernel_pid": pid}),
            on_cell=on_cell,
        )
    except Exception as err:  # the kernel's machinery failed: keep what was scored
        notes.append(f"grading stopped early: {type(err).__name__}: {str(err)[:300]}")
        return [CellOutcome("skipped", "not run") for _ in plan.roles]


def _exercise_rows(job: dict, plan, outcomes: list, verdicts: dict) -> list[dict]:
    """Stage 4: one row per exercise, from its score and what happened to its cells."""
    from course_lib.checks.core import get_exercise

    sub_id, limit = job["submission"], int(job.get("output_limit", 0))
    cell_timeout = float(job["cell_timeout"])
    rows = []
    for ex_id in plan.exercises:
        ex = get_exercise(ex_id)
        notes = list(plan.notes.get(ex_id, []))
        if ex_id in plan.missing:
            feedback = notes + [plan.missing[ex_id]]
            rows.append(
                row(sub_id, plan.assignment, ex_id, 0, ex.points, "missing", feedback, ex.title)
            )
            continue
        status, points, feedback = _verdict_for(ex, plan, outcomes, verdicts, cell_timeout)
        cells = [i for i, (_, e) in enumerate(plan.roles) if e == ex_id]
        printed = sum(outcomes[i].output_bytes for i in cells)
        if limit and printed > limit:
            notes.append(
                f"your code printed {printed / 2**20:.1f} MB of output; the grader "
                "discarded it (print less: the output is not graded)"
            )
        rows.append(
            row(
                sub_id,
                plan.assignment,
                ex_id,
                points,
                ex.points,
                status,
                notes + feedback,
                ex.title,
                verdicts[ex_id].diagnoses if status == "failed" and ex_id in verdicts else [],
            )
        )
    return rows


def _course_cell_notes(plan, outcomes: list) -> list[str]:
    """Stage 5: the course's own cells that failed, each kind said once (at most ten)."""
    first_learner = next((i for i, (r, _) in enumerate(plan.roles) if r != "course"), None)
    course_notes: dict[str, int] = {}
    for i, (o, (r, _)) in enumerate(zip(outcomes, plan.roles)):
        if r != "course" or o.status not in ("error", "timeout", "died"):
            continue
        after_learner = first_learner is not None and i > first_learner
        if o.status == "timeout" and after_learner:
            note = (
                f"a cell of the course did not finish after your code had run ({o.message}): "
                "does your code replace a name the course's cells use (`print`, `np`, …)? "
                "Later exercises may be affected"
            )
        else:
            note = (
                f"a course cell failed while grading ({o.status}: "
                f"{o.message[:300]}); later exercises may be affected"
            )
        course_notes[note] = course_notes.get(note, 0) + 1
    return [
        note + (f" ({times} cells)" if times > 1 else "")
        for note, times in list(course_notes.items())[:10]
    ]


# --------------------------------------------------------------------------- own limits


def _limit_self(limits: dict) -> None:
    """This process's own limits (``--grader-memory``, CPU seconds): soft limits only, so
    that the kernels it starts set theirs afresh (:func:`lift_own_limits`). Past the memory
    limit an allocation raises MemoryError (the submission's error); past the CPU time,
    SIGXCPU stops this process (the grader says why)."""
    import resource

    for which, value in (
        (resource.RLIMIT_DATA, limits.get("data_bytes")),
        (resource.RLIMIT_CPU, limits.get("cpu_seconds")),
    ):
        if value:
            try:
                _, hard = resource.getrlimit(which)
                resource.setrlimit(which, (int(value), hard))
            except (ValueError, OSError):  # a system without it: the other bounds remain
                pass


def lift_own_limits() -> None:
    """In a kernel's process before it starts: the grading process's own soft limits
    lifted (the kernel has limits of its own: :func:`course_tools.grading.sandbox.apply_limits`)."""
    import resource

    for which in (resource.RLIMIT_DATA, resource.RLIMIT_CPU):
        try:
            _, hard = resource.getrlimit(which)
            resource.setrlimit(which, (hard, hard))
        except (ValueError, OSError):
            pass


def _over_memory(job: dict) -> str:
    gb = (job.get("grader_limits") or {}).get("data_bytes", 0) / 2**30
    return (
        f"grading this notebook needed more than the {gb:g} GB of memory the grader spends "
        "on one submission (reading and scoring its recorded outputs); the exercises "
        "scored before count"
    )


# --------------------------------------------------------------------------- channel


def sign(key: bytes, payload: dict) -> bytes:
    body = json.dumps(payload, sort_keys=True)
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    return f"{mac} {body}\n".encode()


def verify(key: bytes, line: bytes) -> dict | None:
    """The payload of a correctly signed line, else None."""
    try:
        mac, body = line.decode().rstrip("\n").split(" ", 1)
    except (UnicodeDecodeError, ValueError):
        return None
    good = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, good):
        return None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fd = int(argv[0])
    os.set_inheritable(fd, False)
    job = json.loads(sys.stdin.read())  # read (and so drain) the key before any kernel runs
    key = bytes.fromhex(job.pop("key"))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)

    def send(payload: dict) -> None:
        data = memoryview(sign(key, payload))
        while data:
            data = data[os.write(fd, data) :]

    _limit_self(job.get("grader_limits") or {})
    expected = job.get("manifest")
    if expected is not None:
        changed = changed_files(expected, manifest(Path(job["root"])))
        if changed:
            send(
                {
                    "fatal": "the course's files changed since grading started: "
                    + ", ".join(changed[:5])
                }
            )
            return 3
    try:
        result = grade(job, send)
    except MemoryError:  # past --grader-memory: this submission's error, not the grader's
        send({"fatal": _over_memory(job)})
        return 2
    except Exception as err:  # a bug here must not take the other submissions down
        import traceback

        send(
            {
                "fatal": f"internal grader error: {type(err).__name__}: {err}\n"
                + traceback.format_exc()[-2000:]
            }
        )
        return 2
    send({"result": result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
