"""Updating the course never conflicts with what a learner did in JupyterLab.

A learner clones the course and `make lab` copies the exercises into work/; they open, run
and save every lecture and exercise (JupyterLab writes outputs, execution counts, its
kernel's display name, the Python version and timing metadata), edit a lecture's code and
work on an exercise. Upstream then changes every notebook and adds a chapter. `git pull`
refuses (as git does); `make update` (tools/learner_files.update) brings the new course,
keeps the learner's version of every replaced file in work/backup/, never touches their
started copies in work/, refreshes the copies they had not started and adds the new
chapter's.

The repositories are small copies of the course's notebooks in a temporary folder.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import learner_files as lf  # noqa: E402

FOLDERS = ("notebooks", "solutions", "exercises")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [
            "git",
            "-c",
            "user.name=Course",
            "-c",
            "user.email=course@example.invalid",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if check:
        assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc


def all_notebooks(root: Path) -> list[Path]:
    return sorted(p for d in FOLDERS for p in (root / d).glob("*.ipynb"))


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """A small course repository: the real notebooks, the filter and the learner tools."""
    up = tmp_path / "upstream"
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, up / folder)
    (up / "tools").mkdir()
    shutil.copy2(ROOT / "tools" / "learner_files.py", up / "tools" / "learner_files.py")
    (up / ".gitignore").write_text("work/\n__pycache__/\n")
    git(up, "init", "-q")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "the course")
    return up


def clone(upstream: Path, name: str) -> Path:
    dest = upstream.parent / name
    git(upstream.parent, "clone", "-q", str(upstream), str(dest))
    lf.sync_work(dest)  # what `make lab` does
    return dest


def save_as_jupyterlab_does(path: Path, counter: list[int]) -> None:
    """What opening, running every cell and saving in JupyterLab writes into a notebook."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["language_info"] = {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": "3.11.7",
    }
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        counter[0] += 1
        cell.execution_count = counter[0]
        cell.metadata["execution"] = {
            "iopub.execute_input": "2026-01-01T10:00:00.000Z",
            "shell.execute_reply": "2026-01-01T10:00:01.000Z",
        }
        cell.metadata["scrolled"] = True
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=f"ran cell {counter[0]}\n"),
            nbformat.v4.new_output(
                "display_data", data={"image/png": PNG, "text/plain": "<Figure>"}
            ),
            nbformat.v4.new_output(
                "execute_result", data={"text/plain": "42"}, execution_count=counter[0]
            ),
        ]
    nbformat.write(nb, path)  # jupyter_server saves through nbformat too


def solve_first_exercise(copy: Path) -> str:
    """The learner's own work: a solution written into the first solution cell."""
    nb = nbformat.read(copy, as_version=4)
    cell = next(c for c in nb.cells if (c.metadata.get("course") or {}).get("role") == "solution")
    cell.source += "\n# my own solution, written in the workshop\n"
    nbformat.write(nb, copy)
    return cell.source


def change_upstream(up: Path) -> None:
    """A new version of the course: every notebook's first cell changes; a chapter appears."""
    for path in all_notebooks(up):
        nb = nbformat.read(path, as_version=4)
        nb.cells[0].source += "\n\n(Updated for the second workshop.)"
        nbformat.write(nb, path)
    for folder in ("notebooks", "exercises", "solutions"):
        src = up / folder / "00_setup.ipynb"
        shutil.copy2(src, up / folder / "98_new_chapter.ipynb")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "second workshop")


class Said:
    """Collects what update() prints."""

    def __init__(self):
        self.parts: list[str] = []

    def write(self, s: str) -> None:
        self.parts.append(s)

    def __str__(self) -> str:
        return "".join(self.parts)


@pytest.mark.slow
def test_make_update_after_running_every_notebook(upstream: Path):
    learner = clone(upstream, "learner")
    work = sorted((learner / "work").glob("*.ipynb"))
    assert [p.name for p in work] == [
        lf.work_name(p.stem) for p in sorted((upstream / "exercises").glob("*.ipynb"))
    ]
    counter = [0]
    for path in all_notebooks(learner) + work:
        save_as_jupyterlab_does(path, counter)
    mine = solve_first_exercise(work[1])
    untouched_copy = work[2]
    assert lf.untouched(untouched_copy), "running a copy is not starting it"
    ran = {p: p.read_bytes() for p in all_notebooks(learner)}

    change_upstream(upstream)
    refused = git(learner, "pull", "-q", check=False)
    assert refused.returncode != 0 and "would be overwritten" in refused.stderr, (
        "git pull no longer refuses saved notebooks: update the README's advice"
    )
    said = Said()
    assert lf.update(learner, out=said) == 0, str(said)
    for path in all_notebooks(learner):
        if "98_new_chapter" in path.name:
            continue
        assert "(Updated for the second workshop.)" in nbformat.read(path, 4).cells[0].source
    assert git(learner, "status", "--porcelain").stdout == ""
    backup = next((learner / "work" / "backup").iterdir())
    for path, data in ran.items():  # the learner's executed notebooks, outputs and all
        kept = backup / path.relative_to(learner)
        assert kept.read_bytes() == data, f"{kept} is not what the learner saved"

    started = nbformat.read(work[1], 4)
    assert any(c.source == mine for c in started.cells), "the learner's solution was lost"
    assert any(c.get("outputs") for c in started.cells), "the learner's outputs were lost"
    assert f"your work/{work[1].name} is kept" in str(said), str(said)
    refreshed = nbformat.read(untouched_copy, 4)
    assert "(Updated for the second workshop.)" in refreshed.cells[0].source
    assert (learner / "work" / lf.work_name("98_new_chapter")).exists()


@pytest.mark.slow
def test_notebooks_the_update_leaves_alone_keep_their_outputs(upstream: Path):
    learner = clone(upstream, "learner")
    lecture = learner / "notebooks" / "01_rnn_bottleneck.ipynb"
    save_as_jupyterlab_does(lecture, [0])
    saved = lecture.read_bytes()
    other = upstream / "notebooks" / "02_qkv_attention.ipynb"
    nb = nbformat.read(other, 4)
    nb.cells[0].source += " (typo fixed)"
    nbformat.write(nb, other)
    git(upstream, "commit", "-q", "-am", "a typo")
    assert lf.update(learner, out=Said()) == 0
    assert lecture.read_bytes() == saved
    assert not (learner / "work" / "backup").exists(), "nothing needed a backup"
    assert (
        "(typo fixed)"
        in nbformat.read(learner / "notebooks" / "02_qkv_attention.ipynb", 4).cells[0].source
    )


@pytest.mark.slow
def test_make_update_after_editing_a_lecture(upstream: Path):
    """Real edits (a lecture's code, a solution) are kept too; the update still merges."""
    learner = clone(upstream, "learner")
    counter = [0]
    for path in all_notebooks(learner) + sorted((learner / "work").glob("*.ipynb")):
        save_as_jupyterlab_does(path, counter)
    lecture = learner / "notebooks" / "02_qkv_attention.ipynb"
    nb = nbformat.read(lecture, 4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source += "\nprint('my experiment')"
    nbformat.write(nb, lecture)
    edited = lecture.read_bytes()
    copy = learner / "work" / lf.work_name("01_rnn_bottleneck")
    mine = solve_first_exercise(copy)
    change_upstream(upstream)

    refused = git(learner, "pull", "-q", check=False)
    assert refused.returncode != 0, "git pull was expected to refuse an edited lecture"
    assert "would be overwritten" in refused.stderr

    out = Said()
    assert lf.update(learner, out=out) == 0, str(out)
    said = str(out)
    assert "Updated the course" in said, said
    new = nbformat.read(lecture, 4)
    assert "(Updated for the second workshop.)" in new.cells[0].source
    backups = list((learner / "work" / "backup").glob("*/notebooks/02_qkv_attention.ipynb"))
    assert len(backups) == 1 and backups[0].read_bytes() == edited, said
    assert "notebooks/02_qkv_attention.ipynb" in said
    assert any(c.source == mine for c in nbformat.read(copy, 4).cells)
    assert (learner / "work" / lf.work_name("98_new_chapter")).exists()
    assert git(learner, "status", "--porcelain").stdout == ""
    # Nothing left to do: a second update changes nothing and backs nothing up.
    out = Said()
    assert lf.update(learner, out=out) == 0
    assert "already up to date" in str(out)
    assert len(list((learner / "work" / "backup").iterdir())) == 1


def test_the_grader_recognises_work_copies_by_name():
    """A copy that lost its metadata is still matched by its file name (the grader's rule)."""
    from course_tools.grading.identity import Course, assignment_from_name

    course = Course.load(ROOT, check=False)
    for assignment in course.notebooks:
        assert assignment_from_name(lf.work_name(assignment), course) == assignment
