"""The grader's cases, drawn in the grader's process: from the secret seed and a
fingerprint of the submission's code, so a re-grade of changed code gets other inputs."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from course_lib.checks.core import Case, cases_for, to_numpy


def case_seed(seed: int, exercise_id: str, kind: str, fingerprint: str = "") -> int:
    """The seed of one exercise's visible or hidden cases: the grader's secret ``seed``
    mixed with the exercise and a ``fingerprint`` of the submission's code."""
    text = f"{int(seed)}:{exercise_id}:{kind}:{fingerprint}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def grader_cases(exercise_id: str, seed: int, fingerprint: str = "") -> list[Case]:
    """The grader's cases for one exercise: visible ones, then hidden ones (both drawn
    afresh, so a function fitted to the notebook's visible cases gains nothing)."""
    visible = cases_for(exercise_id, False, case_seed(seed, exercise_id, "visible", fingerprint))
    hidden = cases_for(exercise_id, True, case_seed(seed, exercise_id, "hidden", fingerprint))
    return list(visible) + list(hidden)


def _signature(x: Any, out: list) -> list:
    """A case's inputs as comparable parts (arrays by shape and bytes)."""
    x = to_numpy(x)
    if isinstance(x, np.ndarray):
        out.append((x.shape, str(x.dtype), x.tobytes()))
    elif isinstance(x, (list, tuple)):
        for e in x:
            _signature(e, out)
    elif isinstance(x, dict):
        for k in sorted(x, key=str):
            _signature(x[k], out)
    else:
        out.append(repr(x))
    return out


def fixed_cases(exercise_id: str, cases: list[Case], seed: int, fingerprint: str = "") -> set[int]:
    """The positions of ``cases`` whose inputs the seed does not change (the written-out
    cases, which the learners' edition shows): drawn once more from another seed, the
    cases that come out the same. ``--partial`` credit counts only the others."""
    other = grader_cases(exercise_id, int(seed) ^ 0x5EED5EED, fingerprint + ":fixed?")
    if len(other) != len(cases):
        return set()
    return {
        i
        for i, (a, b) in enumerate(zip(cases, other))
        if _signature((a.args, a.kwargs), []) == _signature((b.args, b.kwargs), [])
    }


def code_fingerprint(sources: list[str]) -> str:
    """A digest of the learner's code as it will run (every cell's source, in order)."""
    h = hashlib.sha256()
    for src in sources:
        h.update(hashlib.sha256(src.encode("utf-8", "surrogatepass")).digest())
    return h.hexdigest()
