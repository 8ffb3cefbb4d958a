"""The README's course map is a well-formed table, in the course and in the learners' edition.

A row with one cell more than the header is no longer part of the table for a Markdown
renderer: chapter 10's row once had an empty cell before its badges, so neither its Colab nor
its Binder badge rendered, in README.md and in the edition's README made from it
(``course_tools.release.readme``, badges by ``notebook_headers.readme_text``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course_tools import release
from course_tools.links import Links
from course_tools.notebook_headers import readme_text

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| \d\d \| \[")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _course_map_rows(text: str) -> tuple[list[str], list[str]]:
    lines = text.splitlines()
    start = lines.index("## Course map")
    header = next(line for line in lines[start:] if line.startswith("| # |"))
    return _cells(header), [line for line in lines[start:] if ROW.match(line)]


def _readmes() -> dict[str, str]:
    links = Links.load(ROOT)
    course = (ROOT / "README.md").read_text(encoding="utf-8")
    return {
        "README.md": course,
        "the edition's README": readme_text(release.readme(ROOT, links), links),
    }


@pytest.mark.parametrize("which", ["README.md", "the edition's README"])
def test_every_course_map_row_has_the_headers_cells_and_its_badges(which):
    header, rows = _course_map_rows(_readmes()[which])
    assert len(rows) == len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    for row in rows:
        cells = _cells(row)
        assert len(cells) == len(header), (
            f"{which}: {cells[0]} has {len(cells)} cells, header {len(header)}"
        )
        assert all(cells), f"{which}: chapter {cells[0]} has an empty cell"
        assert "colab-badge" in cells[-1] and "mybinder.org/badge" in cells[-1], cells[0]
