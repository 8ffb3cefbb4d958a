"""Sizing a hub: each chapter's lecture and exercise kernel, its peak memory and CPU time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kernel_sizing.py
        [--budget ci full] [--only GLOB ...] [--out PATH]

Runs each notebook (``notebooks/`` for the lecture, ``solutions/`` for the exercise kernel: a
learner who finishes the exercises runs what the solution runs) top to bottom in a fresh
process with nbclient, with ``COURSE_BUDGET`` set, and records what the kernel used, from
``getrusage(RUSAGE_CHILDREN)`` of that process once the kernel has exited: its peak resident
memory (the largest process among the kernel and what it waited for: chapter 09's workers)
and its CPU seconds (user + system, every thread and waited-for child). CPU seconds do not
depend on the machine's load; wall seconds do and are recorded for reference only. Writes
``benchmarks/results/kernel_sizing.json``; the instructors' guide derives its per-learner and
30-learner table from it (``python -m course_tools.plan`` does not read it). Reported, never
asserted.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "kernel_sizing.json"

# Runs in a fresh process: executes one notebook, then prints the children's usage.
_ONE = r"""
import json, resource, sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient
path = Path(sys.argv[1])
nb = nbformat.read(path, as_version=4)
t0 = time.perf_counter()
NotebookClient(nb, timeout=3600, kernel_name="python3", allow_errors=False,
               resources={"metadata": {"path": str(path.parent)}}).execute()
wall = time.perf_counter() - t0
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": round(wall, 1), "cpu_s": round(u.ru_utime + u.ru_stime, 1),
                  "peak_rss_mb": round(u.ru_maxrss / 1024, 1)}))
"""


def measure(rel: str, budget: str) -> dict:
    env = {**os.environ, "COURSE_BUDGET": budget, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _ONE, str(ROOT / rel)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return {"notebook": rel, "budget": budget, "error": proc.stderr[-600:]}
    return {"notebook": rel, "budget": budget, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", nargs="+", choices=("ci", "full"), default=["ci", "full"])
    ap.add_argument("--only", nargs="+", metavar="GLOB")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    every = [
        str(p.relative_to(ROOT))
        for folder in ("notebooks", "solutions")
        for p in sorted((ROOT / folder).glob("*.ipynb"))
    ]
    paths = [p for p in every if not args.only or any(fnmatch.fnmatch(p, g) for g in args.only)]
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    rows = {(r["notebook"], r["budget"]): r for r in old.get("rows", [])}
    for budget in args.budget:
        for rel in paths:
            row = measure(rel, budget)
            rows[(rel, budget)] = row
            shown = row.get("error", "")[:200] or (
                f"{row['peak_rss_mb']:7.0f} MB {row['cpu_s']:7.1f} CPU s {row['wall_s']:7.1f} s"
            )
            print(f"{budget:4} {rel:45} {shown}", flush=True)
            report = {
                "what": __doc__.splitlines()[0],
                "how": "each notebook alone in a fresh process (nbclient); the kernel's "
                "getrusage(RUSAGE_CHILDREN) after it exited: peak RSS and user+system CPU",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), no GPU",
                "load_average_1m_at_end": round(os.getloadavg()[0], 2),
                "python": platform.python_version(),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "rows": sorted(rows.values(), key=lambda r: (r["budget"], r["notebook"])),
            }
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
