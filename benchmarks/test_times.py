"""The suite's time, and its slowest tests, from the last pytest run.

    .venv/bin/python benchmarks/test_times.py [--from test-output/test_times.json]
        [--tier full|fast] [--top 20] [--out PATH]

Every pytest run of the course writes ``test-output/test_times.json`` (``conftest.py``: each
test's setup + call + teardown, and the run's wall time). This script ranks the tests and
sums them by file, and writes ``benchmarks/results/test_times_<tier>.json`` with the
machine and date: the slowest tests are where the suite's budget goes (12 minutes for
``make test`` and 3 for ``make test-fast`` on 2 cores; COURSE_DESIGN.md). Reported, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def summarise(run: dict, top: int) -> dict:
    tests = run["tests"]
    by_file: dict[str, float] = defaultdict(float)
    for nodeid, secs in tests.items():
        by_file[nodeid.split("::")[0]] += secs
    slowest = sorted(tests.items(), key=lambda kv: -kv[1])[:top]
    return {
        "date": run["date"],
        "machine": {"cpus": run["cpus"], "platform": platform.platform()},
        "workers": run["workers"],
        "args": run["args"],
        "wall_s": run["wall_s"],
        "tests": len(tests),
        "test_seconds": round(sum(tests.values()), 1),
        "slowest": [{"test": k, "seconds": v} for k, v in slowest],
        "slowest_files": [
            {"file": f, "seconds": round(s, 1)}
            for f, s in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]
        ],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="src", type=Path, default=ROOT / "test-output" / "test_times.json"
    )
    parser.add_argument("--tier", choices=("full", "fast"), default="full")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.src.exists():
        parser.error(f"{args.src} does not exist: run `make test` (or `make test-fast`) first")
    report = summarise(json.loads(args.src.read_text()), args.top)
    out = args.out or ROOT / "benchmarks" / "results" / f"test_times_{args.tier}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['tests']} tests, {report['wall_s']:.0f} s wall on {report['workers']} workers")
    for row in report["slowest"]:
        print(f"{row['seconds']:8.1f} s  {row['test']}")
    print(f"(written to {out})")
    return report


if __name__ == "__main__":
    main()
