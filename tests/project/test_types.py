"""The type check: mypy over course_lib, course_tools and tools/ (pyproject.toml's
``[tool.mypy]``) passes, can fail, and silences no module of the course."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from course_tools.links import load_toml

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
OURS = ("course_lib", "course_tools", "tools")


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _config() -> dict:
    return load_toml(PYPROJECT)["tool"]["mypy"]


@pytest.mark.slow  # ~50 s of CPU with a cold .mypy_cache (as in CI); a few seconds warm
def test_mypy_passes_on_the_course():
    """`.venv/bin/mypy` from the repository root: the files and settings of pyproject.toml."""
    proc = _mypy()
    assert proc.returncode == 0, f"mypy found problems:\n{proc.stdout}{proc.stderr}"


def test_the_type_check_can_fail(tmp_path):
    """The same settings on a module with one error of each kind they catch: a wrong type,
    one in the body of an unannotated function (check_untyped_defs) and an ignore comment
    that ignores nothing (warn_unused_ignores)."""
    bad = tmp_path / "bad_types.py"
    bad.write_text(
        'x: int = "not a number"\n'
        "\n"
        "\n"
        "def untyped():\n"
        '    return 1 + ""\n'
        "\n"
        "\n"
        "y: int = 1  # type: ignore[assignment]\n",
        encoding="utf-8",
    )
    args = ["--config-file", str(PYPROJECT), "--cache-dir", str(tmp_path / "cache"), str(bad)]
    proc = _mypy(*args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"mypy should have failed:\n{out}"
    for line, code in ((1, "assignment"), (5, "operator"), (8, "unused-ignore")):
        assert any(
            f"bad_types.py:{line}: error:" in row and row.endswith(f"[{code}]")
            for row in out.splitlines()
        ), f"mypy did not report the [{code}] error on line {line}:\n{out}"


def test_the_config_checks_our_code_and_silences_only_third_party_imports():
    config = _config()
    assert config["files"] == list(OURS)
    for key in ("ignore_errors", "ignore_missing_imports", "follow_imports"):
        assert key not in config, f"[tool.mypy] sets {key} for every module"
    for override in config.get("overrides", []):
        assert set(override) == {"module", "ignore_missing_imports"}, (
            f"an override may only let a third-party package without types in: {override}"
        )
        modules = override["module"]
        for module in [modules] if isinstance(modules, str) else modules:
            top = module.split(".")[0]
            assert top not in OURS and not (ROOT / top).exists(), (
                f"{module!r}: a module of the course is type-checked, not silenced"
            )
            assert not (ROOT / f"{top}.py").exists(), f"{module!r} is a module of the course"
