"""Grading throughput: every solved and blank notebook of the course graded in the sandbox.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/grader_throughput.py
        [--label NAME] [--runs 1] [--jobs 2] [--out PATH] [--exclude GLOB ...]

Runs ``course-grade solutions/*.ipynb exercises/*.ipynb --jobs J`` (a fresh output folder
each run, the real sandbox where bubblewrap is present) and appends one measurement to
``benchmarks/results/grader_throughput.json``: wall seconds per run, submissions per
minute, the machine, its load average, the date and the commit. ``--label`` names what was
measured (``before-refactor``, ``after-round3``); ``--exclude`` leaves out notebooks by name
(``--exclude '11_*'`` grades the same notebooks as a commit before chapter 11). Reported,
never asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "grader_throughput.json"


def one_run(notebooks: list[Path], jobs: int) -> tuple[float, int]:
    """Seconds to grade ``notebooks`` once, and course-grade's exit code."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "course_tools.grading", *map(str, notebooks)]
        cmd += ["--out", out, "--jobs", str(jobs), "--seed", "1", "--quiet"]
        t0 = time.monotonic()
        code = subprocess.run(cmd, cwd=ROOT).returncode
        return time.monotonic() - t0, code


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--exclude", nargs="*", default=[], metavar="GLOB")
    args = ap.parse_args(argv)
    notebooks = sorted((ROOT / "solutions").glob("*.ipynb"))
    notebooks += sorted((ROOT / "exercises").glob("*.ipynb"))
    notebooks = [p for p in notebooks if not any(p.match(g) for g in args.exclude)]
    seconds, codes = [], []
    for _ in range(args.runs):
        s, code = one_run(notebooks, args.jobs)
        seconds.append(round(s, 1))
        codes.append(code)
        print(f"{len(notebooks)} notebooks in {s:.1f} s (exit {code})")
    best = min(seconds)
    entry = {
        "label": args.label,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), no GPU, shared",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "jobs": args.jobs,
        "submissions": len(notebooks),
        "seconds": seconds,
        "exit_codes": codes,
        "submissions_per_minute_best": round(60 * len(notebooks) / best, 1),
    }
    data = {"what": __doc__.splitlines()[0], "measurements": []}
    if args.out.exists():
        data = json.loads(args.out.read_text(encoding="utf-8"))
    data["measurements"].append(entry)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(entry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
