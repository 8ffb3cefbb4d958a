"""docs/notation.md is kept: no retired name appears anywhere in the course.

Python code (modules, tests, notebook code cells) is scanned token by token, so the shape
letter ``d_h`` in a comment or a message is fine while a variable ``d_h`` is not; spellings
that are never right (``d_head``, ``q_proj``, ...) are also looked for in every text. The
keyword arguments and attributes that 0.2 still accepted under retired names (with a
warning) were removed in 0.3.0: they are gone from the library, and no call in the course
uses them (:data:`REMOVED_KEYWORDS`, :data:`REMOVED_ATTRIBUTES`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import json
import re
import tokenize
from pathlib import Path

import numpy as np
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
# The table of retired names, this test, the history; and the torch API whose names the
# course does not choose.
ALLOWED_FILES = {
    "docs/notation.md",
    "tests/project/test_notation.py",
    "CHANGELOG.md",
}
ALLOWED_LINE = re.compile(
    r"# retired"
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
    if rel in ALLOWED_FILES or rel.startswith("docs/releases/"):  # the history of names
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


def test_no_retired_name_in_the_course():
    bad = [v for f in _files() for v in _violations(f)]
    assert not bad, "retired names (docs/notation.md):\n" + "\n".join(bad[:40])


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


# --------------------------------------------------------------------------- removed in 0.3.0

# What 0.2 still accepted under a retired name, with a warning, and 0.3.0 removed (CHANGELOG):
# {"module:callable": {old keyword: new keyword}}.
REMOVED_KEYWORDS = {
    "course_lib.positional:sinusoidal_encoding": {"n_positions": "seq_len"},
    "course_lib.rnn:dependency_graph": {"n_tokens": "seq_len", "n_layers": "num_layers"},
    "course_lib.rnn:recurrent_matrix": {"d_h": "d_hidden"},
    "course_lib.rnn:make_recall_batch": {"batch": "batch_size", "vocab": "vocab_size"},
    "course_lib.rnn:RecallRNN": {"vocab": "vocab_size"},
    "course_lib.rnn:RecallAttention": {"vocab": "vocab_size"},
    "course_lib.rnn:train_recall": {"batch": "batch_size", "vocab": "vocab_size"},
    "course_lib.rnn:recall_accuracy_by_distance": {"vocab": "vocab_size", "n": "batch_size"},
    "course_lib.multihead:repeat_kv": {"n_rep": "num_groups"},
    "course_lib.scaling:project_and_score": {"w_q": "W_Q", "w_k": "W_K"},
    "course_lib.scaling:RetrievalTask": {"vocab": "vocab_size"},
    "course_lib.experiments.coref:CorefAttention": {"n_layers": "num_layers"},
    "course_lib.experiments.coref:make_model": {"n_layers": "num_layers"},
    "course_lib.widgets.gradients:GradientExplorer": {"T": "seq_len", "d_h": "d_hidden"},
}
# {"module:class": {old attribute: new attribute}}
REMOVED_ATTRIBUTES = {
    "course_lib.rnn:RecallAttention": {"q": "W_Q", "k": "W_K", "v": "W_V"},
    "course_lib.multihead:MultiHeadAttention": {
        "q_proj": "W_Q",
        "k_proj": "W_K",
        "v_proj": "W_V",
        "out_proj": "W_O",
    },
    "course_lib.scaling:TrainResult": {"w_q": "W_Q", "w_k": "W_K"},
    "course_lib.experiments.coref:CorefAttention": {
        "n_layers": "num_layers",
        "q": "W_Q",
        "k": "W_K",
        "v": "W_V",
        "o": "W_O",
    },
}
# ``scaling.multihead_scores(x, W_Q, W_K, num_heads)`` is ``scaling.project_and_score`` (the
# old name clashed with exercise 03.5's ``multihead_scores(q, k, num_heads)``, which stays).
REMOVED_FUNCTIONS = {"course_lib.scaling:multihead_scores": "course_lib.scaling:project_and_score"}
# attributes that no object of the course has any more (``.q`` or ``.k`` say too little to scan)
REMOVED_ATTRIBUTE_SPELLINGS = {"w_q", "w_k", "n_layers", "q_proj", "k_proj", "v_proj"}


def _resolve(target: str):
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("target", sorted(REMOVED_KEYWORDS))
def test_the_removed_keywords_are_gone(target):
    params = inspect.signature(_resolve(target)).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), f"{target} takes **kwargs"
    for old, new in REMOVED_KEYWORDS[target].items():
        assert old not in params and new in params, (target, old, new)


def test_the_removed_attributes_and_functions_are_gone():
    import torch

    from course_lib.experiments.coref import CorefAttention
    from course_lib.multihead import MultiHeadAttention
    from course_lib.rnn import RecallAttention
    from course_lib.scaling import TrainResult

    objects = {
        "course_lib.rnn:RecallAttention": RecallAttention(4),
        "course_lib.multihead:MultiHeadAttention": MultiHeadAttention(8, 2),
        "course_lib.scaling:TrainResult": TrainResult(np.zeros(2), 1.0, torch.eye(2), torch.eye(2)),
        "course_lib.experiments.coref:CorefAttention": CorefAttention(10),
    }
    for target, renames in REMOVED_ATTRIBUTES.items():
        for old, new in renames.items():
            assert not hasattr(objects[target], old), f"{target}.{old} (now .{new})"
            assert hasattr(objects[target], new), f"{target}.{new}"
    for old, new in REMOVED_FUNCTIONS.items():
        module, name = old.split(":")
        assert not hasattr(importlib.import_module(module), name), f"{old} (now {new})"
        _resolve(new)


def test_the_retired_spelling_of_a_scale_is_an_error():
    import torch

    from course_lib.scaling import project_and_score

    with pytest.raises(ValueError, match="head_dim"):  # 0.2 took "d_head" with a warning
        project_and_score(torch.zeros(1, 2, 4), torch.eye(4), torch.eye(4), 2, scale_by="d_head")


def _removed_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each call with a removed keyword and each removed attribute."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # notebook magics, exercise placeholders
        return []
    by_name: dict[str, set[str]] = {}
    for target, renames in REMOVED_KEYWORDS.items():
        by_name.setdefault(target.split(":")[1], set()).update(renames)
    removed_functions = {t.split(":")[1] for t in REMOVED_FUNCTIONS}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            found += [
                (node.lineno, f"{name}({k.arg}=...)")
                for k in node.keywords
                if k.arg in by_name.get(name, ())
            ]
        elif isinstance(node, ast.Attribute) and node.attr in REMOVED_ATTRIBUTE_SPELLINGS:
            found.append((node.lineno, f".{node.attr}"))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in removed_functions
            and getattr(node.value, "id", None) == "scaling"
        ):
            found.append((node.lineno, f"scaling.{node.attr}"))
    return found


def test_no_call_in_the_course_uses_a_removed_keyword():
    bad = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix == ".py":
            chunks = [(rel, path.read_text(encoding="utf-8"))]
        elif path.suffix == ".ipynb":
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            chunks = [
                (f"{rel} cell {i}", "".join(c["source"]))
                for i, c in enumerate(cells)
                if c["cell_type"] == "code"
            ]
        else:
            continue
        for where, src in chunks:
            src = "\n".join(
                "" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines()
            )
            lines = src.splitlines()
            bad += [
                f"{where}:{n}: {what}"
                for n, what in _removed_uses(src)
                if not ALLOWED_LINE.search(lines[n - 1])
            ]
    assert not bad, "names removed in 0.3.0 (docs/notation.md):\n" + "\n".join(bad[:40])


@pytest.mark.parametrize(
    "snippet, caught",
    [
        ("rnn.make_recall_batch(batch=2, seq_len=5, vocab=3)\n", True),
        ("make_recall_batch(batch_size=2, seq_len=5, vocab_size=3)\n", False),
        ("RecallRNN(vocab=4)\n", True),
        ("result.w_q\n", True),
        ("ref.out_proj.weight\n", False),  # torch's own module keeps its name
        ("scaling.multihead_scores(x, W_Q, W_K, 2)\n", True),
        ("multihead_scores(q, k, 2)\n", False),  # exercise 03.5's function
    ],
)
def test_the_scan_finds_removed_keywords(snippet, caught):
    assert bool(_removed_uses(snippet)) is caught
