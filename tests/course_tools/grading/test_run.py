"""course_tools/grading/run.py: executing a rebuilt notebook cell by cell and surviving what
its kernel does. No kernel starts here: a stand-in client plays the kernel (a cell that
hangs, one that kills the kernel, one that raises), so the time limits, the restarts with
their replays, the outcomes and the bounded outputs are the module's own logic."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import nbformat
import pytest
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from course_tools.grading import run as R
from course_tools.grading.run import KernelPlace, execute, kernel_env
from course_tools.grading.sandbox import Limits, Sandbox

# --------------------------------------------------------------------------- the environment


def test_a_kernel_without_the_sandbox_gets_private_folders_and_few_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("JPY_PARENT_PID", "1")
    monkeypatch.setenv("JUPYTER_PATH", "/elsewhere")
    monkeypatch.delenv("COURSE_BUDGET", raising=False)
    env = kernel_env(3, tmp_path / "private")
    for name in ("IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR",
                 "MPLCONFIGDIR"):  # fmt: skip
        assert env[name] == str(tmp_path / "private" / name.lower())
        assert os.path.isdir(env[name])
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "3"
    assert (env["MPLBACKEND"], env["COURSE_GRADING"], env["COURSE_BUDGET"]) == ("Agg", "1", "ci")
    assert "JPY_PARENT_PID" not in env and "JUPYTER_PATH" not in env
    monkeypatch.setenv("COURSE_BUDGET", "full")  # an instructor's own budget is kept
    assert kernel_env(1, tmp_path / "p2")["COURSE_BUDGET"] == "full"


# --------------------------------------------------------------------------- outputs


def test_outputs_are_counted_never_kept_and_the_first_error_is_named():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    client = R._Client(nb)
    outs = []
    stream = {"msg_type": "stream", "content": {"name": "stdout", "text": "x" * 1000}}
    assert client.output(outs, stream, None, 0) is None and outs == []
    assert client.output_bytes[0] > 1000
    error = {
        "msg_type": "error",
        "content": {
            "ename": "ValueError",
            "evalue": "\x1b[31mbad\x1b[0m",
            "traceback": ["Traceback", "Cell In[3], line 2\n----> 2 raise ValueError('bad')"],
        },
    }
    client.output(outs, error, None, 0)
    client.output(outs, dict(error, content={"ename": "Second", "evalue": ""}), None, 0)
    assert client.errors == {0: "ValueError: bad [----> 2 raise ValueError('bad')]"}


# --------------------------------------------------------------------------- processes


def test_killing_a_kernels_group_never_kills_the_grader():
    R._kill_group(None)
    R._kill_group(os.getpgrp())  # our own group: left alone (we are still here)
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    R._kill_group(child.pid)
    assert child.wait(timeout=10) == -9


# --------------------------------------------------------------------------- the disk guard


def test_the_disk_guard_counts_files_as_well_as_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "MAX_BOX_ENTRIES", 5)
    box = tmp_path / "box"
    box.mkdir()
    guard = R._DiskGuard([box], limit=2**30, pid=None, period=3600)
    try:
        for i in range(5):
            (box / f"f{i}").write_text("x")
        assert guard.check() == "" and guard.usage()[1] == 5
        (box / "d").mkdir()
        (box / "d" / "more").write_text("x")
        reason = guard.check()
        assert "more than 5 files into its working folder" in reason and "--disk-limit" in reason
        assert list(box.iterdir()) == []
        (box / "later").write_text("x")
        assert guard.check() == reason  # the verdict stays: the kernel is gone
    finally:
        guard.stop()


# --------------------------------------------------------------------------- a kernel's client


def _notebook(*sources: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def _place(tmp_path, **kw) -> KernelPlace:
    box = tmp_path / "box"
    box.mkdir(exist_ok=True)
    return KernelPlace(box=box, channels=tmp_path / "channels", env={}, **kw)


def test_a_kernels_client_talks_over_unix_sockets_in_a_folder_of_its_own(tmp_path):
    sandbox = Sandbox("/usr/bin/bwrap")
    place = _place(tmp_path, inputs=tmp_path / "inputs", sandbox=sandbox)
    started = R._Started(place)
    client = R._new_client(_notebook("1"), place, started, cell_timeout=7.9)
    km = client.km
    assert client.timeout == 7 and client.allow_errors and client.kernel_name == "python3"
    assert km.transport == "ipc" and km.connection_file == str(started.channel / "kernel.json")
    assert started.channel == tmp_path / "channels" / "c1"
    assert oct(started.channel.stat().st_mode & 0o777) == "0o700"
    assert km.sandbox_rw == [str(place.box), str(started.channel)]
    assert km.sandbox_ro == [str(tmp_path / "inputs")] and km.sandbox_cwd == str(place.box)
    cmd = km.format_kernel_cmd()
    assert cmd[0] == "/usr/bin/bwrap" and cmd[cmd.index("--") + 1 : cmd.index("--") + 4] == [
        sys.executable,
        "-m",
        "ipykernel_launcher",
    ]
    started.close()
    assert not started.channel.exists()


class _Clock:
    """The module's clock, moved by the stand-in kernel: a cell that "takes" time takes no
    time at all, so no outcome depends on how loaded the machine is."""

    now = 1000.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now


class _Kernel:
    """A stand-in kernel client: ``hang`` times out, ``die`` kills the kernel, ``raise``
    raises (an error output), ``slow`` takes 100 s of the clock, anything else runs; every
    run is logged with its kernel."""

    runs: list[tuple[int, int]] = []
    kernels = 0

    def __init__(self, nb, place, started, cell_timeout):
        type(self).kernels += 1
        self.kernel = type(self).kernels
        self.nb, self.timeout, self.km = nb, cell_timeout, None
        self.output_bytes, self.errors = {}, {}

    def start_new_kernel(self, **kwargs):
        if "no kernel" in self.nb.metadata.get("say", ""):
            raise RuntimeError("no kernel spec named python3")

    def start_new_kernel_client(self):
        pass

    def execute_cell(self, cell, i):
        type(self).runs.append((self.kernel, i))
        if cell.source == "hang":
            raise CellTimeoutError("timed out")
        if cell.source == "die":
            raise DeadKernelError("dead")
        if cell.source == "slow":
            _Clock.now += 100
        self.output_bytes[i] = len(cell.source)
        if cell.source == "raise":
            self.errors[i] = "ValueError: bad"

    def _cleanup_kernel(self):
        pass


@pytest.fixture
def stand_in(monkeypatch):
    _Kernel.runs, _Kernel.kernels = [], 0
    monkeypatch.setattr(R, "_new_client", _Kernel)
    monkeypatch.setattr(R, "time", _Clock)
    return _Kernel


def _execute(tmp_path, nb, roles=None, **kw):
    roles = roles or [("course", None)] * len(nb.cells)
    seen = []
    out = execute(
        nb,
        roles,
        _place(tmp_path, limits=Limits()),
        cell_timeout=kw.pop("cell_timeout", 10),
        total_timeout=kw.pop("total_timeout", 60),
        on_cell=lambda i, o: seen.append(i),
        **kw,
    )
    return out, seen


def test_every_cell_gets_an_outcome_in_order(tmp_path, stand_in):
    nb = _notebook("a = 1", "raise", "   ")
    nb.cells.append(nbformat.v4.new_markdown_cell("text"))
    out, seen = _execute(tmp_path, nb)
    assert [(o.status, o.message) for o in out] == [
        ("ok", ""),
        ("error", "ValueError: bad"),
        ("ok", ""),  # an empty cell: nothing to run
        ("ok", ""),  # a markdown cell
    ]
    assert out[0].output_bytes == 5 and seen == [0, 1, 2, 3]
    assert stand_in.runs == [(1, 0), (1, 1)]


def test_a_hung_or_dead_kernel_is_replaced_and_the_good_cells_replayed(tmp_path, stand_in):
    nb = _notebook("setup", "hang", "harvest", "die", "after")
    roles = [("course", None), ("solution", "00.1"), ("harvest", "00.1"),
             ("learner", None), ("course", None)]  # fmt: skip
    out, _ = _execute(tmp_path, nb, roles, cell_timeout=5)
    assert [o.status for o in out] == ["ok", "timeout", "ok", "died", "ok"]
    assert out[1].message == "the cell did not finish within 5 s"
    assert "the kernel died while this cell ran" in out[3].message
    # kernel 2 replays the set-up only; kernel 3 the set-up again (never a bad cell, never
    # a harvest), then goes on
    assert stand_in.runs == [(1, 0), (1, 1), (2, 0), (2, 2), (2, 3), (3, 0), (3, 4)]


def test_after_too_many_restarts_the_rest_is_skipped(tmp_path, stand_in):
    out, _ = _execute(tmp_path, _notebook("die", "die", "die", "die", "die", "ok"))
    assert [o.status for o in out] == ["died"] * 4 + ["skipped"] * 2
    assert "hung or crashed 4 times" in out[-1].message


def test_a_kernel_that_cannot_start_skips_every_cell_saying_why(tmp_path, stand_in):
    nb = _notebook("a", "b")
    nb.metadata["say"] = "no kernel"
    out, seen = _execute(tmp_path, nb)
    assert [o.status for o in out] == ["skipped", "skipped"] and seen == [0, 1]
    assert "the kernel could not be started: no kernel spec named python3" in out[0].message


def test_the_notebooks_time_limit_stops_the_run(tmp_path, stand_in):
    out, _ = _execute(tmp_path, _notebook("slow", "a", "b"), total_timeout=50)
    assert [o.status for o in out] == ["ok", "skipped", "skipped"]
    assert out[1].message == "not run: the notebook reached its total time limit of 50 s"


def test_a_cell_cut_short_by_the_notebooks_limit_says_so(tmp_path, stand_in):
    nb = _notebook("setup", "hang", "after")
    roles = [("course", None), ("solution", "00.1"), ("course", None)]
    out, _ = _execute(tmp_path, nb, roles, cell_timeout=10, total_timeout=5)
    assert [o.status for o in out] == ["ok", "timeout", "skipped"]
    assert out[1].message == (
        "the notebook reached its total time limit of 5 s while this cell ran"
    )
    assert stand_in.kernels == 1  # out of time: no kernel is started again


def test_course_cells_before_any_learner_code_are_bounded_by_the_notebook_alone(tmp_path):
    nb = _notebook("import", "learner", "course after")
    roles = [("course", None), ("solution", "00.1"), ("course", None)]
    run = R._Execution(nb, roles, _place(tmp_path), 10, 100, None, None)
    assert run.limit_for(0, 95) == 95  # a slow import must not fail the notebook
    assert run.limit_for(1, 95) == 10 and run.limit_for(2, 95) == 10
    assert run.limit_for(1, 4) == 4  # never past the notebook's limit
    run.deadline = time.monotonic() + 0.5  # (under a second left: out of time)
    with pytest.raises(R._OutOfTime):
        run.remaining()
