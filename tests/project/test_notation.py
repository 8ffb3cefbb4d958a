"""docs/notation.md is kept: no retired name appears outside the deprecation shims.

Python code (modules, tests, notebook code cells) is scanned token by token, so the shape
letter ``d_h`` in a comment or a message is fine while a variable ``d_h`` is not; spellings
that are never right (``d_head``, ``q_proj``, ...) are also looked for in every text.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = (
    "course_lib",
    "course_tools",
    "tests",
    "tools",
    "benchmarks",
    "notebooks",
    "solutions",
    "exercises",
    "docs",
    "README.md",
    "CONTRIBUTING.md",
    "conftest.py",
)
# Identifiers docs/notation.md retired (as Python names).
RETIRED_NAMES = {
    "d_head",
    "d_h",
    "n_layers",
    "n_tokens",
    "n_positions",
    "n_heads",
    "n_rep",
    "w_q",
    "W_q",
    "w_k",
    "W_k",
    "w_v",
    "W_v",
    "w_o",
    "W_o",
    "q_proj",
    "k_proj",
    "v_proj",
    "out_proj",
}
# Spellings that are wrong in any text (prose, maths, messages, comments).
RETIRED_TEXT = re.compile(r"(?<![\w\\])(d_head|d_\\text\{head\}|q_proj|k_proj|v_proj|n_rep)(?!\w)")
# The shims, and the torch API whose names the course does not choose.
ALLOWED_FILES = {
    "course_lib/_deprecated.py",
    "docs/notation.md",
    "tests/project/test_notation.py",
    "tests/library/test_deprecated.py",
    "CHANGELOG.md",
}
ALLOWED_LINE = re.compile(
    r"renamed_kwargs\(|renamed_attributes\(|warn_once\(|# retired"
    r"|\b(ref|m|torch_mha|mha_torch)\.out_proj\b"
    r"|\bself_attn\.[qkv]_proj\.weight\b"  # a Hugging Face checkpoint's tensor name
)


def _files() -> list[Path]:
    out = []
    for name in SCANNED:
        p = ROOT / name
        out += (
            [p]
            if p.is_file()
            else sorted(f for f in p.rglob("*") if f.suffix in (".py", ".ipynb", ".md"))
        )
    # not Python caches or hidden folders (JupyterLab's .ipynb_checkpoints hold old copies)
    return [
        f
        for f in out
        if "__pycache__" not in f.parts
        and not any(part.startswith(".") for part in f.relative_to(ROOT).parts)
    ]


def _code_names(source: str) -> list[tuple[int, str]]:
    source = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )
    found = []
    prev = None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        after_dot = prev is not None and prev.string == "."
        if tok.type == tokenize.NAME and tok.string in RETIRED_NAMES and not after_dot:
            found.append((tok.start[0], tok.string))
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            prev = tok
    return found


def _violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    if rel in ALLOWED_FILES:
        return []
    text = path.read_text(encoding="utf-8")
    chunks: list[tuple[str, str, bool]] = []  # (where, text, is python)
    if path.suffix == ".ipynb":
        for i, cell in enumerate(json.loads(text)["cells"]):
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            chunks.append((f"{rel} cell {i}", src, cell["cell_type"] == "code"))
    else:
        chunks.append((rel, text, path.suffix == ".py"))
    bad = []
    for where, src, is_py in chunks:
        lines = src.splitlines()
        if is_py:
            for lineno, name in _code_names(src):
                if not ALLOWED_LINE.search(lines[lineno - 1]):
                    bad.append(f"{where}:{lineno}: the name {name}")
        for lineno, line in enumerate(lines, 1):
            m = RETIRED_TEXT.search(line)
            if m and not ALLOWED_LINE.search(line):
                bad.append(f"{where}:{lineno}: {m.group(1)}")
    return bad


def test_no_retired_name_outside_the_shims():
    bad = [v for f in _files() for v in _violations(f)]
    assert not bad, "retired names (docs/notation.md) outside the deprecation shims:\n" + "\n".join(
        bad[:40]
    )


@pytest.mark.parametrize(
    "snippet, caught",
    [
        ("d_h = 4\n", True),  # a variable named like the shape letter
        ("x = y  # (B, H, N, d_h)\n", False),  # the shape letter in a comment
        ("m.out_proj.weight\n", False),  # an attribute of torch's module
        ("def f(n_layers): pass\n", True),
        ("s = 'scale by d_head'\n", True),
    ],
)
def test_the_scan_tells_names_from_shape_letters(tmp_path, snippet, caught):
    path = ROOT / "tests" / "_notation_probe.py"
    try:
        path.write_text(snippet)
        assert bool(_violations(path)) is caught
    finally:
        path.unlink(missing_ok=True)


def test_the_notation_page_names_every_retired_identifier():
    page = (ROOT / "docs" / "notation.md").read_text(encoding="utf-8")
    retired = page.split("## Retired names", 1)[1]
    missing = [n for n in sorted(RETIRED_NAMES) if f"`{n}`" not in retired]
    assert not missing, f"docs/notation.md's retired table does not list {missing}"
