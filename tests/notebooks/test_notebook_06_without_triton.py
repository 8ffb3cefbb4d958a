"""Chapter 06 runs top to bottom on a machine without Triton (macOS, Windows).

Triton ships wheels for Linux only. The lecture must then run its numpy/torch sections in
full, define (not launch) its kernels, and carry on to the recorded results. We hide Triton
from every process of an nbval run with a ``sitecustomize.py`` on ``PYTHONPATH`` (Python
imports it at start-up, in pytest's process and in the notebook's kernel alike):
``sys.modules["triton"] = None`` makes ``import triton`` fail and ``find_spec`` report it
missing, exactly as on a machine where it is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "06_flash_attention.ipynb"

SITECUSTOMIZE = """\
import os, sys
sys.modules["triton"] = None  # as if Triton were not installed
with open(os.environ["HIDE_TRITON_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
"""


@pytest.mark.slow
def test_chapter_06_runs_under_nbval_with_triton_hidden(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "pids.txt"
    environ = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
        HIDE_TRITON_LOG=str(log),
    )
    probe = subprocess.run(
        [sys.executable, "-c", "from course_lib import env; print(env.triton_installed())"],
        env=environ,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert probe.stdout.strip() == "False", probe.stderr  # the hiding works
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p", "no:xdist",
         "-p", "no:cacheprovider", "-q", str(NOTEBOOK)],
        env=environ,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    # pytest's process, the notebook's kernel (and the probe) all ran with Triton hidden
    assert len(set(log.read_text().split())) >= 3
