"""course_tools/course.py: where the course is (given, or the current directory), its
version as git describes it, and each notebook's time budget."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from course_tools.course import (
    CourseRootError,
    add_course_argument,
    course_commit,
    course_root,
    notebook_budget_s,
)


def test_the_course_is_the_folder_given(tmp_path):
    (tmp_path / "solutions").mkdir()
    assert course_root(tmp_path) == tmp_path.resolve()
    assert course_root(str(tmp_path / "solutions" / "..")) == tmp_path.resolve()


def test_the_course_is_the_current_directory_when_none_is_given(tmp_path, monkeypatch):
    (tmp_path / "solutions").mkdir()
    monkeypatch.chdir(tmp_path)
    assert course_root() == tmp_path.resolve()


def test_a_folder_without_solutions_is_refused_saying_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(CourseRootError, match="it has no solutions/ folder"):
        course_root(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        CourseRootError, match="run the command from the course checkout or pass --course"
    ):
        course_root()
    (tmp_path / "solutions").write_text("a file, not a folder")
    with pytest.raises(CourseRootError):
        course_root(tmp_path)
    assert issubclass(CourseRootError, ValueError)


def test_a_home_relative_course_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "course" / "solutions").mkdir(parents=True)
    assert course_root("~/course") == (tmp_path / "course").resolve()


def test_every_tool_spells_the_option_course_or_root():
    parser = argparse.ArgumentParser()
    add_course_argument(parser)
    assert parser.parse_args([]).course is None
    assert parser.parse_args(["--course", "a"]).course == Path("a")
    assert parser.parse_args(["--root", "b"]).course == Path("b")


def test_the_commit_is_what_git_describes(tmp_path):
    assert course_commit(tmp_path) == "unknown"  # not a git checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a").write_text("a")
    subprocess.run([*git, "add", "a"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    subprocess.run([*git, "tag", "v9.9.9"], check=True)
    assert course_commit(tmp_path) == "v9.9.9"
    (tmp_path / "a").write_text("edited")
    assert course_commit(tmp_path) == "v9.9.9-dirty"


def test_budgets_are_per_chapter():
    assert notebook_budget_s("notebooks/00_setup.ipynb") == 60.0
    assert notebook_budget_s("solutions/05_positional_encodings.ipynb") == 60.0
    for chapter in ("06_flash_attention", "07_tiny_gpt", "08_attention_variants"):
        assert notebook_budget_s(f"exercises/{chapter}.ipynb") == 120.0


def test_the_real_model_chapters_have_the_longest_budgets():
    assert notebook_budget_s("10_real_models.ipynb") == 120.0
    assert notebook_budget_s("notebooks/11_real_model_claims.ipynb") == 180.0
    assert notebook_budget_s("work/99_other.ipynb") == 60.0
    assert notebook_budget_s("notebooks/x_06_not_a_prefix.ipynb") == 60.0  # by the file's name
