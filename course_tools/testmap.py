"""Which tests cover which module, read from the tree: one test file per module, at the
mirrored path, and the tests to run after a change.

Every module of ``course_lib/``, ``course_tools/`` and ``tools/`` (``__init__`` and
``__main__`` aside) has its unit tests in ``tests/<the same folders>/test_<module>.py``:
``course_lib/gpt/bpe.py`` is tested by ``tests/course_lib/gpt/test_bpe.py``. The other folders
of ``tests/`` hold what crosses modules (a grading run end to end, the notebooks, the site);
:data:`FOLDERS` says what each holds. ``tests/project/test_test_layout.py`` fails for a module
without its test file, a test folder without a line here, and a ``tests/README.md`` that is not
this module's output.

    python -m course_tools.testmap --write          # rewrite tests/README.md
    python -m course_tools.testmap course_lib/attention.py
        # the tests to run after changing it: its own, and those of every module importing it
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from .course import add_course_argument, course_root

PACKAGES = ("course_lib", "course_tools", "tools")
README = "tests/README.md"

# The folders of tests/ that hold what crosses modules, and what each holds.
FOLDERS = {
    "tests/grader": "`course-grade` end to end: sandboxed grading runs, attacks on the sandbox, "
    "the verdict and the gradebook, sharding at scale, older gradebooks, the instructors' guide "
    "run as written, hidden cases drawn from the seed",
    "tests/notebooks": "the notebooks as files: exercises generated from solutions, opening a "
    "notebook changes nothing, chapter 06 without Triton",
    "tests/learner_tools": "the learner's commands end to end: the course's JupyterLab server, "
    "`make update` on a learner's copy",
    "tests/site": "the website (`make site`), its public address, the hub kit, and the browser "
    "tests (JupyterLab in headless Chromium)",
    "tests/benchmarks": "the scripts under `benchmarks/`, run on small inputs, and the recorded "
    "tables they write",
    "tests/project": "rules of the repository: the layout matches `docs/architecture.md`, every "
    "module has its test file (this map), `course_lib` never imports `course_tools`, one name per "
    "concept, lint and types, clean notebooks",
    "tests/support": "helpers the folders share (not tests), on `sys.path`: `course_lab`, "
    "`browser_lab`, `grading_lab`, `guide_blocks`, `scripts`, `tiny_gguf`, `flash_lab`, `gpt_lab`, "
    "`context_parallel_lab`",
}


# What to run after a change that is not to one module.
OTHER_CHANGES = {
    "a solution notebook": "`make exercises`, then `tests/notebooks` and `make notebooks`",
    "a lecture notebook": "`python -m course_tools.notebook_headers --apply`, then "
    "`tests/notebooks` and its nbval run: `pytest --nbval-lax notebooks/NN_topic.ipynb`",
    "a lecture's assertions": "`python benchmarks/mutation_run.py --lectures NN` (each mutant "
    "must stay killed), then `tests/benchmarks/test_mutation_run.py`",
    "an exercise's texts, `course_lib/checks/chNN.md`": "`tests/course_lib/checks/test_chNN.py`"
    " and `tests/course_lib/checks/test_exercise_contract.py`",
    "the grader's sandbox or its stages": "`tests/course_tools/grading`, then `tests/grader` "
    "(the sandboxed runs are marked `slow`)",
    "`Makefile`, `tools/bootstrap.py`, the release": "`tests/tools`, `tests/course_tools/"
    "test_release.py`, `tests/learner_tools`",
    "a script in `benchmarks/`": "`tests/benchmarks`",
    "a module's place, a name in `docs/notation.md`, a dependency": "`tests/project`",
}


def modules(root: Path | None = None, packages: bool = False) -> list[str]:
    """Every module of the packages, as a path relative to ``root`` (sorted); with
    ``packages``, their ``__init__.py`` files too."""
    root = course_root(root)
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            skip = ("__main__.py",) if packages else ("__init__.py", "__main__.py")
            if path.name in skip or "__pycache__" in path.parts:
                continue
            found.append(path.relative_to(root).as_posix())
    return found


def test_file(module: str) -> str:
    """The mirrored test file of ``module``: ``course_lib/gpt/bpe.py`` ->
    ``tests/course_lib/gpt/test_bpe.py``."""
    path = Path(module)
    return (Path("tests") / path.parent / f"test_{path.name}").as_posix()


def missing_tests(root: Path | None = None) -> list[str]:
    """The modules whose mirrored test file does not exist."""
    root = course_root(root)
    return [m for m in modules(root) if not (root / test_file(m)).is_file()]


def _dotted(module: str) -> str:
    return module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def imported_modules(module: str, root: Path | None = None) -> set[str]:
    """The course modules ``module`` imports (dotted names; relative imports resolved)."""
    root = course_root(root)
    tree = ast.parse((root / module).read_text(encoding="utf-8"))
    package = (
        _dotted(module) if module.endswith("__init__.py") else _dotted(module).rsplit(".", 1)[0]
    )
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def importers(root: Path | None = None) -> dict[str, set[str]]:
    """``{module: the modules that import it, directly or through others}`` (a package's
    ``__init__`` counts as importing what it hands on; it is not listed itself)."""
    root = course_root(root)
    by_name = {_dotted(m): m for m in modules(root, packages=True)}
    direct: dict[str, set[str]] = {m: set() for m in by_name.values()}
    for m in by_name.values():
        for name in imported_modules(m, root):
            target = by_name.get(name) or by_name.get(name.rsplit(".", 1)[0])
            if target and target != m:
                direct[target].add(m)
    closed: dict[str, set[str]] = {}
    for m in direct:
        seen, todo = set(), list(direct[m])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += direct[n]
        closed[m] = {n for n in seen - {m} if not n.endswith("__init__.py")}
    return {m: users for m, users in closed.items() if not m.endswith("__init__.py")}


def tests_for(module: str, root: Path | None = None) -> list[str]:
    """The test files to run after changing ``module``: its own, then those of every module
    that imports it (directly or not)."""
    root = course_root(root)
    others = sorted(importers(root).get(module, set()))
    return [test_file(module)] + [test_file(m) for m in others]


def readme(root: Path | None = None) -> str:
    """``tests/README.md``, written from the tree."""
    root = course_root(root)
    lines = [
        "# The tests: where they are, and what to run after a change",
        "",
        "<!-- Written by `python -m course_tools.testmap --write`; "
        "tests/project/test_test_layout.py checks it. -->",
        "",
        "`make test` runs all of them (what CI runs); `make test-fast` leaves out those marked "
        "`slow` or `browser`.",
        "",
        "Each module has its unit tests at the mirrored path: `course_lib/gpt/bpe.py` is tested "
        "by `tests/course_lib/gpt/test_bpe.py` (a project test fails for a module without one). "
        "After changing a module, run its tests and those of the modules that import it:",
        "",
        "    python -m course_tools.testmap course_lib/attention.py   # prints the pytest line",
        "",
        "| you changed | run |",
        "|---|---|",
        *(f"| {what} | {run} |" for what, run in OTHER_CHANGES.items()),
        "",
        "## What crosses modules",
        "",
        "| folder | what it tests |",
        "|---|---|",
    ]
    lines += [f"| `{folder}/` | {text} |" for folder, text in FOLDERS.items()]
    lines += [
        "",
        "The notebooks themselves (`notebooks/`, `solutions/`) run under nbval in `make test` and "
        "`make notebooks`; a lecture's assertions are checked by the mutation run "
        "(`python benchmarks/mutation_run.py --lectures NN`).",
        "",
        "## Each module, its test file, and the modules that import it",
        "",
        "| module | its tests | imported by (run their tests too) |",
        "|---|---|---|",
    ]
    users = importers(root)
    for m in modules(root):
        by = ", ".join(f"`{Path(u).with_suffix('').as_posix()}`" for u in sorted(users[m])[:8])
        more = len(users[m]) - 8
        by += f" and {more} more" if more > 0 else ""
        lines.append(f"| `{m}` | `{test_file(m)}` | {by or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools.testmap", description=__doc__)
    parser.add_argument("module", nargs="?", help="a module path: print the tests to run")
    parser.add_argument("--write", action="store_true", help=f"rewrite {README}")
    add_course_argument(parser)
    args = parser.parse_args(argv)
    root = course_root(args.course)
    if args.write:
        (root / README).write_text(readme(root), encoding="utf-8")
        print(f"wrote {README}")
        return 0
    if not args.module:
        parser.print_usage()
        return 2
    module = Path(args.module).as_posix().removeprefix("./")
    if module not in modules(root):
        print(f"{module} is not a module of {', '.join(PACKAGES)}", file=sys.stderr)
        return 2
    files = [f for f in tests_for(module, root) if (root / f).is_file()]
    print(" ".join([".venv/bin/python -m pytest -q", *files]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
