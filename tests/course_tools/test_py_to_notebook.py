"""course_tools/py_to_notebook.py: a notebook authored as a "percent" script, converted."""

from __future__ import annotations

import nbformat

from course_tools.py_to_notebook import convert, main

SCRIPT = """\
# text before the first cell marker is not part of any cell

# %% [markdown]
# # A title
# Markdown lines start with "# ".
#no space after the hash

# %%
import numpy as np

x = 1  # a code cell


# %% [markdown] exercise=02.1 role=statement
# ### Exercise 02.1

# %% exercise=02.1 role=solution
def f(x):
    return x

# %% exercise=02.1
# a role left out

# %% tags=skip-execution,raises-exception
1 / 0
"""


def test_cells_metadata_and_stable_ids():
    nb = convert(SCRIPT)
    assert [c.cell_type for c in nb.cells] == [
        "markdown",
        "code",
        "markdown",
        "code",
        "code",
        "code",
    ]
    title, code, statement, solution, no_role, tagged = nb.cells
    assert title.source == '# A title\nMarkdown lines start with "# ".\nno space after the hash'
    assert code.source == "import numpy as np\n\nx = 1  # a code cell"  # blank edges stripped
    assert statement.source == "### Exercise 02.1"
    assert statement.metadata == {"course": {"exercise": "02.1", "role": "statement"}}
    assert solution.metadata["course"] == {"exercise": "02.1", "role": "solution"}
    assert solution.source == "def f(x):\n    return x"
    assert no_role.metadata["course"] == {"exercise": "02.1", "role": ""}
    assert tagged.metadata == {"tags": ["skip-execution", "raises-exception"]}
    assert [c.id for c in nb.cells] == [f"cell-{i:03d}" for i in range(6)]
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["language_info"] == {"name": "python"}
    nbformat.validate(nb)


def test_a_script_without_markers_is_an_empty_notebook():
    nb = convert("print('no cells')\n")
    assert nb.cells == [] and nb.nbformat == 4


def test_the_command_writes_a_valid_notebook(tmp_path, capsys):
    src, dest = tmp_path / "lecture.py", tmp_path / "lecture.ipynb"
    src.write_text(SCRIPT, encoding="utf-8")
    assert main([str(src), str(dest)]) == 0
    assert capsys.readouterr().out == f"wrote {dest} (6 cells)\n"
    text = dest.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[3].source == "def f(x):\n    return x"


def test_the_command_needs_two_paths(capsys):
    assert main(["only-one.py"]) == 2
    assert "Usage: ``python -m course_tools.py_to_notebook SCRIPT.py OUT.ipynb``" in (
        capsys.readouterr().out
    )
