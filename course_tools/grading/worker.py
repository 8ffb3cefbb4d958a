"""Grade one submission in a process of its own: ``python -m course_tools.grading.worker FD``.

The command-line tool starts one worker per submission (``--jobs`` at a time). The worker
reads its job (and a one-time key) from stdin, limits its own memory and CPU time, checks
that the course's files are the ones the grader started with, and passes the submission
through :data:`STAGES`, in order:

1. :func:`read_submission`: parse the notebook (:mod:`~course_tools.grading.identity`),
   find its assignment; a notebook that cannot be graded stops here;
2. :func:`plan_run`: rebuild it from the course's copy (:mod:`~course_tools.grading.plan`),
   once: exercises whose placeholder is untouched are decided without a kernel;
3. :func:`run_kernel`: draw the grader's cases (:mod:`~course_tools.grading.cases`), write
   their inputs where the kernel can read them, run the notebook in a sandboxed kernel
   (:mod:`~course_tools.grading.run`) and, right after each harvest cell, score what it
   recorded here, in the grader's own process (:mod:`~course_tools.grading.scoring`),
   reporting an exercise's earned points at once;
4. :func:`make_rows`: one gradebook row per exercise
   (:class:`~course_tools.grading.protocol.Row`);
5. :func:`course_cell_notes`: the course's own cells that failed.

It sends its result to the parent on file descriptor FD, each line signed with the key
(HMAC-SHA256, :mod:`~course_tools.grading.protocol`): a kernel that finds that pipe cannot
forge a verdict.

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
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

from course_lib.checks.core import cases_for, evaluate_case, get_exercise  # noqa: E402

from .analysis import read_course_functions  # noqa: E402
from .cases import grader_cases  # noqa: E402
from .harvest import flatten, unflatten, write_inputs  # noqa: E402
from .identity import (  # noqa: E402
    Course,
    SubmissionError,
    assignment_from_name,
    claimed_assignment,
    identify,
    parse_notebook,
)
from .integrity import changed_files, manifest  # noqa: E402
from .plan import Plan, rebuild  # noqa: E402
from .protocol import Result, Row, row, sign, whole_submission_rows  # noqa: E402
from .run import CellOutcome, KernelPlace, execute  # noqa: E402
from .run import kernel_env as plain_kernel_env  # noqa: E402
from .sandbox import CgroupSet, Limits, Sandbox  # noqa: E402
from .sandbox import kernel_env as sandbox_kernel_env  # noqa: E402
from .scoring import Verdict, results_problem, score, verdict_for  # noqa: E402


def warm_up(exercise_ids: list[str]) -> None:
    """Import, before any learner code runs, everything scoring will use: each exercise's
    checks and references, numpy's archive reading and writing, the comparisons. Run on
    one case of each exercise with the reference as the "learner"."""
    import io
    import zipfile  # noqa: F401

    import numpy as np

    for ex_id in exercise_ids:
        ex = get_exercise(ex_id)
        try:
            case = cases_for(ex_id, False, 0)[0]
            got = ex.reference(*case.args, **case.kwargs)
            arrays: dict = {}
            node = flatten(got, "c0", arrays)
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            buf.seek(0)
            with np.load(buf, allow_pickle=False) as loaded:
                evaluate_case(ex, case, unflatten(node, loaded))
        except Exception:  # a warm-up is best effort: scoring reports real problems
            pass


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


@dataclass
class Grading:
    """One submission on its way through :data:`STAGES`: each stage reads what the ones
    before it left and adds its own; a stage that sets ``ended`` ends the way early."""

    job: dict
    course: Course
    send: Callable[[dict], None]
    kernel: bool = True  # False: plan only (a dry run), no kernel is started
    result: Result = field(default_factory=lambda: Result(assignment="", notes=[], flags={}))
    nb: object = None
    plan: Plan | None = None
    where: _Where | None = None
    outcomes: list[CellOutcome] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    rows: list[Row] | None = None
    ended: bool = False  # set by a stage after which none of the others runs


def grade(job: dict, send=None, course=None, kernel: bool = True) -> Result | None:
    """Grade one submission described by ``job``; return its result (rows, notes, flags).

    ``send(payload)`` (when given) reports progress to the grader: the assignment once
    known, each kernel's pid, each exercise's row as soon as it is scored, so a crash of
    this process later loses nothing already earned. With ``kernel=False`` (a dry run: the
    plan only), a submission that needs a kernel returns None instead.
    """
    t0 = time.monotonic()
    if course is None:
        course = Course.load(Path(job["root"]), check=False)
        course.take_cards(job.get("cards"))
    g = Grading(job, course, send or (lambda payload: None), kernel)
    g.result["submission"] = job["submission"]
    for stage in STAGES:
        stage(g)
        if g.ended:
            break
    if g.rows is None:  # a dry run that stopped before the kernel
        return None
    g.result["rows"] = g.rows
    g.result["seconds"] = round(time.monotonic() - t0, 2)
    return g.result


def read_submission(g: Grading) -> None:
    """The submission's notebook and assignment, or the rows of a submission that cannot
    be graded at all."""
    job, course, result = g.job, g.course, g.result
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
        g.ended = True
        g.rows = whole_submission_rows(sub_id, assignment, course, err.status, err.reason)
        return
    result["notes"] += notes
    assignment, how = identify(nb, name, course, job.get("expected"))
    if assignment is None:
        known = ", ".join(course.notebooks) or "none"
        reason = (
            f"unknown assignment: neither the notebook's metadata nor its file name "
            f"{name!r} nor its exercise ids match one of this course's assignments ({known})"
        )
        g.ended = True
        g.rows = whole_submission_rows(sub_id, None, course, "error", reason)
        return
    result["assignment"] = assignment
    g.send({"assignment": assignment})
    if assignment in course.broken:
        reason = (
            "the course's own copy of this assignment "
            f"could not be read, so nothing was graded: {course.broken[assignment]}"
        )
        g.ended = True
        g.rows = whole_submission_rows(sub_id, assignment, course, "error", reason)
        return
    flags = result["flags"].setdefault("*", [])
    claimed = claimed_assignment(nb, course)
    if claimed and claimed != assignment:
        mismatch = (
            f"handed in as {assignment} ({job.get('expected_from') or 'its name'}), but the "
            f"notebook's metadata says it is {claimed}: graded as {assignment}"
        )
        flags.append(mismatch)
        result["notes"].append(
            mismatch + "; if the wrong notebook was handed in, hand in the right one"
        )
    elif how not in ("metadata", "expected"):
        result["notes"].append(f"assignment {assignment} recognised by its {how}")
    if how != "expected":  # nothing the instructor controls said which assignment this is
        flags.insert(
            0,
            f"graded as {assignment}, which its {how} names: no --assignment was given and "
            "neither its file name nor its folder names an assignment; check that it is "
            "the one handed in for (grade with --assignment, or name the folder)",
        )
    g.nb = nb


def plan_run(g: Grading) -> None:
    """The notebook to run (:func:`course_tools.grading.plan.rebuild`), planned once, and
    where its files go."""
    assignment = g.result["assignment"]
    scratch = Path(g.job["scratch"])
    box, inputs_dir = scratch / "box", scratch / "inputs"
    exercises = g.course.exercises[assignment]
    g.where = _Where(
        scratch,
        box,
        inputs_dir,
        {e: str(box / f"results-{e}") for e in exercises},
        {e: str(inputs_dir / f"{e}.pkl") for e in exercises},
    )
    library = read_course_functions(g.job.get("course_functions"), g.course.root / "course_lib")
    g.plan = plan = rebuild(
        g.nb, assignment, g.course, g.where.harvest_dirs, g.where.inputs, library
    )
    g.nb = None  # the submission is read: only the plan goes on
    whole = g.result["flags"].pop("*", [])
    g.result["flags"] = plan.flags
    if whole or "*" in plan.flags:
        plan.flags["*"] = whole + plan.flags.get("*", [])
    g.result["notes"] += plan.notes.pop("*", [])
    g.outcomes = [CellOutcome("skipped", "not run") for _ in plan.roles]
    g.ended = plan.needs_kernel and not g.kernel


def _kernel_place(job: dict, where: _Where) -> KernelPlace:
    """Where and with which limits the kernels run: the sandbox the grader found (or
    none), the environment, the limits (and cgroups) it chose."""
    root = Path(job["root"])
    threads = int(job.get("threads", 1))
    sandbox = None
    if job.get("sandbox"):
        how = job["sandbox"]
        sandbox = Sandbox(
            how["bwrap"], how["user_namespace"], version=tuple(how["version"]), hide=[root]
        )
        env = sandbox_kernel_env(threads, hide=[root])
    else:
        env = plain_kernel_env(threads, where.scratch / "private")
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


def run_kernel(g: Grading) -> None:
    """Run the rebuilt notebook in a kernel; right after each harvest cell, score what it
    recorded (here, never in the kernel), delete it and report earned points."""
    job, plan, where, verdicts, send = g.job, g.plan, g.where, g.verdicts, g.send
    assert plan is not None and where is not None
    if not plan.needs_kernel:
        return
    harvested = [e for r, e in plan.roles if r == "harvest" and e is not None]
    warm_up(harvested)  # everything scoring needs, imported before learner code runs
    where.box.mkdir(parents=True, exist_ok=True)
    where.inputs_dir.mkdir(parents=True, exist_ok=True)
    cases = {}
    partial = bool(job.get("partial"))  # (score counts the declared written-out cases apart)
    for ex_id in harvested:
        cases[ex_id] = grader_cases(ex_id, int(job["seed"]), plan.fingerprint)
        write_inputs(cases[ex_id], where.inputs[ex_id], ex_id)

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
                verdicts[ex_id] = within_cpu(
                    JUDGE_CPU_SECONDS,
                    lambda: score(ex_id, cases[ex_id], folder, partial),
                )
            except MemoryError:  # the grader's own limit for one submission
                verdicts[ex_id] = Verdict(ex_id, 0, ex.points, "error", [_over_memory(job)])
            except JudgingTooLong:
                verdicts[ex_id] = Verdict(ex_id, 0, ex.points, "error", [_too_long()])
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
        g.outcomes = execute(
            plan.nb,
            plan.roles,
            _kernel_place(job, where),
            cell_timeout=float(job["cell_timeout"]),
            total_timeout=float(job["timeout"]),
            on_kernel=lambda pid: send({"kernel_pid": pid}),
            on_cell=on_cell,
        )
    except Exception as err:  # the kernel's machinery failed: keep what was scored
        g.result["notes"].append(f"grading stopped early: {type(err).__name__}: {str(err)[:300]}")


def make_rows(g: Grading) -> None:
    """One row per exercise, from its score and what happened to its cells."""
    assert g.plan is not None
    g.rows = _exercise_rows(g.job, g.plan, g.outcomes, g.verdicts, g.course)


def course_cell_notes(g: Grading) -> None:
    """The course's own cells that failed, each kind said once (at most ten)."""
    assert g.plan is not None
    g.result["notes"] += _course_cell_notes(g.plan, g.outcomes)


# The order a submission goes through; a stage that sets ``Grading.ended`` ends it early.
STAGES: tuple[Callable[[Grading], None], ...] = (
    read_submission,
    plan_run,
    run_kernel,
    make_rows,
    course_cell_notes,
)


def _exercise_rows(job: dict, plan, outcomes: list, verdicts: dict, course: Course) -> list[Row]:
    """One row per exercise, from its score and what happened to its cells; the rules of a
    statement broken at run time are flagged for review."""
    sub_id, limit = job["submission"], int(job.get("output_limit", 0))
    cell_timeout = float(job["cell_timeout"])
    rows = []
    for ex_id in plan.exercises:
        notes = list(plan.notes.get(ex_id, []))
        if ex_id in plan.missing:  # (its card: no chapter's checks imported for a blank)
            card, feedback = course.card(ex_id), notes + [plan.missing[ex_id]]
            rows.append(
                row(sub_id, plan.assignment, ex_id, 0, card.points, "missing", feedback, card.title)
            )
            continue
        ex = get_exercise(ex_id)
        status, points, feedback = verdict_for(ex, plan, outcomes, verdicts, cell_timeout)
        broke = verdicts[ex_id].broke if ex_id in verdicts else []
        origin = verdicts[ex_id].origin if ex_id in verdicts else ""
        if origin:
            plan.flags.setdefault(ex_id, []).append(
                f"the function checked is the course's own: {origin}"
            )
        for how in broke:  # seen at run time: for a human look, beside the code's own flags
            plan.flags.setdefault(ex_id, []).append(f"breaks the statement's rules: {how}")
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


# The CPU seconds the grader spends judging one exercise's recorded outputs (the course's
# slowest takes under two): a check slowed by what a learner returned ends there, and the
# exercises after it are judged as usual. CPU time, not wall time: a loaded machine does
# not change the verdict.
JUDGE_CPU_SECONDS = 60


class JudgingTooLong(Exception):
    """Judging one exercise used up :data:`JUDGE_CPU_SECONDS`."""


def within_cpu(seconds: float, fn: Callable[[], Verdict]) -> Verdict:
    """``fn()``, stopped by :class:`JudgingTooLong` once this process has spent ``seconds``
    of CPU time in it (a profiling timer: CPU time, so load cannot trip it). Outside the
    main thread, where no signal can reach it, ``fn()`` runs unbounded (the process's
    own CPU limit remains)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return fn()

    def stop(signum, frame):
        raise JudgingTooLong

    before = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, before)


def _too_long() -> str:
    return (
        f"judging what your function returned took the grader more than {JUDGE_CPU_SECONDS} s "
        "of CPU time, so it was stopped: return what the statement asks for (a result of "
        "the expected size and type)"
    )


def _over_memory(job: dict) -> str:
    gb = (job.get("grader_limits") or {}).get("data_bytes", 0) / 2**30
    return (
        f"grading this notebook needed more than the {gb:g} GB of memory the grader spends "
        "on one submission (reading and scoring its recorded outputs); the exercises "
        "scored before count"
    )


# --------------------------------------------------------------------------- channel


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
