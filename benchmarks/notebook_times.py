"""Time every notebook of the course, one after another, kernel start-up included.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/notebook_times.py
        [--budget ci|full] [--only GLOB ...] [--out PATH]

``--budget`` sets ``COURSE_BUDGET`` for the notebooks' kernels: ``ci`` (the default here, what
``make test`` runs) or ``full`` (what a learner gets in JupyterLab: chapters 07-08 train
longer). ``--only`` keeps the notebooks whose path matches one of the globs
(``'notebooks/0[78]_*'``). Writes JSON (default
``benchmarks/results/notebook_times.json``, or ``notebook_times_full.json`` for the full
budget) with the machine, versions and date. The CI budgets (60 s; chapters 06-10: 120 s; 11: 180 s, on
a 2-core machine, ``course_tools.course.notebook_budget_s``) are reported, never asserted;
they apply to ``--budget ci`` only. ``make test`` prints a similar table for its parallel run
(``test-output/notebook_times.json``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_tools.course import notebook_budget_s

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def select(paths: list[str], only: list[str] | None) -> list[str]:
    """The paths (relative, ``notebooks/07_tiny_gpt.ipynb``) that match one of ``only``."""
    if not only:
        return paths
    return [p for p in paths if any(fnmatch.fnmatch(p, g) for g in only)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=("ci", "full"), default="ci")
    parser.add_argument("--only", nargs="+", metavar="GLOB")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = args.out or RESULTS / (
        "notebook_times.json" if args.budget == "ci" else "notebook_times_full.json"
    )
    os.environ["COURSE_BUDGET"] = args.budget  # the kernels inherit it
    from course_lib import env

    env.setup(quiet=True, plots=False)  # Triton's interpreter before triton is imported
    every = [
        str(p.relative_to(ROOT))
        for folder in ("notebooks", "solutions", "exercises")
        for p in sorted((ROOT / folder).glob("*.ipynb"))
    ]
    paths = select(every, args.only)
    if not paths:
        parser.error(f"no notebook matches {args.only}")
    rows = []
    for rel in paths:
        path = ROOT / rel
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        # Blank exercises raise only in learner code; their checks print "not implemented".
        NotebookClient(
            nb,
            timeout=1800,
            kernel_name="python3",
            allow_errors=False,
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
        secs = time.perf_counter() - t0
        row = {"notebook": rel, "seconds": round(secs, 1)}
        if args.budget == "ci":
            row["budget_s"] = notebook_budget_s(rel)
        rows.append(row)
        limit = f" / {row['budget_s']:3.0f} s" if "budget_s" in row else ""
        print(f"{secs:6.1f} s{limit}  {rel}", flush=True)
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    report = {
        "what": "each notebook executed alone, in sequence, with nbclient; kernel start included",
        "command": "benchmarks/notebook_times.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "course_budget": args.budget,
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), no GPU"
        if not torch.cuda.is_available()
        else torch.cuda.get_device_name(0),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "total_seconds": round(sum(r["seconds"] for r in rows), 1),
        "notebooks": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
