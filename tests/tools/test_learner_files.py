"""tools/learner_files.py: the learner's copies in work/ (named for their tab, refreshed while
untouched, never overwritten once started), notebooks cleaned as the course commits them, and
`make update`'s refusals. (Whole updates of a cloned course are tests/learner_tools.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from scripts import ROOT, load_script

lf = load_script("tools/learner_files.py")


def solve_first_exercise(copy: Path) -> str:
    """The learner's own work: a solution written into the first solution cell."""
    nb = nbformat.read(copy, as_version=4)
    cell = next(c for c in nb.cells if (c.metadata.get("course") or {}).get("role") == "solution")
    cell.source += "\n# my own solution, written in the workshop\n"
    nbformat.write(nb, copy)
    return cell.source


def _notebook(source: str = "x = 1") -> dict:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"course": {"assignment": "01_rnn"}},
        "cells": [
            {"cell_type": "markdown", "id": "m", "metadata": {}, "source": "# 01"},
            {"cell_type": "code", "id": "c", "metadata": {}, "source": source,
             "outputs": [], "execution_count": None},
        ],
    }  # fmt: skip


def _course(tmp_path: Path, *sources: str) -> Path:
    """A course folder with one exercise notebook per source (01_a, 02_b, ...)."""
    root = tmp_path / "course"
    (root / "exercises").mkdir(parents=True)
    for i, src in enumerate(sources, 1):
        name = f"{i:02d}_{'abc'[i - 1]}.ipynb"
        (root / "exercises" / name).write_text(json.dumps(_notebook(src)))
    return root


class Said:
    """Collects what the functions print."""

    def __init__(self):
        self.parts: list[str] = []

    def write(self, s: str) -> None:
        self.parts.append(s)

    def __str__(self) -> str:
        return "".join(self.parts)


# --------------------------------------------------------------------------- clean notebooks


def test_a_notebook_is_cleaned_as_the_course_commits_it():
    nb = _notebook()
    nb["metadata"].update(
        kernelspec={"name": "python3", "display_name": "Python 3"},
        language_info={"name": "python", "version": "3.11.7"},
        widgets={"state": {}},
        vscode={"x": 1},
    )
    code = nb["cells"][1]
    code.update(outputs=[{"output_type": "stream", "text": "hi"}], execution_count=7)
    code["metadata"] = {"scrolled": True, "execution": {}, "tags": [], "keep": 1}
    code["source"] = "a\nb\n"
    assert lf.clean_notebook(nb) is nb  # in place
    assert nb["metadata"]["kernelspec"] == lf.COURSE_KERNELSPEC
    assert nb["metadata"]["language_info"] == {"name": "python"}
    assert "widgets" not in nb["metadata"] and "vscode" not in nb["metadata"]
    assert (code["outputs"], code["execution_count"]) == ([], None)
    assert code["metadata"] == {"keep": 1} and code["source"] == ["a\n", "b\n"]


def test_another_languages_kernel_is_kept():
    nb = _notebook()
    nb["metadata"]["kernelspec"] = {"name": "julia-1.10", "display_name": "Julia"}
    nb["metadata"]["language_info"] = {"name": "julia"}
    lf.clean_notebook(nb)
    assert nb["metadata"]["kernelspec"]["name"] == "julia-1.10"
    assert nb["metadata"]["language_info"] == {"name": "julia"}


def test_the_copy_is_named_for_its_tab():
    assert lf.work_name("02_qkv_attention") == "02_qkv_attention_exercises.ipynb"


def test_a_fingerprint_is_the_learners_cells_only():
    nb = _notebook()
    ran = json.loads(json.dumps(nb))
    ran["cells"][1].update(outputs=[{"output_type": "stream", "text": "1"}], execution_count=3)
    ran["metadata"]["kernelspec"] = {"name": "python3"}
    ran["metadata"]["course"]["copied_from"] = "abc"
    assert lf.fingerprint(ran) == lf.fingerprint(nb)
    assert lf.fingerprint(_notebook("x = 2")) != lf.fingerprint(nb)
    assert ran["cells"][1]["execution_count"] == 3  # the argument is not changed


# --------------------------------------------------------------------------- work/


def test_every_exercise_notebook_gets_a_copy_that_remembers_its_origin(tmp_path):
    root = _course(tmp_path, "a = 1", "b = 2")
    said = Said()
    notes = lf.sync_work(root, out=said)
    assert notes == ["new: work/01_a_exercises.ipynb", "new: work/02_b_exercises.ipynb"]
    copy = root / "work" / "01_a_exercises.ipynb"
    nb = json.loads(copy.read_text())
    assert nb["metadata"]["course"]["copied_from"] == lf.fingerprint(_notebook("a = 1"))
    assert lf.untouched(copy)
    assert lf.sync_work(root) == []  # nothing changed: nothing to say
    assert str(said).count("new: ") == 2


def test_running_a_copy_is_not_starting_it_but_editing_a_cell_is(tmp_path):
    root = _course(tmp_path, "a = 1")
    lf.sync_work(root)
    copy = root / "work" / "01_a_exercises.ipynb"
    nb = json.loads(copy.read_text())
    nb["cells"][1].update(outputs=[{"output_type": "stream", "text": "1"}], execution_count=1)
    copy.write_text(json.dumps(nb))
    assert lf.untouched(copy)
    nb["cells"][1]["source"] = "a = 1  # mine"
    copy.write_text(json.dumps(nb))
    assert not lf.untouched(copy)
    copy.write_text("{ not json")
    assert not lf.untouched(copy) and not lf.untouched(root / "work" / "missing.ipynb")


def test_an_untouched_copy_follows_the_course_and_a_started_one_is_kept(tmp_path):
    root = _course(tmp_path, "a = 1", "b = 2")
    lf.sync_work(root)
    started = root / "work" / "02_b_exercises.ipynb"
    nb = json.loads(started.read_text())
    nb["cells"][1]["source"] = "b = 2  # my answer"
    started.write_text(json.dumps(nb))
    for name, src in (("01_a", "a = 10"), ("02_b", "b = 20")):
        (root / "exercises" / f"{name}.ipynb").write_text(json.dumps(_notebook(src)))
    notes = lf.sync_work(root)
    assert notes == [
        "updated (you had not started it): work/01_a_exercises.ipynb",
        "exercises/02_b.ipynb changed; your work/02_b_exercises.ipynb is kept as it is "
        "(compare the two, or copy your solution cells into a fresh copy)",
    ]
    assert "a = 10" in (root / "work" / "01_a_exercises.ipynb").read_text()
    assert "# my answer" in started.read_text()


def test_a_copy_made_by_hand_is_left_alone(tmp_path):
    root = _course(tmp_path, "a = 1")
    (root / "work").mkdir()
    mine = root / "work" / "01_a_exercises.ipynb"
    mine.write_text(json.dumps(_notebook("my own notebook")))  # no copied_from
    assert lf.sync_work(root) == []
    assert "my own notebook" in mine.read_text()


def test_a_course_without_exercises_has_nothing_to_copy(tmp_path):
    assert lf.sync_work(tmp_path) == [] and not (tmp_path / "work").exists()


def test_old_copies_get_the_new_names(tmp_path: Path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "exercises", course / "exercises")
    (course / "work").mkdir()
    old = course / "work" / "02_qkv_attention.ipynb"
    shutil.copy2(ROOT / "exercises" / "02_qkv_attention.ipynb", old)
    solve_first_exercise(old)
    lf.sync_work(course)
    new = course / "work" / "02_qkv_attention_exercises.ipynb"
    assert new.exists() and not old.exists()
    assert "my own solution" in new.read_text()
    meta = json.loads(new.read_text())["metadata"]["course"]
    assert meta["assignment"] == "02_qkv_attention", "the grader recognises copies by this"


# --------------------------------------------------------------------------- make update, refused


def test_update_needs_a_git_clone(tmp_path):
    said = Said()
    assert not lf.is_git_checkout(tmp_path)
    assert lf.update(tmp_path, out=said) == 1
    assert "is not a git clone; download the course again" in str(said)


def test_update_needs_a_branch_to_follow(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert lf.is_git_checkout(tmp_path)
    said = Said()
    assert lf.update(tmp_path, out=said) == 1
    assert "this clone follows no remote branch" in str(said)


def test_a_failed_git_command_says_which(tmp_path):
    with pytest.raises(RuntimeError, match="`git rev-parse --no-such-option-here` failed"):
        lf.git(tmp_path, "rev-parse", "--no-such-option-here")
    assert lf.git(tmp_path, "--version").stdout.startswith("git version")


def test_the_script_says_how_to_use_it():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "learner_files.py")], capture_output=True, text=True
    )
    assert (
        proc.returncode == 1 and "usage: python tools/learner_files.py update|sync" in proc.stderr
    )


def test_submit_hands_in_the_started_copies_only(tmp_path):
    """`make submit`: every exercise copy the learner started, into $COURSE_SUBMIT (a hub's
    hand-in folder of their own), replacing an earlier hand-in; never an untouched copy, a
    link, or anything without a folder to go to."""
    import io
    import json

    lf = load_script("tools/learner_files.py")
    root = tmp_path / "course"
    (root / "exercises").mkdir(parents=True)
    for name in ("00_setup", "01_rnn_bottleneck"):
        nb = {
            "cells": [
                {
                    "cell_type": "code",
                    "id": "c",
                    "metadata": {},
                    "source": "x = 1",
                    "outputs": [],
                    "execution_count": None,
                }
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        (root / "exercises" / f"{name}.ipynb").write_text(json.dumps(nb))
    lf.sync_work(root, out=io.StringIO())
    said = io.StringIO()
    assert lf.submit(root, str(tmp_path / "hand-in" / "alice"), out=said) == 1
    assert "nothing to hand in" in said.getvalue()
    started = root / "work" / "00_setup_exercises.ipynb"
    nb = json.loads(started.read_text())
    nb["cells"][0]["source"] = "x = 2  # alice"
    started.write_text(json.dumps(nb))
    (root / "work" / "02_qkv_attention_exercises.ipynb").symlink_to(started)
    assert lf.submit(root, str(tmp_path / "hand-in" / "alice"), out=io.StringIO()) == 0
    handed = tmp_path / "hand-in" / "alice"
    assert sorted(p.name for p in handed.iterdir()) == ["00_setup_exercises.ipynb"]
    assert "alice" in (handed / "00_setup_exercises.ipynb").read_text()
    assert (handed.stat().st_mode & 0o077) == 0  # classmates cannot read it
    said = io.StringIO()
    assert lf.submit(root, "", out=said) == 2 and "COURSE_SUBMIT" in said.getvalue()
