"""Publishing: one command sets the course's address everywhere it appears; the placeholder
address warns in development and fails a release build; the docs pages the lectures link to
are pages of the website."""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from pathlib import Path

import nbformat
import pytest

# Imported here, not first inside a capsys test: generate()'s `out` defaults to the
# sys.stdout of the moment course_tools.exercises is imported.
from course_tools import exercises as _exercises  # noqa: F401
from course_tools import links as L
from course_tools import notebook_headers as H
from course_tools import site as S

ROOT = Path(__file__).resolve().parents[2]
URL = "https://github.com/example-school/attention-course"


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    for name in ("notebooks", "solutions", "exercises"):
        shutil.copytree(ROOT / name, tmp_path / name)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def test_one_command_sets_the_address_everywhere(course_copy: Path):
    assert L.main(["--set", URL + ".git", "--branch", "spring", "--course", str(course_copy)]) == 0
    links = L.Links.load(course_copy)
    assert (links.repository, links.branch) == (URL, "spring")
    pyproject = (course_copy / "pyproject.toml").read_text()
    assert f'Repository = "{URL}"' in pyproject and 'branch = "spring"' in pyproject
    assert "[project.optional-dependencies]" in pyproject  # nothing else was rewritten
    for folder in ("notebooks", "solutions", "exercises"):
        for path in sorted((course_copy / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            colab = next(c for c in nb.cells if c.get("id") == H.COLAB_ID)
            assert f'"{URL}.git"' in colab.source, f"{folder}/{path.name}"
    readme = (course_copy / "README.md").read_text()
    assert "github.com/OWNER" not in readme
    assert f"git clone {URL}.git\ncd attention-course\n" in readme
    for path in sorted((course_copy / "notebooks").glob("*.ipynb")):
        assert links.colab_badge(f"notebooks/{path.name}") in readme, path.name
        assert links.binder_badge(f"notebooks/{path.name}") in readme, path.name
    assert "/blob/spring/" in readme
    # idempotent: a second run changes nothing, and the check agrees
    before = {p: p.read_bytes() for p in course_copy.rglob("*") if p.is_file()}
    assert L.main(["--set", URL, "--branch", "spring", "--course", str(course_copy)]) == 0
    assert {p: p.read_bytes() for p in course_copy.rglob("*") if p.is_file()} == before
    assert H.main(["--check", "--course", str(course_copy)]) == 0


@pytest.mark.parametrize(
    "bad", ["https://gitlab.com/a/b", "github.com/a/b", "https://github.com/a", "x"]
)
def test_a_wrong_address_is_refused_by_name(course_copy: Path, bad: str, capsys):
    assert L.main(["--set", bad, "--course", str(course_copy)]) == 2
    assert "https://github.com/OWNER/NAME" in capsys.readouterr().err
    assert (course_copy / "pyproject.toml").read_bytes() == (ROOT / "pyproject.toml").read_bytes()


def test_the_placeholder_warns_in_development_and_fails_a_release(monkeypatch):
    placeholder = L.Links("https://github.com/OWNER/attention-course")
    monkeypatch.delenv("COURSE_RELEASE", raising=False)
    note = L.check_published(placeholder)
    assert note.startswith("warning:") and "--set" in note
    assert L.check_published(L.Links(URL)) is None
    monkeypatch.setenv("COURSE_RELEASE", "1")
    with pytest.raises(ValueError, match="placeholder"):
        L.check_published(placeholder)
    monkeypatch.setattr(S.Links, "load", classmethod(lambda cls, root: placeholder))
    with pytest.raises(S.SiteError, match="placeholder"):  # make site, before any work
        S.build(ROOT, ROOT / "build" / "never", only=["00"])
    assert not (ROOT / "build" / "never").exists()


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


def test_the_nbgitpuller_link():
    link = L.Links(URL, "spring").nbgitpuller("https://hub.example.org/")
    assert link == (
        "https://hub.example.org/hub/user-redirect/git-pull?"
        "repo=https%3A%2F%2Fgithub.com%2Fexample-school%2Fattention-course.git&branch=spring"
        "&targetpath=attention-course"
        "&urlpath=lab%2Ftree%2Fattention-course%2Fnotebooks%2F00_setup.ipynb"
    )
    with pytest.raises(ValueError, match="JupyterHub"):
        L.Links(URL).nbgitpuller("hub.example.org")


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
