"""`make release`: the learner's edition, built from this checkout and checked as a graded
learner would receive it (folder, zip, git repository): nothing of the solutions, the hidden
tests or the grader in it; it installs as a package of its own and its notebooks run."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from scripts import ROOT, load_script

from course_tools import release as R
from course_tools.links import Links, load_toml

EDITION_URL = "https://github.com/example-school/attention-workshop"


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "attention-workshop"
    said = io.StringIO()
    R.build(ROOT, out, repository=EDITION_URL, branch="spring", stream=said)
    assert "no solutions" in said.getvalue() and "git -C" in said.getvalue()
    return out


def files_of(folder: Path) -> set[str]:
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(folder).parts
    }


def test_the_edition_has_what_a_learner_needs_and_nothing_else(edition: Path):
    names = files_of(edition)
    for folder in ("notebooks", "exercises"):
        want = {f"{folder}/{p.name}" for p in (ROOT / folder).glob("*.ipynb")}
        assert want and want <= names, f"{folder}/ incomplete: {sorted(want - names)}"
    for need in (
        "Makefile",
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "LICENSE-CONTENT",
        "environment.yml",
        "postBuild",
        "tools/bootstrap.py",
        "tools/learner_files.py",
        "course_lib/__init__.py",
        "course_lib/checks/core.py",
        ".jupyter/lab/user-settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings",
    ):
        assert need in names, f"the edition lacks {need}"
    for name in names:
        assert not name.startswith(("solutions/", "course_tools/", "tests/")), name
        assert name not in ("CHANGELOG.md", "docs/instructors.md", "conftest.py"), name
    assert R.leaks(edition) == []


def test_no_solution_or_hidden_test_reaches_the_edition(edition: Path):
    """Every solution block of solutions/ is absent from the edition's exercises, line by
    line (lines long enough to be the solution's own, not an import or a return)."""
    blocks = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
    hidden = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
    exercises_text = "\n".join(
        (edition / "exercises" / p.name).read_text(encoding="utf-8")
        for p in (ROOT / "solutions").glob("*.ipynb")
    )
    for path in sorted((edition / "exercises").glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        for marker in R.FORBIDDEN_TEXT:
            assert marker not in text, f"{path.name}: {marker}"
    checked = 0
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            for pattern in (blocks, hidden):
                for body in pattern.findall(cell.source):
                    for line in body.splitlines():
                        line = line.strip()
                        if len(line) < 40 or line.startswith(("#", "return", "import", "from")):
                            continue
                        checked += 1
                        assert json_str(line) not in exercises_text, (
                            f"{path.name}: a solution line is in the edition: {line!r}"
                        )
    assert checked > 50, f"only {checked} solution lines were checked"


def json_str(line: str) -> str:
    import json

    return json.dumps(line)[1:-1]


def test_the_zip_and_the_git_repository_hold_the_same_files(edition: Path):
    archive = edition.with_name(edition.name + ".zip")
    with zipfile.ZipFile(archive) as zf:
        zipped = {n.split("/", 1)[1] for n in zf.namelist() if not n.endswith("/")}
    assert zipped == files_of(edition)
    tracked = subprocess.run(
        ["git", "-C", str(edition), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert set(tracked) == files_of(edition)
    status = subprocess.run(
        ["git", "-C", str(edition), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert status == "", status
    branch = subprocess.run(
        ["git", "-C", str(edition), "branch", "--show-current"], capture_output=True, text=True
    ).stdout.strip()
    assert branch == "spring"


def test_every_link_points_at_the_edition(edition: Path):
    links = Links.load(edition)
    assert (links.repository, links.branch) == (EDITION_URL, "spring")
    for folder in ("notebooks", "exercises"):
        for path in sorted((edition / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            colab = next(c for c in nb.cells if c.get("id") == "course-colab")
            assert f'"{EDITION_URL}.git"' in colab.source, f"{folder}/{path.name}"
    readme = (edition / "README.md").read_text(encoding="utf-8")
    assert f"git clone {EDITION_URL}.git" in readme
    assert "solutions/" not in readme and "course-grade" not in readme
    assert "## Course map" in readme and "make progress" in readme
    assert links.colab_badge("notebooks/00_setup.ipynb") in readme
    assert "OWNER" not in readme


@pytest.mark.slow
def test_the_edition_installs_as_its_own_package(edition: Path, tmp_path: Path):
    """Its pyproject names the course's dependencies and course_lib only (no grader, no
    course-grade command); pip builds it."""
    ours, theirs = load_toml(ROOT / "pyproject.toml"), load_toml(edition / "pyproject.toml")
    assert theirs["project"]["dependencies"] == ours["project"]["dependencies"]
    assert "scripts" not in theirs["project"]
    assert set(theirs["project"]["optional-dependencies"]) == {"test"}
    target = tmp_path / "site-packages"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "--target", str(target), str(edition)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "course_lib" / "checks" / "core.py").exists()
    assert not (target / "course_tools").exists()


def test_the_editions_own_commands(edition: Path):
    """`make lab` / `make test` there run its bootstrap, whose suite is its notebooks."""
    proc = subprocess.run(
        ["make", "-n", "lab", "test", "progress"], cwd=edition, capture_output=True, text=True
    )
    if proc.returncode != 0 and "not found" in proc.stderr:
        pytest.skip("make is not installed")
    for what in ("lab", "test", "progress"):
        assert f"tools/bootstrap.py {what}" in proc.stdout
    boot = load_script("tools/bootstrap.py")
    assert boot.is_learner_edition(str(edition)) and not boot.is_learner_edition(str(ROOT))
    args = boot.full_suite_args(str(edition))
    assert args[-2:] == ["notebooks", "exercises"]
    assert all((edition / a).is_dir() for a in args[-2:])
    proc = subprocess.run(
        [sys.executable, "tools/bootstrap.py", "exercises"],
        cwd=edition,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "learner's edition" in proc.stderr


@pytest.mark.slow
def test_the_editions_notebooks_run_and_progress_reads_them(edition: Path, tmp_path: Path):
    """Chapter 00's lecture and exercises under nbval, importing the edition's course_lib;
    then `make progress`'s module in the edition on a learner's copy."""
    env = dict(os.environ, PYTHONPATH=str(edition), COURSE_BUDGET="ci", OMP_NUM_THREADS="1")
    env.pop("COURSE_ROOT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax"]
        + ["--nbval-current-env", "notebooks/00_setup.ipynb", "exercises/00_setup.ipynb"],
        cwd=edition,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    work = edition / "work"
    work.mkdir(exist_ok=True)
    (work / "00_setup_exercises.ipynb").write_bytes(
        (edition / "exercises/00_setup.ipynb").read_bytes()
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import course_lib, sys; print(course_lib.__file__)"],
        cwd=edition,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip().startswith(str(edition)), proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.progress", "work", "--json"],
        cwd=edition,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    rows = json.loads(proc.stdout)
    mine = [r for r in rows if r["assignment"] == "00_setup"]
    assert mine and all(r["status"] == "not started" for r in mine), rows


def test_the_placeholder_address_and_a_foreign_folder_are_refused(tmp_path: Path):
    course = Links.load(ROOT)
    from course_tools.links import is_placeholder

    if is_placeholder(course):
        with pytest.raises(R.ReleaseError, match="placeholder"):
            R.build(ROOT, tmp_path / "e", git=False, make_zip=False)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(R.ReleaseError, match="not a learner's edition"):
        R.build(ROOT, foreign, repository=EDITION_URL, git=False, make_zip=False)
    assert (foreign / "notes.txt").read_text() == "mine"
    with pytest.raises(R.ReleaseError, match="inside the course"):
        R.build(ROOT, ROOT / "notebooks" / "x", repository=EDITION_URL)
    # an edition is rebuilt in place
    out = tmp_path / "again"
    R.build(ROOT, out, repository=EDITION_URL, git=False, make_zip=False, stream=io.StringIO())
    (out / "stale.txt").write_text("old")
    R.build(ROOT, out, repository=EDITION_URL, git=False, make_zip=False, stream=io.StringIO())
    assert not (out / "stale.txt").exists()


@pytest.mark.parametrize(
    "address",
    [
        "https://github.com/OWNER/attention-course",
        "https://github.com/YOUR-ORG/attention-workshop",
        "https://github.com/your-school/attention-workshop",
        "https://github.com/YOU/NAME",
    ],
)
def test_a_placeholder_address_is_refused_unless_a_dry_run(tmp_path: Path, address, capsys):
    """The guide's own default (YOUR-ORG) was accepted without a word (issue 37, item 5)."""
    with pytest.raises(R.ReleaseError, match="placeholder.*--dry-run"):
        R.build(ROOT, tmp_path / "e", repository=address, git=False, make_zip=False)
    assert not (tmp_path / "e").exists()
    args = [str(tmp_path / "e"), "--repository", address, "--no-git", "--no-zip"]
    assert R.main([*args, "--course", str(ROOT)]) == 2
    assert "placeholder" in capsys.readouterr().err
    assert R.main([*args, "--course", str(ROOT), "--dry-run"]) == 0
    assert "dry run, not for learners" in capsys.readouterr().out
    assert (tmp_path / "e" / R.MARKER).exists()


def test_placeholders_and_example_hosts_are_recognised():
    from course_tools.links import is_placeholder

    for address in (
        "https://github.com/OWNER/x",
        "https://github.com/YOUR-ORG/x",
        "https://hub.example.org/org/x",
        "https://example.com/org/x",
    ):
        assert is_placeholder(Links(address)), address
    for address in (EDITION_URL, "https://github.com/example-school/x", "/srv/git/x"):
        assert not is_placeholder(Links(address)), address


def _log(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


@pytest.mark.parametrize(
    "address",
    ["https://gitlab.com/example-school/attention-workshop.git", "bare"],
)
def test_an_update_is_the_next_commit_on_the_editions_history(tmp_path: Path, address):
    """Day two: the edition rebuilt into its folder keeps its .git and remote and commits on
    top, so a push is a fast-forward and nbgitpuller merges it (it refused unrelated
    histories); any git host, a local bare repository included."""
    bare = tmp_path / "attention-workshop.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    address = str(bare) if address == "bare" else address
    out = tmp_path / "release" / "attention-workshop"
    R.build(ROOT, out, repository=address, make_zip=False, stream=io.StringIO())
    assert Links.load(out).clone_url == address
    subprocess.run(["git", "-C", str(out), "remote", "add", "origin", str(bare)], check=True)
    subprocess.run(["git", "-C", str(out), "push", "-q", "-u", "origin", "main"], check=True)
    first = _log(out)
    (out / "work").mkdir()  # what an instructor may have left there: replaced, like the rest
    said = io.StringIO()
    R.build(ROOT, out, repository=address, make_zip=False, stream=said)
    assert _log(out) == first  # nothing changed: no empty commit
    assert f"git -C {out} push" in said.getvalue() and "remote add" not in said.getvalue()
    readme = (out / "README.md").read_text(encoding="utf-8")
    (out / "README.md").write_text(readme + "\nday two\n", encoding="utf-8")  # a stale file
    R.build(ROOT, out, repository=address, make_zip=False, stream=io.StringIO())
    assert "day two" not in (out / "README.md").read_text(encoding="utf-8")
    assert not (out / "work").exists()
    url = subprocess.run(
        ["git", "-C", str(out), "remote", "get-url", "origin"], capture_output=True, text=True
    )
    assert url.stdout.strip() == str(bare)
    subprocess.run(["git", "-C", str(out), "push", "-q"], check=True)  # a fast-forward
