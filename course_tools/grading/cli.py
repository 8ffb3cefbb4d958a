"""``course-grade``: grade a folder of submitted notebooks into a gradebook and feedback.

    course-grade SUBMISSION_OR_FOLDER... --out DIR [--jobs N] [--shard K/N] ...
    course-grade merge SHARD_DIR... --out DIR
    course-grade report DIR                       # DIR/report.html: the class in figures

(also ``python -m course_tools.grading``). Each submission that needs a kernel is graded
in a process of its own (:mod:`course_tools.grading.worker`), ``--jobs`` at a time, its
kernel inside the sandbox (:mod:`course_tools.grading.sandbox`); see
``docs/instructors.md``. The parts: the options (:mod:`.options`), grading a class
(:mod:`.pool`), merging shards (:mod:`.merge`); this module runs the stages in order.
"""

from __future__ import annotations

import sys

# The grader's own processes never write bytecode into the course (the integrity check
# counts every file of course_lib and course_tools, __pycache__ included).
sys.dont_write_bytecode = True
# See worker.py: a slow import nbformat never uses. (None blocks it, as documented; typeshed
# types sys.modules as modules only.)
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import hashlib  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor, as_completed  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

from .. import __version__  # noqa: E402
from ..course import CourseRootError, course_commit, course_root  # noqa: E402
from .collect import Submission, collect, snapshot  # noqa: E402
from .merge import merge_main, write_json  # noqa: E402
from .options import (  # noqa: E402, F401
    KERNEL_MEMORY,
    SEED_FILE,
    Options,
    build_parser,
    default_jobs,
    make_limits,
    parse_options,
)
from .pool import Grader, Progress, Reaper, signed_lines  # noqa: E402, F401
from .report import (  # noqa: E402
    Gradebook,
    recording_failed,
    summary_table,
    write_all,
    write_exports,
)
from .sandbox import Limits, Sandbox, SandboxUnavailable, usable_cpus  # noqa: E402

UNSAFE_LOSSES = """\
warning: --unsafe-no-sandbox: learners' code runs as you, with no sandbox. It loses:
  - the course, the Python environment and the submissions are writable by learner code
    (a payload appended to numpy, a planted .pyc, an edited classmate's notebook);
    the integrity check catches changes to course_lib, course_tools and solutions/
    afterwards, not to numpy or torch, and not a file restored in time;
  - kernels share /tmp, the network and the process table with you and each other:
    one kernel can find and drive another's (--jobs > 1), read your files, and, where
    ptrace is allowed, attach to the grader;
  - no memory, process or CPU limit beyond --memory-limit's address-space cap.
  The verdicts are still decided outside the kernel and the seed still never enters it.
  Use it only for code you trust (your own solutions), or grade on Linux with bubblewrap."""


def _seed(out_dir: Path, given: int | None, seed_file: Path | None) -> int:
    """The secret seed of the hidden cases: --seed, --seed-file, else kept in DIR (so
    re-runs into DIR agree)."""
    if given is not None:
        return int(given)
    if seed_file is not None:
        return int(Path(seed_file).read_text().strip())
    path = out_dir / SEED_FILE
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        seed = secrets.randbelow(2**31 - 2)
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{seed}\n")
        return seed


def seed_fingerprint(seed: int) -> str:
    """Tells whether two runs used the same seed, without saying which."""
    return hashlib.sha256(f"course-grade seed {seed}".encode()).hexdigest()[:16]


class _Usage(Exception):
    """A mistake on the command line (or an unusable folder): exit code 2, no gradebook."""


@dataclass
class _Class:
    """What a run grades and where: the course, the sandbox, the submissions (this shard's
    and everyone's), the output folder and the seed."""

    root: Path
    course: object
    sandbox: Sandbox | None
    everyone: list[Submission]
    subs: list[Submission]
    out_dir: Path
    seed: int
    provenance: dict = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["merge"]:
        return merge_main(argv[1:])
    if argv[:1] == ["report"]:  # the class report (class_report.py)
        from .class_report import main as report_main

        return report_main(argv[1:])
    args = parse_options(argv)
    try:
        _check_usage(args)
        root, sandbox, course = _find_course(args)
        everyone, subs = _select(args)
        out_dir, seed = _open_out(args)
    except _Usage as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    provenance = {"course_commit": course_commit(root), "grader_version": __version__}
    run = _Class(root, course, sandbox, everyone, subs, out_dir, seed, provenance)
    return _grade_class(args, run)


def _check_usage(args: Options) -> None:
    if args.jobs < 1 or args.timeout <= 0 or args.cell_timeout <= 0:
        raise _Usage("--jobs, --timeout and --cell-timeout must be positive")
    if args.shard and args.seed is None and args.seed_file is None:
        raise _Usage(
            "--shard needs --seed or --seed-file: every shard must draw the same "
            'hidden cases (make one with `python -c "import secrets; '
            'print(secrets.randbelow(2**31))" > seed.txt`, keep it secret)'
        )


def _find_course(args: Options):
    """The course folder, the sandbox (None with --unsafe-no-sandbox) and the course's
    own notebooks, each validated."""
    from .identity import Course

    try:
        root = course_root(args.course)
    except CourseRootError as err:
        raise _Usage(str(err)) from None
    sandbox = None
    if args.sandbox:
        try:
            sandbox = Sandbox.find()
        except SandboxUnavailable as err:
            raise _Usage(str(err)) from None
    elif not args.quiet:
        print(UNSAFE_LOSSES, file=sys.stderr)
    course = Course.load(root)
    known = [*course.notebooks, *course.broken]
    if args.assignment and args.assignment not in known:
        raise _Usage(
            f"--assignment {args.assignment!r} is not one of this course's assignments "
            f"({', '.join(known) or 'none'})"
        )
    for name, why in course.broken.items():
        print(
            f"warning: solutions/{name}.ipynb is broken; its submissions get errors: {why}",
            file=sys.stderr,
        )
    return root, sandbox, course


def _select(args: Options) -> tuple[list[Submission], list[Submission]]:
    """Every submission found, and this shard's, within the caps."""
    missing = [str(p) for p in args.inputs if not os.path.lexists(p)]
    if missing:  # a typo must not produce a gradebook with a bogus row
        raise _Usage("no such file or folder: " + ", ".join(missing))
    everyone = collect(args.inputs)
    if not everyone:
        raise _Usage("no notebooks (.ipynb) found in " + ", ".join(map(str, args.inputs)))
    k, n = args.shard or (1, 1)
    subs = [s for i, s in enumerate(everyone) if i % n == k - 1]
    size = sum(s.size for s in subs)
    if len(subs) > args.max_submissions:
        raise _Usage(
            f"{len(subs)} submissions, more than --max-submissions "
            f"{args.max_submissions}: raise the cap, or split the class with --shard K/N"
        )
    if size > args.max_total_size * 2**30:
        raise _Usage(
            f"the notebooks take {size / 2**30:.1f} GB, more than --max-total-size "
            f"{args.max_total_size:g} GB: raise the cap, or split the class with --shard K/N"
        )
    return everyone, subs


def _open_out(args: Options) -> tuple[Path, int]:
    """The output folder, proven writable, and the seed."""
    out_dir = args.out.resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        seed = _seed(out_dir, args.seed, args.seed_file)
        probe = out_dir / ".course-grade-write-test"
        probe.write_text("")
        probe.unlink()
    except (OSError, ValueError) as err:
        raise _Usage(f"cannot write the results to {out_dir}: {err}") from None
    return out_dir, seed


def _grade_class(args: Options, run: _Class) -> int:
    """Grade every submission of ``run``, write what the instructor reads, say how it went."""
    scratch = Path(tempfile.mkdtemp(prefix="cg-", dir=_short_tmp()))
    # before any learner code runs: every submission copied where no kernel can reach
    snapshot(run.subs, scratch / "inbox")
    t0 = time.monotonic()
    busy = max(1, min(args.jobs, len(run.subs)))
    limits = make_limits(args, busy, max(1, usable_cpus() // busy))
    if not args.quiet:
        _announce(args, run, limits)
    run_info = _run_info(args, run)
    book = Gradebook(run.out_dir, run.provenance, run_info["all_submissions"], student=args.student)
    write_json(run.out_dir / "run.json", run_info)
    reaper = Reaper()
    try:
        grader = Grader(
            run.root,
            run.course,
            run.seed,
            args,
            scratch,
            run.out_dir,
            len(run.subs),
            reaper,
            run.sandbox,
            limits,
        )
        interrupted = _grade_all(args, grader, run.subs, book)
    finally:
        reaper.close()
        if limits.cgroup is not None:
            limits.cgroup.close()
        if not args.keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    run_info["workers"] = grader.workers  # (a count: what the run cost, not how long)
    out_dir = _write_outputs(args, run, book, run_info, interrupted)
    results = book.results
    if interrupted:
        print(
            f"\ninterrupted: {out_dir / 'grades.csv'} holds the {len(results)} of "
            f"{len(run.subs)} submission(s) graded so far",
            file=sys.stderr,
        )
        return 130
    return _summarise(args, grader, results, len(run.subs), time.monotonic() - t0, out_dir)


def _announce(args: Options, run: _Class, limits: Limits) -> None:
    sandbox = run.sandbox
    where = (
        f"sandbox: bubblewrap{'' if sandbox.user_namespace else ' (no user namespace)'}"
        if sandbox
        else "NO SANDBOX"
    )
    k, n = args.shard or (1, 1)
    print(
        f"course-grade: {len(run.subs)} submission(s)"
        + (f" (shard {k}/{n} of {len(run.everyone)})" if args.shard else "")
        + f", {args.jobs} at a time, cell timeout {args.cell_timeout:g} s, notebook "
        f"timeout {args.timeout:g} s; {where}; limits per kernel: {limits.describe()}",
        file=sys.stderr,
    )


def _run_info(args: Options, run: _Class) -> dict:
    k, n = args.shard or (1, 1)
    return {
        "format": 1,
        "grader_version": __version__,
        "course_commit": run.provenance["course_commit"],
        "seed_fingerprint": seed_fingerprint(run.seed),
        "shard": [k, n] if args.shard else None,
        "partial": bool(args.partial),
        "all_submissions": [s.id for s in run.everyone],
        "submissions": [s.id for s in run.subs],
        "sandbox": bool(run.sandbox),
        "complete": False,
    }


def _grade_all(args: Options, grader: Grader, subs: list[Submission], book: Gradebook) -> bool:
    """Grade ``subs``, ``--jobs`` at a time, each result into ``book`` as it finishes;
    True when interrupted (Ctrl-C, SIGTERM)."""
    interrupted = False
    old_term = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # Slurm, Kubernetes and kill: stop as on Ctrl-C
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        signal.signal(signal.SIGTERM, on_term)
    try:
        grader.journal(f"grading {len(subs)} submission(s), jobs={args.jobs}")
        progress = Progress(len(subs), quiet=args.quiet)
        pool = ThreadPoolExecutor(max_workers=args.jobs)
        try:
            futures = {pool.submit(grader.grade, i, s): s for i, s in enumerate(subs)}
            for fut in as_completed(futures):
                sub = futures[fut]
                try:
                    res = fut.result()
                except Exception as err:  # a grader bug: report it, keep the others
                    res = grader._fallback(sub, "error", f"internal grader error: {err}")
                _record(book, res)
                progress.step(sub.id)
        except KeyboardInterrupt:
            interrupted = True
            grader.kill_all()
            pool.shutdown(wait=True, cancel_futures=True)
        else:
            pool.shutdown(wait=True)
        grader.sweep()  # last: nothing a learner started may edit what is written below
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, old_term)
    return interrupted


def _record(book: Gradebook, res: dict) -> None:
    """``res`` into the gradebook; a fault while recording it is that submission's
    ``error`` row, with the cause, and grading goes on."""
    try:
        book.add(res)
    except Exception as err:
        failed = recording_failed(res, f"{type(err).__name__}: {str(err)[:300]}")
        try:
            book.add(failed)
        except Exception:
            book.results.append(failed)


def _write_outputs(
    args: Options, run: _Class, book: Gradebook, run_info: dict, interrupted
) -> Path:
    """The gradebook, feedback, review list and exports; somewhere else if DIR fails."""
    out_dir, results = run.out_dir, book.results
    try:
        skipped = book.finish()
        if args.export:
            write_exports(out_dir, results, args.export, args.student)
        run_info.update(complete=not interrupted, graded=len(results))
        write_json(out_dir / "run.json", run_info)
    except OSError as err:  # DIR changed under us: keep the grades rather than lose them
        rescue = Path(tempfile.mkdtemp(prefix="course-grade-results-"))
        print(
            f"error: could not write to {out_dir} ({err}); the results are in {rescue}",
            file=sys.stderr,
        )
        all_ids = run_info["all_submissions"]
        skipped = write_all(rescue, results, run.provenance, all_ids, args.student)
        out_dir = rescue
    for path in skipped:
        print(f"warning: not written, its folder leads outside {out_dir}: {path}", file=sys.stderr)
    return out_dir


def _summarise(
    args: Options, grader: Grader, results, n_subs: int, secs: float, out_dir: Path
) -> int:
    """The summary table and what needs the instructor's attention; the exit code."""
    print(summary_table(results))
    print(
        f"\n{n_subs} submission(s) graded in {secs:.1f} s -> {out_dir / 'grades.csv'}, "
        f"feedback in {out_dir / 'feedback'}"
    )
    if grader.strays:
        print(
            f"note: {grader.strays} process(es) that learners' code left running were stopped",
            file=sys.stderr,
        )
    if grader.out_of_time:
        print(
            f"warning: {grader.out_of_time} submission(s) were not graded: the run reached "
            f"--max-time {args.max_time:g} s (their rows say so)",
            file=sys.stderr,
        )
    flagged = sum(1 for r in results if r.get("flags"))
    if flagged:
        print(f"⚑ {flagged} submission(s) flagged for a human look: see {out_dir / 'review.csv'}")
    if grader.tainted:
        print(
            f"error: the course's files were modified during grading ({grader.tainted}); "
            "affected submissions were marked as errors. Restore the files and grade again "
            "in the sandbox (see docs/instructors.md).",
            file=sys.stderr,
        )
        return 3
    return 0


def _short_tmp() -> str | None:
    """A temporary folder whose paths stay short: Unix socket paths (the kernels' channels)
    must fit in 107 bytes."""
    base = tempfile.gettempdir()
    return base if len(base) <= 40 else ("/tmp" if os.path.isdir("/tmp") else None)


if __name__ == "__main__":
    raise SystemExit(main())
