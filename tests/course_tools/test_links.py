"""course_tools/links.py: where the course lives online (pyproject.toml's repository and
branch), every link derived from it (Colab, Binder, badges, nbgitpuller), the placeholder
address, and ``python -m course_tools.links`` which shows, sets and carries it everywhere."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest
from scripts import ROOT

# Imported here, not first inside a capsys test: generate()'s `out` defaults to the
# sys.stdout of the moment course_tools.exercises is imported.
from course_tools import exercises as _exercises  # noqa: F401
from course_tools import links as L
from course_tools import notebook_headers as H

URL = "https://github.com/example-school/attention-course"
PYPROJECT = """[project]
name = "x"

[project.urls]
Repository = "{repository}"

[tool.course]
branch = "{branch}"  # the branch Colab and Binder open
"""


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    for name in ("notebooks", "solutions", "exercises"):
        shutil.copytree(ROOT / name, tmp_path / name)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def _course(tmp_path: Path, repository: str = URL + ".git/", branch: str = "spring") -> Path:
    (tmp_path / "solutions").mkdir(exist_ok=True)
    text = PYPROJECT.format(repository=repository, branch=branch)
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


# --------------------------------------------------------------------------- the address


def test_the_address_is_read_from_pyproject(tmp_path):
    links = L.Links.load(_course(tmp_path))
    assert links == L.Links(URL, "spring")  # without ".git" and the trailing slash
    assert links.github == "example-school/attention-course"
    assert links.clone_url == URL + ".git"


def test_the_branch_defaults_to_main_and_the_repository_is_required(tmp_path):
    (tmp_path / "pyproject.toml").write_text(f'[project.urls]\nRepository = "{URL}"\n')
    assert L.Links.load(tmp_path).branch == "main"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(ValueError, match=r"no \[project.urls\] Repository"):
        L.Links.load(tmp_path)


def test_colab_needs_a_github_address_and_binder_an_https_one():
    links = L.Links(URL, "spring")
    path = "notebooks/02_qkv_attention.ipynb"
    assert links.colab(path) == (
        f"https://colab.research.google.com/github/example-school/attention-course/blob/spring/{path}"
    )
    assert links.binder(path) == (
        f"https://mybinder.org/v2/gh/example-school/attention-course/spring?urlpath=lab/tree/{path}"
    )
    assert links.colab_badge(path) == (
        f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({links.colab(path)})"
    )
    assert links.binder_badge(path).endswith(f"({links.binder(path)})")
    gitlab = L.Links.of("https://gitlab.example.edu/ml/attention-workshop.git")
    assert gitlab.colab(path) is None and gitlab.colab_badge(path) == ""
    assert gitlab.clone_url == "https://gitlab.example.edu/ml/attention-workshop.git"
    assert gitlab.binder(path) == (
        "https://mybinder.org/v2/git/https%3A%2F%2Fgitlab.example.edu%2Fml%2F"
        f"attention-workshop.git/main?urlpath=lab/tree/{path}"
    )
    for local in ("/srv/git/attention-workshop.git", "git@host:ml/attention-workshop.git"):
        links = L.Links.of(local)
        assert links.clone_url == local and links.folder == "attention-workshop"
        assert links.colab(path) is None and links.binder(path) is None


@pytest.mark.parametrize(
    "address",
    [
        "https://github.com/example-school/attention-workshop",
        "https://gitlab.com/example-school/attention-workshop.git",
        "http://git.local:3000/ml/attention-workshop",
        "git@gitlab.com:ml/attention-workshop.git",
        "ssh://git@host:2222/ml/attention-workshop.git",
        "file:///srv/git/attention-workshop.git",
        "/srv/git/attention-workshop.git",
        "./attention-workshop",
    ],
)
def test_any_git_address_is_an_address(address):
    assert L.check_address(address) == address.rstrip("/")


@pytest.mark.parametrize("address", ["", "attention-workshop", "github.com/x/y", "https://", "a b"])
def test_what_is_no_git_address_is_refused(address):
    with pytest.raises(ValueError):
        L.check_address(address)


@pytest.mark.parametrize(
    "repository, folder",
    [
        ("https://host/org/attention-workshop.git", "attention-workshop"),
        ("/srv/attention-workshop/", "attention-workshop"),
        ("git@host:org/course.git", "course"),
    ],
)
def test_a_clone_gets_the_addresss_last_part_as_its_folder(repository, folder):
    assert L.clone_folder(repository) == folder


@pytest.mark.parametrize("repository", ["", "/", "https://host/..", "."])
def test_an_address_without_a_folder_name_is_refused(repository):
    with pytest.raises(ValueError, match="no folder name"):
        L.clone_folder(repository)


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


def test_the_nbgitpuller_link_names_the_same_folder_twice():
    link = L.nbgitpuller_link("https://hub.example.org/jupyter", "/srv/w.git/", "b-2",
                              "exercises/02.ipynb")  # fmt: skip
    assert link.startswith("https://hub.example.org/jupyter/hub/user-redirect/git-pull?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    assert query == {
        "repo": "/srv/w.git",
        "branch": "b-2",
        "targetpath": "w",
        "urlpath": "lab/tree/w/exercises/02.ipynb",
    }
    with pytest.raises(ValueError, match="not a branch name"):
        L.nbgitpuller_link("https://hub.example.org", URL, "main; rm -rf /")


# --------------------------------------------------------------------------- the placeholder


@pytest.mark.parametrize(
    "repository, placeholder",
    [
        ("https://github.com/OWNER/attention-course", True),
        ("https://github.com/YOUR-ORG/attention-course", True),
        ("https://github.com/YOU/x", True),
        ("https://hub.example.org/course", True),
        ("https://example.com/a/b", True),
        (URL, False),
        ("https://github.com/owner-of-it/attention-course", False),
    ],
)
def test_a_placeholder_address_is_recognised(repository, placeholder):
    assert L.is_placeholder(L.Links(repository)) is placeholder


def test_the_placeholder_warns_in_development_and_fails_a_release(monkeypatch):
    placeholder = L.Links("https://github.com/OWNER/attention-course")
    monkeypatch.delenv("COURSE_RELEASE", raising=False)
    note = L.check_published(placeholder)
    assert note.startswith("warning:") and "--set" in note
    assert L.check_published(L.Links(URL)) is None
    monkeypatch.setenv("COURSE_RELEASE", "1")
    with pytest.raises(ValueError, match="placeholder"):
        L.check_published(placeholder)


@pytest.mark.parametrize("value, release", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_a_release_build_is_any_course_release_but_0(monkeypatch, value, release):
    monkeypatch.setenv("COURSE_RELEASE", value)
    assert L.release_build() is release


# --------------------------------------------------------------------------- setting it


def test_setting_the_address_rewrites_only_its_lines(tmp_path):
    root = _course(tmp_path, repository="https://github.com/OWNER/attention-course", branch="main")
    before = (root / "pyproject.toml").read_text()
    links = L.set_address(root, URL + ".git/", "spring")
    assert links == L.Links(URL, "spring")
    after = (root / "pyproject.toml").read_text()
    assert after == before.replace("OWNER", "example-school").replace('"main"', '"spring"')
    assert L.set_address(root, URL).branch == "spring"  # no branch given: kept


@pytest.mark.parametrize(
    "repository, branch, message",
    [
        ("https://gitlab.com/a/b", None, "must be https://github.com/OWNER/NAME"),
        (URL, "a branch", "not a branch name"),
    ],
)
def test_a_bad_address_or_branch_changes_nothing(tmp_path, repository, branch, message):
    root = _course(tmp_path)
    before = (root / "pyproject.toml").read_text()
    with pytest.raises(ValueError, match=message):
        L.set_address(root, repository, branch)
    assert (root / "pyproject.toml").read_text() == before


def test_a_pyproject_without_the_repository_line_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project.urls]\nHomepage = 'x'\n")
    with pytest.raises(ValueError, match="no `Repository"):
        L.set_address(tmp_path, URL)


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


# --------------------------------------------------------------------------- the command


def test_without_options_the_command_shows_the_address(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COURSE_RELEASE", raising=False)
    root = _course(tmp_path, repository="https://github.com/OWNER/c")
    assert L.main(["--course", str(root)]) == 0
    said = capsys.readouterr()
    assert said.out == "https://github.com/OWNER/c (branch spring)\n"
    assert said.err.startswith("warning: the course's Colab, Binder and GitHub links")
    assert L.main(["--course", str(tmp_path / "nowhere")]) == 2
    assert "error:" in capsys.readouterr().err


def test_the_command_prints_an_editions_nbgitpuller_link(tmp_path, capsys):
    root = _course(tmp_path)
    args = ["--course", str(root), "--nbgitpuller", "https://hub.example.org"]
    assert L.main(args) == 0
    course_link = capsys.readouterr().out.strip()
    assert course_link == L.Links(URL, "spring").nbgitpuller("https://hub.example.org")
    assert L.main([*args, "--repository", "https://git.example.edu/w/edition.git/"]) == 0
    said = capsys.readouterr()
    query = parse_qs(urlsplit(said.out.strip()).query)
    assert query["repo"] == ["https://git.example.edu/w/edition.git"]
    assert query["branch"] == ["main"] and query["targetpath"] == ["edition"]
    assert "placeholder" in said.err  # an example.edu address: a placeholder
    assert L.main([*args[:2], "--nbgitpuller", "not a hub"]) == 2
