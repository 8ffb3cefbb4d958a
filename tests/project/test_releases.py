"""Releases: each a short, dated section of CHANGELOG.md naming its tag and commit, that commit
carrying the version, its full notes in docs/releases/, and the tag (where the clone has tags)
on that commit."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^## (\d+\.\d+\.\d+) — (\d{4}-\d{2}-\d{2})$", re.M)
TAG_LINE = re.compile(
    r"^Tag `v(\d+\.\d+\.\d+)`, commit `([0-9a-f]{7,40})`\. Full notes: "
    r"\[docs/releases/(\d+\.\d+\.\d+)\.md\]\(docs/releases/\3\.md\)\.$"
)
MAX_SECTION_LINES = 40  # a release's summary; the full notes are in docs/releases/


def releases(text: str) -> list[dict]:
    """Each released section: version, date, the tag line's fields, its line count."""
    found = []
    matches = list(HEADING.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end() : end].strip("\n").splitlines()
        tag = TAG_LINE.match(body[0]) if body else None
        found.append({"version": m.group(1), "date": m.group(2), "lines": len(body), "tag": tag})
    return found


def _git(*args: str) -> str | None:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _version() -> str:
    text = (ROOT / "course_lib" / "__init__.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def test_every_release_is_a_short_dated_section_with_its_tag_and_notes():
    text = (ROOT / "CHANGELOG.md").read_text()
    found = releases(text)
    assert [r["version"] for r in found][:3] == ["0.3.0", "0.2.0", "0.1.0"][: len(found)]
    versions = [tuple(map(int, r["version"].split("."))) for r in found]
    assert versions == sorted(versions, reverse=True), "newest release first"
    assert [r["date"] for r in found] == sorted((r["date"] for r in found), reverse=True)
    for r in found:
        assert r["tag"], f"{r['version']}: the line under the heading names its tag and commit"
        assert r["tag"].group(1) == r["version"] == r["tag"].group(3)
        assert r["lines"] <= MAX_SECTION_LINES, f"{r['version']}: {r['lines']} lines"
        notes = ROOT / "docs" / "releases" / f"{r['version']}.md"
        assert notes.is_file() and notes.read_text().startswith(f"# {r['version']} — {r['date']}")
    assert text.index("## Unreleased") < text.index(f"## {found[0]['version']} —")
    assert tuple(map(int, _version().split("."))) >= versions[0]


def test_a_section_without_its_tag_line_or_too_long_is_caught():
    bad = "## 9.9.9 — 2030-01-01\nno tag line\n" + "- x\n" * 50
    (r,) = releases(bad)
    assert r["tag"] is None and r["lines"] > MAX_SECTION_LINES


@pytest.mark.skipif(_git("rev-parse", "--is-shallow-repository") != "false",
                    reason="a shallow clone holds no release commits to check")  # fmt: skip
def test_each_release_commit_carries_its_version_and_date_and_any_tag_points_there():
    for r in releases((ROOT / "CHANGELOG.md").read_text()):
        version, commit = r["version"], r["tag"].group(2)
        source = _git("show", f"{commit}:course_lib/__init__.py")
        assert source is not None, f"{version}: commit {commit} is not in this repository"
        assert f'__version__ = "{version}"' in source, f"{commit} is not version {version}"
        assert _git("log", "-1", "--format=%cs", commit) == r["date"]
        tagged = _git("rev-list", "-n", "1", f"v{version}")
        if tagged is not None:  # a clone that fetched the tags
            assert tagged.startswith(commit) or _git("rev-parse", commit) == tagged, version
