"""docs/instructors.md, run: every command block it marks `<!-- doc-test: instructor -->`
or `<!-- doc-test: learner -->` runs here, in order, on a simulated JupyterHub (an
instructor's home, learners' homes holding the edition as nbgitpuller clones it). Blocks
that need a cluster or a service are marked `<!-- doc-test: skip: why -->`; they are
syntax-checked. Grading is kept small: chapter 00, three submissions."""

from __future__ import annotations

import csv
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest
from guide_blocks import GUIDE, Block, blocks

from course_tools import plan as P
from course_tools.grading import cli

ROOT = Path(__file__).resolve().parents[2]
EDITION = "https://github.com/example-school/attention-workshop"
LANGS = ("bash", "sh", "python", "yaml")


def clone(repository: str, folder: Path, branch: str) -> None:
    """What nbgitpuller's first click does (its GitPuller where installed: the test extra has
    it), from the edition's folder instead of the link's GitHub address."""
    try:
        from nbgitpuller.pull import GitPuller
    except ImportError:
        subprocess.run(["git", "clone", "-q", "-b", branch, repository, str(folder)], check=True)
        return
    for _line in GitPuller(repository, str(folder), branch=branch).pull():
        pass


def test_every_command_block_says_whether_it_runs():
    found = [b for b in blocks(GUIDE.read_text(encoding="utf-8")) if b.lang in LANGS]
    assert len(found) >= 15
    unmarked = [b.line for b in found if not b.role]
    assert unmarked == [], f"command blocks without a doc-test marker at lines {unmarked}"
    for b in found:
        if b.role.startswith("skip") and b.lang in ("bash", "sh"):
            proc = subprocess.run(["bash", "-n"], input=b.body, text=True, capture_output=True)
            assert proc.returncode == 0, f"line {b.line}: {proc.stderr}"
    ran = [b for b in found if not b.role.startswith("skip")]
    assert sum("course-grade" in b.body for b in ran) >= 2  # grading and the class report
    assert any(b.role == "learner" for b in ran)


def test_the_option_table_names_real_options():
    text = GUIDE.read_text(encoding="utf-8")
    table = text[text.index("| option | default | meaning |") :].split("\n\n", 1)[0]
    named = set(re.findall(r"`(--[a-z-]+)", table))
    known = {o for a in cli.build_parser()._actions for o in a.option_strings}
    assert named and named <= known, f"not options of course-grade: {sorted(named - known)}"


def test_the_plan_is_the_courses_own_figures():
    """The plan block is what `python -m course_tools.plan` prints (regenerate it with
    `python -m course_tools.plan --write` after re-measuring)."""
    text = GUIDE.read_text(encoding="utf-8")
    block = text[text.index(P.PLAN_START) + len(P.PLAN_START) : text.index(P.PLAN_END)]
    assert block.strip() == P.plan_markdown(ROOT).strip()


# --------------------------------------------------------------------------- the simulation


def script(parts: list[Block]) -> str:
    return "set -euo pipefail\n" + "\n".join(b.body for b in parts) + "\n"


def shim(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + text + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def set_solution(copy: Path, source: str) -> None:
    nb = nbformat.read(copy, as_version=4)
    for cell in nb.cells:
        if (cell.metadata.get("course") or {}).get("role") == "solution":
            cell.source = source
    nbformat.write(nb, copy)


def solved_source() -> str:
    nb = nbformat.read(ROOT / "solutions" / "00_setup.ipynb", as_version=4)
    return next(
        c.source for c in nb.cells if (c.metadata.get("course") or {}).get("role") == "solution"
    )


@pytest.mark.slow
def test_the_guide_runs_on_a_simulated_hub(tmp_path: Path):
    from grading_lab import require_sandbox

    require_sandbox()  # the guide grades in the sandbox, as it tells instructors to
    found = [b for b in blocks(GUIDE.read_text(encoding="utf-8")) if b.lang in LANGS]
    ran = [b for b in found if b.role in ("instructor", "learner")]
    first_learner = next(i for i, b in enumerate(ran) if b.role == "learner")
    setup = ran[0]
    assert "HOMES=" in setup.body and "CHAPTER=" in setup.body
    before = ran[:first_learner]
    learner = [b for b in ran if b.role == "learner"]
    after = [b for b in ran[first_learner:] if b.role == "instructor"]
    assert len(learner) == 2, "the guide's learner blocks: copies in work/, then progress"

    instructor, homes, bin_dir, pkgs = (tmp_path / n for n in ("admin", "home", "bin", "pkgs"))
    for d in (instructor, homes, bin_dir, pkgs):
        d.mkdir()
    # The course's packages as the tree under test has them (a symlink folder on PYTHONPATH:
    # the sandbox hides a PYTHONPATH entry that holds the course folder itself).
    for package in ("course_lib", "course_tools"):
        (pkgs / package).symlink_to(ROOT / package)
    shim(bin_dir, "python3", f'exec "{sys.executable}" "$@"')
    shim(bin_dir, "course-grade", 'exec python3 -m course_tools.grading "$@"')
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COURSE_ROOT")},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(pkgs),
        "COURSE": str(ROOT),
        "EDITION": EDITION,
        "HUB": "https://hub.example.org",
        "HOMES": str(homes),
        "CHAPTER": "00_setup",
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }

    def run(parts: list[Block], home: Path, cwd: Path) -> str:
        proc = subprocess.run(
            ["bash", "-c", script([setup, *parts] if parts[0] is not setup else parts)],
            cwd=cwd,
            env={**env, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, (
            f"the guide's commands failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n"
            f"{proc.stderr[-4000:]}"
        )
        return proc.stdout

    # 1. plan, the learner's edition, the nbgitpuller link
    out = run(before, instructor, instructor)
    assert "| **all 10 chapters** |" in out or "| **all " in out
    edition = instructor / "release" / "attention-workshop"
    assert (edition / ".course-edition").exists() and not (edition / "solutions").exists()
    assert (instructor / "release" / "attention-workshop.zip").exists()
    stated = re.search(r"`make release` writes one,\s+([\d.]+) MB", GUIDE.read_text("utf-8"))
    size = (instructor / "release" / "attention-workshop.zip").stat().st_size / 1e6
    assert stated and abs(float(stated.group(1)) - size) <= 0.1 * size, (
        f"the guide says the zip is {stated and stated.group(1)} MB; it is {size:.2f} MB"
    )
    link = next(line for line in out.splitlines() if "/hub/user-redirect/git-pull?" in line)
    assert link.startswith("https://hub.example.org/hub/user-redirect/git-pull?repo=https%3A")
    assert "attention-workshop" in link and "00_setup.ipynb" in link
    query = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    # nbgitpuller clones into targetpath (else the address's last part) and opens urlpath
    target = query.get("targetpath") or query["repo"].rstrip("/").split("/")[-1]
    assert query["urlpath"] == f"lab/tree/{target}/notebooks/00_setup.ipynb", link

    # 2. learners: the edition as nbgitpuller clones it; copies in work/; their work
    users = {"alice": "solved", "bob": "wrong", "carol": "blank", "dave": "link", "erin": "backup"}
    for user, what in users.items():
        home = homes / user
        home.mkdir()
        clone(str(edition), home / target, query["branch"])
        for ex in (home / "attention-workshop" / "exercises").glob("*.ipynb"):
            if not ex.name.startswith("00_"):
                ex.unlink()  # one short chapter keeps the simulation quick
        run(learner[:1], home, home)
        copy = home / "attention-workshop" / "work" / "00_setup_exercises.ipynb"
        assert copy.exists()
        if what == "solved":
            set_solution(copy, solved_source())
            progress = run(learner[1:], home, home)
            assert "✓ passed" in progress and "1 of 1 exercises passed" in progress, progress
        elif what == "wrong":
            set_solution(
                copy,
                "import numpy as np\n\n\ndef softmax(x):\n"
                "    return np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)\n",
            )
        elif what == "link":  # a learner's "work" that is the course's solutions
            copy.unlink()
            copy.symlink_to(ROOT / "solutions" / "00_setup.ipynb")
        elif what == "backup":  # work, then nbgitpuller's "Backup and resync": a fresh clone
            set_solution(copy, solved_source())
            (home / "attention-workshop").rename(home / "attention-workshop_backup_1733400000")
            clone(str(edition), home / target, query["branch"])
            for ex in (home / "attention-workshop" / "exercises").glob("*.ipynb"):
                if not ex.name.startswith("00_"):
                    ex.unlink()
            run(learner[:1], home, home)

    # 3. collect, grade, totals, the class report, feedback back into the homes
    out = run(after, instructor, instructor)
    assert "skipped, a symbolic link" in out and "dave" in out
    assert "in a backup, look at it: " in out and "erin/attention-workshop_backup_" in out
    grades = instructor / "grades" / "00_setup"
    with open(grades / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    assert set(rows) == {
        "alice/00_setup_exercises.ipynb",
        "bob/00_setup_exercises.ipynb",
        "carol/00_setup_exercises.ipynb",
        "erin/00_setup_exercises.ipynb",
    }, rows
    assert rows["alice/00_setup_exercises.ipynb"]["status"] == "passed"
    assert rows["bob/00_setup_exercises.ipynb"]["status"] == "failed"
    assert rows["carol/00_setup_exercises.ipynb"]["status"] == "missing"
    assert "alice/00_setup_exercises.ipynb: 1 / 1" in out
    report = (grades / "report.html").read_text(encoding="utf-8")
    assert "wrong axis" in report and "<svg" in report
    for user in ("alice", "bob", "carol"):
        fb = homes / user / "attention-workshop" / "work" / "00_setup_feedback.md"
        assert fb.exists(), f"no feedback returned to {user}"
    fb = (homes / "bob" / "attention-workshop" / "work" / "00_setup_feedback.md").read_text()
    assert "Score: 0 / 1" in fb and "Likely cause" in fb
    assert not (homes / "dave" / "attention-workshop" / "work" / "00_setup_feedback.md").exists()
    shutil.rmtree(tmp_path / "admin" / "release", ignore_errors=True)
