"""Execute a rebuilt notebook in a fresh kernel, one cell at a time, and survive anything.

* every cell with learner code has a time limit (``cell_timeout``), the whole notebook
  another (``total_timeout``), which alone bounds the course's own cells;
* a cell that times out or kills the kernel (``os._exit``, a signal, a segfault, running
  out of memory) is recorded, the kernel is replaced by a fresh one, the earlier cells
  that went well are replayed, and execution goes on with the next cell, so one bad
  exercise does not cost the others (at most ``max_restarts`` times per notebook);
* outputs are never stored (only their size is counted and error messages kept), so a
  cell that prints gigabytes costs nothing but its note;
* the course's own cells are bounded by the notebook's limit alone until learner code
  has run; after that a course cell gets the cell limit too (a learner who replaced
  ``print`` must not make a course cell hang for the whole notebook's budget);
* anything the kernel does to its channel (garbage on its ZMQ sockets, forged or
  malformed messages) counts as the kernel dying: never as a grader error;
* with a :class:`~course_tools.grading.sandbox.Sandbox`, every kernel runs inside
  bubblewrap and talks to the grader over Unix sockets (ZMQ's ``ipc`` transport) in a
  folder of its own that no other kernel can see; without one, the kernel gets its own
  session, empty private IPython/Jupyter/matplotlib folders, no stdin, and none of the
  grader's file descriptors.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from .sandbox import CgroupSet, Limits, Sandbox, apply_limits, lift_own_limits

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# The largest message the grader's sockets accept from a kernel: ZMQ drops a bigger one
# before reading it (a 400 MB print would otherwise cost the grader gigabytes).
MAX_KERNEL_MESSAGE = 32 * 2**20
MAX_BOX_ENTRIES = 100_000  # files and folders a kernel may make in its working folders
GUARD_PERIOD = 0.2  # seconds between two looks at what a kernel has written


@dataclass
class CellOutcome:
    """What happened to one cell: ok | error | timeout | died | skipped."""

    status: str
    message: str = ""
    output_bytes: int = 0
    seconds: float = 0.0


class _Client(NotebookClient):
    """An nbclient that keeps no outputs: it counts their bytes and keeps error messages."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.output_bytes: dict[int, int] = {}
        self.errors: dict[int, str] = {}

    def output(self, outs, msg, display_id, cell_index):  # noqa: D401 - nbclient hook
        content = msg.get("content", {})
        try:
            size = len(json.dumps(content, default=str))
        except Exception:  # pragma: no cover - exotic content
            size = 0
        self.output_bytes[cell_index] = self.output_bytes.get(cell_index, 0) + size
        if msg.get("msg_type") == "error" and cell_index not in self.errors:
            ename = str(content.get("ename", "Error"))[:200]
            evalue = _ANSI.sub("", str(content.get("evalue", "")))[:1000]
            tb = [_ANSI.sub("", str(t)) for t in content.get("traceback", [])][-3:]
            where = ""
            for block in tb:  # the learner's line, as IPython shows it: "----> 3 ..."
                for line in block.splitlines():
                    if line.lstrip().startswith("---->") or line.lstrip().startswith("File "):
                        where = line.strip()[:200]
            self.errors[cell_index] = f"{ename}: {evalue}" + (f" [{where}]" if where else "")
        return None


def kernel_env(threads: int, private_dir: Path) -> dict[str, str]:
    """The kernel's environment without a sandbox: the grader's, with private
    IPython/Jupyter folders (see :func:`course_tools.grading.sandbox.kernel_env` for the
    sandbox's, which keeps nothing of the grader's)."""
    env = dict(os.environ)
    for name in (
        "IPYTHONDIR",
        "JUPYTER_RUNTIME_DIR",
        "JUPYTER_CONFIG_DIR",
        "JUPYTER_DATA_DIR",
        "MPLCONFIGDIR",
    ):
        d = private_dir / name.lower()
        d.mkdir(parents=True, exist_ok=True)
        env[name] = str(d)
    env.update(
        {
            "MPLBACKEND": "Agg",
            "COURSE_GRADING": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
        }
    )
    env.setdefault("COURSE_BUDGET", "ci")  # training cells: the short budget (see sandbox.py)
    env.pop("JPY_PARENT_PID", None)
    env.pop("JUPYTER_PATH", None)
    return env


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel command runs inside the sandbox."""

    sandbox: Sandbox | None = None
    sandbox_rw: list[str] = []
    sandbox_ro: list[str] = []
    sandbox_cwd: str = "/"

    def client(self, **kwargs):
        """A client whose sockets refuse messages over :data:`MAX_KERNEL_MESSAGE`."""
        import zmq

        kc = super().client(**kwargs)
        kc.context.setsockopt(zmq.MAXMSGSIZE, MAX_KERNEL_MESSAGE)
        return kc

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        if self.sandbox is None:
            return cmd
        return self.sandbox.command(
            cmd, rw=self.sandbox_rw, ro=self.sandbox_ro, cwd=self.sandbox_cwd
        )


@dataclass
class KernelPlace:
    """Where and how kernels start: ``box`` is their working folder (writable), ``inputs``
    a folder they may read, ``channels`` where each kernel's connection folder is made."""

    box: Path
    channels: Path
    env: dict[str, str]
    inputs: Path | None = None
    sandbox: Sandbox | None = None
    limits: Limits | None = None
    started: int = 0


def _kill_group(pid: int | None) -> None:
    if not pid:
        return
    # The kernel (or bubblewrap) leads its own session and process group (jupyter_client
    # starts it with start_new_session), so its group id is its pid: this also ends its
    # children; inside a sandbox, the PID namespace ends with its first process.
    if pid == os.getpgrp():
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _cleanup(client, wait: float = 10.0) -> None:
    """Close the client's channels and manager, giving up after ``wait`` seconds: a kernel
    that wrote garbage into its sockets can leave a channel thread that never stops."""
    import threading

    def run():
        try:
            client._cleanup_kernel()
        except Exception:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(wait)


class _Started:
    """One kernel's resources, released by :meth:`close`."""

    def __init__(self, place: KernelPlace):
        place.started += 1
        self.channel = place.channels / f"c{place.started}"
        self.channel.mkdir(parents=True, mode=0o700)
        self.cgroups: list[Path] = []
        self.limits = place.limits or Limits()
        cg: CgroupSet | None = self.limits.cgroup
        if cg is not None:
            try:
                self.cgroups = cg.new(self.limits)
            except OSError:
                self.cgroups = []

    def preexec(self) -> None:
        lift_own_limits()  # the grading process's own limits are not the kernel's
        apply_limits(self.limits, self.cgroups)

    def close(self) -> None:
        CgroupSet.kill(self.cgroups)
        shutil.rmtree(self.channel, ignore_errors=True)


class _DiskGuard:
    """Bounds what a kernel writes into its working folders (the box and its channel
    folder, on the host's disk): over ``limit`` bytes or :data:`MAX_BOX_ENTRIES` entries,
    the kernel is killed, the folders emptied and :attr:`reason` says why.

    The verdict does not depend on when anything wakes: :meth:`check` measures the folders
    synchronously at the end of every cell, before its outcome is recorded, so a cell that
    leaves more than the limit behind is the cell that fails, on a quiet machine or a
    loaded one. Between two ends of cells a watcher thread protects the host's disk: it
    looks again after :data:`GUARD_PERIOD` seconds, or ten times as long as its last look
    took (a kernel that made 99,000 files costs the grader a tenth of a core, not most of
    one), and stops the kernel the same way."""

    def __init__(self, folders: list[Path], limit: int, pid: int | None, period=GUARD_PERIOD):
        import threading

        self.folders, self.limit, self.pid, self.period = folders, limit, pid, period
        self.reason = ""
        self.looks = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def usage(self) -> tuple[int, int]:
        """(bytes on disk, entries) under the folders, counting stops past the caps."""
        used = entries = 0
        stack = [str(f) for f in self.folders]
        while stack and entries <= MAX_BOX_ENTRIES and used <= self.limit:
            try:
                with os.scandir(stack.pop()) as it:
                    for e in it:
                        entries += 1
                        st = e.stat(follow_symlinks=False)
                        used += st.st_blocks * 512
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
            except OSError:
                continue
        return used, entries

    def check(self) -> str:
        """Measure now; past a limit, stop the kernel and empty the folders. The reason
        (empty when within the limits)."""
        with self._lock:
            if self.reason:
                return self.reason
            self.looks += 1
            used, entries = self.usage()
            if used <= self.limit and entries <= MAX_BOX_ENTRIES:
                return ""
            what = (
                f"more than {self.limit / 2**30:g} GB"
                if used > self.limit
                else f"more than {MAX_BOX_ENTRIES} files"
            )
            self.reason = (
                f"the kernel was stopped: it wrote {what} into its working folder "
                "(the grader's --disk-limit); the files were deleted"
            )
            _kill_group(self.pid)
            for folder in self.folders:
                for child in list(Path(folder).iterdir()) if Path(folder).is_dir() else []:
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
            return self.reason

    def _watch(self) -> None:
        wait = self.period
        while not self._stop.wait(wait):
            t0 = time.monotonic()
            if self.check():
                return
            wait = max(self.period, 10 * (time.monotonic() - t0))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class _ChannelWatch:
    """Tells whether the grader's sockets dropped their connection to the kernel (ZMQ does
    so on a message over :data:`MAX_KERNEL_MESSAGE`): a monitor on the client's iopub and
    shell sockets, read without waiting after each cell."""

    def __init__(self, client):
        import zmq

        self.monitors: list[tuple[zmq.Socket, zmq.Socket, zmq.Socket]] = []
        for name in ("iopub_channel", "shell_channel"):
            try:
                sock = getattr(client.kc, name).socket
                mon = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                self.monitors.append((sock, mon, zmq.Socket.shadow(mon.underlying)))
            except Exception:  # no monitor: a dropped message goes unnoticed, still unread
                continue

    def broken(self) -> bool:
        import zmq

        hit = False
        for _sock, _mon, sync in self.monitors:
            try:
                while True:
                    sync.recv_multipart(zmq.NOBLOCK)
                    hit = True
            except zmq.Again:
                pass
            except zmq.ZMQError:
                continue
        return hit

    def close(self) -> None:
        for sock, mon, _sync in self.monitors:
            try:
                sock.disable_monitor()
                mon.close(linger=0)
            except Exception:
                pass
        self.monitors = []


def _new_client(nb, place: KernelPlace, started: _Started, cell_timeout: float) -> _Client:
    client = _Client(
        nb,
        timeout=int(cell_timeout),
        kernel_name="python3",
        allow_errors=True,
        startup_timeout=120,
        shutdown_kernel="immediate",
        iopub_timeout=5,
        record_timing=False,
        coalesce_streams=False,
        resources={"metadata": {"path": str(place.box)}},
    )
    km = SandboxedKernelManager(kernel_name="python3")
    # Unix sockets in a folder of this kernel's own: no TCP port another kernel could
    # reach, and in the sandbox nobody else sees the folder at all.
    km.transport = "ipc"
    km.ip = str(started.channel / "k")
    km.connection_file = str(started.channel / "kernel.json")
    if place.sandbox is not None:
        km.sandbox = place.sandbox
        km.sandbox_rw = [str(place.box), str(started.channel)]
        km.sandbox_ro = [str(place.inputs)] if place.inputs else []
        km.sandbox_cwd = str(place.box)
    client.km = km
    return client


def execute(
    nb,
    roles: list[tuple[str, str | None]],
    place: KernelPlace,
    *,
    cell_timeout: float,
    total_timeout: float,
    max_restarts: int = 3,
    on_kernel: Callable[[int], None] | None = None,
    on_cell: Callable[[int, CellOutcome], None] | None = None,
) -> list[CellOutcome]:
    """Run ``nb``'s code cells in order; return one CellOutcome per cell.

    ``roles[i][0]`` is "course", "solution", "learner" (a cell the learner added) or
    "harvest"; harvest cells are never replayed after a restart. ``on_kernel(pid)`` is
    called for every kernel started (so a parent can kill it if this process dies);
    ``on_cell(i, outcome)`` after every cell. ``place`` says where kernels run and with
    which limits (a sandbox, or none).
    """
    run = _Execution(nb, roles, place, cell_timeout, total_timeout, on_kernel, on_cell)
    while run.i < run.n:
        kernel = run.start_kernel()
        if kernel is None:
            break
        restart_needed = run.session(*kernel)
        if restart_needed and run.i < run.n:
            run.restarts += 1
            if run.restarts > max_restarts:
                run.skip_rest(
                    run.i,
                    f"not run: the kernel hung or crashed {run.restarts} times; grading "
                    "of this notebook stopped",
                )
                break
    return [o if o is not None else CellOutcome("skipped", "not run") for o in run.outcomes]


class _OutOfTime(Exception):
    pass


class _Execution:
    """The state of one notebook's run across kernel restarts: the next cell ``i``, each
    cell's outcome, the cells that hung or crashed (never replayed), the deadline."""

    def __init__(self, nb, roles, place, cell_timeout, total_timeout, on_kernel, on_cell):
        self.nb, self.roles, self.place = nb, roles, place
        self.cell_timeout, self.total_timeout = cell_timeout, total_timeout
        self.on_kernel, self.on_cell = on_kernel, on_cell
        self.n = len(nb.cells)
        self.deadline = time.monotonic() + total_timeout
        self.outcomes: list[CellOutcome | None] = [None] * self.n
        self.bad: set[int] = set()
        self.restarts = 0
        self.i = 0
        self.first_learner = next((j for j, (r, _) in enumerate(roles) if r != "course"), self.n)

    def done(self, idx: int, outcome: CellOutcome) -> None:
        self.outcomes[idx] = outcome
        if self.on_cell is not None:
            self.on_cell(idx, outcome)

    def skip_rest(self, start: int, why: str) -> None:
        for j in range(start, self.n):
            if self.outcomes[j] is None:
                self.done(j, CellOutcome("skipped", why))

    def limit_for(self, j: int, remaining: float) -> float:
        # Course cells before any learner code are known to run: only the notebook's limit
        # bounds them (a slow machine must not fail an import). Anything later may call
        # learner code (a shadowed `print`, a patched module): the cell limit applies.
        guarded = self.roles[j][0] != "course" or j > self.first_learner
        return min(self.cell_timeout, remaining) if guarded else remaining

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 1:
            raise _OutOfTime()
        return left

    def start_kernel(self):
        """A fresh kernel and its client, or None (the rest skipped) when it cannot start."""
        started = _Started(self.place)
        client = _new_client(self.nb, self.place, started, self.cell_timeout)
        pid = None
        try:
            client.start_new_kernel(
                cwd=str(self.place.box),
                env=self.place.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=started.preexec,
            )
            proc = getattr(getattr(client.km, "provisioner", None), "process", None)
            pid = getattr(proc, "pid", None)
            if pid and self.on_kernel:
                self.on_kernel(pid)
            client.start_new_kernel_client()
        except Exception as err:
            _kill_group(pid)
            started.close()
            self.skip_rest(self.i, f"the kernel could not be started: {err}")
            return None
        return client, started, pid

    def session(self, client, started, pid) -> bool:
        """Run cells in this kernel until the end, or until one hangs or crashes it
        (True: a restart is needed); the kernel is always stopped afterwards."""
        limits = self.place.limits or Limits()
        self.guard = _DiskGuard([self.place.box, started.channel], limits.disk_bytes, pid)
        self.channel = _ChannelWatch(client)
        try:
            if self.restarts:
                self.replay(client)
            while self.i < self.n:
                if self.run_cell(client, self.i):
                    return True
        except _OutOfTime:
            self.skip_rest(
                self.i,
                f"not run: the notebook reached its total time limit of {self.total_timeout:g} s",
            )
            self.i = self.n
        except Exception:
            # a replayed cell failed this time (hung, crashed, broke the channel): stop
            # rather than loop
            self.skip_rest(
                self.i,
                "not run: the kernel could not be brought back to a working state "
                "after an earlier cell hung or crashed it",
            )
            self.i = self.n
        finally:
            self.guard.stop()
            self.channel.close()
            _kill_group(pid)  # first: a kernel that broke its channel cannot stall the rest
            _cleanup(client)
            started.close()
        return False

    def replay(self, client) -> None:
        """Run again what went well before, so later cells have their state."""
        for j in range(self.i):
            cell = self.nb.cells[j]
            if cell.cell_type != "code" or j in self.bad or self.roles[j][0] == "harvest":
                continue
            client.timeout = max(1, int(self.limit_for(j, self.remaining())))
            client.execute_cell(cell, j)

    def run_cell(self, client, i: int) -> bool:
        """Run cell ``i`` and record its outcome; True when it hung or crashed the kernel."""
        cell = self.nb.cells[i]
        if cell.cell_type != "code" or not cell.source.strip():
            self.i = i + 1
            self.done(i, CellOutcome("ok"))
            return False
        limit = self.limit_for(i, self.remaining())  # (out of time: cell i is skipped)
        self.i = i + 1
        client.timeout = max(1, int(limit))
        t0 = time.monotonic()

        def outcome(status: str, message: str) -> CellOutcome:
            return CellOutcome(
                status, message, client.output_bytes.get(i, 0), time.monotonic() - t0
            )

        try:
            client.execute_cell(cell, i)
        except CellTimeoutError:
            total = limit < self.cell_timeout
            msg = (
                f"the notebook reached its total time limit of {self.total_timeout:g} s "
                "while this cell ran"
                if total
                else f"the cell did not finish within {self.cell_timeout:g} s"
            )
            self.done(i, outcome("timeout", msg))
            self.bad.add(i)
            if total:
                raise _OutOfTime() from None
            return True
        except Exception as err:  # DeadKernelError, or a channel the kernel broke
            msg = (
                self.guard.reason
                or "the kernel died while this cell ran (os._exit, "
                "a signal, a crash in native code, or out of memory)"
                if isinstance(err, DeadKernelError) or self.guard.reason
                else "the kernel broke its connection to the grader while this "
                f"cell ran ({type(err).__name__}: {str(err)[:200]})"
            )
            self.done(i, outcome("died", msg))
            self.bad.add(i)
            return True
        if self.channel.broken():  # a message over MAX_KERNEL_MESSAGE was refused
            msg = (
                "the kernel broke its connection to the grader while this cell ran (it sent "
                f"a message over {MAX_KERNEL_MESSAGE // 2**20} MB, more than the grader "
                "reads: print less)"
            )
            self.done(i, outcome("died", msg))
            self.bad.add(i)
            return True
        if self.guard.check():  # what the cell left on disk, measured now: no race
            self.done(i, outcome("died", self.guard.reason))
            self.bad.add(i)
            return True
        error = client.errors.get(i)
        self.done(i, outcome("error" if error else "ok", error or ""))
        return False
