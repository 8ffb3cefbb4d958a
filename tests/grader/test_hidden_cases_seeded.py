"""Hidden cases come from the grader's secret seed (issue 38, item 1): for every exercise,
two seeds draw different hidden inputs, so no table of answers precomputed from the
learners' edition covers them; the visible cases a notebook's check cell shows stay fixed.

Exercises listed in ``NOT_YET`` take nothing from the seed in their hidden cases: known
gaps, each an expected failure.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from course_lib.checks.core import all_exercises, cases_for

# none left: every exercise's hidden cases take the seed
NOT_YET: set[str] = set()


def _parts(x, out: list) -> list:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().float().numpy()
    if isinstance(x, np.ndarray):
        out.append((x.shape, x.tobytes()))
    elif isinstance(x, (list, tuple)):
        for e in x:
            _parts(e, out)
    elif isinstance(x, dict):
        for k in sorted(x):
            _parts(x[k], out)
    else:
        out.append(repr(x))
    return out


def _inputs(ex_id: str, hidden: bool, seed: int) -> list:
    return [_parts((c.args, c.kwargs), []) for c in cases_for(ex_id, hidden, seed)]


@pytest.mark.parametrize("ex_id", sorted(all_exercises()))
def test_two_seeds_draw_different_hidden_inputs(ex_id):
    if ex_id in NOT_YET:
        pytest.xfail("its hidden inputs are still fixed (a known gap, issue 38)")
    assert _inputs(ex_id, True, 1) != _inputs(ex_id, True, 2), ex_id


@pytest.mark.parametrize("ex_id", ["05.5", "05.6", "06.5", "08.8", "09.3", "09.5", "09.7"])
def test_fixed_visible_cases_stay_fixed(ex_id):
    """The exercises whose hidden cases now come from the seed keep their written-out
    visible cases: what the notebook's check cell shows does not change."""
    assert _inputs(ex_id, False, 1) == _inputs(ex_id, False, 2)


def test_a_table_of_the_written_out_cases_earns_no_partial_credit(tmp_path):
    """With --partial, the written-out cases (the exercise declares them: their inputs are
    the same for every seed) must pass for full marks but earn nothing on their own."""
    import json

    from course_lib.checks.core import get_exercise
    from course_tools.grading.cases import fixed_cases, grader_cases
    from course_tools.grading.harvest import flatten
    from course_tools.grading.scoring import score

    cases = grader_cases("01.4", 7, "fp")
    fixed = fixed_cases(cases)
    assert fixed and len(fixed) < len(cases)
    ex = get_exercise("01.4")
    arrays: dict = {}
    entries = []
    for i, c in enumerate(cases):
        out = ex.reference(*c.args, **c.kwargs) if i in fixed else 0.0  # the table's answers
        entries.append({"name": c.name, "output": flatten(out, f"c{i}", arrays)})
    import numpy as np

    np.savez(tmp_path / "01.4.npz", **arrays)
    (tmp_path / "01.4.json").write_text(json.dumps({"cases": entries}))
    table = score("01.4", cases, tmp_path, partial=True)  # the declared ones, by default
    assert (table.status, table.points) == ("failed", 0)
    unfixed = score("01.4", cases, tmp_path, partial=True, fixed=set())  # were none declared
    assert unfixed.points > 1  # most of the points: what the declaration takes away


def test_the_release_says_what_in_it_can_answer_an_exercise():
    """`make release` names the reference implementations the learners' edition holds
    (issue 38: it printed "no solutions" and nothing else)."""
    from pathlib import Path

    from course_tools.release import answers_inside

    said = answers_inside(Path(__file__).resolve().parents[2])
    n = int(said.split("each of its ")[1].split()[0])
    assert n == len(all_exercises()) and "reference implementation" in said, said
