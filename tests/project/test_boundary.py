"""The package boundary: course_lib is what learners import and read; course_tools (the
grader, the exercise generator, the authoring tools) imports it, never the reverse; and the
tools work from a wheel, on a course folder named on the command line."""

from __future__ import annotations

import ast
import csv
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import course_lib

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "course_lib"
TOOLS = ROOT / "course_tools"


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` statement (or ``import_module("...")``) names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", ""))
            in ("import_module", "__import__")
        ):
            names.add(node.args[0].value)
    return names


@pytest.mark.parametrize("path", sorted(LIB.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_course_lib_never_imports_course_tools(path: Path):
    bad = sorted(m for m in _imported_modules(path) if m.split(".")[0] == "course_tools")
    assert not bad, (
        f"{path.relative_to(ROOT)} imports {bad}: course_lib is what learners "
        "read; the instructor's tools depend on it, not the other way round"
    )


def test_the_scan_sees_every_kind_of_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import course_tools.x\nfrom course_tools import y\n"
        "import importlib\nimportlib.import_module('course_tools.z')\n"
    )
    assert _imported_modules(probe) >= {"course_tools.x", "course_tools", "course_tools.z"}


def test_learner_modules_load_without_the_tools():
    code = (
        "import sys, course_lib, course_lib.env, course_lib.attention, course_lib.multihead, "
        "course_lib.positional, course_lib.rnn, course_lib.scaling, course_lib.experiments.coref, "
        "course_lib.flash, course_lib.checks\n"
        "from course_lib.checks import all_exercises\nall_exercises()\n"
        "print(sorted(m for m in sys.modules if m.startswith('course_tools')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("pkg", [LIB, TOOLS], ids=lambda p: p.name)
def test_no_module_finds_the_checkout_from_its_own_location(pkg: Path):
    """A wheel lives in site-packages: paths climbing out of the package find nothing."""
    climb = re.compile(r"__file__.*(parents\[\d\]|\.parent\.parent)")
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(pkg.rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if climb.search(line)
    ]
    assert not hits, f"these lines find the checkout through the package's location: {hits}"


def test_one_version_source():
    import course_tools
    from course_tools.links import load_toml

    pyproject = load_toml(ROOT / "pyproject.toml")
    assert "version" not in pyproject["project"], "pyproject.toml must not repeat the version"
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "course_lib.__version__"
    }
    assert course_tools.__version__ == course_lib.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {course_lib.__version__}" in changelog, "CHANGELOG.md has no entry for this version"


# --------------------------------------------------------------------------- a wheel install


def _course_copy(dest: Path) -> Path:
    """A course folder as an instructor has it: solutions/ and exercises/, nothing else."""
    for d in ("solutions", "exercises"):
        shutil.copytree(ROOT / d, dest / d)
    return dest


@pytest.mark.slow
def test_a_wheel_install_runs_both_commands_on_a_course_folder(tmp_path):
    # Built from a copy of the sources: setuptools leaves build/ in the folder it builds.
    src = tmp_path / "src"
    for name in ("course_lib", "course_tools"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    proc = subprocess.run(
        [*cmd, "-w", str(wheels), str(src)], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, f"building the wheel failed:\n{proc.stdout}{proc.stderr}"
    (wheel,) = wheels.glob("course_lib-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(vpy),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    # The dependencies (torch, nbclient, ...) come from this environment's site-packages,
    # on PYTHONPATH, which runs no .pth file: the editable install of the checkout is not
    # seen, so course_lib and course_tools are the wheel's.
    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
    course = _course_copy(tmp_path / "course")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*cmd, cwd=elsewhere):
        return subprocess.run(
            [str(venv / "bin" / cmd[0]), *cmd[1:]],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=600,
        )

    where = run(
        "python",
        "-c",
        "import course_lib, course_tools; print(course_lib.__file__); print(course_tools.__file__)",
    ).stdout.split()
    assert all(str(venv) in w for w in where), where

    # (--course is tried by course-grade below; course-exercises takes the same option)
    proc = run("course-exercises", "--check", cwd=course)  # the current directory
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run("course-exercises", "--check")  # not a course folder: says so
    assert proc.returncode == 2 and "not a course folder" in proc.stderr, proc.stderr

    sub = tmp_path / "subs" / "00_setup.ipynb"
    sub.parent.mkdir()
    sub.write_bytes((course / "solutions" / "00_setup.ipynb").read_bytes())
    proc = run(
        "course-grade",
        str(sub),
        "--out",
        str(tmp_path / "out"),
        "--course",
        str(course),
        "--quiet",
        "--jobs",
        "1",
        # where bubblewrap is missing (macOS, say) the grader refuses without this flag;
        # CI installs it, so there the wheel's grader runs sandboxed
        *([] if shutil.which("bwrap") else ["--unsafe-no-sandbox"]),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(tmp_path / "out" / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["status"] == "passed" for r in rows), rows
    assert {(r["course_commit"], r["grader_version"]) for r in rows} == {
        ("unknown", course_lib.__version__)
    }  # a copy outside git: "unknown"
    proc = run("course-grade", str(sub), "--out", str(tmp_path / "out2"))
    assert proc.returncode == 2 and "not a course folder" in proc.stderr, proc.stderr
