"""Grading a class: one worker process per submission (``--jobs`` at a time), its signed
messages read back, and nothing a learner started left running (:class:`Reaper`)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from .analysis import course_functions_file
from .collect import Submission
from .identity import SubmissionError, assignment_from_name, expected_assignment, parse_notebook
from .integrity import changed_files, manifest
from .options import Options, grader_cpu_seconds
from .protocol import verify, whole_submission_rows
from .sandbox import Limits, Sandbox, usable_cpus

MAX_LINE = 64 * 1024 * 1024
SMALL_FILE = 64 * 1024  # a file this small is read here to see whether it is a notebook
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


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
        if self.enabled and self.libc is not None:  # (enabled: libc was loaded)
            self.libc.prctl(PR_SET_CHILD_SUBREAPER, self.previous, 0, 0, 0)
            self.enabled = False


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
    """One worker process per submission, ``--jobs`` at a time; this process reads their signed
    results and keeps the gradebook."""

    def __init__(
        self,
        root: Path,
        course,
        seed: int,
        args: Options,
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
        self.workers = 0  # worker processes started
        self.out_of_time = 0

    def cards(self) -> dict:
        """Every exercise's card (:class:`course_tools.grading.identity.Card`), read once."""
        with self.lock:
            if not hasattr(self, "_cards"):
                self._cards = self.course.cards_json()
        return self._cards

    def library_file(self) -> Path:
        """The course library's functions, read once per run for the copy check
        (:func:`course_tools.grading.analysis.course_functions`), in the grader's scratch."""
        with self.lock:
            if not hasattr(self, "_library"):
                try:
                    self._library = course_functions_file(self.root / "course_lib", self.scratch)
                except (OSError, SyntaxError, ValueError):  # each worker reads it then
                    self._library = Path("")
        return self._library

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
        assignment = (
            assignment
            or self._expected(sub).get("expected")
            or assignment_from_name(sub.name, self.course)
        )
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
        counts: dict[str, int] = {}
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
            "course_functions": str(self.library_file() or ""),
            "cards": self.cards(),
            **self._expected(sub),
        }

    def _expected(self, sub: Submission) -> dict:
        """The assignment ``sub`` was handed in for: ``--assignment``, else its folder or
        file name (see :func:`course_tools.grading.identity.expected_assignment`)."""
        chosen = getattr(self.args, "assignment", None)
        if chosen:
            return {"expected": chosen, "expected_from": "--assignment"}
        found = expected_assignment(sub.id, self.course)
        if not found:
            return {}
        where = "its file name" if found in Path(sub.id).name else "its folder"
        return {"expected": found, "expected_from": where}

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
        # A small file that is no notebook at all is decided here (its JSON is bounded by
        # SMALL_FILE, no code in it is parsed); everything else about a submission, its
        # reading and planning included, happens in a worker under the grader's limits.
        unreadable = self._not_a_notebook(sub, data)
        if unreadable is not None:
            return unreadable
        work = self.scratch / f"s{index:06d}"
        job = self._job(sub, data, work)
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

    def _not_a_notebook(self, sub: Submission, data: bytes) -> dict | None:
        """The error rows of a file of at most :data:`SMALL_FILE` bytes that is no notebook
        (broken JSON, no list of cells), else None: 300 such files once took a worker
        process each."""
        if len(data) > SMALL_FILE:
            return None
        try:
            parse_notebook(data)
        except SubmissionError as err:
            return self._fallback(sub, err.status, err.reason)
        except Exception:  # anything else: the worker reads it, under its limits
            return None
        return None

    def _run_worker(self, index: int, sub: Submission, job: dict) -> dict:
        """Grade ``sub`` in a worker process of its own: start it, read its signed
        messages, and make a result of them (or of what was earned before it failed)."""
        work = Path(job["scratch"])
        work.mkdir(parents=True, mode=0o700)
        key = secrets.token_bytes(32)
        job = self._worker_job(index, job, key)
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
                    env=_worker_env(work),
                    start_new_session=True,
                )
            except OSError as err:
                os.close(r)
                os.close(w)
                log.close()
                return self._fallback(sub, "error", f"could not start a grading process: {err}")
            kernels: list[int] = []
            self.live[proc.pid] = kernels
            self.workers += 1
            if self.stopping:
                proc.kill()
        os.close(w)
        watchdog = threading.Timer(self.args.timeout + 300, proc.kill)
        watchdog.start()
        try:
            heard = _Heard()
            heard.listen(proc, r, job, key, kernels, self.lock)
            proc.wait()
        finally:
            watchdog.cancel()
            log.close()
            self._stop_worker(proc, kernels)
        result = heard.result if heard.result is not None else self._failed(sub, proc, heard, work)
        if heard.forged:
            result.setdefault("flags", {}).setdefault("*", []).append(
                f"{heard.forged} forged or garbled message(s) reached the grader's result channel"
            )
        if not self.args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        return result

    def _worker_job(self, index: int, job: dict, key: bytes) -> dict:
        """The job as the worker reads it: with its key, the manifest, the sandbox and the
        limits (a cgroup of its own)."""
        job = dict(job, key=key.hex(), manifest=self.manifest)
        job["grader_limits"] = {
            "data_bytes": int(self.args.grader_memory * 2**30),
            "cpu_seconds": grader_cpu_seconds(self.args),
        }
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
            "disk_bytes": lim.disk_bytes,
            "cgroup": lim.cgroup.to_json(f"s{index}-") if lim.cgroup else None,
        }
        return job

    def _stop_worker(self, proc, kernels: list[int]) -> None:
        """The worker is done: forget it, kill its kernels, sweep what they left."""
        with self.lock:
            self.live.pop(proc.pid, None)
        for pid in kernels:  # a kernel orphaned by a killed worker must not linger
            if pid != os.getpgrp():
                try:
                    os.killpg(pid, 9)
                except OSError:
                    pass
        self.sweep()  # and nothing its code started in a session of its own

    def _failed(self, sub: Submission, proc, heard: _Heard, work: Path) -> dict:
        """The result of a worker that sent none: error rows, with the points it reported
        as earned before it stopped kept."""
        import signal

        reason = heard.fatal or (
            (
                "grading this notebook used more than the "
                f"{grader_cpu_seconds(self.args)} s of CPU time the grader spends on one "
                "submission (its own limit, beside the kernel's); the exercises scored "
                "before count"
            )
            if proc.returncode == -signal.SIGXCPU
            else "this notebook's code stopped the grading process (exit code "
            f"{proc.returncode}): it killed it, used up the machine's memory, or ran "
            "past the notebook's time limit; the exercises scored before count"
        )
        if self.args.verbose:
            tail = (work / "worker.log").read_text(errors="replace")[-3000:]
            print(f"\n--- worker log of {sub.id} ---\n{tail}", file=sys.stderr)
        result = self._fallback(sub, "error", reason, heard.assignment)
        # points already earned stay earned: those exercises' code was not at fault
        result["rows"] = [heard.earned.get(r["exercise"], r) for r in result["rows"]]
        return result


def _worker_env(work: Path) -> dict[str, str]:
    """The worker finds the kernel by name: only the environment's own "python3" spec
    (this Python's ipykernel), never one in a user's ~/.local/share/jupyter."""
    env = dict(os.environ, JUPYTER_DATA_DIR=str(work / "jupyter-data"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("JUPYTER_PATH", None)
    return env


class _Heard:
    """What a worker said on its signed channel."""

    def __init__(self):
        self.result = self.fatal = self.assignment = None
        self.earned: dict[str, dict] = {}
        self.forged = 0

    def listen(self, proc, r: int, job: dict, key: bytes, kernels: list[int], lock) -> None:
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        for payload in signed_lines(r, proc, key):
            if payload is None:
                self.forged += 1
                if self.forged > 100:
                    proc.kill()
                continue
            if "kernel_pid" in payload:
                with lock:
                    kernels.append(int(payload["kernel_pid"]))
            elif "assignment" in payload:
                self.assignment = str(payload["assignment"])
            elif "earned" in payload:
                row = payload["earned"]
                self.earned[str(row.get("exercise"))] = row
            elif "result" in payload:
                self.result = payload["result"]
            elif "fatal" in payload:
                self.fatal = str(payload["fatal"])


def signed_lines(fd: int, proc: subprocess.Popen, key: bytes):
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
