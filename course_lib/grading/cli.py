"""``course-grade``: grade a folder of submitted notebooks into a gradebook and feedback.

    course-grade SUBMISSION_OR_FOLDER... --out DIR [--jobs N] [--timeout S] [--cell-timeout S]

(also ``python -m course_lib.grading``). Each submission is graded in a process of its own
(:mod:`course_lib.grading.worker`), ``--jobs`` at a time; see ``docs/instructors.md``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.modules.setdefault("rfc3987_syntax", None)  # see worker.py: a slow import nbformat never uses

from .collect import Submission, collect  # noqa: E402
from .generate import course_root  # noqa: E402
from .report import summary_table, write_all  # noqa: E402
from .worker import changed_files, manifest, verify, whole_submission_rows  # noqa: E402

MAX_LINE = 64 * 1024 * 1024
SEED_FILE = ".grader-seed"
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


class Reaper:
    """Linux: no process started by a learner's code outlives its grading.

    A kernel's process group is killed after its notebook, but code can leave that group
    (``os.setsid()`` in a double fork) and live on to edit the gradebook once it is
    written. As a *child subreaper* (``prctl``), this process becomes the parent of every
    such orphan instead of init; :meth:`sweep` kills every child that is not one of the
    grader's own worker processes. Elsewhere it does nothing (see docs/instructors.md).
    """

    def __init__(self):
        self.enabled, self.previous, self.libc = False, 0, None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                old = ctypes.c_int(0)
                libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(old), 0, 0, 0)
                if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
                    self.enabled, self.previous, self.libc = True, old.value, libc
            except (OSError, AttributeError):
                pass
        self.before = set(self.children())  # e.g. a test runner's own children: not ours

    def children(self) -> list[int]:
        if not self.enabled:
            return []
        me, out = os.getpid(), []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
                ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me:
                out.append(int(d))
        return out

    def sweep(self, keep: set[int]) -> int:
        """Kill (and reap) every child not in ``keep``; their orphans come back: repeat."""
        killed = 0
        for _ in range(100):
            strays = [p for p in self.children() if p not in keep and p not in self.before]
            if not strays:
                break
            for pid in strays:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            for pid in strays:
                try:
                    os.waitpid(pid, 0)
                except OSError:
                    pass
            killed += len(strays)
        return killed

    def close(self) -> None:
        if self.enabled:
            self.libc.prctl(PR_SET_CHILD_SUBREAPER, self.previous, 0, 0, 0)
            self.enabled = False


def _seed(out_dir: Path, given: int | None) -> int:
    """The secret seed of the hidden cases: --seed, else kept in DIR (so re-runs agree)."""
    if given is not None:
        return int(given)
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


class Progress:
    """A text progress bar on stderr (one line per submission when not a terminal)."""

    def __init__(self, total: int, stream=None, quiet: bool = False):
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.quiet = quiet
        self.lock = threading.Lock()

    def step(self, label: str) -> None:
        with self.lock:
            self.done += 1
            if self.quiet:
                return
            width = 30
            filled = int(width * self.done / max(1, self.total))
            bar = "█" * filled + "·" * (width - filled)
            secs = time.monotonic() - self.t0
            text = f"[{bar}] {self.done}/{self.total}  {secs:5.0f} s  {label[-50:]}"
            if self.tty:
                self.stream.write("\r" + text.ljust(110))
                if self.done == self.total:
                    self.stream.write("\n")
            else:
                self.stream.write(text + "\n")
            self.stream.flush()


class Grader:
    """Runs one worker process per submission and collects their signed results."""

    def __init__(
        self,
        root: Path,
        course,
        seed: int,
        args,
        scratch: Path,
        out_dir: Path,
        n_subs: int = 0,
        reaper: Reaper | None = None,
    ):
        self.root, self.course, self.seed, self.args = root, course, seed, args
        self.out_dir = out_dir
        self.scratch = scratch
        self.manifest = manifest(root) if args.integrity else None
        self.lock = threading.Lock()
        self.tainted: str | None = None
        busy = max(1, min(args.jobs, n_subs or args.jobs))  # --jobs 8 for 3 submissions
        self.threads = max(1, (os.cpu_count() or 1) // busy)
        self.live: dict[int, list[int]] = {}  # worker pid -> its kernels' pids
        self.stopping = False
        self.reaper = reaper or Reaper()
        self.strays = 0

    def sweep(self) -> None:
        """Kill what learners' code left running (see :class:`Reaper`)."""
        with self.lock:  # no worker is being started meanwhile: its pid is in self.live
            self.strays += self.reaper.sweep(set(self.live))

    def kill_all(self) -> None:
        """Stop every running worker and kernel (on Ctrl-C)."""
        with self.lock:
            self.stopping = True
            groups = [g for pid, ks in self.live.items() for g in (pid, *ks)]
        for g in groups:
            if g != os.getpgrp():
                try:
                    os.killpg(g, 9)
                except OSError:
                    pass

    def _fallback(
        self, sub: Submission, status: str, reason: str, assignment: str | None = None
    ) -> dict:
        from .rebuild import assignment_from_name

        assignment = assignment or assignment_from_name(sub.name, self.course)
        return {
            "submission": sub.id,
            "assignment": assignment or "",
            "notes": [],
            "flags": {},
            "rows": whole_submission_rows(sub.id, assignment, self.course, status, reason),
        }

    def _check_integrity(self) -> None:
        if self.manifest is None:
            return
        changed = changed_files(self.manifest, manifest(self.root, list(self.manifest)))
        if changed:
            with self.lock:
                if self.tainted is None:
                    self.tainted = ", ".join(changed[:5])

    def journal(self, text: str) -> None:
        """One line in DIR/grading.log, written at once: after a crash of the whole run (a
        kernel that killed every process of the user, say), it tells which submissions
        were being graded."""
        with self.lock:
            with open(self.out_dir / "grading.log", "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def grade(self, index: int, sub: Submission) -> dict:
        self.journal(f"start {sub.id}")
        res = self._grade(index, sub)
        counts = {}
        for r in res["rows"]:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        self.journal(f"done  {sub.id} " + " ".join(f"{k}:{v}" for k, v in sorted(counts.items())))
        return res

    def _grade(self, index: int, sub: Submission) -> dict:
        data = sub.read()
        if data is None:
            return self._fallback(sub, "error", sub.problem)
        if sub.link and Path(sub.link).is_relative_to(self.root / "solutions"):
            return self._fallback(
                sub,
                "error",
                "not graded: the submission is a symbolic link "
                "to the course's own solutions, not a learner's notebook",
            )
        if self.stopping:
            return self._fallback(sub, "error", "not graded: grading was interrupted")
        if self.tainted:
            return self._fallback(
                sub,
                "error",
                "not graded: the course's files were modified "
                f"during this grading run ({self.tainted})",
            )
        try:
            res = self._run_worker(index, sub, data)
        finally:
            self._check_integrity()
        if sub.link:
            res.setdefault("flags", {}).setdefault("*", []).append(
                f"the submission is a symbolic link to {sub.link}"
            )
        if self.tainted:
            return self._fallback(
                sub,
                "error",
                "not trusted: the course's files were "
                f"modified while this submission was graded ({self.tainted})"
                "; restore them (git checkout) and grade again",
                res.get("assignment"),
            )
        return res

    def _run_worker(self, index: int, sub: Submission, data: bytes) -> dict:
        work = self.scratch / f"s{index:05d}"
        work.mkdir(parents=True)
        key = secrets.token_bytes(32)
        # The notebook goes to the worker with its job, on stdin: no copy on disk that
        # another submission's kernel, running meanwhile, could swap for a solved one.
        job = {
            "key": key.hex(),
            "root": str(self.root),
            "submission": sub.id,
            "name": sub.name,
            "notebook_b64": base64.b64encode(data).decode(),
            "scratch": str(work),
            "seed": self.seed,
            "cell_timeout": self.args.cell_timeout,
            "timeout": self.args.timeout,
            "output_limit": self.args.output_limit,
            "threads": self.threads,
            "manifest": self.manifest,
            "memory_limit": int(self.args.memory_limit * 2**30) if self.args.memory_limit else None,
        }
        # The worker finds the kernel by name: only the environment's own "python3" spec
        # (this Python's ipykernel), never one in a user's ~/.local/share/jupyter.
        env = dict(os.environ, JUPYTER_DATA_DIR=str(work / "jupyter-data"))
        env.pop("JUPYTER_PATH", None)
        r, w = os.pipe()
        log = open(work / "worker.log", "wb")
        with self.lock:  # (a sweep, which holds it too, must see this worker in self.live)
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "course_lib.grading.worker", str(w)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(w,),
                    cwd=work,
                    env=env,
                    start_new_session=True,
                )
            except OSError as err:
                os.close(r)
                os.close(w)
                log.close()
                return self._fallback(sub, "error", f"could not start a grading process: {err}")
            self.live[proc.pid] = kernels = []
            if self.stopping:
                proc.kill()
        os.close(w)
        watchdog = threading.Timer(self.args.timeout + 300, proc.kill)
        watchdog.start()
        result = fatal = None
        forged = 0
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
            with os.fdopen(r, "rb") as f:
                while True:
                    line = f.readline(MAX_LINE)
                    if not line:
                        break
                    payload = verify(key, line)
                    if payload is None:
                        forged += 1
                        if forged > 100:
                            proc.kill()
                        continue
                    if "kernel_pid" in payload:
                        with self.lock:
                            kernels.append(int(payload["kernel_pid"]))
                    elif "result" in payload:
                        result = payload["result"]
                    elif "fatal" in payload:
                        fatal = str(payload["fatal"])
            proc.wait()
        except BrokenPipeError:
            proc.wait()
        finally:
            watchdog.cancel()
            log.close()
            with self.lock:
                self.live.pop(proc.pid, None)
            for pid in kernels:  # a kernel orphaned by a killed worker must not linger
                if pid != os.getpgrp():
                    try:
                        os.killpg(pid, 9)
                    except OSError:
                        pass
            self.sweep()  # and nothing its code started in a session of its own
        if result is None:
            reason = fatal or (
                f"the grading process was killed (exit code {proc.returncode}) "
                "while running this notebook: did its code kill its parent "
                "process or exhaust the machine's memory?"
            )
            if self.args.verbose:
                tail = (work / "worker.log").read_text(errors="replace")[-3000:]
                print(f"\n--- worker log of {sub.id} ---\n{tail}", file=sys.stderr)
            result = self._fallback(sub, "error", reason)
        if forged:
            result.setdefault("flags", {}).setdefault("*", []).append(
                f"{forged} forged or garbled message(s) reached the grader's result channel"
            )
        if not self.args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="course-grade",
        description="Grade submitted exercise notebooks: rebuild each from the course's own "
        "copy with the learner's solution cells, run it in a fresh kernel with the "
        "hidden tests, and decide every verdict in the grader's process. Writes "
        "DIR/grades.csv, DIR/feedback/*.md and DIR/review.csv.",
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="SUBMISSION_OR_FOLDER",
        help="notebooks, folders (searched recursively) or .zip archives",
    )
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="output folder for grades.csv, feedback/ and review.csv",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="submissions graded at once (default: half the CPU cores)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="time limit in seconds for a whole notebook, the course's own "
        "cells included (default 900)",
    )
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=180.0,
        metavar="S",
        help="time limit in seconds for a cell with learner code: a solution "
        "cell, or running their function on all cases (default 180)",
    )
    p.add_argument(
        "--output-limit",
        type=int,
        default=1_000_000,
        metavar="BYTES",
        help="output above this many bytes per exercise is noted in the "
        "feedback (outputs are never kept; default 1000000)",
    )
    p.add_argument(
        "--memory-limit",
        type=float,
        default=None,
        metavar="GB",
        help="cap each kernel's address space (Linux/macOS rlimit); an allocation "
        "past it fails in the learner's code (default: no cap; PyTorch needs "
        "about 3 GB)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the hidden cases (default: a secret one kept in "
        f"DIR/{SEED_FILE}, so re-runs into DIR agree)",
    )
    p.add_argument(
        "--course",
        type=Path,
        default=None,
        metavar="ROOT",
        help="the course checkout holding solutions/ (default: this one)",
    )
    p.add_argument(
        "--no-integrity-check",
        dest="integrity",
        action="store_false",
        help="do not stop when the course's files change during grading (only "
        "while developing the course, when you edit it as you grade)",
    )
    p.add_argument(
        "--keep-work",
        action="store_true",
        help="keep the per-submission scratch folders (for debugging)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument(
        "--verbose", "-v", action="store_true", help="print a worker's log when it fails"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0 or args.cell_timeout <= 0:
        print("error: --jobs, --timeout and --cell-timeout must be positive", file=sys.stderr)
        return 2
    from .rebuild import Course

    root = (args.course or course_root()).resolve()
    if not (root / "solutions").is_dir():
        print(f"error: no solutions/ folder in {root}; pass --course ROOT", file=sys.stderr)
        return 2
    course = Course.load(root)
    for name, why in course.broken.items():
        print(
            f"warning: solutions/{name}.ipynb is broken; its submissions get errors: {why}",
            file=sys.stderr,
        )
    missing = [str(p) for p in args.inputs if not os.path.lexists(p)]
    if missing:  # a typo must not produce a gradebook with a bogus row
        print("error: no such file or folder: " + ", ".join(missing), file=sys.stderr)
        return 2
    subs = collect(args.inputs)
    if not subs:
        print(
            "error: no notebooks (.ipynb) found in " + ", ".join(map(str, args.inputs)),
            file=sys.stderr,
        )
        return 2
    out_dir = args.out.resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        seed = _seed(out_dir, args.seed)
        probe = out_dir / ".course-grade-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        print(f"error: cannot write the results to {out_dir}: {err}", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="course-grade-"))
    reaper = Reaper()
    t0 = time.monotonic()
    if not args.quiet:
        print(
            f"course-grade: {len(subs)} submission(s), {args.jobs} at a time, cell timeout "
            f"{args.cell_timeout:g} s, notebook timeout {args.timeout:g} s",
            file=sys.stderr,
        )
    try:
        grader = Grader(root, course, seed, args, scratch, out_dir, len(subs), reaper)
        grader.journal(f"grading {len(subs)} submission(s), jobs={args.jobs}")
        progress = Progress(len(subs), quiet=args.quiet)
        results = []
        pool = ThreadPoolExecutor(max_workers=args.jobs)
        try:
            futures = {pool.submit(grader.grade, i, s): s for i, s in enumerate(subs)}
            for fut in as_completed(futures):
                sub = futures[fut]
                try:
                    res = fut.result()
                except Exception as err:  # a grader bug: report it, keep the others
                    res = grader._fallback(sub, "error", f"internal grader error: {err}")
                results.append(res)
                progress.step(sub.id)
        except KeyboardInterrupt:
            grader.kill_all()
            pool.shutdown(wait=True, cancel_futures=True)
            grader.sweep()
            print("\ninterrupted: nothing was written", file=sys.stderr)
            return 130
        pool.shutdown(wait=True)
        grader.sweep()  # last: nothing a learner started may edit what is written below
    finally:
        reaper.close()
        if not args.keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    try:
        skipped = write_all(out_dir, results)
    except OSError as err:  # DIR changed under us: keep the grades rather than lose them
        rescue = Path(tempfile.mkdtemp(prefix="course-grade-results-"))
        print(
            f"error: could not write to {out_dir} ({err}); the results are in {rescue}",
            file=sys.stderr,
        )
        skipped, out_dir = write_all(rescue, results), rescue
    for path in skipped:
        print(f"warning: not written, its folder leads outside {out_dir}: {path}", file=sys.stderr)
    secs = time.monotonic() - t0
    print(summary_table(results))
    print(
        f"\n{len(subs)} submission(s) graded in {secs:.1f} s -> {out_dir / 'grades.csv'}, "
        f"feedback in {out_dir / 'feedback'}"
    )
    if grader.strays:
        print(
            f"note: {grader.strays} process(es) that learners' code left running were stopped",
            file=sys.stderr,
        )
    flagged = sum(1 for r in results if r.get("flags"))
    if flagged:
        print(f"⚑ {flagged} submission(s) flagged for a human look: see {out_dir / 'review.csv'}")
    if grader.tainted:
        print(
            f"error: the course's files were modified during grading ({grader.tainted}); "
            "affected submissions were marked as errors. Restore the files and grade again, "
            "ideally with kernels that cannot write to the course (see docs/instructors.md).",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
