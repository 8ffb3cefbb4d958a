"""Time every notebook of the course, one after another, kernel start-up included.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/notebook_times.py [--out PATH]

Writes JSON (default benchmarks/results/notebook_times.json) with the machine, versions and
date. Budgets (60 s; chapter 06: 120 s, on a 2-core machine) are reported, never asserted.
`make test` prints a similar table for its parallel run (test-output/notebook_times.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/notebook_times.json")
    args = parser.parse_args()
    from course_lib import env

    env.setup(quiet=True, plots=False)  # Triton's interpreter before triton is imported
    rows = []
    for folder in ("notebooks", "solutions", "exercises"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            t0 = time.perf_counter()
            # Blank exercises raise on purpose only in learner code; their checks just print.
            NotebookClient(
                nb,
                timeout=600,
                kernel_name="python3",
                allow_errors=False,
                resources={"metadata": {"path": str(path.parent)}},
            ).execute()
            secs = time.perf_counter() - t0
            budget = 120 if path.name.startswith("06_") else 60
            rel = str(path.relative_to(ROOT))
            rows.append({"notebook": rel, "seconds": round(secs, 1), "budget_s": budget})
            print(f"{secs:6.1f} s / {budget:3d} s  {rel}", flush=True)
    import torch
    import triton

    report = {
        "what": "each notebook executed alone, in sequence, with nbclient; kernel start included",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), no GPU"
        if not torch.cuda.is_available()
        else torch.cuda.get_device_name(0),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "total_seconds": round(sum(r["seconds"] for r in rows), 1),
        "notebooks": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
