"""Author a notebook as a plain-text script, then convert it: a maintainer's convenience.

The committed ``.ipynb`` is the source of truth; this converter only saves typing JSON.
Cells are separated by ``# %%`` lines (the "percent" format most editors understand)::

    # %% [markdown]
    # # A title
    # Markdown lines start with "# ".

    # %%
    x = 1  # a code cell

    # %% [markdown] exercise=02.1 role=statement
    # ### Exercise 02.1 ...
    # %% exercise=02.1 role=solution
    # %% exercise=02.1 role=check
    # %% tags=skip-execution      (cell tags, comma separated)

Usage: ``python -m course_tools.py_to_notebook SCRIPT.py OUT.ipynb``
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import nbformat

HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?P<rest>.*)$")


def convert(text: str):
    cells: list[nbformat.NotebookNode] = []
    kind: str | None = None
    attrs: dict[str, str] = {}
    lines: list[str] = []

    def flush():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(
                l[2:] if l.startswith("# ") else l.lstrip("#") for l in body.splitlines()
            )
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
        meta: dict[str, Any] = {}
        if "exercise" in attrs:
            meta["course"] = {"exercise": attrs["exercise"], "role": attrs.get("role", "")}
        if "tags" in attrs:
            meta["tags"] = attrs["tags"].split(",")
        cell.metadata.update(meta)
        cell["id"] = f"cell-{len(cells):03d}"  # stable ids keep diffs clean
        cells.append(cell)

    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            flush()
            kind = "markdown" if m.group("md") else "code"
            attrs = dict(kv.split("=", 1) for kv in m.group("rest").split() if "=" in kv)
            lines = []
        elif kind is not None:
            lines.append(line)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    src, dest = Path(argv[0]), Path(argv[1])
    nb = convert(src.read_text(encoding="utf-8"))
    nbformat.validate(nb)
    dest.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    print(f"wrote {dest} ({len(nb.cells)} cells)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
