"""benchmarks/coverage.py on one small test file: the report's shape and its figures."""

from __future__ import annotations

import json

from scripts import load_script


def test_coverage_of_one_test_file_is_measured_and_written(tmp_path):
    coverage = load_script("benchmarks/coverage.py")
    out = tmp_path / "coverage.json"
    report = coverage.main(["--out", str(out), "--", "tests/course_lib/checks/test_texts.py"])
    assert json.loads(out.read_text()) == report
    assert report["pytest_exit_code"] == 0 and report["tests"].endswith("test_texts.py")
    assert 0 < report["total_percent"] < 100
    assert set(report["packages_percent"]) == {"course_lib", "course_tools", "tools"}
    # the test file exercises texts.py and nothing of the grader
    assert report["packages_percent"]["course_lib"] > report["packages_percent"]["course_tools"]
    least = [row["module"] for row in report["least_covered"]]
    assert "course_lib/checks/texts.py" not in least and len(least) == 20
    assert report["modules"] > 100
