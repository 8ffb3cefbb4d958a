"""``course-grade``: grade a folder of submitted notebooks into a gradebook and feedback.

    course-grade SUBMISSION_OR_FOLDER... --out DIR [--jobs N] [--shard K/N] ...
    course-grade merge SHARD_DIR... --out DIR
    course-grade report DIR                       # DIR/report.html: the class in figures

(also ``python -m course_tools.grading``). Each submission that needs a kernel is graded
in a process of its own (:mod:`course_tools.grading.worker`), ``--jobs`` at a time, its
kernel inside the sandbox (:mod:`course_tools.grading.sandbox`); see
``docs/instructors.md``.
"""

from __future__ import annotations

import sys

# The grader's own processes never write bytecode into the course (the integrity check
# counts every file of course_lib and course_tools, __pycache__ included).
sys.dont_write_bytecode = True
sys.modules.setdefault("rfc3987_syntax", None)  # see worker.py: a slow import nbformat never uses

import argparse  # noqa: E402
import base64  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import secrets  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor, as_completed  # noqa: E402
from pathlib import Path  # noqa: E402

from .. import __version__  # noqa: E402
from ..course import CourseRootError, course_commit, course_root  # noqa: E402
from .collect import Submission, collect, snapshot  # noqa: E402
from .report import (  # noqa: E402
    EXPORTS,
    Gradebook,
    read_results,
    summary_table,
    write_all,
    write_exports,
)
from .sandbox import (  # noqa: E402
    CgroupSet,
    Limits,
    Sandbox,
    SandboxUnavailable,
    memory_total,
    usable_cpus,
)
from .worker import changed_files, manifest, verify, whole_submission_rows  # noqa: E402

MAX_LINE = 64 * 1024 * 1024
SEED_FILE = ".grader-seed"
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
KERNEL_MEMORY = 1.5 * 2**30  # what one kernel with PyTorch loaded takes, roughly

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


class Reaper:
    """Linux: no process started by a learner's code outlives its grading.

    A kernel's process group is killed after its notebook, but code can leave that group
    (``os.setsid()`` in a double fork) and live on to edit the gradebook once it is
    written. As a *child subreaper* (``prctl``), this process becomes the parent of every
    such orphan instead of init; :meth:`sweep` kills every child that is not one of the
    grader's own worker processes. (In the sandbox, the PID namespace already ends every
    such process with its kernel.) Elsewhere it does nothing (see docs/instructors.md).
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
        """Kill (and reap) every child not in ``keep``; their orphans come back: repeat.
        Returns how many were learners' processes (a sandbox's own bubblewrap process,
        orphaned for a moment while its kernel is stopped, does not count)."""
        killed = 0
        for _ in range(100):
            strays = [p for p in self.children() if p not in keep and p not in self.before]
            if not strays:
                break
            for pid in strays:
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        ours = f.read().strip() == "bwrap"
                except OSError:
                    ours = False
                killed -= ours
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


def default_jobs() -> int:
    """Every usable core, as long as the memory holds one kernel per job."""
    cpus = usable_cpus()
    mem = memory_total()
    by_memory = int(mem // KERNEL_MEMORY) if mem else cpus
    return max(1, min(cpus, by_memory))


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
    """Triage in this process; one worker process per submission that needs a kernel."""

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
        sandbox: Sandbox | None = None,
        limits: Limits | None = None,
    ):
        self.root, self.course, self.seed, self.args = root, course, seed, args
        self.out_dir = out_dir
        self.scratch = scratch
        self.manifest = manifest(root) if args.integrity else None
        self.lock = threading.Lock()
        self.tainted: str | None = None
        busy = max(1, min(args.jobs, n_subs or args.jobs))  # --jobs 8 for 3 submissions
        self.threads = max(1, usable_cpus() // busy)
        self.live: dict[int, list[int]] = {}  # worker pid -> its kernels' pids
        self.stopping = False
        self.reaper = reaper or Reaper()
        self.strays = 0
        self.sandbox = sandbox
        self.limits = limits or Limits()
        self.deadline = time.monotonic() + args.max_time if args.max_time else None
        self.out_of_time = 0

    def sweep(self) -> None:
        """Kill what learners' code left running (see :class:`Reaper`)."""
        with self.lock:  # no worker is being started meanwhile: its pid is in self.live
            self.strays += self.reaper.sweep(set(self.live))

    def kill_all(self) -> None:
        """Stop every running worker and kernel (on Ctrl-C or SIGTERM)."""
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
        changed = changed_files(self.manifest, manifest(self.root))
        if changed:
            with self.lock:
                if self.tainted is None:
                    self.tainted = ", ".join(changed[:5])

    def journal(self, text: str) -> None:
        """One line in DIR/grading.log, written at once: after a crash of the whole run, it
        tells which submissions were being graded."""
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

    def _job(self, sub: Submission, data: bytes, work: Path) -> dict:
        return {
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
            "partial": self.args.partial,
        }

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
        if self.deadline is not None and time.monotonic() > self.deadline:
            with self.lock:
                self.out_of_time += 1
            return self._fallback(
                sub,
                "error",
                f"not graded: the run reached its time cap (--max-time {self.args.max_time:g} s) "
                "before this submission's turn; grade it in another run",
            )
        if self.tainted:
            return self._fallback(
                sub,
                "error",
                "not graded: the course's files were modified "
                f"during this grading run ({self.tainted})",
            )
        # Triage here, without a process or a kernel: unreadable notebooks, unknown
        # assignments and untouched exercises are decided at once.
        from .worker import grade as grade_here

        work = self.scratch / f"s{index:06d}"
        job = self._job(sub, data, work)
        try:
            res = grade_here(job, course=self.course, kernel=False)
        except Exception as err:  # a grader bug: report it, keep the others
            return self._fallback(sub, "error", f"internal grader error: {err}")
        if res is not None:
            res.pop("seconds", None)
            return res
        res_assignment = None
        try:
            res = self._run_worker(index, sub, job)
            res_assignment = res.get("assignment")
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
                res_assignment,
            )
        return res

    def _run_worker(self, index: int, sub: Submission, job: dict) -> dict:
        work = Path(job["scratch"])
        work.mkdir(parents=True, mode=0o700)
        key = secrets.token_bytes(32)
        job = dict(job, key=key.hex(), manifest=self.manifest)
        if self.sandbox is not None:
            job["sandbox"] = {
                "bwrap": self.sandbox.bwrap,
                "user_namespace": self.sandbox.user_namespace,
                "version": list(self.sandbox.version),
            }
        lim = self.limits
        job["limits"] = {
            "memory": lim.memory,
            "address_space": lim.address_space,
            "cpus": lim.cpus,
            "pids": lim.pids,
            "cpu_seconds": lim.cpu_seconds,
            "file_bytes": lim.file_bytes,
            "cgroup": lim.cgroup.to_json(f"s{index}-") if lim.cgroup else None,
        }
        # The worker finds the kernel by name: only the environment's own "python3" spec
        # (this Python's ipykernel), never one in a user's ~/.local/share/jupyter.
        env = dict(
            os.environ,
            JUPYTER_DATA_DIR=str(work / "jupyter-data"),
            PYTHONDONTWRITEBYTECODE="1",
        )
        env.pop("JUPYTER_PATH", None)
        r, w = os.pipe()
        log = open(work / "worker.log", "wb")
        with self.lock:  # (a sweep, which holds it too, must see this worker in self.live)
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "course_tools.grading.worker", str(w)],
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
        assignment = None
        earned: dict[str, dict] = {}
        forged = 0
        try:
            try:
                proc.stdin.write(json.dumps(job).encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass
            for payload in _signed_lines(r, proc, key):
                if payload is None:
                    forged += 1
                    if forged > 100:
                        proc.kill()
                    continue
                if "kernel_pid" in payload:
                    with self.lock:
                        kernels.append(int(payload["kernel_pid"]))
                elif "assignment" in payload:
                    assignment = str(payload["assignment"])
                elif "earned" in payload:
                    row = payload["earned"]
                    earned[str(row.get("exercise"))] = row
                elif "result" in payload:
                    result = payload["result"]
                elif "fatal" in payload:
                    fatal = str(payload["fatal"])
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
                "this notebook's code stopped the grading process (exit code "
                f"{proc.returncode}): it killed it, used up the machine's memory, or ran "
                "past the notebook's time limit; the exercises scored before count"
            )
            if self.args.verbose:
                tail = (work / "worker.log").read_text(errors="replace")[-3000:]
                print(f"\n--- worker log of {sub.id} ---\n{tail}", file=sys.stderr)
            result = self._fallback(sub, "error", reason, assignment)
            # points already earned stay earned: those exercises' code was not at fault
            result["rows"] = [earned.get(r["exercise"], r) for r in result["rows"]]
        if forged:
            result.setdefault("flags", {}).setdefault("*", []).append(
                f"{forged} forged or garbled message(s) reached the grader's result channel"
            )
        if not self.args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        return result


def _signed_lines(fd: int, proc: subprocess.Popen, key: bytes):
    """The worker's messages, verified: a payload, or None for a forged or garbled line.

    Reading stops when the worker has exited and nothing more is waiting, not only at
    end of file: a process a learner left holding the pipe's write end cannot keep the
    grader waiting."""
    os.set_blocking(fd, False)
    buf = b""
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 0.2)
            chunk = b""
            if ready:
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue
                if chunk == b"":
                    break  # end of file
            elif proc.poll() is not None:
                break  # the worker is gone; whatever it wrote has been read
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield verify(key, line + b"\n")
            if len(buf) > MAX_LINE:
                buf = b""
                yield None
    finally:
        os.close(fd)


def _shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N (e.g. 2/8), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _exports(text: str) -> list[str]:
    which = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in which if w not in EXPORTS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown export {', '.join(bad)}: choose from {', '.join(EXPORTS)}"
        )
    return which


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="course-grade",
        description="Grade submitted exercise notebooks: rebuild each from the course's own "
        "copy with the learner's code, run it in a fresh, sandboxed kernel with the "
        "hidden tests, and decide every verdict in the grader's process. Writes "
        "DIR/grades.csv, DIR/feedback/*.md and DIR/review.csv. "
        "`course-grade merge SHARD_DIR... --out DIR` combines shards.",
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
        default=default_jobs(),
        help="submissions graded at once (default: every usable core, fewer if memory "
        "would not hold one kernel per job)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="time limit in seconds for a whole notebook (default 900)",
    )
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=180.0,
        metavar="S",
        help="time limit in seconds for a cell with learner code, and for any course cell "
        "after the first learner cell (default 180)",
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
        help="cap each kernel's memory: its cgroup's (all its processes) where cgroups "
        "can be used, and every process's address space (default: no address-space cap, "
        "and a cgroup cap of 80%% of the memory divided by --jobs)",
    )
    p.add_argument(
        "--no-cgroups",
        dest="cgroups",
        action="store_false",
        help="do not use cgroups for limits, only rlimits",
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="partial credit: an exercise earns its points times the share of the "
        "grader's cases passed (default: all or nothing)",
    )
    p.add_argument(
        "--export",
        type=_exports,
        default=[],
        metavar="WHAT",
        help="also write lms (DIR/lms.csv for Canvas or Moodle) and/or gradescope "
        "(DIR/gradescope/*.json, Gradescope's results.json format); comma-separated",
    )
    p.add_argument(
        "--student",
        metavar="REGEX",
        default=None,
        help="for --export lms: the student's key in a submission id (the regular "
        "expression's first group); default: the part of the ids that differs",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the hidden cases (default: a secret one kept in "
        f"DIR/{SEED_FILE}, so re-runs into DIR agree)",
    )
    p.add_argument(
        "--seed-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="read the seed from a file (shards share one; it stays off the command line)",
    )
    p.add_argument(
        "--shard",
        type=_shard,
        default=None,
        metavar="K/N",
        help="grade only the K-th of N deterministic slices of the submissions (needs "
        "--seed or --seed-file); combine the N output folders with `course-grade merge`",
    )
    p.add_argument(
        "--max-submissions",
        type=int,
        default=20000,
        metavar="N",
        help="refuse to start with more submissions than this (default 20000)",
    )
    p.add_argument(
        "--max-total-size",
        type=float,
        default=10.0,
        metavar="GB",
        help="refuse to start when the notebooks take more than this in all (default 10)",
    )
    p.add_argument(
        "--max-time",
        type=float,
        default=None,
        metavar="S",
        help="start no submission after this many seconds; the rest get an error row "
        "saying so (default: no cap)",
    )
    p.add_argument(
        "--course",
        "--root",
        dest="course",
        type=Path,
        default=None,
        metavar="ROOT",
        help="the course folder holding solutions/ (default: the current "
        "directory, when it is one)",
    )
    p.add_argument(
        "--unsafe-no-sandbox",
        dest="sandbox",
        action="store_false",
        help="run learners' kernels without the sandbox (where bubblewrap is missing: "
        "macOS, Windows); prints what this loses",
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


def make_limits(args, jobs: int, threads: int) -> Limits:
    """Per-kernel limits: cgroups (memory, processes, CPU share) when this process may make
    them, rlimits always (CPU seconds, file size; address space when asked)."""
    mem = memory_total()
    explicit = int(args.memory_limit * 2**30) if args.memory_limit else None
    name = f"course-grade-{os.getpid()}-{secrets.token_hex(3)}"
    cg = CgroupSet.create(name) if args.cgroups else None
    memory = explicit or (max(2 * 2**30, int(mem * 0.8 / max(1, jobs))) if mem else None)
    return Limits(
        memory=memory if cg else None,
        address_space=explicit,
        cpus=float(threads) if cg else None,
        pids=1024,
        cpu_seconds=int(args.timeout * max(1, threads) * 2) + 120,
        cgroup=cg,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["merge"]:
        return merge_main(argv[1:])
    if argv[:1] == ["report"]:  # the class report (class_report.py)
        from .class_report import main as report_main

        return report_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0 or args.cell_timeout <= 0:
        print("error: --jobs, --timeout and --cell-timeout must be positive", file=sys.stderr)
        return 2
    if args.shard and args.seed is None and args.seed_file is None:
        print(
            "error: --shard needs --seed or --seed-file: every shard must draw the same "
            'hidden cases (make one with `python -c "import secrets; '
            'print(secrets.randbelow(2**31))" > seed.txt`, keep it secret)',
            file=sys.stderr,
        )
        return 2
    from .rebuild import Course

    try:
        root = course_root(args.course)
    except CourseRootError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sandbox = None
    if args.sandbox:
        try:
            sandbox = Sandbox.find()
        except SandboxUnavailable as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    elif not args.quiet:
        print(UNSAFE_LOSSES, file=sys.stderr)
    course = Course.load(root)
    provenance = {"course_commit": course_commit(root), "grader_version": __version__}
    for name, why in course.broken.items():
        print(
            f"warning: solutions/{name}.ipynb is broken; its submissions get errors: {why}",
            file=sys.stderr,
        )
    missing = [str(p) for p in args.inputs if not os.path.lexists(p)]
    if missing:  # a typo must not produce a gradebook with a bogus row
        print("error: no such file or folder: " + ", ".join(missing), file=sys.stderr)
        return 2
    everyone = collect(args.inputs)
    if not everyone:
        print(
            "error: no notebooks (.ipynb) found in " + ", ".join(map(str, args.inputs)),
            file=sys.stderr,
        )
        return 2
    all_ids = [s.id for s in everyone]
    k, n = args.shard or (1, 1)
    subs = [s for i, s in enumerate(everyone) if i % n == k - 1]
    size = sum(s.size for s in subs)
    if len(subs) > args.max_submissions:
        print(
            f"error: {len(subs)} submissions, more than --max-submissions "
            f"{args.max_submissions}: raise the cap, or split the class with --shard K/N",
            file=sys.stderr,
        )
        return 2
    if size > args.max_total_size * 2**30:
        print(
            f"error: the notebooks take {size / 2**30:.1f} GB, more than --max-total-size "
            f"{args.max_total_size:g} GB: raise the cap, or split the class with --shard K/N",
            file=sys.stderr,
        )
        return 2
    out_dir = args.out.resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        seed = _seed(out_dir, args.seed, args.seed_file)
        probe = out_dir / ".course-grade-write-test"
        probe.write_text("")
        probe.unlink()
    except (OSError, ValueError) as err:
        print(f"error: cannot write the results to {out_dir}: {err}", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="cg-", dir=_short_tmp()))
    # before any learner code runs: every submission copied where no kernel can reach
    snapshot(subs, scratch / "inbox")
    reaper = Reaper()
    t0 = time.monotonic()
    busy = max(1, min(args.jobs, len(subs)))
    limits = make_limits(args, busy, max(1, usable_cpus() // busy))
    if not args.quiet:
        where = (
            f"sandbox: bubblewrap{'' if sandbox.user_namespace else ' (no user namespace)'}"
            if sandbox
            else "NO SANDBOX"
        )
        print(
            f"course-grade: {len(subs)} submission(s)"
            + (f" (shard {k}/{n} of {len(everyone)})" if args.shard else "")
            + f", {args.jobs} at a time, cell timeout {args.cell_timeout:g} s, notebook "
            f"timeout {args.timeout:g} s; {where}; limits per kernel: {limits.describe()}",
            file=sys.stderr,
        )
    run_info = {
        "format": 1,
        "grader_version": __version__,
        "course_commit": provenance["course_commit"],
        "seed_fingerprint": seed_fingerprint(seed),
        "shard": [k, n] if args.shard else None,
        "partial": bool(args.partial),
        "all_submissions": all_ids,
        "submissions": [s.id for s in subs],
        "sandbox": bool(sandbox),
        "complete": False,
    }
    book = Gradebook(out_dir, provenance, all_ids)
    _write_json(out_dir / "run.json", run_info)
    interrupted = False
    old_term = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # Slurm, Kubernetes and kill: stop as on Ctrl-C
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)
    grader = None
    try:
        grader = Grader(
            root, course, seed, args, scratch, out_dir, len(subs), reaper, sandbox, limits
        )
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
                book.add(res)
                progress.step(sub.id)
        except KeyboardInterrupt:
            interrupted = True
            grader.kill_all()
            pool.shutdown(wait=True, cancel_futures=True)
        else:
            pool.shutdown(wait=True)
        grader.sweep()  # last: nothing a learner started may edit what is written below
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, old_term)
        reaper.close()
        if limits.cgroup is not None:
            limits.cgroup.close()
        if not args.keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    results = book.results
    try:
        skipped = book.finish()
        if args.export:
            write_exports(out_dir, results, args.export, args.student)
        run_info.update(complete=not interrupted, graded=len(results))
        _write_json(out_dir / "run.json", run_info)
    except OSError as err:  # DIR changed under us: keep the grades rather than lose them
        rescue = Path(tempfile.mkdtemp(prefix="course-grade-results-"))
        print(
            f"error: could not write to {out_dir} ({err}); the results are in {rescue}",
            file=sys.stderr,
        )
        skipped, out_dir = write_all(rescue, results, provenance, all_ids), rescue
    for path in skipped:
        print(f"warning: not written, its folder leads outside {out_dir}: {path}", file=sys.stderr)
    if interrupted:
        print(
            f"\ninterrupted: {out_dir / 'grades.csv'} holds the {len(results)} of "
            f"{len(subs)} submission(s) graded so far",
            file=sys.stderr,
        )
        return 130
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


def _write_json(path: Path, data: dict) -> None:
    from .report import atomic_write

    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- merge


def merge_main(argv: list[str]) -> int:
    """``course-grade merge SHARD_DIR... --out DIR``: one gradebook from N shards."""
    p = argparse.ArgumentParser(
        prog="course-grade merge",
        description="Combine the output folders of `course-grade --shard K/N` runs into one "
        "gradebook, identical to what a single run would have written.",
    )
    p.add_argument("shards", nargs="+", type=Path, metavar="SHARD_DIR")
    p.add_argument("--out", required=True, type=Path, metavar="DIR")
    p.add_argument("--export", type=_exports, default=[], metavar="WHAT")
    p.add_argument("--student", metavar="REGEX", default=None)
    args = p.parse_args(argv)
    infos, results = [], []
    for d in args.shards:
        try:
            info = json.loads((d / "run.json").read_text())
            part = read_results(d)
        except (OSError, ValueError) as err:
            print(f"error: {d} is not a course-grade output folder: {err}", file=sys.stderr)
            return 2
        infos.append((d, info))
        results += part
    problems = _merge_problems(infos, results)
    if problems:
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    info = infos[0][1]
    provenance = {"course_commit": info["course_commit"], "grader_version": info["grader_version"]}
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results.sort(key=lambda r: r["submission"])
    skipped = write_all(out, results, provenance, info["all_submissions"])
    (out / "results.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in results)
    )
    if args.export:
        write_exports(out, results, args.export, args.student)
    merged = dict(
        info,
        shard=None,
        submissions=info["all_submissions"],
        complete=True,
        graded=len(results),
        merged_from=[str(d) for d, _ in infos],
    )
    _write_json(out / "run.json", merged)
    for path in skipped:
        print(f"warning: not written, its folder leads outside {out}: {path}", file=sys.stderr)
    print(summary_table(results))
    print(f"\nmerged {len(infos)} shard(s), {len(results)} submission(s) -> {out / 'grades.csv'}")
    return 0


def _merge_problems(infos: list[tuple[Path, dict]], results: list[dict]) -> list[str]:
    problems = []
    shards = [i.get("shard") for _, i in infos]
    if any(s is None for s in shards):
        problems.append("every folder must come from a `--shard K/N` run")
        return problems
    n = {s[1] for s in shards}
    if len(n) != 1:
        problems.append(f"the shards come from different splits (N = {sorted(n)})")
        return problems
    (n,) = n
    ks = sorted(s[0] for s in shards)
    if ks != list(range(1, n + 1)):
        have = ", ".join(map(str, ks))
        problems.append(f"expected shards 1..{n} once each, got {have}")
    for key, what in (
        ("seed_fingerprint", "seeds"),
        ("course_commit", "course commits"),
        ("grader_version", "grader versions"),
        ("partial", "--partial settings"),
        ("all_submissions", "lists of submissions (different inputs?)"),
    ):
        if len({json.dumps(i.get(key), sort_keys=True) for _, i in infos}) != 1:
            problems.append(f"the shards used different {what}")
    for d, i in infos:
        if not i.get("complete"):
            problems.append(f"{d} is an incomplete run (it was stopped): grade that shard again")
    ids = [r["submission"] for r in results]
    if len(ids) != len(set(ids)):
        problems.append("a submission was graded in two shards")
    expected = set(infos[0][1].get("all_submissions", []))
    if not problems and set(ids) != expected:
        problems.append(f"{len(expected - set(ids))} submission(s) are missing from the shards")
    return problems


if __name__ == "__main__":
    raise SystemExit(main())
