"""The kernel's side of grading: the cases' inputs written for the kernel
(:func:`write_inputs`) and what a harvest cell records there (:func:`harvest`). It decides
nothing: the verdict is drawn in the grader's process (:mod:`course_tools.grading.scoring`)."""

from __future__ import annotations

import json
import math
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.checks.core import Case, call_learner, get_exercise, to_numpy
from course_lib.checks.rules import Watch, watch_for

MAX_MESSAGE = 2000  # characters of a learner's exception message kept per case


def write_inputs(cases: list[Case], path: str | Path, exercise_id: str | None = None) -> None:
    """The cases' inputs (names, arguments) for the kernel, and what the kernel needs to call
    the learner's function (its name, whether warnings fail a case, what to watch on each
    case: :mod:`course_lib.checks.rules`): no seed, no expected output, nothing the kernel
    would have to import the exercise's checks for."""
    ex = get_exercise(exercise_id) if exercise_id else None
    data = {
        "target": ex.target if ex else "",
        "no_warnings": bool(ex.no_warnings) if ex else False,
        "keeps_inputs": bool(ex.keeps_inputs) if ex else False,
        "cases": [(c.name, c.args, c.kwargs) for c in cases],
        "watches": [watch_for(ex.rules, c).to_json() if ex else {} for c in cases],
    }
    Path(path).write_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))


def flatten(x: Any, prefix: str, arrays: dict) -> Any:
    """Turn an output into JSON-able structure with arrays stored separately (a torch
    tensor marked as one, so that the grader judges what the notebook's check would)."""
    torch = sys.modules.get("torch")
    was_tensor = torch is not None and isinstance(x, torch.Tensor)
    x = to_numpy(x)
    if isinstance(x, (tuple, list)):
        return {
            "seq": type(x).__name__,
            "items": [flatten(e, f"{prefix}_{i}", arrays) for i, e in enumerate(x)],
        }
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return {"repr": repr(x)[:200]}
        # a copy, made now: a function that reuses its output buffer (or returns a view
        # of its state) must be recorded as it returned, not as the next call leaves it
        arrays[prefix] = np.array(x, copy=True)
        return {"array": prefix, "torch": True} if was_tensor else {"array": prefix}
    if x is None or isinstance(x, (bool, int, float, str)):
        if isinstance(x, float) and not math.isfinite(x):
            return {"float": repr(x)}
        return {"value": x}
    return {"repr": f"{type(x).__name__}: {repr(x)[:200]}"}


def unflatten(node: dict, arrays: Any) -> Any:
    if "seq" in node:
        items = [unflatten(e, arrays) for e in node["items"]]
        return tuple(items) if node["seq"] == "tuple" else items
    if "array" in node:
        if node.get("torch") is True:
            import torch

            return torch.as_tensor(np.array(arrays[node["array"]]))
        return arrays[node["array"]]
    if "float" in node:
        return float(node["float"])
    if "value" in node:
        return node["value"]
    return _Unreadable(node.get("repr", "?"))


class _Unreadable:
    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def course_origin(fn: Any) -> str:
    """Where ``fn``'s code lives when it is the course's library's own (``course_lib/rnn.py
    `rnn_forward```: reached through ``pkgutil``, ``importlib`` or an import), else ""."""
    import course_lib

    package = Path(course_lib.__file__).resolve().parent
    inner = getattr(fn, "func", fn)  # a functools.partial of it
    code = getattr(inner, "__code__", None)
    if code is None:
        return ""
    try:
        where = Path(code.co_filename).resolve().relative_to(package)
    except (ValueError, OSError):
        return ""
    return f"course_lib/{where.as_posix()} `{getattr(inner, '__qualname__', '?')}`"[:300]


def harvest(exercise_id: str, fn: Any, inputs: str | Path, out_dir: str | Path) -> None:
    """Run inside the student's kernel: record the learner's outputs, decide nothing.

    Reads the cases' inputs from ``inputs`` (written by :func:`write_inputs`) and writes
    ``<out_dir>/<id>.json`` (per case, what the call did: :class:`~course_lib.checks.core.Call`)
    and ``<out_dir>/<id>.npz`` (arrays). It needs no exercise: the kernel in the grader's
    sandbox has no chapter checks, so no reference and no hidden-case generator to reach.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(inputs, "rb") as f:
        spec = pickle.load(f)
    record: dict[str, Any] = {"exercise": str(exercise_id), "cases": []}
    arrays: dict[str, np.ndarray] = {}
    if fn is None or not callable(fn):
        record["missing"] = f"no function named `{spec['target']}` was defined"
    else:
        origin = course_origin(fn)
        if origin:  # (a learner who fakes this only flags themselves)
            record["origin"] = origin
        watches = spec.get("watches") or [{}] * len(spec["cases"])
        for i, ((name, args, kwargs), watch) in enumerate(zip(spec["cases"], watches)):
            call = call_learner(
                fn,
                Case(name, args, kwargs),
                spec["no_warnings"],
                spec.get("keeps_inputs", False),
                Watch.from_json(watch),
            )
            entry: dict[str, Any] = {"name": name}
            if call.broke:  # (a learner who fakes this only loses the case)
                entry["broke"] = {"rule": call.broke[:100], "how": call.how[:MAX_MESSAGE]}
            if call.raised or call.exit is not None:
                entry["raised"] = {
                    "type": call.raised[:200],
                    "message": call.message[:MAX_MESSAGE],
                    "frames": call.frames[:MAX_MESSAGE],
                    "not_implemented": call.not_implemented,
                    "exit": None if call.exit is None else call.exit[:200],
                }
            else:
                if call.warning:
                    entry["warning"] = call.warning[:MAX_MESSAGE]
                if call.changed:
                    entry["changed"] = call.changed[:MAX_MESSAGE]
                try:
                    entry["output"] = flatten(call.output, f"c{i}", arrays)
                except Exception as err:  # pragma: no cover - defensive
                    entry["raised"] = {"type": "", "message": f"could not record: {err}"}
            record["cases"].append(entry)
    # (mypy matches **arrays against allow_pickle, which numpy >= 2.1's savez has too; the
    # keys are case names. unused-ignore: older numpy has no such parameter.)
    np.savez(out / f"{exercise_id}.npz", **arrays)  # type: ignore[arg-type, unused-ignore]
    (out / f"{exercise_id}.json").write_text(json.dumps(record))
