r"""What an exercise's statement forbids, watched while the learner's function runs.

Comparing outputs cannot tell a softmax written out from ``torch.softmax``, nor a tiled loop
from one that builds the whole score matrix and slices it: both return the right numbers.
A :class:`Rule` says what the statement forbids, in two forms:

* ``calls``: the torch functions (by ``__name__``) the function may not call, watched at run
  time by a :class:`torch.overrides.TorchFunctionMode` (``torch.softmax``, ``F.softmax``
  and ``x.softmax`` all arrive there as ``softmax``), and ``names``: the attributes and
  imported names the grader looks for in the function's code before it runs
  (:func:`course_tools.grading.analysis.forbidden_uses`);
* ``largest``: for a case, the most values one array or tensor may hold (the score matrix
  has :math:`N_q N_k`), or None where the case cannot tell. Torch results are counted as
  each torch call returns them; numpy's allocations through :mod:`tracemalloc`, whose peak
  during the call must stay under ``4 * largest`` bytes (a float32 matrix of that size, or a
  float64 one of half of it, goes over). The peak counts every allocation, a module imported
  during the call too: the chapters put the cases ``largest`` watches last, after small
  ones whose calls have done any first-call imports.

The notebook's check and the grader's kernel watch the same way (:func:`watch_for` gives a
case's :class:`Watch`, plain data the grader writes beside the case's inputs, since its
kernel has no chapter checks). A call that breaks a rule fails its case whatever it
returned, and its diagnosis is the rule's key (``"03.2/no-softmax"``), with prose in the
chapter's ``chNN.md``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Every torch function that computes a softmax, as its __name__ reaches a TorchFunctionMode.
SOFTMAX_CALLS = frozenset(
    {"softmax", "log_softmax", "_softmax", "special_softmax", "special_log_softmax", "softmin"}
)
SOFTMAX_NAMES = frozenset({"softmax", "log_softmax", "softmin", "Softmax", "LogSoftmax", "Softmin"})
# Attention computed by the library: PyTorch's fused kernel and its module's functional form.
LIBRARY_ATTENTION_CALLS = frozenset(
    {"scaled_dot_product_attention", "multi_head_attention_forward"}
)
LIBRARY_ATTENTION_NAMES = LIBRARY_ATTENTION_CALLS | {"MultiheadAttention"}


def whole_scores(margin: float) -> Callable[[Any], int | None]:
    """``largest`` for attention on ``(q, k, v, ...)``: the whole score matrix's Nq * Nk
    values, on a case where that is at least ``margin`` times everything else the function
    must hold (q, k, v and the output); None on a smaller case, where a tiled loop and the
    whole matrix weigh about the same and the memory cannot tell them apart."""

    def largest(case: Any) -> int | None:
        q, k, v = case.args[:3]
        n_q, n_k = int(q.shape[0]), int(k.shape[0])
        rest = (n_q + n_k) * int(q.shape[1]) + (n_k + n_q) * int(v.shape[1])
        return n_q * n_k if n_q * n_k >= margin * rest else None

    return largest


@dataclass(frozen=True)
class Rule:
    """One thing a statement forbids (see the module's docstring); ``name`` keys its prose
    (``## 03.2/no-softmax`` in ``ch03.md``) and its diagnosis."""

    name: str
    calls: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    largest: Callable[[Any], int | None] | None = None  # (case) -> values, or None
    numpy: bool = True  # ``largest`` counts numpy's allocations too (tracemalloc)


@dataclass
class Watch:
    """What to watch on one call: ``calls`` maps a torch function's name to the rule that
    forbids it; ``largest`` is the most values one array may hold, ``largest_rule`` the
    rule that says so. Plain data: the grader writes it for its kernel."""

    calls: dict[str, str] = field(default_factory=dict)
    largest: int | None = None
    largest_rule: str = ""
    numpy: bool = False

    def __bool__(self) -> bool:
        return bool(self.calls) or self.largest is not None

    def to_json(self) -> dict:
        return {
            "calls": dict(self.calls),
            "largest": self.largest,
            "rule": self.largest_rule,
            "numpy": self.numpy,
        }

    @classmethod
    def from_json(cls, data: Any) -> Watch:
        if not isinstance(data, dict):
            return cls()
        largest = data.get("largest")
        return cls(
            {str(k): str(v) for k, v in dict(data.get("calls") or {}).items()},
            int(largest) if isinstance(largest, int) else None,
            str(data.get("rule") or ""),
            data.get("numpy") is True,
        )


def watch_for(rules: tuple[Rule, ...], case: Any) -> Watch:
    """The watch of ``rules`` on one case."""
    w = Watch()
    for rule in rules:
        for name in rule.calls:
            w.calls.setdefault(name, rule.name)
        limit = rule.largest(case) if rule.largest else None
        if limit is not None and (w.largest is None or limit < w.largest):
            w.largest, w.largest_rule, w.numpy = int(limit), rule.name, rule.numpy
    return w


@dataclass
class Breach:
    """The first rule a call broke, and how (``"it called `softmax`"``)."""

    rule: str
    how: str


def _values(x: Any) -> int:
    """The most values one tensor in ``x`` (a result, or a tuple of them) holds."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return int(x.numel())
    if isinstance(x, (tuple, list)):
        return max((_values(e) for e in x), default=0)
    return 0


def _mode(watch: Watch, found: list[Breach]):
    """A TorchFunctionMode that records the first breach of ``watch`` (None without torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    from torch.overrides import TorchFunctionMode

    class _Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in watch.calls and not found:
                found.append(Breach(watch.calls[name], f"it called `{name}`"))
            out = func(*args, **(kwargs or {}))
            if watch.largest is not None and not found:
                n = _values(out)
                if n >= watch.largest:
                    found.append(
                        Breach(
                            watch.largest_rule,
                            f"`{name}` returned a tensor of {n} values, as many as the "
                            f"whole score matrix ({watch.largest})",
                        )
                    )
            return out

    return _Watching()


def watched(fn: Callable[[], Any], watch: Watch) -> tuple[Any, Breach | None]:
    """``fn()`` under ``watch``: its result and the first rule it broke (None: none)."""
    if not watch:
        return fn(), None
    import contextlib
    import tracemalloc

    found: list[Breach] = []
    mode = _mode(watch, found)
    traced = watch.largest is not None and watch.numpy
    started = traced and not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    if traced:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    try:
        with mode if mode is not None else contextlib.nullcontext():
            out = fn()
        if traced and not found:
            peak = tracemalloc.get_traced_memory()[1] - base
            if watch.largest is not None and peak >= 4 * watch.largest:
                found.append(
                    Breach(
                        watch.largest_rule,
                        f"it held {peak / 1024:.0f} KiB at once, as much as the whole score "
                        f"matrix ({watch.largest} values)",
                    )
                )
    finally:
        if started:
            tracemalloc.stop()
    return out, (found[0] if found else None)
