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


def fixed_cases(cases: list[Case]) -> set[int]:
    """The positions of the written-out cases among ``cases``: those the exercise declares
    fixed (:class:`course_lib.checks.exercise.Fixed`), whose inputs are the same for every
    seed. ``--partial`` credit counts them apart. Declared, never inferred from a draw: a
    drawn input with a few possible values would look fixed in some draws."""
    return {i for i, c in enumerate(cases) if c.fixed}


def input_signature(case: Case) -> list:
    """A case's inputs as comparable parts (arrays by shape, dtype and bytes)."""
    return _signature((case.args, case.kwargs), [])


def code_fingerprint(sources: list[str]) -> str:
    """A digest of the learner's code as it will run (every cell's source, in order), with
    comments, blank lines and spacing set aside: a comment changes no case (and so no
    partial mark), a change to the code draws other cases."""
    h = hashlib.sha256()
    for src in sources:
        src = "\n".join(
            "".join(line.split("#", 1)[0].split()) for line in src.splitlines() if line.strip()
        )
        h.update(hashlib.sha256(src.encode("utf-8", "surrogatepass")).digest())
    return h.hexdigest()
