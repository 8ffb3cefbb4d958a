"""course_tools/notebook_headers.py: the cells and pointers every notebook shares (the Colab
cell, lectures pointing at the learner's copy in work/, the progress cell, JupyterLab's
metadata), the README's badges, all derived from pyproject.toml's repository and kept in
step by one idempotent command. (That the committed notebooks are up to date is
tests/notebooks/test_notebook_headers.py.)"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from scripts import ROOT

# Imported here, not first inside a capsys test: generate()'s `out` defaults to the
# sys.stdout of the moment course_tools.exercises is imported.
from course_tools import exercises as _exercises  # noqa: F401
from course_tools import notebook_headers as H
from course_tools.links import Links

LINKS = Links.load(ROOT)
URL = "https://github.com/example-school/attention-course"
# What lab_metadata() asks a real kernel; the tests below that do not need one use this.
META = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python", "version": "3.99.0", "mimetype": "text/x-python"},
}


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    for name in ("notebooks", "solutions", "exercises"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _notebook(*cells) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=list(cells))


# --------------------------------------------------------------------------- the whole course


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


def _tiny_course(tmp_path: Path) -> Path:
    """A course of one lecture: a title and one code cell, nothing shared yet."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "solutions").mkdir()
    (tmp_path / "pyproject.toml").write_text(f'[project.urls]\nRepository = "{URL}"\n')
    nb = _notebook(
        nbformat.v4.new_markdown_cell("# 01\nYour copy: `exercises/01_rnn.ipynb`."),
        nbformat.v4.new_code_cell("import numpy as np"),
    )
    nbformat.write(nb, tmp_path / "notebooks" / "01_rnn.ipynb")
    return tmp_path


def test_check_names_what_is_stale_and_apply_fixes_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(H, "lab_metadata", lambda kernel=H.KERNEL: META)
    root = _tiny_course(tmp_path)
    before = (root / "notebooks" / "01_rnn.ipynb").read_bytes()
    said = io.StringIO()
    assert H.run(root, apply=False, out=said) == ["notebooks/01_rnn.ipynb"]
    assert said.getvalue() == "not up to date: notebooks/01_rnn.ipynb\n"
    assert H.main(["--check", "--course", str(root)]) == 1
    assert "--apply` and commit the result" in capsys.readouterr().err
    assert (root / "notebooks" / "01_rnn.ipynb").read_bytes() == before  # check writes nothing
    assert H.main(["--apply", "--course", str(root)]) == 0
    nb = nbformat.read(root / "notebooks" / "01_rnn.ipynb", as_version=4)
    assert [c.get("id") for c in nb.cells if c.cell_type == "code"][0] == H.COLAB_ID
    assert "`work/01_rnn_exercises.ipynb`" in nb.cells[0].source
    assert nb.metadata["language_info"]["version"] == "3.99.0"
    assert H.main(["--check", "--course", str(root)]) == 0


def test_the_command_needs_one_action_and_a_course(tmp_path, capsys):
    with pytest.raises(SystemExit):
        H.main([])
    with pytest.raises(SystemExit):
        H.main(["--apply", "--check"])
    assert H.main(["--check", "--course", str(tmp_path)]) == 2
    assert "error:" in capsys.readouterr().err


# --------------------------------------------------------------------------- the Colab cell


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


def test_the_colab_cell_clones_the_courses_own_address():
    src = H.colab_source(Links(URL, "spring"), "02")
    assert f'REPOSITORY = "{URL}.git"' in src and 'COURSE = "/content/attention-course"' in src


def test_the_colab_cell_goes_before_the_first_code_cell_once():
    nb = _notebook(nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("x = 1"))
    H.set_colab_cell(nb, "first")
    assert [c.source for c in nb.cells] == ["# title", "first", "x = 1"]
    assert nb.cells[1].id == H.COLAB_ID and nb.cells[1].metadata == {"course": {"role": "colab"}}
    nb.cells.append(nb.cells.pop(1))  # moved to the end by hand
    H.set_colab_cell(nb, "second")
    assert [c.source for c in nb.cells] == ["# title", "second", "x = 1"]
    empty = _notebook(nbformat.v4.new_markdown_cell("only text"))
    H.set_colab_cell(empty, "c")
    assert [c.cell_type for c in empty.cells] == ["markdown", "code"]


# --------------------------------------------------------------------------- pointers, progress


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


def test_the_learners_copy_is_named_for_its_tab():
    assert H.work_name("02_qkv_attention") == "02_qkv_attention_exercises.ipynb"


def test_the_progress_cell_is_last_and_names_its_chapter():
    nb = _notebook(nbformat.v4.new_code_cell("a"), nbformat.v4.new_code_cell("b"))
    H.set_progress_cell(nb, "02_qkv_attention")
    assert nb.cells[-1].id == H.PROGRESS_ID
    assert 'progress.show("02_qkv_attention")' in nb.cells[-1].source
    nb.cells.insert(0, nb.cells.pop())  # moved to the top by hand
    H.set_progress_cell(nb, "02_qkv_attention")
    assert [c.source for c in nb.cells[:2]] == ["a", "b"] and len(nb.cells) == 3
    assert nb.cells[-1].metadata == {"course": {"role": "progress"}}


def test_jupyterlabs_metadata_keeps_the_python_version_already_there():
    nb = _notebook()
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    H.set_lab_metadata(nb, META)
    assert nb.metadata["kernelspec"] == META["kernelspec"]
    assert nb.metadata["language_info"] == dict(META["language_info"], version="3.11.7")
    fresh = _notebook()
    H.set_lab_metadata(fresh, META)
    assert fresh.metadata["language_info"]["version"] == "3.99.0"


def test_a_lecture_and_a_solution_get_their_own_shared_cells():
    nb = _notebook(
        nbformat.v4.new_markdown_cell("see `exercises/02_qkv_attention.ipynb`"),
        nbformat.v4.new_code_cell("x = 1"),
    )
    lecture = H.updated(nb, "lecture", "02_qkv_attention", LINKS)
    assert "`work/02_qkv_attention_exercises.ipynb`" in lecture.cells[0].source
    assert lecture.cells[-1].id != H.PROGRESS_ID
    solution = H.updated(nb, "solution", "02_qkv_attention", LINKS, META)
    assert "`exercises/02_qkv_attention.ipynb`" in solution.cells[0].source  # kept
    assert solution.cells[-1].id == H.PROGRESS_ID and solution.metadata["kernelspec"]
    assert len(nb.cells) == 2 and "kernelspec" not in nb.metadata  # the input is unchanged


# --------------------------------------------------------------------------- badges, README


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


README = """# Course

```bash
git clone https://github.com/OWNER/old-name.git
cd old-name
```

## Course map

| # | chapter | time | open |
|---|---|---|---|
| 00 | [setup](notebooks/00_setup.ipynb) | 10 min | [![Open in Colab](old/colab-badge.svg)](old) |
| 01 | [rnn](notebooks/01_rnn.ipynb) | 60 min |
"""


def test_the_readmes_clone_line_and_badges_follow_the_address():
    links = Links(URL, "spring")
    text = H.readme_text(README, links)
    assert f"git clone {URL}.git\ncd attention-course\n" in text
    rows = [line for line in text.splitlines() if line.startswith("| 0")]
    badges = [
        f"{links.colab_badge(p)} {links.binder_badge(p)}"
        for p in ("notebooks/00_setup.ipynb", "notebooks/01_rnn.ipynb")
    ]
    assert rows == [
        f"| 00 | [setup](notebooks/00_setup.ipynb) | 10 min | {badges[0]} |",  # replaced
        f"| 01 | [rnn](notebooks/01_rnn.ipynb) | 60 min | {badges[1]} |",  # added
    ]
    assert H.readme_text(text, links) == text


def test_update_readme_says_whether_the_readme_is_stale(tmp_path):
    (tmp_path / "pyproject.toml").write_text(f'[project.urls]\nRepository = "{URL}"\n')
    assert H.update_readme(tmp_path, apply=True) is False  # no README: nothing to do
    (tmp_path / "README.md").write_text(README)
    out = io.StringIO()
    assert H.update_readme(tmp_path, apply=False, out=out) is True
    assert (tmp_path / "README.md").read_text() == README
    assert out.getvalue() == "not up to date: README.md (course map badges)\n"
    assert H.update_readme(tmp_path, apply=True, out=out) is True
    assert H.update_readme(tmp_path, apply=False, out=out) is False
    assert "example-school" in (tmp_path / "README.md").read_text()


def test_the_badges_command_prints_the_table(tmp_path, capsys):
    root = _tiny_course(tmp_path)
    assert H.main(["--badges", "--course", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["| # | lecture | exercises |", "|---|---|---|"]
    lecture = "notebooks/01_rnn.ipynb"
    links = Links(URL)
    assert out[2] == f"| 01 | {links.colab_badge(lecture)} {links.binder_badge(lecture)} |  |"
