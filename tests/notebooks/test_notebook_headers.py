"""The course-wide cells every committed notebook shares are up to date.

Colab cell first (installing the course on Colab, nothing elsewhere), lectures pointing at
the learner's copy in work/, a progress cell at the end of every exercise notebook; all
derived from pyproject.toml's repository. The command that keeps them in step
(course_tools/notebook_headers.py) is tested in tests/course_tools/test_notebook_headers.py.
"""

from __future__ import annotations

from pathlib import Path

from course_tools import notebook_headers as H

ROOT = Path(__file__).resolve().parents[2]


def test_every_notebook_is_up_to_date():
    """After editing a notebook (or the repository URL): python -m
    course_tools.notebook_headers --apply, then commit."""
    stale = H.run(ROOT, apply=False)
    assert stale == [], (
        f"not up to date: {stale}; run `python -m course_tools.notebook_headers --apply`"
    )
