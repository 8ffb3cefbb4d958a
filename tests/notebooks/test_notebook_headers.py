"""The course-wide cells every notebook shares (course_tools/notebook_headers.py).

Colab cell first (installing the course on Colab, nothing elsewhere), lectures pointing at
the learner's copy in work/, a progress cell at the end of every exercise notebook; all
derived from pyproject.toml's repository, all kept in step by one idempotent command.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_tools import notebook_headers as H
from course_tools.links import Links

ROOT = Path(__file__).resolve().parents[2]
LINKS = Links.load(ROOT)


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    for name in ("notebooks", "solutions", "exercises"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_every_notebook_is_up_to_date():
    """After editing a notebook (or the repository URL): python -m
    course_tools.notebook_headers --apply, then commit."""
    stale = H.run(ROOT, apply=False)
    assert stale == [], (
        f"not up to date: {stale}; run `python -m course_tools.notebook_headers --apply`"
    )


def test_apply_is_idempotent_and_regenerates_exercises(course_copy: Path):
    H.run(course_copy, apply=True)
    first = {p: p.read_bytes() for p in course_copy.rglob("*.ipynb")}
    assert H.run(course_copy, apply=False) == []
    H.run(course_copy, apply=True)
    assert {p: p.read_bytes() for p in course_copy.rglob("*.ipynb")} == first
    for folder in ("notebooks", "solutions", "exercises"):
        for path in sorted((course_copy / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            code = [c for c in nb.cells if c.cell_type == "code"]
            assert code[0].id == H.COLAB_ID, f"{folder}/{path.name}: Colab cell not first"
            assert "env.setup()" in code[1].source, f"{folder}/{path.name}: setup not second"
            if folder != "notebooks":
                assert nb.cells[-1].id == H.PROGRESS_ID
                assert f'progress.show("{path.stem}")' in nb.cells[-1].source
    # The generator carried the cells into exercises/, which stay fresh.
    from course_tools.exercises import generate

    assert generate(course_copy, check=True) == []


def test_the_colab_cell_is_formatted_as_ruff_formats_it():
    ruff = Path(sys.executable).with_name("ruff")
    cmd = [str(ruff)] if ruff.exists() else [sys.executable, "-m", "ruff"]
    for chapter in ("02", "06"):
        src = H.colab_source(LINKS, chapter) + "\n"
        proc = subprocess.run(
            [*cmd, "format", "--config", str(ROOT / "pyproject.toml"), "-"],
            input=src,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == src, "ruff format would change the Colab cell"


def test_the_colab_cell_does_nothing_off_colab(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(H.colab_source(LINKS, "06"), {})
    assert calls == []


def test_the_colab_cell_installs_the_course_on_colab(monkeypatch, capsys):
    import os
    import types

    calls, path_before = [], list(sys.path)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(subprocess, "run", lambda cmd, **k: calls.append(cmd))
    monkeypatch.setattr(os.path, "isdir", lambda p: False)
    try:
        exec(H.colab_source(LINKS, "06"), {})
    finally:
        sys.path[:] = path_before
    folder = "/content/" + LINKS.github.split("/")[1]
    assert calls[0] == ["git", "clone", "--depth=1", LINKS.clone_url, folder]
    assert calls[1] == [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", folder]
    import torch

    if not torch.cuda.is_available():
        assert "Change runtime type" in capsys.readouterr().out  # chapter 06 wants a GPU
    assert "Change runtime type" not in H.colab_source(LINKS, "02")


@pytest.mark.parametrize(
    "before, after",
    [
        ("the exercises in `exercises/02_qkv_attention.ipynb`.", "the exercises in `work/02_qkv_attention_exercises.ipynb`."),
        ("(`exercises/05_positional_encodings.ipynb`; worked", "(`work/05_positional_encodings_exercises.ipynb`; worked"),
        ("`work/00_setup.ipynb` (a copy of `exercises/00_setup.ipynb`)", "`work/00_setup_exercises.ipynb` (a copy of `exercises/00_setup.ipynb`)"),
        ("copies in `work/NN_topic.ipynb`; on\nBinder or Colab open `exercises/NN_topic.ipynb`)", "copies in `work/NN_topic_exercises.ipynb`; on\nBinder or Colab open `exercises/NN_topic.ipynb`)"),
        ("`work/02_qkv_attention_exercises.ipynb`", "`work/02_qkv_attention_exercises.ipynb`"),
        ("`notebooks/02_qkv_attention.ipynb`", "`notebooks/02_qkv_attention.ipynb`"),
    ],
)  # fmt: skip
def test_lecture_pointers_name_the_learners_copy(before: str, after: str):
    assert H.rewrite_pointers(before) == after
    assert H.rewrite_pointers(after) == after


def test_badges_come_from_the_one_repository_url():
    table = H.badge_table(ROOT)
    lectures = sorted((ROOT / "notebooks").glob("*.ipynb"))
    rows = [line for line in table.splitlines() if line[:5].removeprefix("| ")[:2].isdigit()]
    assert len(rows) == len(lectures)
    assert LINKS.colab("notebooks/02_qkv_attention.ipynb") in table
    assert LINKS.binder("exercises/02_qkv_attention.ipynb") in table
    assert LINKS.colab("notebooks/02_qkv_attention.ipynb") == (
        f"https://colab.research.google.com/github/{LINKS.github}/blob/{LINKS.branch}/"
        "notebooks/02_qkv_attention.ipynb"
    )
