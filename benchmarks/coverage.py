"""How much of the course's code the fast tier of tests runs: line coverage, by package and module.

    .venv/bin/python benchmarks/coverage.py [--out PATH] [-- PYTEST ARGS...]

Runs ``make test-fast``'s selection (``tests -m "not browser and not slow"``, 2 workers) under
coverage.py with branch coverage, over ``course_lib``, ``course_tools`` and ``tools``, and writes
``benchmarks/results/coverage.json``: the total, each package's figure, the twenty least
covered modules, the machine, the versions and the date. Reported, never asserted: a figure is
a map of what the fast tier leaves to the slow tests and the notebooks (the Triton kernels run
in the interpreter; the sandboxed grading runs and the lectures are the slow tier's).
After PYTEST ARGS (``-- tests/course_lib/test_stats.py``) it measures those tests instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("course_lib", "course_tools", "tools")
FAST_TIER = ["-n", "2", "tests", "-m", "not browser and not slow"]


def run_pytest(pytest_args: list[str], data: Path) -> int:
    """The tests under coverage (``pytest-cov``); the data file ``data``. pytest's exit code."""
    cov = [f"--cov={p}" for p in PACKAGES] + ["--cov-branch", "--cov-report="]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *cov, *pytest_args]
    env = {**os.environ, "COVERAGE_FILE": str(data)}
    return subprocess.call(cmd, cwd=ROOT, env=env)


def summarise(data: Path) -> dict:
    """Coverage's JSON report of ``data``, reduced to the total, the packages and modules."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "coverage.json"
        subprocess.run(
            [sys.executable, "-m", "coverage", "json", f"--data-file={data}", "-o", str(report)],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        raw = json.loads(report.read_text())
    modules = {
        path: round(f["summary"]["percent_covered"], 1)
        for path, f in raw["files"].items()
        if path.startswith(PACKAGES)
    }
    packages = {}
    for package in PACKAGES:
        files = [f for p, f in raw["files"].items() if p.startswith(package + "/")]
        covered = sum(
            f["summary"]["covered_lines"] + f["summary"]["covered_branches"] for f in files
        )
        total = sum(f["summary"]["num_statements"] + f["summary"]["num_branches"] for f in files)
        packages[package] = round(100 * covered / total, 1) if total else None
    least = sorted(modules.items(), key=lambda kv: kv[1])[:20]
    return {
        "total_percent": round(raw["totals"]["percent_covered"], 1),
        "packages_percent": packages,
        "modules": len(modules),
        "least_covered": [{"module": m, "percent": p} for m, p in least],
    }


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    ours, pytest_args = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "coverage.json"
    )
    args = parser.parse_args(ours)
    pytest_args = pytest_args or FAST_TIER
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / ".coverage"
        status = run_pytest(pytest_args, data)
        report = summarise(data)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "tests": " ".join(pytest_args),
        "pytest_exit_code": status,
        "wall_s": round(time.time() - start, 1),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": platform.python_version(),
        "measure": "lines and branches (coverage.py --branch)",
        **report,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['total_percent']} % of course_lib, course_tools and tools ({report['tests']})")
    for package, percent in report["packages_percent"].items():
        print(f"  {package:13s} {percent} %")
    print(f"(written to {args.out})")
    return report


if __name__ == "__main__":
    main()
