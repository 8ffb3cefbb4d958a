"""The learner's edition of the course: everything a learner needs, nothing a graded one
should not see.

    make release                                   # build/release/ and build/release.zip
    make release RELEASE_DIR=~/workshop            # another folder
    python -m course_tools.release OUT [--repository https://github.com/ME/NAME] [--branch B]

The edition holds the lectures (``notebooks/``), the exercises (``exercises/``, generated
without solutions or hidden tests), the learner's library ``course_lib/``, the set-up files
(its own ``Makefile``, ``pyproject.toml``, ``environment.yml``, ``postBuild``, the JupyterLab
defaults, ``tools/bootstrap.py`` and ``tools/learner_files.py``), the recorded benchmark
results chapter 06 plots, and the notation and conventions pages. It has no ``solutions/``,
no grader (``course_tools/``), no tests and no changelog of hidden cases; it *does* hold the
checks' reference implementations and case generators (what the check cells compare with),
and the build says so (:func:`answers_inside`). ``OUT`` becomes a
git repository with one commit (push it where learners clone from), and ``OUT.zip`` is the
same files for a download.

``--repository`` (and ``--branch``) is where the edition will live: its Colab cells, its
Binder link and its pyproject point there. Without it the edition keeps the course's own
address, which must not be the ``OWNER`` placeholder (the build fails and says so).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat

from .course import CourseRootError, course_commit, course_root
from .links import Links, load_toml, release_address_problem

MARKER = ".course-edition"  # in every edition; a folder with it may be rebuilt in place

# What the edition takes from the course (tracked files under these paths).
INCLUDE = (
    "course_lib/",
    "notebooks/",
    "exercises/",
    ".jupyter/",
    "benchmarks/results/",
    "docs/notation.md",
    "docs/conventions.md",
    "tools/bootstrap.py",
    "tools/learner_files.py",
    "environment.yml",
    "postBuild",
    "LICENSE",
    "LICENSE-CONTENT",
)
# What must never be in it (checked after the copy, whatever INCLUDE says).
FORBIDDEN_PATHS = ("solutions/", "course_tools/", "tests/", "CHANGELOG.md")
FORBIDDEN_TEXT = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


class ReleaseError(ValueError):
    """The edition cannot be built as asked (the message says why and what to do)."""


def tracked_files(root: Path) -> list[str]:
    """The course's files as git tracks them (a build never ships a stray local file);
    every file under ``root`` when it is not a git checkout."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z"],
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        proc = None
    if proc is not None and proc.returncode == 0 and proc.stdout:
        names = [n for n in proc.stdout.decode("utf-8").split("\0") if n]
        return sorted(n for n in names if (root / n).is_file())
    return sorted(
        str(p.relative_to(root)).replace(os.sep, "/")
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts and ".venv" not in p.parts
    )


def selected(names: list[str]) -> list[str]:
    """The files of the edition among ``names``."""
    return [
        n
        for n in names
        if n.startswith(INCLUDE) and "__pycache__" not in n and ".ipynb_checkpoints" not in n
    ]


# --------------------------------------------------------------------------- generated files

MAKEFILE = """\
# The learner's edition of the course. Each command creates .venv on first use.
#   make lab        set up and open the course in JupyterLab (your exercise copies: work/)
#   make progress   where you stand: every exercise passed, failing (and why), not started
#   make update     the new version of the course (git pull), keeping everything you changed
#   make submit     hand in your started exercise copies (on a hub that sets COURSE_SUBMIT)
#   make test       run every lecture and exercise notebook (adds pytest and nbval)
# `make lab` picks the PyTorch that fits the machine (the CPU build on Linux without an
# NVIDIA driver); TORCH=cpu|cuda|default overrides it, also later to switch.
# No make (e.g. Windows)? `python3 tools/bootstrap.py lab` does the same.

PYTHON ?= python3
JOBS ?= 2
export JOBS
BOOT = @command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: '$(PYTHON)' was not found. \\
Install Python 3.10 or newer (python.org, brew install python@3.12, sudo apt install python3 \\
python3-venv) or name one: make $@ PYTHON=/path/to/python3"; exit 1; }; \\
\t$(PYTHON) tools/bootstrap.py

.PHONY: lab test setup progress update submit clean

lab:
\t$(BOOT) lab

test:
\t$(BOOT) test

setup:
\t$(BOOT) setup

progress:
\t$(BOOT) progress

update:
\t$(BOOT) update

submit:
\t$(BOOT) submit

clean:
\trm -rf build test-output .pytest_cache
"""

GITIGNORE = """\
.venv/
__pycache__/
*.egg-info/
.pytest_cache/
.ipynb_checkpoints/
test-output/
build/
work/
"""


def pyproject(source: dict, links: Links) -> str:
    """The edition's pyproject.toml: the course's dependencies, course_lib only, no grader's
    commands; its test extra runs the notebooks."""
    project = source["project"]
    test_extra = [
        r
        for r in project.get("optional-dependencies", {}).get("test", [])
        if re.match(r"(pytest|pytest-xdist|nbval)\b", r)
    ]

    def toml_list(items: list[str]) -> str:
        return "[\n" + "".join(f"    {_toml_str(i)},\n" for i in items) + "]"

    return f"""\
# The learner's edition of {project["name"]} (built by `make release` from the course).
[build-system]
requires = {toml_list(source["build-system"]["requires"])}
build-backend = "{source["build-system"]["build-backend"]}"

[project]
name = "course_lib"
dynamic = ["version"]
description = {_toml_str(project.get("description", ""))}
requires-python = {_toml_str(project.get("requires-python", ">=3.10"))}
license = {_toml_str(project.get("license", "MIT"))}
dependencies = {toml_list(project["dependencies"])}

[project.optional-dependencies]
test = {toml_list(test_extra)}

[project.urls]
Repository = "{links.repository}"

[tool.course]
branch = "{links.branch}"
edition = "learner"

[tool.setuptools.packages.find]
include = ["course_lib*"]

[tool.setuptools.dynamic]
version = {{ attr = "course_lib.__version__" }}

[tool.setuptools.package-data]
course_lib = ["data/*.pt"]

[tool.pytest.ini_options]
addopts = "-ra"
filterwarnings = ["ignore::DeprecationWarning:jupyter_client.*"]
"""


def _toml_str(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def readme(root: Path, links: Links) -> str:
    """The edition's README: the course map and how the course works, from the course's."""
    text = (root / "README.md").read_text(encoding="utf-8")
    course_map = _section(text, "## Course map")
    how = _section(text, "## How the course works")
    cpu_gpu = _section(text, "## CPU and GPU")
    how = re.sub(
        r"\(`exercises/NN_topic\.ipynb`, with worked solutions in `solutions/NN_topic\.ipynb`\)",
        "(`exercises/NN_topic.ipynb`)",
        how,
    )
    how = re.sub(
        r"Stuck\? Compare with `solutions/`\.",
        "Stuck? Read the check's hint again, or ask your instructor.",
        how,
    )
    return f"""\
# Attention, from RNNs to FlashAttention: the learner's edition

An open course that builds Transformer self-attention from first principles to a working
FlashAttention kernel in Triton: a lecture notebook and an exercise notebook per chapter,
whose check cells tell you at once what is right and what is wrong. This edition has no
worked solutions: your instructor grades your exercises.

## Quick start

```bash
git clone {links.clone_url}
cd {links.folder}
make lab        # set up .venv (first run only) and open the course in JupyterLab
make progress   # where you stand: every exercise passed, failing (and why) or not started
```

You need Python 3.10 or newer and `make`. `make lab` installs what the course needs into
`.venv` (the first time only, a few minutes) and picks the PyTorch that fits your machine:
on Linux without an NVIDIA driver the CPU-only build. `make lab TORCH=cpu` (or `cuda`,
`default`) chooses another, also later to switch. Your own copies of the exercises are in
`work/`. No `make` (Windows)? `python3 tools/bootstrap.py lab` does the same.
`make update` brings a new version of the course without touching your work;
`make test` runs every notebook. On Colab or Binder: the badges of the course map below.

{course_map.rstrip()}

{how.rstrip()}

{cpu_gpu.rstrip()}
"""


def _section(text: str, heading: str) -> str:
    """The README's section under ``heading`` (up to the next heading of its level)."""
    start = text.find(heading + "\n")
    if start < 0:
        raise ReleaseError(f"README.md has no section {heading!r}, which the edition copies")
    level = heading.split(" ")[0]
    rest = text[start + len(heading) + 1 :]
    end = re.search(rf"^{level} ", rest, re.M)
    return heading + "\n" + (rest[: end.start()] if end else rest)


def retarget_notebooks(out: Path, links: Links) -> None:
    """Point the Colab cell of every edition notebook at the edition's address."""
    from .notebook_headers import COLAB_ID, colab_source

    for path in sorted((out / "notebooks").glob("*.ipynb")) + sorted(
        (out / "exercises").glob("*.ipynb")
    ):
        nb = nbformat.read(path, as_version=4)
        changed = False
        for cell in nb.cells:
            if cell.get("id") == COLAB_ID:
                new = colab_source(links, path.name[:2])
                changed |= cell.source != new
                cell.source = new
        if changed:
            text = nbformat.writes(nb, version=4)
            path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- checks


def leaks(out: Path) -> list[str]:
    """What in the edition a graded learner must not see: solution or hidden-test cells,
    the solutions folder, the grader. Empty when the edition is clean."""
    found = []
    for path in sorted(out.rglob("*")):
        rel = str(path.relative_to(out)).replace(os.sep, "/")
        if rel.startswith(".git/") or rel == ".git":
            continue
        if rel.startswith(FORBIDDEN_PATHS) or rel in ("solutions", "course_tools", "tests"):
            found.append(f"{rel}: not part of the learner's edition")
            continue
        if path.is_file() and path.suffix in (".ipynb", ".py", ".md", ".toml", ".yml", ""):
            text = path.read_text(encoding="utf-8", errors="replace")
            for marker in FORBIDDEN_TEXT:
                if marker in text:
                    found.append(f"{rel}: contains {marker!r}")
    return found


# --------------------------------------------------------------------------- the build


def _git(out: Path, *args: str) -> None:
    env = dict(os.environ)
    env.setdefault("GIT_AUTHOR_NAME", "course release")
    env.setdefault("GIT_AUTHOR_EMAIL", "release@localhost")
    env.setdefault("GIT_COMMITTER_NAME", env["GIT_AUTHOR_NAME"])
    env.setdefault("GIT_COMMITTER_EMAIL", env["GIT_AUTHOR_EMAIL"])
    subprocess.run(
        ["git", "-C", str(out), *args],
        check=True,
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def build(
    root: str | Path,
    out: str | Path,
    repository: str | None = None,
    branch: str | None = None,
    git: bool = True,
    make_zip: bool = True,
    stream=sys.stdout,
    dry_run: bool = False,
) -> Path:
    """Build the learner's edition of the course at ``root`` into the folder ``out``
    (``dry_run``: a placeholder address is only warned about). Into an edition built
    before, it is an update: everything but ``.git`` is replaced and the change committed
    on top of the edition's history (its remote kept), so learners' clones and
    nbgitpuller merge it as the next commit."""
    root = Path(root).resolve()
    out = Path(out).expanduser().resolve()
    inside = out == root or root in out.parents
    if inside and (root / "build") not in out.parents:
        raise ReleaseError(
            f"{out} is inside the course itself: choose a folder under build/ or outside it"
        )
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ReleaseError(
            f"{out} exists and is not a learner's edition: choose an empty or new folder "
            "(RELEASE_DIR=...)"
        )
    course = Links.load(root)
    links = _address(course, repository, branch, dry_run, stream)
    _empty_but_history(out)
    files = selected(tracked_files(root))
    for name in files:
        dst = out / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dst)
    source = load_toml(root / "pyproject.toml")
    (out / "pyproject.toml").write_text(pyproject(source, links), encoding="utf-8")
    (out / "Makefile").write_text(MAKEFILE, encoding="utf-8")
    from .notebook_headers import readme_text  # the course map's badges: the edition's

    (out / "README.md").write_text(readme_text(readme(root, links), links), encoding="utf-8")
    (out / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
    (out / MARKER).write_text(
        f"learner's edition of {course.repository} at {course_commit(root)}\n", encoding="utf-8"
    )
    retarget_notebooks(out, links)
    found = leaks(out)
    if found:
        raise ReleaseError("the edition would leak:\n  " + "\n  ".join(found))
    if git:
        _commit(out, links, course_commit(root))
    if make_zip:
        archive = out.with_name(out.name + ".zip")
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(out.rglob("*")):
                rel = path.relative_to(out)
                if path.is_file() and rel.parts[0] != ".git":
                    zf.write(path, str(Path(out.name) / rel))
    _say(out, links, git, make_zip, stream)
    return out


def _empty_but_history(out: Path) -> None:
    """``out`` made (or emptied of everything but its ``.git``, an edition's history)."""
    out.mkdir(parents=True, exist_ok=True)
    for child in out.iterdir():
        if child.name == ".git":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _commit(out: Path, links: Links, commit: str) -> None:
    """The edition committed: a first commit, or the next one on its history (nothing when
    nothing changed)."""
    if not (out / ".git").exists():
        _git(out, "init", "-q", "-b", links.branch)
    _git(out, "add", "-A")
    changed = subprocess.run(
        ["git", "-C", str(out), "diff", "--cached", "--quiet"], stdin=subprocess.DEVNULL
    )
    has_head = subprocess.run(
        ["git", "-C", str(out), "rev-parse", "-q", "--verify", "HEAD"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    if changed.returncode != 0 or has_head.returncode != 0:
        _git(out, "commit", "-q", "-m", f"Learner's edition ({commit})")


def _address(course: Links, repository, branch, dry_run: bool, stream) -> Links:
    """The edition's address: a GitHub one, never a placeholder unless ``dry_run``."""
    links = Links.of(
        repository or course.repository,
        branch or (course.branch if repository is None else "main"),
    )  # (any git address, or a clear error)
    msg = release_address_problem(links.repository)
    if msg:
        if not dry_run:
            raise ReleaseError(msg + "; --dry-run builds it anyway, for a look")
        print(f"dry run, not for learners: {msg}", file=stream)
    return links


def _say(out: Path, links, git: bool, make_zip: bool, stream) -> None:
    """What was built, and what in it can answer an exercise."""
    n = sum(1 for p in out.rglob("*") if p.is_file() and ".git" not in p.relative_to(out).parts)
    print(
        f"The learner's edition: {out} ({n} files; no solutions/, no hidden-test cells, no grader)",
        file=stream,
    )
    print("  " + answers_inside(out), file=stream)
    if make_zip:
        print(f"  zip: {out.with_name(out.name + '.zip')}", file=stream)
    if git and _has_origin(out):
        print(f"  git: a commit on the edition's history; push it: git -C {out} push", file=stream)
    elif git:
        print(
            f"  git: push it where learners clone from: git -C {out} remote add origin "
            f"{links.clone_url} && git -C {out} push -u origin {links.branch}",
            file=stream,
        )


def _has_origin(out: Path) -> bool:
    found = subprocess.run(
        ["git", "-C", str(out), "remote", "get-url", "origin"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    return found.returncode == 0


def answers_inside(out: Path) -> str:
    """What in the edition can still answer an exercise, said plainly: the visible checks
    compare with a reference implementation of every exercise, and the library implements
    what many exercises ask (the grader's hidden inputs come from its secret seed, which
    the edition does not hold)."""
    import re

    checks = sorted((out / "course_lib" / "checks").glob("ch*.py"))
    exercises = sum(len(re.findall(r"^exercise\(", f.read_text(), re.M)) for f in checks)
    return (
        f"it does hold answers: course_lib/checks has a reference implementation of each of "
        f"its {exercises} exercises (what the check cells compare with, in {len(checks)} "
        "files) and the generators of the cases; course_lib implements much of what the "
        "exercises ask. None of the checks reaches the grader's kernel (its course_lib has no "
        "course_lib/checks/chNN.py or chNN.md), the grader draws its hidden inputs from a secret seed the "
        "edition lacks, and review.csv flags code that calls the course's implementations"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.release",
        description="Build the learner's edition of the course (no solutions, no hidden "
        "tests, no grader): a folder, a zip beside it and a git repository in it.",
    )
    parser.add_argument("out", type=Path, nargs="?", default=Path("build/release"))
    parser.add_argument("--course", type=Path, default=None, metavar="ROOT")
    parser.add_argument(
        "--repository",
        default=os.environ.get("RELEASE_REPOSITORY") or None,
        help="where the edition will live, any git address (https://github.com/OWNER/NAME, "
        "https://gitlab.example/ORG/NAME, git@host:ORG/NAME.git, /srv/NAME.git): its clone, "
        "nbgitpuller, Colab (GitHub) and Binder (https) links point there (default: the "
        "course's own address)",
    )
    parser.add_argument("--branch", default=os.environ.get("RELEASE_BRANCH") or None)
    parser.add_argument("--no-git", action="store_true", help="no git repository in OUT")
    parser.add_argument("--no-zip", action="store_true", help="no OUT.zip")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="build even with a placeholder address (OWNER, YOUR-ORG, an example host)",
    )
    args = parser.parse_args(argv)
    try:
        root = course_root(args.course)
        out = args.out if args.out.is_absolute() else Path.cwd() / args.out
        build(
            root,
            out,
            args.repository,
            args.branch,
            not args.no_git,
            not args.no_zip,
            stream=sys.stdout,
            dry_run=args.dry_run,
        )
    except (CourseRootError, ReleaseError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
