"""Execute a rebuilt notebook in a fresh kernel, one cell at a time, and survive anything.

* every cell with learner code has a time limit (``cell_timeout``), the whole notebook
  another (``total_timeout``), which alone bounds the course's own cells;
* a cell that times out or kills the kernel (``os._exit``, a signal, a segfault, running
  out of memory) is recorded, the kernel is replaced by a fresh one, the earlier cells
  that went well are replayed, and execution goes on with the next cell, so one bad
  exercise does not cost the others (at most ``max_restarts`` times per notebook);
* outputs are never stored (only their size is counted and error messages kept), so a
  cell that prints gigabytes costs nothing but its note;
* the kernel gets its own session (so its whole process group can be killed), empty
  private IPython/Jupyter/matplotlib folders, no stdin, and none of the grader's file
  descriptors.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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
    """The kernel's environment: the grader's, with private IPython/Jupyter folders."""
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
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
        }
    )
    env.pop("JPY_PARENT_PID", None)
    env.pop("JUPYTER_PATH", None)
    return env


def _limit_memory(limit: int) -> None:  # runs in the kernel's process before it starts
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _kill_group(pid: int | None) -> None:
    if not pid:
        return
    # The kernel leads its own session and process group (jupyter_client starts it with
    # start_new_session), so its group id is its pid: this also ends its children.
    if pid == os.getpgrp():
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def execute(
    nb,
    roles: list[tuple[str, str | None]],
    workdir: Path,
    *,
    cell_timeout: float,
    total_timeout: float,
    env: dict[str, str],
    max_restarts: int = 3,
    memory_limit: int | None = None,
    on_kernel: Callable[[int], None] | None = None,
    on_cell: Callable[[int, CellOutcome], None] | None = None,
) -> list[CellOutcome]:
    """Run ``nb``'s code cells in order; return one CellOutcome per cell.

    ``roles[i][0]`` is "course", "solution" or "harvest"; harvest cells are never replayed
    after a restart. ``on_kernel(pid)`` is called for every kernel started (so a parent
    can kill it if this process dies); ``on_cell(i, outcome)`` after every cell.
    ``memory_limit`` (bytes) caps the kernel's address space: a learner's allocation past it
    raises MemoryError in their code instead of exhausting the machine.
    """
    extra: dict = {}
    if memory_limit:
        extra["preexec_fn"] = lambda: _limit_memory(memory_limit)
    n = len(nb.cells)
    deadline = time.monotonic() + total_timeout
    outcomes: list[CellOutcome | None] = [None] * n
    bad: set[int] = set()
    restarts = 0
    i = 0

    def done(idx: int, outcome: CellOutcome) -> None:
        outcomes[idx] = outcome
        if on_cell is not None:
            on_cell(idx, outcome)

    def skip_rest(start: int, why: str) -> None:
        for j in range(start, n):
            if outcomes[j] is None:
                done(j, CellOutcome("skipped", why))

    while i < n:
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
            resources={"metadata": {"path": str(workdir)}},
        )
        pid = None
        try:
            client.km = client.create_kernel_manager()
            client.start_new_kernel(
                cwd=str(workdir),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                **extra,
            )
            proc = getattr(getattr(client.km, "provisioner", None), "process", None)
            pid = getattr(proc, "pid", None)
            if pid and on_kernel:
                on_kernel(pid)
            client.start_new_kernel_client()
        except Exception as err:
            _kill_group(pid)
            skip_rest(i, f"the kernel could not be started: {err}")
            break
        restart_needed = False
        try:
            if restarts:  # replay what went well before, so later cells have their state
                for j in range(i):
                    if nb.cells[j].cell_type != "code" or j in bad or roles[j][0] == "harvest":
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 1:
                        raise _OutOfTime()
                    learner = roles[j][0] != "course"
                    client.timeout = max(
                        1, int(min(cell_timeout, remaining) if learner else remaining)
                    )
                    client.execute_cell(nb.cells[j], j)
            while i < n:
                cell = nb.cells[i]
                if cell.cell_type != "code" or not cell.source.strip():
                    done(i, CellOutcome("ok"))
                    i += 1
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 1:
                    raise _OutOfTime()
                # Cells with learner code get the cell limit; the course's own cells (known
                # to run) only the notebook's, so a slow machine cannot fail an import.
                learner = roles[i][0] != "course"
                limit = min(cell_timeout, remaining) if learner else remaining
                client.timeout = max(1, int(limit))
                t0 = time.monotonic()
                try:
                    client.execute_cell(cell, i)
                except CellTimeoutError:
                    total = limit < cell_timeout or not learner
                    msg = (
                        f"the notebook reached its total time limit of {total_timeout:g} s "
                        "while this cell ran"
                        if total
                        else f"the cell did not finish within {cell_timeout:g} s"
                    )
                    done(
                        i,
                        CellOutcome(
                            "timeout", msg, client.output_bytes.get(i, 0), time.monotonic() - t0
                        ),
                    )
                    bad.add(i)
                    i += 1
                    if total:
                        raise _OutOfTime() from None
                    restart_needed = True
                    break
                except DeadKernelError:
                    done(
                        i,
                        CellOutcome(
                            "died",
                            "the kernel died while this cell ran (os._exit, "
                            "a signal, a crash in native code, or out of memory)",
                            client.output_bytes.get(i, 0),
                            time.monotonic() - t0,
                        ),
                    )
                    bad.add(i)
                    i += 1
                    restart_needed = True
                    break
                err = client.errors.get(i)
                done(
                    i,
                    CellOutcome(
                        "error" if err else "ok",
                        err or "",
                        client.output_bytes.get(i, 0),
                        time.monotonic() - t0,
                    ),
                )
                i += 1
        except _OutOfTime:
            skip_rest(
                i, f"not run: the notebook reached its total time limit of {total_timeout:g} s"
            )
            i = n
        except (CellTimeoutError, DeadKernelError):
            # a replayed cell failed this time: stop rather than loop
            skip_rest(
                i,
                "not run: the kernel could not be brought back to a working state "
                "after an earlier cell hung or crashed it",
            )
            i = n
        finally:
            try:
                client._cleanup_kernel()
            except Exception:
                pass
            _kill_group(pid)
        if restart_needed and i < n:
            restarts += 1
            if restarts > max_restarts:
                skip_rest(
                    i,
                    f"not run: the kernel hung or crashed {restarts} times; grading "
                    "of this notebook stopped",
                )
                break
    return [o if o is not None else CellOutcome("skipped", "not run") for o in outcomes]


class _OutOfTime(Exception):
    pass
