"""docs/architecture.md matches the tree, and the old import paths are gone and not used.

The library is laid out by chapter (``course_lib/variants/`` for chapter 08, ...). Modules that
moved kept their old dotted path for one release (0.2, with a warning); 0.3.0 removed those
aliases: an old path no longer imports, and nothing in the course may still name one.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SCANNED = ("course_lib", "course_tools", "tests", "tools", "benchmarks", "notebooks")
SCANNED += ("solutions", "exercises", "docs", "README.md", "CONTRIBUTING.md", "conftest.py")
# Modules that moved when course_lib was laid out by chapter (0.2), old path: new path. 0.3.0
# removed the old paths (CHANGELOG).
MOVED_MODULES: dict[str, str] = {
    # chapter 08: the variants of attention that current models use
    "course_lib.flex": "course_lib.variants.flex",
    "course_lib.mask_mods": "course_lib.variants.mask_mods",
    "course_lib.score_mods": "course_lib.variants.score_mods",
    "course_lib.alibi": "course_lib.variants.alibi",
    "course_lib.sliding_window": "course_lib.variants.sliding_window",
    "course_lib.mla": "course_lib.variants.mla",
    "course_lib.linear_attention": "course_lib.variants.linear_attention",
    # experiments the lectures train and measure (not the library proper)
    "course_lib.recall": "course_lib.experiments.recall",
    "course_lib.coref": "course_lib.experiments.coref",
    "course_lib.extrapolation": "course_lib.experiments.extrapolation",
}
# The table above, and the history of what moved.
ALLOWED_FILES = {
    "tests/project/test_architecture.py",
    "docs/architecture.md",
    "CHANGELOG.md",
}
OLD_SHORT = sorted(m.rsplit(".", 1)[1] for m in MOVED_MODULES)
OLD_DOTTED = re.compile(r"\bcourse_lib\.(" + "|".join(OLD_SHORT) + r")\b")
CHAPTER_CHECK = re.compile(r"course_lib/checks/ch\d\d\.py$")
# a learner-facing module is one a learner reads beside a lecture
LEARNER_MODULE_MAX_LINES = 600
# a function of course_tools (the grader, the generators) a reader follows in one screen or two
TOOL_FUNCTION_MAX_LINES = 80
# a function of the learner's library, the same: a forward pass reads as its maths
LIBRARY_FUNCTION_MAX_LINES = 80
# Long functions being split, each a (path, function name); none left.
LONG_FUNCTIONS_BEING_SPLIT: set[tuple[str, str]] = set()


def _doc_paths() -> set[str]:
    return set(
        re.findall(r"`((?:course_lib|course_tools|tools|benchmarks|tests)/[^`]*)`", DOC.read_text())
    )


def _files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        p = ROOT / name
        out += [p] if p.is_file() else sorted(p.rglob("*"))
    return [
        f
        for f in out
        if f.is_file()
        and f.suffix in (".py", ".ipynb", ".md")
        and "__pycache__" not in f.parts
        and not any(part.startswith(".") for part in f.relative_to(ROOT).parts)
    ]


def _imports_of_old_paths(source: str, module: str | None) -> list[tuple[int, str]]:
    """(line, old path) for every import statement that names a moved module."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # notebook magics, exercise placeholders
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and module:  # relative: resolve against the importing module
                parts = module.split(".")[: -node.level]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
            found += [(node.lineno, n) for n in names if n in MOVED_MODULES]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name in MOVED_MODULES]
    return found


def _old_path_uses(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    if rel in ALLOWED_FILES or rel.startswith("docs/releases/"):  # the history of names
        return []
    text = path.read_text(encoding="utf-8")
    module = None
    if rel.startswith("course_lib/") and path.suffix == ".py":
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
    chunks = [(rel, text, path.suffix == ".py")]
    if path.suffix == ".ipynb":
        chunks = []
        for i, cell in enumerate(json.loads(text)["cells"]):
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            chunks.append((f"{rel} cell {i}", src, cell["cell_type"] == "code"))
    bad = []
    for where, src, is_py in chunks:
        for lineno, line in enumerate(src.splitlines(), 1):
            if m := OLD_DOTTED.search(line):
                bad.append(f"{where}:{lineno}: {m.group(0)}")
        if is_py:
            bad += [f"{where}:{n}: imports {old}" for n, old in _imports_of_old_paths(src, module)]
    return sorted(set(bad))


def test_no_old_module_path_in_the_course():
    bad = [v for f in _files() for v in _old_path_uses(f)]
    assert not bad, (
        "old module paths (removed in 0.3.0; MOVED_MODULES above gives the new ones):\n"
        + "\n".join(bad[:40])
    )


@pytest.mark.parametrize(
    "snippet, caught",
    [
        ("from course_lib import mask_mods as M\n", True),
        ("from course_lib.variants import mask_mods as M\n", False),
        ("import course_lib.coref\n", True),
        ("x = 1  # see course_lib.alibi\n", True),
        ("from course_lib.experiments.recall import train\n", False),
    ],
)
def test_the_scan_finds_old_paths(snippet, caught):
    probe = ROOT / "tests" / "_architecture_probe.py"
    try:
        probe.write_text(snippet)
        assert bool(_old_path_uses(probe)) is caught
    finally:
        probe.unlink(missing_ok=True)


def test_a_relative_import_of_an_old_path_is_found():
    # inside course_lib/checks/ch08.py, `from ..alibi import x` means course_lib.alibi
    assert _imports_of_old_paths("from ..alibi import x\n", "course_lib.checks.ch08")
    assert not _imports_of_old_paths("from ..variants.alibi import x\n", "course_lib.checks.ch08")


def test_the_old_paths_are_gone_and_the_new_ones_import():
    # a fresh interpreter: nothing imported yet, no alias left in sys.modules by another test
    code = """
import importlib, json, sys
import course_lib
out = {}
for old, new in json.loads(sys.argv[1]).items():
    importlib.import_module(new)
    try:
        importlib.import_module(old)
        out[old] = "imports"
    except ModuleNotFoundError:
        out[old] = "gone"
    if hasattr(course_lib, old.rsplit(".", 1)[1]):
        out[old] = "an attribute of course_lib"
print(json.dumps(out))
"""
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(MOVED_MODULES)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == dict.fromkeys(MOVED_MODULES, "gone")


def _modules(package: str) -> list[str]:
    return sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / package).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def test_the_architecture_page_names_every_learner_module():
    listed = _doc_paths()
    missing = []
    for rel in _modules("course_lib"):
        if CHAPTER_CHECK.search(rel):
            ok = "course_lib/checks/chNN.py" in listed
        elif rel.endswith("/__init__.py") and rel.count("/") > 1:  # a subpackage's face
            ok = rel in listed or rel.removesuffix("__init__.py") in listed
        else:
            ok = rel in listed
        if not ok:
            missing.append(rel)
    assert not missing, f"docs/architecture.md has no line for {missing}"


def test_the_architecture_page_names_every_tool():
    listed = _doc_paths()
    wanted = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "course_tools").glob("*.py"))]
    wanted += [
        p.relative_to(ROOT).as_posix() + "/"
        for p in sorted((ROOT / "course_tools").iterdir())
        if p.is_dir() and p.name != "__pycache__"
    ]
    wanted = [w for w in wanted if not w.endswith("__init__.py")]
    missing = [w for w in wanted if w not in listed]
    assert not missing, f"docs/architecture.md has no line for {missing}"


def _chapters(text: str) -> set[str]:
    return set(re.findall(r"\b(\d{2})\b", text))


def test_each_folders_chapters_include_its_modules_chapters():
    """A folder's heading ("### `course_lib/gpt/` (chapters 07, 10 and 11)") and its row in
    the top table name every chapter its modules' lines start with ("chapter 11: ...")."""
    text = DOC.read_text()
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    checked = 0
    for section in sections:
        head = re.match(r"`(course_lib/[^`]+/)` \(chapters? ([^)]*)\)", section)
        if not head:
            continue
        folder, listed = head.group(1), _chapters(head.group(2))
        named = set()
        for line in section.splitlines():
            lead = re.match(r"\| `[^`]+` \| chapters? ([\d, and]+)[:\s]", line)
            if lead:
                named |= _chapters(lead.group(1))
        assert named <= listed, f"{folder}: its modules serve chapters {sorted(named - listed)}"
        row = re.search(rf"^\| `{re.escape(folder)}` \| ([^|]*) \|", text, re.M)
        if row:
            assert _chapters(row.group(1)) >= listed, f"{folder}: the top table lists fewer"
        checked += 1
    assert checked >= 4


def test_every_path_on_the_architecture_page_exists():
    gone = [
        p
        for p in sorted(_doc_paths())
        if p not in ("course_lib/checks/chNN.py", "course_lib/checks/chNN.md")
        and not (ROOT / p).exists()
    ]
    assert not gone, f"docs/architecture.md names paths that do not exist: {gone}"


def test_no_learner_module_is_longer_than_a_reader_can_hold():
    # The library a lecture sends its reader to (chapters, experiments, widgets, foundation),
    # and the exercises' checks: a chapter's references with their slips, and its cases.
    long = {
        rel: n
        for rel in _modules("course_lib")
        if (n := len((ROOT / rel).read_text().splitlines())) >= LEARNER_MODULE_MAX_LINES
    }
    assert not long, f"modules of {LEARNER_MODULE_MAX_LINES} lines or more: {long}"


def _long_functions(rel: str, limit: int, skip=lambda node: False) -> list[str]:
    """``"path:line name (n lines)"`` for each function (or method, or nested function) of
    ``rel`` over ``limit`` lines, counted from its ``def`` line to its last line: docstring,
    comments and blank lines included, decorators not."""
    long = []
    for node in ast.walk(ast.parse((ROOT / rel).read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not skip(node):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                long.append(f"{rel}:{node.lineno} {node.name} ({n} lines)")
    return long


def _is_triton_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated ``@triton.jit`` (or ``@triton.autotune``, ``@triton.heuristics`` on top)."""
    return any(ast.unparse(d).startswith("triton.") for d in node.decorator_list)


def test_no_function_of_the_library_is_longer_than_a_reader_can_follow():
    # Every module of course_lib, the chapter check files included (their cases and wrong
    # twins are many short functions; nothing there comes near the limit). Left out: the
    # Triton kernels (a @triton.jit function is one GPU program; its @triton.jit helpers are
    # already inlined pieces, and the generated code it compiles to is what chapter 06
    # measures), and LONG_FUNCTIONS_BEING_SPLIT.
    long = []
    for rel in _modules("course_lib"):
        long += [
            f
            for f in _long_functions(rel, LIBRARY_FUNCTION_MAX_LINES, _is_triton_kernel)
            if (rel, f.split()[1]) not in LONG_FUNCTIONS_BEING_SPLIT
        ]
    assert not long, f"functions over {LIBRARY_FUNCTION_MAX_LINES} lines: {long}"


def test_the_library_length_scan_counts_what_it_says(tmp_path, monkeypatch):
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "course_lib").mkdir()
    (tmp_path / "course_lib" / "m.py").write_text(
        f"def short():\n{body}\n\n\n@triton.jit\ndef kernel():\n{body}\n    x = 0\n"
        f"\n\ndef long():\n{body}\n    x = 0\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _long_functions("course_lib/m.py", 80) == [
        "course_lib/m.py:84 kernel (81 lines)",
        "course_lib/m.py:167 long (81 lines)",
    ]
    assert _long_functions("course_lib/m.py", 80, _is_triton_kernel) == [
        "course_lib/m.py:167 long (81 lines)"
    ]


def test_no_function_of_the_tools_is_longer_than_a_reader_can_follow():
    # the grader's stages (rebuild, run, harvest, score, report) each in a function of its own;
    # the benchmark scripts and tools/ too
    scripts = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "benchmarks").glob("*.py"))]
    scripts += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "tools").glob("*.py"))]
    long = [
        f
        for rel in _modules("course_tools") + scripts
        for f in _long_functions(rel, TOOL_FUNCTION_MAX_LINES)
    ]
    assert not long, f"functions over {TOOL_FUNCTION_MAX_LINES} lines: {long}"
