"""``course-grade``'s command line: its options, checked as they are read, and the limits
they give each kernel (see :mod:`course_tools.grading.cli`)."""

from __future__ import annotations

import argparse
import os
import re
import secrets
from dataclasses import dataclass, fields
from pathlib import Path

from ..course import add_course_argument
from .protocol import EXPORTS
from .sandbox import CgroupSet, Limits, memory_total, usable_cpus

SEED_FILE = ".grader-seed"
KERNEL_MEMORY = 1.5 * 2**30  # what one kernel with PyTorch loaded takes, roughly


def default_jobs() -> int:
    """Every usable core, as long as the memory holds one kernel per job."""
    cpus = usable_cpus()
    mem = memory_total()
    by_memory = int(mem // KERNEL_MEMORY) if mem else cpus
    return max(1, min(cpus, by_memory))


def _shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N (e.g. 2/8), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def parse_exports(text: str) -> list[str]:
    which = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in which if w not in EXPORTS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown export {', '.join(bad)}: choose from {', '.join(EXPORTS)}"
        )
    return which


@dataclass(frozen=True)
class Options:
    """``course-grade``'s options, as :func:`build_parser` reads them (one field per
    option; the defaults are the parser's)."""

    inputs: list[str]
    out: Path
    jobs: int
    timeout: float
    cell_timeout: float
    output_limit: int
    memory_limit: float | None
    disk_limit: float
    cgroups: bool
    max_submissions: int
    max_total_size: float
    max_time: float | None
    grader_memory: float
    assignment: str | None
    partial: bool
    export: list[str]
    student: str | None
    seed: int | None
    seed_file: Path | None
    shard: tuple[int, int] | None
    course: Path | None
    sandbox: bool
    integrity: bool
    keep_work: bool
    quiet: bool
    verbose: bool


def parse_options(argv: list[str]) -> Options:
    """The command line ``argv`` as :class:`Options` (argparse exits on a bad one)."""
    ns = build_parser().parse_args(argv)
    return Options(**{f.name: getattr(ns, f.name) for f in fields(Options)})


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
    _add_limit_options(p)
    _add_grader_options(p)
    _add_grading_options(p)
    _add_safety_options(p)
    return p


def _add_grader_options(p: argparse.ArgumentParser) -> None:
    """The grading process's own limits (beside its kernels')."""
    p.add_argument(
        "--grader-memory",
        type=float,
        default=GRADER_MEMORY_GB,
        metavar="GB",
        help="what the grading process of one submission may allocate itself (reading and "
        f"scoring its recorded outputs; default {GRADER_MEMORY_GB:g}); past it, that "
        "submission gets an error",
    )


def _add_limit_options(p: argparse.ArgumentParser) -> None:
    """How much each submission and the whole run may take."""
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
        "--disk-limit",
        type=float,
        default=2.0,
        metavar="GB",
        help="what a kernel may write into its working folders (default 2); a kernel that "
        "writes more is stopped and its exercise gets an error saying so",
    )
    p.add_argument(
        "--no-cgroups",
        dest="cgroups",
        action="store_false",
        help="do not use cgroups for limits, only rlimits",
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


def _add_grading_options(p: argparse.ArgumentParser) -> None:
    """What is graded, how points are counted, exported and drawn (the seed, shards)."""
    p.add_argument(
        "--assignment",
        metavar="NAME",
        default=None,
        help="grade every submission as this assignment (e.g. 02_qkv_attention); default: "
        "the assignment named by each submission's folder or file name, else its metadata. "
        "A notebook whose metadata names another assignment is graded as the expected one "
        "and flagged for review",
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="partial credit: an exercise earns its points times the share of the "
        "grader's cases passed (default: all or nothing)",
    )
    p.add_argument(
        "--export",
        type=parse_exports,
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


def _add_safety_options(p: argparse.ArgumentParser) -> None:
    """Where the course is, the sandbox, and what the run prints."""
    add_course_argument(p)
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


GRADER_MEMORY_GB = 2.0  # the grading process's own data (RLIMIT_DATA), per submission


def grader_cpu_seconds(args: Options) -> int:
    """CPU seconds the grading process of one submission may use itself (its kernel's are
    not counted): its watching, reading and scoring, never more than its notebook's time
    limit plus two minutes (a process that used them is stopped: that submission's error)."""
    return int(args.timeout) + 120


def make_limits(args: Options, jobs: int, threads: int) -> Limits:
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
        disk_bytes=int(args.disk_limit * 2**30),
        cgroup=cg,
    )
