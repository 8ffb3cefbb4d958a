"""Where the course is: the folder that holds ``solutions/`` (and ``exercises/``).

The tools never guess it from where they are installed (a wheel lives in site-packages,
far from any course): it is given on the command line, or it is the current directory.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path


class CourseRootError(ValueError):
    """No course folder where one was expected (the message says what to do)."""


def course_root(given: str | Path | None = None) -> Path:
    """The course folder: ``given`` (``--course ROOT``), else the current directory.

    Either must hold a ``solutions/`` folder; otherwise :class:`CourseRootError` says so.
    """
    if given is None:
        root = Path.cwd().resolve()
        if not (root / "solutions").is_dir():
            raise CourseRootError(
                f"the current directory {root} is not a course folder (it has no solutions/): "
                "run the command from the course checkout or pass --course ROOT"
            )
        return root
    root = Path(given).expanduser().resolve()
    if not (root / "solutions").is_dir():
        raise CourseRootError(f"{root} is not a course folder: it has no solutions/ folder")
    return root


def add_course_argument(parser: argparse.ArgumentParser) -> None:
    """``--course ROOT`` (or ``--root``): the one spelling of the option every tool takes;
    :func:`course_root` resolves it."""
    parser.add_argument(
        "--course",
        "--root",
        dest="course",
        type=Path,
        default=None,
        metavar="ROOT",
        help="the course folder holding solutions/ (default: the current "
        "directory, when it is one)",
    )


def course_commit(root: str | Path) -> str:
    """The course's version as git describes it (``v0.2.0-3-g1a2b3c4d5e6f-dirty``), or
    ``"unknown"`` when the folder is not a git checkout (or git is missing)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--tags", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = proc.stdout.strip()
    return text if proc.returncode == 0 and text else "unknown"


# Per-notebook time budgets on the 2-core CI machine, in seconds, with COURSE_BUDGET=ci:
# reported by `make test` and benchmarks/notebook_times.py, never asserted.
NOTEBOOK_BUDGET_S = {
    "06_": 120.0,
    "07_": 120.0,
    "08_": 120.0,
    "09_": 120.0,
    "10_": 120.0,
    "11_": 180.0,
}
DEFAULT_NOTEBOOK_BUDGET_S = 60.0


def notebook_budget_s(name: str) -> float:
    """The time budget of the notebook called ``name`` (``07_tiny_gpt.ipynb``): 120 s for
    the chapters that train models, run kernels or load a real model (06-10), 180 s for
    chapter 11 (a real model on long texts), 60 s for the others."""
    return next(
        (b for p, b in NOTEBOOK_BUDGET_S.items() if Path(name).name.startswith(p)),
        DEFAULT_NOTEBOOK_BUDGET_S,
    )
