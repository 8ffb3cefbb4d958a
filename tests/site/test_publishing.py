"""Publishing: the course's own address is real on a release build; the nbgitpuller link
opens what nbgitpuller clones; the docs pages the lectures link to are pages of the website.

Setting the address (``python -m course_tools.links --set``) and the placeholder's warning
are tested in tests/course_tools/test_links.py."""

from __future__ import annotations

import re
import subprocess
import warnings
from pathlib import Path

import pytest

from course_tools import links as L
from course_tools import site as S

ROOT = Path(__file__).resolve().parents[2]
URL = "https://github.com/example-school/attention-course"


def test_the_courses_address_is_real_on_a_release_build():
    """Fails on a release build (COURSE_RELEASE=1) while pyproject.toml's address is the
    placeholder; in development it warns (pytest's summary shows it)."""
    links = L.Links.load(ROOT)
    if not L.is_placeholder(links):
        return
    message = f"the course's address is the placeholder {links.repository}: {L.PLACEHOLDER_HELP}"
    if L.release_build():
        pytest.fail(message)
    warnings.warn(message, UserWarning, stacklevel=1)


def _edition_repository(path: Path, branch: str) -> None:
    """A git repository with chapter 00 on ``branch``, as `make release` leaves one."""
    (path / "notebooks").mkdir(parents=True)
    (path / "notebooks" / "00_setup.ipynb").write_text("{}\n", encoding="utf-8")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(path)]
    subprocess.run([*git, "init", "-q", "-b", branch], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "edition"], check=True)


@pytest.mark.slow  # runs git
@pytest.mark.parametrize(
    "address, branch",
    [
        ("{root}/attention-workshop", "main"),
        ("{root}/attention-workshop.git", "main"),
        ("file://{root}/attention-workshop.git/", "spring-2027"),
    ],
)
def test_the_nbgitpuller_link_opens_what_nbgitpuller_clones(tmp_path, address, branch, capsys):
    """The link from the command line, read by nbgitpuller's own handler code (its
    ``targetpath`` rule) and cloned by its GitPuller: the notebook ``urlpath`` opens is there,
    for an address with or without ``.git`` and any branch (issue 37)."""
    from urllib.parse import parse_qs, urlsplit

    pull = pytest.importorskip("nbgitpuller.pull", reason="the test extra has nbgitpuller")
    source = tmp_path / ("attention-workshop.git" if ".git" in address else "attention-workshop")
    _edition_repository(source, branch)
    repository = address.format(root=tmp_path)
    args = ["--nbgitpuller", "https://hub.example.org", "--repository", repository]
    assert L.main([*args, "--branch", branch, "--course", str(ROOT)]) == 0
    link = capsys.readouterr().out.strip()
    query = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    assert query["repo"] == repository.rstrip("/") and query["branch"] == branch
    # nbgitpuller 1.3's handlers.py: targetpath or the address's last part
    target = query.get("targetpath") or query["repo"].rstrip("/").split("/")[-1]
    home = tmp_path / "home"
    home.mkdir()
    puller = pull.GitPuller(query["repo"], str(home / target), branch=query["branch"])
    for _line in puller.pull():
        pass
    opened = query["urlpath"].removeprefix("lab/tree/")
    assert (home / opened).is_file(), f"the link opens {opened}, nbgitpuller cloned {target}"


def test_every_docs_page_a_lecture_links_to_is_on_the_site():
    linked = set()
    for folder in ("notebooks", "exercises"):
        for path in (ROOT / folder).glob("*.ipynb"):
            linked |= set(re.findall(r"\]\(\.\./docs/([a-z_]+\.md)", path.read_text("utf-8")))
    assert linked, "no lecture links to docs/ (the test would prove nothing)"
    assert linked <= set(S.DOCS), f"linked from a lecture but not on the site: {linked}"
    page = S.index_page(ROOT, L.Links.load(ROOT), [], [])
    for name in S.DOCS:
        assert f"docs/{Path(name).stem}" in page
