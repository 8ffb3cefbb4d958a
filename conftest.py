"""Shared test set-up for tests/ and the nbval runs of notebooks/ and solutions/.

Two jobs: Triton's mode, and a per-notebook timing report (`make test`, `make notebooks`).
Triton reads TRITON_INTERPRET when @triton.jit decorates a kernel, so this must run before
any test module defines one: without a CUDA GPU every kernel runs in Triton's CPU interpreter.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

from course_lib import env as course_env
from course_tools.course import notebook_budget_s

ROOT = Path(__file__).resolve().parent
OUTPUT = ROOT / "test-output"

# Chapters that train models use their short CI budget under the test suite (kernels that
# nbval starts inherit this process's environment). See course_lib.env.budget().
os.environ.setdefault("COURSE_BUDGET", "ci")
course_env.setup(quiet=True, plots=False)


def pytest_collection_modifyitems(config, items):
    try:
        import torch
    except ImportError:  # the torch-free tier on other Pythons (.ci/other-pythons): no GPU
        torch = None
    if torch is not None and torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(
        reason="needs a CUDA GPU (the CPU twin of this test runs the "
        "same kernel in Triton's interpreter)"
    )
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


_times: dict[str, float] = defaultdict(float)
_failed: set[str] = set()
# every test's time (setup + call + teardown), for benchmarks/test_times.py
_test_times: dict[str, float] = defaultdict(float)
_session_start = time.time()


def pytest_runtest_logreport(report):
    _test_times[report.nodeid] += report.duration
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _times[path] += report.duration
        if report.failed:
            _failed.add(path)


def _write_test_times(config) -> None:
    """test-output/test_times.json: how long each test took in this run (never asserted;
    ``benchmarks/test_times.py`` turns it into the slowest-tests report)."""
    if not _test_times or hasattr(config, "workerinput"):  # xdist workers: the controller writes
        return
    OUTPUT.mkdir(exist_ok=True)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "workers": getattr(config.option, "numprocesses", None) or 1,
        "args": list(config.invocation_params.args),
        "wall_s": round(time.time() - _session_start, 1),
        "tests": {k: round(v, 3) for k, v in sorted(_test_times.items())},
    }
    (OUTPUT / "test_times.json").write_text(json.dumps(report, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter):
    _write_test_times(terminalreporter.config)
    if not _times:
        return
    rows = []
    for path, secs in sorted(_times.items()):
        budget = notebook_budget_s(path)
        rows.append(
            {
                "notebook": path,
                "seconds": round(secs, 2),
                "budget_s": budget,
                "within_budget": secs <= budget,
                "failed": path in _failed,
            }
        )
    tr = terminalreporter
    tr.section("notebook execution times")
    for r in rows:
        flag = "" if r["within_budget"] else "  OVER BUDGET"
        tr.write_line(f"{r['seconds']:8.1f} s / {r['budget_s']:5.0f} s  {r['notebook']}{flag}")
    OUTPUT.mkdir(exist_ok=True)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "parallel_workers": os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"),
        "notebooks": rows,
    }
    (OUTPUT / "notebook_times.json").write_text(json.dumps(report, indent=2) + "\n")
    tr.write_line(f"(written to {OUTPUT / 'notebook_times.json'})")


def pytest_configure(config):
    """`pytest -n 2 --nbval-lax notebooks` must keep each notebook on one worker: its
    cells share one kernel, so xdist's default (spread tests over workers) would run a
    notebook's later cells where its first never ran. Unless `--dist` was given, `-n`
    distributes whole files (`--dist loadfile`). A hook rather than `addopts`, so that
    `-p no:xdist` and machines without pytest-xdist keep working."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    given = any(
        a == "-d" or a == "--dist" or a.startswith("--dist=") for a in config.invocation_params.args
    )
    if not given and getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadfile"
