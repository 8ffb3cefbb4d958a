"""benchmarks/test_times.py and conftest's per-test times: what the suite-time report says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _run(tests: dict[str, float]) -> dict:
    return {
        "date": "2026-12-02 00:00:00",
        "cpus": 2,
        "workers": 2,
        "args": ["tests"],
        "wall_s": 12.5,
        "tests": tests,
    }


def test_the_slowest_tests_come_first_and_files_are_summed():
    summarise = load_script("benchmarks/test_times.py").summarise
    tests = {"tests/a.py::x": 1.0, "tests/a.py::y": 5.0, "tests/b.py::z": 4.0, "tests/c.py::w": 0.1}
    got = summarise(_run(tests), top=2)
    assert [r["test"] for r in got["slowest"]] == ["tests/a.py::y", "tests/b.py::z"]
    assert got["slowest_files"][0] == {"file": "tests/a.py", "seconds": 6.0}
    assert got["tests"] == 4 and got["test_seconds"] == pytest.approx(10.1)


def test_a_missing_run_is_named(tmp_path, capsys):
    main = load_script("benchmarks/test_times.py").main
    with pytest.raises(SystemExit):
        main(["--from", str(tmp_path / "none.json"), "--out", str(tmp_path / "o.json")])
    assert "run `make test`" in capsys.readouterr().err


@pytest.mark.slow
def test_a_pytest_run_records_every_test(tmp_path):
    # a tiny suite beside the course's conftest: its times land in test-output/test_times.json
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    (suite / "test_probe.py").write_text(
        "import time\n\ndef test_slow():\n    time.sleep(0.3)\n\ndef test_quick():\n    pass\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_probe.py"],
        cwd=suite,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    times = json.loads((suite / "test-output" / "test_times.json").read_text())
    assert set(times["tests"]) == {"test_probe.py::test_slow", "test_probe.py::test_quick"}
    assert times["tests"]["test_probe.py::test_slow"] >= 0.3
    out = tmp_path / "report.json"
    load_script("benchmarks/test_times.py").main(
        ["--from", str(suite / "test-output" / "test_times.json"), "--out", str(out)]
    )
    assert json.loads(out.read_text())["slowest"][0]["test"] == "test_probe.py::test_slow"
