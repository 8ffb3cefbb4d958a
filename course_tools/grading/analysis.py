"""Reading the learner's code without running it: the names a cell defines, its tokens
with names and layout set aside (to find copies), and the patterns that deserve a human
look (:data:`SUSPICIOUS`, :func:`reaching`). Nothing here changes a grade by itself."""

from __future__ import annotations

import ast
import difflib
import functools
import json
import re
import textwrap
from pathlib import Path
from typing import TypeGuard

from ..exercises import BEGIN_SOLUTION, END_SOLUTION

# Patterns in a learner's solution cell that deserve a human look. They change no grade
# (the verdict is decided in the grader's process, so tampering cannot pass anything); they
# point at attempts to reach the grading machinery, the reference answers or the kernel.
SUSPICIOUS: list[tuple[str, str]] = [
    (
        r"course_lib\s*\.\s*checks|from\s+course_lib\s+import\s+[^\n]*\bchecks\b"
        r"|\bcourse_tools\b",
        "imports the course's checks or grading code",
    ),
    # no solution cell of the course needs course_lib: its modules hold the answers
    (r"\bcourse_lib\b", "uses the course's library (which implements the answers)"),
    (
        r"\b(get_exercise|all_exercises|_REGISTRY|harvest|compare_values|evaluate_case|run_case)\b",
        "uses the checking machinery",
    ),
    (r"\b\w*_reference\b|\.reference\b", "uses a reference implementation"),
    (
        r"\b(get_ipython|_ih|_oh|sys\.modules|__builtins__|builtins|importlib|ctypes|gc"
        r"|sys\._getframe|_current_frames|inspect|currentframe|f_back|f_locals|f_globals|tb_frame"
        r"|extract_stack|settrace|setprofile)\b|\bIn\s*\[|\bOut\s*\["
        r"|\b(globals|vars|locals)\s*\(",
        "inspects or patches the interpreter",
    ),
    (
        r"\bos\.(_exit|kill|killpg|fork|system|exec\w*)\b|\bsubprocess\b|\bsignal\.|\bsys\.exit\b",
        "manipulates processes",
    ),
    (r"(?<![.\w])(exec|eval|compile|__import__)\s*\(", "runs code built at run time"),
    (
        r"\b(pkgutil|runpy|resolve_name|import_module|find_spec|spec_from_file_location"
        r"|zipimport|SourceFileLoader)\b",
        "reaches a module by a name or path given as text",
    ),
    (
        r"\bsolutions\b|\.ipynb\b|ipynb|\.grader-seed|__file__|/proc/|\bopen\s*\(|read_text"
        r"|read_bytes|\bos\.(listdir|walk|scandir)|\bglob\b",
        "reads files (notebooks, the course's solutions or the grader's)",
    ),
]


# The most characters of one cell the grader parses: Python's parser takes hundreds of bytes
# of memory per byte of code (about 630 for `a=1` lines), and no solution needs more than a
# few thousand characters. A longer cell is not parsed (nor run: see the plan).
MAX_PARSED_CHARS = 200_000


def _parse(source: str):
    """The AST of a cell (IPython magics and shell lines blanked), or None (unparsable, or
    longer than :data:`MAX_PARSED_CHARS`)."""
    if len(source) > MAX_PARSED_CHARS:
        return None
    lines = [
        "" if line.lstrip().startswith(("%", "!", "?")) else line for line in source.splitlines()
    ]
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def defined_names(source: str) -> set[str]:
    """Names a cell binds at its top level (def, class, assignment, import)."""
    return set(_defined_names(source))


@functools.lru_cache(maxsize=2048)
def _defined_names(source: str) -> frozenset[str]:
    """(:func:`defined_names`, read once per cell: the plan asks about every cell for
    every exercise.)"""
    tree = _parse(source)
    if tree is None:
        # (spaces and tabs only: `\s*` after `^` may rescan every blank line)
        return frozenset(re.findall(r"^[ \t]*def[ \t]+(\w+)[ \t]*\(", source, re.M))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add(a.asname or a.name.split(".")[0])
    return frozenset(names)


def _strip_docstrings(tree) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]


_ENDS_BLOCK = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _live(body: list) -> list:
    """A block without the statements that do nothing: ``pass``, bare constants, the
    branches of ``if False``/``while 0``, and whatever follows a return, raise, break or
    continue."""
    out = []
    for stmt in body:
        if isinstance(stmt, ast.Pass) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        ):
            continue
        if isinstance(stmt, (ast.If, ast.While)) and isinstance(stmt.test, ast.Constant):
            if not stmt.test.value:
                out += stmt.orelse
                continue
            if isinstance(stmt, ast.If):
                out += stmt.body
                continue
        out.append(stmt)
        if isinstance(stmt, _ENDS_BLOCK):
            break
    return out


def _remove_dead_code(tree) -> None:
    """Strip, in place, what changes nothing the code computes: docstrings, the statements
    of :func:`_live`, and assignments to plain names that nothing ever reads (repeated
    until none is left). Iterative (``ast.walk``), whatever the depth of the tree."""
    _strip_docstrings(tree)
    for _ in range(10):
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    kept = _live(block)
                    setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
        read = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        removed = False
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if not (isinstance(block, list) and block and isinstance(block[0], ast.stmt)):
                    continue
                kept = [st for st in block if not _unread_assignment(st, read)]
                if len(kept) != len(block):
                    removed = True
                    setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
        if not removed:
            break


def _unread_assignment(stmt, read: set[str]) -> bool:
    """``x = …`` or ``x: T = …`` (plain names only) where no code reads ``x``."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    else:
        return False
    return all(isinstance(t, ast.Name) and t.id not in read for t in targets)


MAX_TOKENS = 50_000  # a cell longer than this is compared by its first tokens only


def canonical_tokens(source: str) -> list[str]:
    """The code as a token list that ignores names, comments, docstrings, dead code and
    layout: every name the code binds (arguments, variables, helper functions) becomes
    ``v0``, ``v1``, … in order of first appearance; names it only reads (``np``, ``torch``)
    are kept. Identifiers are read as Python reads them (NFKC: full-width letters are
    ASCII). An explicit stack, not recursion: any depth of expression is walked."""
    tree = _parse(source)
    if tree is None:
        return []
    _remove_dead_code(tree)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    rename: dict[str, str] = {}

    def name(n: str) -> str:
        if n not in bound:
            return n
        return rename.setdefault(n, f"v{len(rename)}")

    out: list[str] = []
    stack = [tree]
    while stack and len(out) < MAX_TOKENS:
        node = stack.pop()
        out.append(type(node).__name__)
        if isinstance(node, ast.Name):
            out.append(name(node.id))
        elif isinstance(node, ast.arg):
            out.append(name(node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(name(node.name))
        elif isinstance(node, ast.Attribute):
            out.append("." + node.attr)
        elif isinstance(node, ast.Constant):
            out.append(repr(node.value)[:40])
        elif isinstance(node, ast.keyword):
            out.append(f"{node.arg}=")
        children = [
            c
            for c in ast.iter_child_nodes(node)
            if not isinstance(c, (ast.Load, ast.Store, ast.Del))
        ]
        stack.extend(reversed(children))  # pre-order, children left to right
    return out


# A solution region this small is what the statement dictates: everyone writes it the same.
COPY_MIN_STATEMENTS = 4


COPY_MIN_NODES = 60


COPY_SIMILARITY = 0.95


def solution_region(source: str) -> str:
    """The code between the solution markers (what the learner writes)."""
    out, inside = [], False
    for line in source.splitlines():
        if line.strip() == BEGIN_SOLUTION:
            inside = True
        elif line.strip() == END_SOLUTION:
            inside = False
        elif inside:
            out.append(line)
    return textwrap.dedent("\n".join(out))


def dictated(reference_cell: str) -> bool:
    """True when the course's solution region is too small to tell a copy from an honest
    answer (a one-liner, or a few lines the statement spells out)."""
    tree = _parse(solution_region(reference_cell))
    if tree is None:
        return True
    statements = sum(isinstance(n, ast.stmt) for n in ast.walk(tree))
    nodes = sum(1 for _ in ast.walk(tree))
    return statements < COPY_MIN_STATEMENTS or nodes < COPY_MIN_NODES


def similarity(a: str, b: str) -> float:
    """How alike two cells are once names and layout are set aside (0 to 1)."""
    ta, tb = canonical_tokens(a), canonical_tokens(b)
    if not ta or not tb:
        return 0.0
    upper = 2 * min(len(ta), len(tb)) / (len(ta) + len(tb))  # what the lengths allow
    if upper < COPY_SIMILARITY:  # (no quadratic comparison of a long cell with a short one)
        return upper
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def course_imports(cells) -> dict[str, str]:
    """{name: what it is} for the names the course's own cells import from course_lib
    (modules: ``R`` → ``course_lib.rnn``; functions: ``apply_rope`` → its module)."""
    found: dict[str, str] = {}
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        tree = _parse(cell.get("source", ""))
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_lib"):
                for a in node.names:
                    found[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("course_lib"):
                        found[a.asname or a.name.split(".")[0]] = a.name
    for harmless in ("env", "check"):
        found.pop(harmless, None)
    return found


def references_used(source: str, names: dict[str, str]) -> set[str]:
    """The course-imported names (``R.rnn_forward``, ``apply_rope``) a cell reads."""
    tree = _parse(source)
    if tree is None:
        return {n for n in names if re.search(rf"\b{re.escape(n)}\b", source)}
    used: set[str] = set()
    attrs = set()
    for node in ast.walk(tree):
        base, attr = _named_attribute(node)
        if base is not None and base.id in names:
            used.add(f"{base.id}.{attr}")
            attrs.add(id(base))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and node.id in names
            and isinstance(node.ctx, ast.Load)
            and id(node) not in attrs
        ):
            used.add(node.id)
    return used


# Attributes that lead from any function or module to everything it can see.
REACHING_ATTRIBUTES = frozenset(
    {
        "__globals__",
        "__dict__",
        "__closure__",
        "__code__",
        "__builtins__",
        "__subclasses__",
        "__wrapped__",
        "__func__",
        "__self__",
        "__getattribute__",
        "f_globals",
        "f_locals",
        "co_consts",
        "__loader__",
        "__spec__",
    }
)


_BY_NAME = ("getattr", "setattr", "delattr", "hasattr", "vars", "globals", "locals")


def _named_attribute(node):
    """(the name, the attribute) of ``R.f``, ``getattr(R, "f")`` or ``R.__dict__["f"]``,
    else (None, None)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value, node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[0], ast.Name)
        and _constant(node.args[1])
    ):
        return node.args[0], str(node.args[1].value)
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "__dict__"
        and isinstance(node.value.value, ast.Name)
        and _constant(node.slice)
    ):
        return node.value.value, str(node.slice.value)
    return None, None


def suspicious(source: str) -> list[str]:
    """Learner-code patterns worth a human look (see SUSPICIOUS), read as Python reads the
    code: NFKC-normalised (full-width letters are ASCII to Python), plus what only the
    syntax tree shows (:func:`reaching`). The patterns are linear in the source's length."""
    import unicodedata

    text = unicodedata.normalize("NFKC", source)
    found = []
    for pattern, what in SUSPICIOUS:
        m = re.search(pattern, text)
        if m:
            found.append(f"{what} (`{m.group(0).strip()[:60]}`)")
    return found + reaching(text)


def reaching(source: str) -> list[str]:
    """Attribute chains that reach past a name: ``f.__globals__``, ``m.__dict__[…]``, and
    ``getattr``/``vars``/subscripts whose attribute or key is built at run time."""
    tree = _parse(source)
    if tree is None:
        return []
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in REACHING_ATTRIBUTES:
            found.setdefault(
                "reach", f"reaches past a name through `{node.attr}` (`{_show(node)}`)"
            )
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in _BY_NAME and len(node.args) > 1 and not _constant(node.args[1]):
                found.setdefault(
                    "built",
                    f"looks up an attribute by a name built at run time (`{_show(node)}`)",
                )
        elif isinstance(node, ast.Subscript) and not _constant(node.slice):
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr in REACHING_ATTRIBUTES:
                found.setdefault(
                    "built",
                    f"looks up a key built at run time in `{base.attr}` (`{_show(node)}`)",
                )
    return list(found.values())


def _constant(node: object) -> TypeGuard[ast.Constant]:
    return isinstance(node, ast.Constant)


def _show(node) -> str:
    try:
        return ast.unparse(node)[:60]
    except Exception:  # (unparse recurses: a deep expression is not shown)
        return type(node).__name__


def safe_flags(analysis):
    """``(analysis(), [])``, or, when the analysis of the learner's code fails (a tree too
    deep, memory), ``([], [a note])``: a failed analysis skips the flag, never the grade."""
    try:
        return analysis(), []
    except Exception as err:  # RecursionError, MemoryError, anything: the flag only
        return [], [
            f"the copy and pattern checks could not read this code ({type(err).__name__}); "
            "they were skipped"
        ]


def normal_code(source: str) -> str:
    """Code without comments, blank lines and spacing."""
    lines = [re.sub(r"\s+", "", line.split("#", 1)[0]) for line in source.splitlines()]
    return "\n".join(line for line in lines if line)


# --------------------------------------------------------------------------- statement rules


def _function_bodies(trees: list, target: str) -> list:
    """The learner's function ``target`` (a def, or a lambda assigned to the name) and every
    function of theirs it calls by name, transitively: the code that runs when it is called,
    not a cell's module-level code (a learner's own comparison with the library, say)."""
    defs: dict[str, list] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        defs.setdefault(t.id, []).append(node.value)
    todo, seen, bodies = [target], set(), []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for fn in defs.get(name, []):
            bodies.append(fn)
            todo += [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in defs]
    return bodies


def forbidden_uses(sources: list[str], target: str, names: frozenset[str]) -> list[str]:
    """Where the code of the learner's ``target`` uses a name its statement forbids
    (:class:`course_lib.checks.rules.Rule` ``names``): an attribute (``torch.softmax``,
    ``F.softmax``, ``x.softmax``) or a name imported under it (``from torch import softmax
    as sm``), inside ``target`` or a function of theirs it calls. The run-time watch sees
    calls; this sees the code, so a watch switched off inside the kernel still leaves
    this."""
    if not names:
        return []
    trees = [t for t in (_parse(s) for s in sources) if t is not None]
    imported = {
        alias.asname or alias.name
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name in names
    }
    found: set[str] = set()
    for body in _function_bodies(trees, target):
        for node in ast.walk(body):
            if isinstance(node, ast.Attribute) and node.attr in names:
                found.add(f"`{_show(node)}` (line {node.lineno})")
            elif isinstance(node, ast.Name) and node.id in imported:
                found.add(f"`{node.id}` (line {node.lineno}), imported as a forbidden name")
            elif _constant(node) and isinstance(node.value, str) and node.value in names:
                found.add(f"the text {node.value!r} (line {node.lineno}), a forbidden name")
    return sorted(found)


# --------------------------------------------------------------------------- the course's own code


def _big_enough(node) -> bool:
    """A function long enough that a copy of it is told from an honest answer."""
    statements = sum(isinstance(n, ast.stmt) for n in ast.walk(node)) - 1  # (not the def)
    return statements >= COPY_MIN_STATEMENTS and sum(1 for _ in ast.walk(node)) >= COPY_MIN_NODES


@functools.lru_cache(maxsize=4)
def course_functions(package: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every function of the course's library under ``package`` (its modules and the
    references its checks ship), big enough to tell (:func:`_big_enough`), as
    ``(label, canonical tokens)``: what a learner could find and paste."""
    root = Path(package)
    out = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = _parse(source)
        if tree is None:
            continue
        where = f"{root.name}/{path.relative_to(root).as_posix()}"
        lines = source.splitlines(keepends=True)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _big_enough(node):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                text = "".join(lines[first - 1 : node.end_lineno])
                tokens = canonical_tokens(textwrap.dedent(text))
                if tokens:
                    out.append((f"{where} `{node.name}`", tuple(tokens)))
    return tuple(out)


def write_course_functions(package: str | Path, path: Path) -> None:
    """:func:`course_functions` as JSON in ``path``: the grader reads the library once
    per run, and each worker loads it (:func:`read_course_functions`)."""
    fresh = course_functions.__wrapped__(str(package))  # (never this process's older read)
    data = [[label, list(tokens)] for label, tokens in fresh]
    path.write_text(json.dumps(data), encoding="utf-8")


def course_functions_file(package: Path, folder: Path) -> Path:
    """:func:`course_functions` written to ``folder/course-functions.json`` (the grader's
    scratch), from a per-user cache keyed by a digest of the library's sources when one is
    there (reading the library takes seconds; a cache hit, milliseconds)."""
    import hashlib
    import os

    digest = hashlib.sha256()
    for path in sorted(Path(package).rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    cache = (
        Path(home)
        / "attention-course"
        / "grader"
        / f"course-functions-{digest.hexdigest()[:20]}.json"
    )
    target = Path(folder) / "course-functions.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = cache.read_bytes()
        json.loads(data)
        target.write_bytes(data)
        return target
    except (OSError, ValueError):
        pass
    write_course_functions(package, target)
    try:  # for the next run; a cache that cannot be written costs only time
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(target.read_bytes())
        os.replace(partial, cache)
    except OSError:
        pass
    return target


def read_course_functions(path: str | Path | None, package: str | Path):
    """What :func:`write_course_functions` wrote, else the library read here."""
    if path:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return tuple((str(label), tuple(tokens)) for label, tokens in data)
        except (OSError, ValueError, TypeError):
            pass  # read it afresh
    return course_functions(str(package))


def course_copies(sources: list[str], target: str, library) -> list[str]:
    """The functions of the learner's ``target`` (and the helpers it calls) that match a
    function of the course's library once names and layout are set aside, each with the
    source it matches: ``"`rnn_forward` matches course_lib/rnn.py `rnn_forward` (100% alike)"``.
    ``library``: :func:`course_functions`' result."""
    trees = [(s, t) for s, t in ((s, _parse(s)) for s in sources) if t is not None]
    found = []
    for source, tree in trees:
        for fn in _function_bodies([tree], target):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not _big_enough(fn):
                continue
            mine = canonical_tokens(textwrap.dedent(ast.get_source_segment(source, fn) or ""))
            best, label = 0.0, ""
            for name, theirs in library:
                if 2 * min(len(mine), len(theirs)) / (len(mine) + len(theirs)) < COPY_SIMILARITY:
                    continue  # the lengths alone rule it out
                ratio = difflib.SequenceMatcher(None, mine, theirs, autojunk=False).ratio()
                if ratio > best:
                    best, label = ratio, name
            if best >= COPY_SIMILARITY:
                found.append(f"`{fn.name}` matches {label} ({best:.0%} alike)")
    return sorted(set(found))


# --------------------------------------------------------------------------- the learner's checks


def without_check_calls(source: str) -> tuple[str, set[str]]:
    """The cell without its top-level calls of the course's check (``check("02.1", fn)``,
    which the grader replaces by its own harvest), and the exercise ids those calls name.
    A cell that does not parse is left as it is."""
    tree = _parse(source)
    if tree is None:
        return source, set()
    drop: set[int] = set()
    called: set[str] = set()
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name != "check":
            continue
        if call.args and _constant(call.args[0]) and isinstance(call.args[0].value, str):
            called.add(call.args[0].value)
        drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    if not drop:
        return source, set()
    lines = source.splitlines(keepends=True)
    return "".join(line for i, line in enumerate(lines) if i not in drop), called
