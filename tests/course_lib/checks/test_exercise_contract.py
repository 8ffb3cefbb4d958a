"""What every exercise of every chapter promises, checked once for all of them.

Chapter-specific behaviour lives in tests/course_lib/checks/test_chNN.py; these are the promises the
framework makes to learners and instructors about any exercise declared with it.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from course_lib.checks import CheckFailed, Hint, check, core
from course_lib.checks.core import PLACEHOLDER_MARK, all_exercises, get_exercise
from course_tools.exercises import BEGIN_SOLUTION, END_SOLUTION, exercise_cells
from course_tools.grading.cases import grader_cases, input_signature
from course_tools.grading.harvest import harvest, write_inputs
from course_tools.grading.scoring import score

IDS = sorted(all_exercises())
ROOT = Path(__file__).resolve().parents[3]


def _failure(ex_id, fn, hidden=False) -> str | None:
    try:
        with np.errstate(all="ignore"):  # the wrong twins overflow on purpose
            check(ex_id, fn, hidden=hidden, quiet=True)
    except CheckFailed as failure:
        return str(failure)
    return None


@pytest.mark.parametrize("ex_id", IDS)
def test_the_written_out_cases_are_declared_and_only_they(ex_id):
    """A case declared fixed (``Fixed``) has the same inputs for every seed; every other case
    changes with the seed: ``--partial`` counts the two kinds apart by the declaration, so
    a wrong one would credit a table of answers, or refuse an honest learner's."""
    seeds = (1, 2, 3, 5, 8, 13)
    for hidden in (False, True):
        draws = [core.cases_for(ex_id, hidden, s) for s in seeds]
        for i, case in enumerate(draws[0]):
            same = all(
                input_signature(d[i]) == input_signature(case) for d in draws[1:] if len(d) > i
            )
            assert same == case.fixed, (
                f"{ex_id} {'hidden' if hidden else 'visible'} case {case.name!r}: declared "
                f"{'fixed' if case.fixed else 'drawn'}, but its inputs "
                f"{'are the same' if same else 'change'} from seed to seed"
            )


@pytest.mark.parametrize("ex_id", IDS)
def test_reference_passes_visible_and_hidden_cases(ex_id, capsys):
    ex = get_exercise(ex_id)
    assert check(ex_id, ex.reference).passed
    assert check(ex_id, ex.reference, hidden=True).passed
    assert "all" in capsys.readouterr().out


@pytest.mark.parametrize("ex_id", IDS)
def test_every_declared_mistake_fails_and_is_named(ex_id):
    """A learner who makes a known mistake is told which one, by the first hint named."""
    ex = get_exercise(ex_id)
    assert ex.mistakes, f"{ex_id} declares no common mistakes to diagnose"
    for hint, wrong in ex.mistakes.items():
        messages = [m for m in (_failure(ex_id, wrong), _failure(ex_id, wrong, hidden=True)) if m]
        assert messages, f"{ex_id}: the mistake {hint[:60]!r}... passes every check"
        named = [h for h in ex.mistakes if any(h in m for m in messages)]
        assert named, f"{ex_id}: {hint[:60]!r}... is caught but not named: {messages}"
        assert hint in named, f"{ex_id}: {hint[:60]!r}... is named as {named[0][:60]!r}"


# The warm-up exercise keeps one mistake (an overflowing softmax) that only the hidden
# cases catch: chapter 00 uses it to show why grading runs hidden cases.
HIDDEN_ONLY = {("00.1", "exp overflowed")}


@pytest.mark.parametrize("ex_id", IDS)
def test_the_visible_cases_already_catch_each_mistake(ex_id):
    """A learner sees a known mistake in the notebook, not first in the grader's report."""
    ex = get_exercise(ex_id)
    for hint, wrong in ex.mistakes.items():
        if any(ex_id == i and hint.startswith(h) for i, h in HIDDEN_ONLY):
            continue
        message = _failure(ex_id, wrong)
        assert message, f"{ex_id}: {hint[:60]!r}... passes the visible checks"
        assert hint in message, f"{ex_id}: visible checks do not name {hint[:60]!r}..."


@pytest.mark.parametrize("ex_id", IDS)
def test_the_hidden_cases_alone_catch_and_name_each_mistake(ex_id):
    """A grader (or the notebook's hidden check) running the hidden cases alone rejects every
    known mistake and names it: the hidden set does not lean on the visible one."""
    ex = get_exercise(ex_id)
    for hint, wrong in ex.mistakes.items():
        message = _failure(ex_id, wrong, hidden=True)
        assert message, f"{ex_id}: {hint[:60]!r}... passes the hidden checks"
        assert hint in message, f"{ex_id}: hidden checks do not name {hint[:60]!r}..."


@pytest.mark.parametrize("ex_id", IDS)
def test_a_blank_exercise_says_not_implemented(ex_id, capsys):
    def blank(*args, **kwargs):
        raise NotImplementedError(f"Exercise {ex_id} {PLACEHOLDER_MARK}: replace this line")

    report = check(ex_id, blank)
    assert report.not_implemented and not report.passed
    assert "not implemented yet" in capsys.readouterr().out
    with pytest.raises(CheckFailed):  # under a grader the hidden checks fail it
        check(ex_id, blank, hidden=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("ex_id", IDS)
def test_grader_protocol_round_trip(ex_id, tmp_path):
    ex = get_exercise(ex_id)
    cases = grader_cases(ex_id, 7)  # the grader's cases; only their inputs reach the kernel
    write_inputs(cases, tmp_path / "inputs.pkl", ex_id)
    harvest(ex_id, ex.reference, tmp_path / "inputs.pkl", tmp_path / "ok")
    verdict = score(ex_id, cases, tmp_path / "ok")
    assert verdict.status == "passed" and verdict.points == ex.points
    for i, wrong in enumerate(ex.mistakes.values()):
        harvest(ex_id, wrong, tmp_path / "inputs.pkl", tmp_path / f"w{i}")
        assert score(ex_id, cases, tmp_path / f"w{i}").status == "failed"


# ----------------------------------------------------------------------- teaching before telling
#
# What a learner reads on a first failure (the nudge of the exercise's hint, of a named
# mistake, of an error pattern; a case's `why`; a gap) must point at what to look at, never
# paste the solution's code. "Contains the solution's code" is decided against the solution
# notebook itself: the lines between BEGIN and END SOLUTION in the cell that
# course_tools.exercises maps to the exercise, cut into the fragments below.

CODE_KINDS = (ast.Call, ast.BinOp, ast.Subscript, ast.Compare, ast.BoolOp, ast.UnaryOp)
SIMPLE_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)
MIN_CODE = 12  # non-space characters for a statement or expression to count as code


def solution_regions(source: str) -> list[str]:
    """The solution regions of a cell's source, each dedented."""
    regions, current = [], None
    for line in source.splitlines():
        if line.strip() == BEGIN_SOLUTION:
            current = []
        elif line.strip() == END_SOLUTION:
            regions.append(textwrap.dedent("\n".join(current or [])))
            current = None
        elif current is not None:
            current.append(line)
    return regions


@functools.cache
def solution_code() -> dict[str, tuple[str, ...]]:
    """{exercise id: its solution regions}, from every notebook of solutions/."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for ex_id, roles in exercise_cells(nb).items():
            for i in roles.get("solution", []):
                found.setdefault(ex_id, []).extend(solution_regions(nb.cells[i].source))
    return {ex_id: tuple(regions) for ex_id, regions in found.items()}


def _nonspace(text: str) -> int:
    return len(re.sub(r"\s", "", text))


def normalise_code(text: str) -> str:
    """One quote style, no space around operators and brackets, single spaces elsewhere:
    ``q @ k.T`` and ``q@k.T`` read alike, ``use x`` does not become ``usex``."""
    text = re.sub(r"\s+", " ", text.replace('"', "'"))
    return re.sub(r" ?([^\w\s]) ?", r"\1", text).strip()


def _node_fragments(node: ast.AST, source: str) -> set[str]:
    """The code fragments one node of a solution contributes (its text as written and as
    ``ast.unparse`` writes it)."""
    if not isinstance(node, (ast.expr, ast.stmt)):
        return set()
    texts = {ast.unparse(node), ast.get_source_segment(source, node) or ""}
    texts = {t for t in texts if t and "\n" not in t}
    out: set[str] = set()
    codey = any(isinstance(n, CODE_KINDS) for n in ast.walk(node))
    if isinstance(node, (ast.expr, *SIMPLE_STATEMENTS)) and codey:
        out |= {t for t in texts if _nonspace(t) >= MIN_CODE}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        out.add(ast.unparse(node.func) + "(")  # torch.softmax(, x.mean(, (q * k).sum(
        text = ast.unparse(node)
        method = text[text.find(f".{node.func.attr}(", len(ast.unparse(node.func.value))) :]
        if _nonspace(method) >= MIN_CODE:
            out.add(method)  # .mean(dim=(0, 1), keepdim=True), whatever it is called on
    if isinstance(node, ast.BinOp) and (
        isinstance(node.op, ast.MatMult)
        or any(
            isinstance(side, (ast.Attribute, ast.Subscript, ast.Call))
            for side in (node.left, node.right)
        )
    ):
        out |= texts  # weights @ v, q @ k.T, x[..., 0::2] ** 2
    if isinstance(node, ast.Subscript) and any(
        isinstance(n, ast.Slice) or (isinstance(n, ast.Constant) and n.value in (None, ...))
        for n in ast.walk(node.slice)
    ):
        out |= texts  # x[..., 0::2], w[:, None]
    return out


def solution_fragments(region: str) -> set[str]:
    """What counts as the solution's code in a region: each line (without its comment) and
    each statement or expression of at least MIN_CODE non-space characters that computes
    something (a call, an operator, an index), and shorter code-looking pieces: a method or
    module call up to its parenthesis, an operator applied to an attribute, index or call,
    an index with a slice. Plain names and dotted names alone (``torch.linalg.eigvalsh``,
    ``warmup_steps``) are words a hint may use."""
    lines = {re.sub(r"#.*$", "", line).strip() for line in region.splitlines()}
    out = {line for line in lines if _nonspace(line) >= MIN_CODE}
    source = "def _solution():\n" + textwrap.indent(region, "    ")
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a region that is not whole statements: its lines still count
        return out
    for node in ast.walk(tree):
        out |= _node_fragments(node, source)
    return out


def pasted_code(text: str, fragments: set[str]) -> list[str]:
    """The fragments of a solution that ``text`` contains (whole words: ``x.mean(`` is not
    found in ``max.mean(``)."""
    hay = normalise_code(text)
    hits = []
    for fragment in fragments:
        code = normalise_code(fragment)
        if not code:
            continue
        before = r"(?<![\w.])" if re.match(r"\w", code) else ""
        after = r"(?!\w)" if re.search(r"\w$", code) else ""
        if re.search(before + re.escape(code) + after, hay):
            hits.append(code)
    return sorted(hits)


def first_tier_texts(ex) -> list[tuple[str, str]]:
    """(where, text) for everything an exercise may show before a repeated failure."""
    texts = [("hint", str(ex.hint))]
    texts += [("mistake", str(h)) for h in ex.mistakes]
    texts += [(f"error {p!r}", str(h)) for p, h in ex.errors.items()]
    for name in ("no_warnings", "keeps_inputs"):
        if isinstance(getattr(ex, name), str):
            texts.append((name, str(getattr(ex, name))))
    for hidden in (False, True):
        for case in ex.cases(np.random.default_rng(0), hidden):
            whys = case.why.values() if isinstance(case.why, dict) else [case.why]
            texts += [(f"why of {case.name!r}", w) for w in whys if w]
    texts += [(f"gap {k!r}", g) for k, g in ex.gaps.items()]
    return texts


def test_every_exercise_has_its_solution_in_the_solution_notebooks():
    code = solution_code()
    assert set(code) == set(IDS), set(code) ^ set(IDS)
    assert all(any(r.strip() for r in code[i]) for i in IDS)


@pytest.mark.parametrize("ex_id", IDS)
def test_the_hint_comes_in_two_tiers_and_no_first_tier_text_pastes_the_solution(ex_id):
    ex = get_exercise(ex_id)
    assert isinstance(ex.hint, Hint) and ex.hint.detail, f"{ex_id}: the hint needs two tiers"
    fragments = set().union(*(solution_fragments(r) for r in solution_code()[ex_id]))
    pasted = {
        where: hits
        for where, text in first_tier_texts(ex)
        if (hits := pasted_code(text, fragments))
    }
    assert not pasted, f"{ex_id}: first-tier text contains the solution's code: {pasted}"


def test_the_rule_catches_a_nudge_that_pastes_the_solution():
    """The rule can fail: a line, an expression, a call or a matrix product of the solution
    in a nudge is caught; the same ideas in words are not."""
    regions = solution_code()["11.4"]
    fragments = set().union(*(solution_fragments(r) for r in regions))
    line = next(ln.strip() for r in regions for ln in r.splitlines() if "clone()" in ln)
    assert pasted_code(f"start like this: {line}", fragments)  # a whole line
    assert pasted_code("copy it first (out.clone()), then replace the heads", fragments)
    assert pasted_code("use .mean(dim=(0, 1), keepdim=True) on each head", fragments)
    assert not pasted_code("check which heads you replace, and return a copy.", fragments)
    assert not pasted_code("each listed head becomes its mean over the batch", fragments)

    regions = solution_code()["02.1"]
    fragments = set().union(*(solution_fragments(r) for r in regions))
    assert pasted_code("then return weights @ v", fragments)  # a matrix product
    assert pasted_code("swap the last two axes of k: np.swapaxes(k, -1, -2)", fragments)
    assert pasted_code("subtract scores.max(axis=-1, keepdims=True) first", fragments)
    assert not pasted_code("subtract each row's max before the exponential", fragments)
    assert not pasted_code("which axis does np.exp normalise?", fragments)  # a name alone
    # the generic hint's second tier may give the code; in a nudge the rule would catch it
    detail = get_exercise("02.2").hint.detail
    assert pasted_code(detail, set().union(*map(solution_fragments, solution_code()["02.2"])))


def _perturbed(x):
    """A wrong answer of the right kind and shape, that no declared mistake makes: every
    number moved, booleans flipped, strings and containers kept."""
    if isinstance(x, (torch.Tensor, np.ndarray)) and x.dtype in (torch.bool, np.bool_):
        flipped = x.clone() if isinstance(x, torch.Tensor) else x.copy()
        flipped.reshape(-1)[:1] = ~flipped.reshape(-1)[:1]  # one entry: no mistake's pattern
        return flipped
    if isinstance(x, torch.Tensor):
        return torch.full_like(x, 0.37) if x.is_floating_point() else x + 1
    if isinstance(x, np.ndarray):
        return np.full_like(x, 0.37) if np.issubdtype(x.dtype, np.floating) else x + 1
    if isinstance(x, (bool, np.bool_)):
        return not x
    if isinstance(x, (int, np.integer)):
        return int(x) + 7
    if isinstance(x, (float, np.floating)):
        return float(x) * 0.61 + 0.37
    if isinstance(x, (tuple, list)):
        return type(x)(_perturbed(e) for e in x)
    return x


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("ex_id", IDS)
def test_an_unnamed_wrong_answer_gets_the_nudge_first_and_the_detail_on_a_repeat(
    ex_id, monkeypatch
):
    ex = get_exercise(ex_id)

    def wrong(*args, **kwargs):
        return _perturbed(ex.reference(*args, **kwargs))

    monkeypatch.setattr(core, "_FAILED_BEFORE", {})
    first, second = _failure(ex_id, wrong), _failure(ex_id, wrong)
    assert first and second, f"{ex_id}: the perturbed answer passes"
    assert f"Hint: {ex.hint}" in first, f"{ex_id}: no generic nudge on a first failure: {first}"
    assert ex.hint.detail not in first, f"{ex_id}: the first failure shows the detail"
    assert ex.hint.detail in second, f"{ex_id}: a repeated failure does not show the detail"


# ----------------------------------------------------------------------- inputs left as given

KEEPS_INPUTS = [i for i in IDS if get_exercise(i).keeps_inputs]


def _scribble_on_first_array(args, kwargs) -> bool:
    """Change the first tensor or array argument in place; False when there is none."""
    for x in (*args, *kwargs.values()):
        if isinstance(x, torch.Tensor) and x.numel():
            x.mul_(2).add_(1)
            return True
        if isinstance(x, np.ndarray) and x.size:
            x *= 2
            x += 1
            return True
    return False


def test_some_exercise_keeps_its_inputs():
    assert "11.4" in KEEPS_INPUTS  # the statement asks for a copy


@pytest.mark.parametrize("ex_id", KEEPS_INPUTS)
def test_an_in_place_twin_fails_and_is_named(ex_id):
    """The right values, computed before the function writes into its input: an exercise
    that keeps its inputs fails it on the visible and the hidden cases and says why."""
    ex = get_exercise(ex_id)
    hint = ex.keeps_inputs if isinstance(ex.keeps_inputs, str) else core.CHANGED_INPUT
    scribbled = []

    def in_place_twin(*args, **kwargs):
        out = ex.reference(*args, **kwargs)
        scribbled.append(_scribble_on_first_array(args, kwargs))
        return out

    for hidden in (False, True):
        message = _failure(ex_id, in_place_twin, hidden=hidden)
        assert any(scribbled), f"{ex_id}: no case has a tensor or array argument to change"
        assert message and str(hint) in message, f"{ex_id}: the in-place change is not named"
        assert "the call changed its argument" in message
