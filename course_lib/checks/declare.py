r"""One way to declare an exercise: its function with *slips*, its cases, its texts.

An exercise is written once, as the correct function with a keyword for each common mistake
(a *slip*) whose default is the right thing to do::

    def _share(weights, *, start=1, key=0):          # the defaults: the reference
        return float(torch.as_tensor(weights)[:, :, start:, key].mean())

    exercise(
        "11.1", _share, target="first_token_share", title="...", points=1, cases=_cases,
        slips={"query-zero": dict(start=0), "last-key": dict(key=-1)},
    )

Each slip is named, and its nudge and detail are prose in ``ch11.md`` under
``## 11.1/query-zero`` (:mod:`course_lib.checks.texts`); the exercise's general hint is the
section ``## 11.1``. A failure the checks recognise is reported with its key
(``CaseResult.cause == "11.1/query-zero"``), so the grader and the class report count
diagnoses by key, never by re-reading text.

Other texts of an exercise, each a section of the same file when it is declared:

* ``errors={"broadcast": PATTERN}``: the cause of an exception whose ``"Type: message"``
  matches ``PATTERN`` (``re.search``), under ``## 11.1/broadcast``;
* ``no_warnings=True``: a RuntimeWarning fails a case; ``## 11.1/no-warnings`` says why, if
  the section exists;
* ``rules=(Rule("no-softmax", ...),)``: what the statement forbids
  (:mod:`course_lib.checks.rules`); a call that breaks one fails its case, and
  ``## 11.1/no-softmax`` says why the statement forbids it (required);
* ``keeps_inputs=True``: changing an argument in place fails a case; ``## 11.1/keeps-inputs``
  says how to avoid it, if the section exists (else :data:`~.core.CHANGED_INPUT`);
* for a measurement on a real model (:func:`~.core.reveal`), ``## 11.1/gap-high``,
  ``gap-low`` and ``gap-right`` explain a prediction that is too high, too low or close.

Every other field of :class:`~.core.Exercise` (``atol``, ``compare``, ``outputs``...) is
passed through unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .core import Exercise, register
from .rules import Rule
from .texts import chapter_texts, text

GAPS = ("high", "low", "right")


def exercise(
    id: str,
    fn: Callable[..., Any],
    *,
    slips: dict[str, dict[str, Any]],
    errors: dict[str, str] | None = None,
    no_warnings: bool = False,
    keeps_inputs: bool = False,
    rules: tuple[Rule, ...] = (),
    **fields: Any,
) -> Exercise:
    """Declare and register exercise ``id``: ``fn`` with its keyword defaults is the
    reference, ``fn(..., **slips[name])`` the mistake called ``name``."""
    texts = chapter_texts(id.split(".")[0])
    mistakes: dict[str, Callable[..., Any]] = {}
    for name, keywords in slips.items():
        if not isinstance(keywords, dict):
            raise TypeError(f"{id}/{name}: a slip is a dict of keywords for {fn.__name__}")
        mistakes[text(f"{id}/{name}")] = functools.partial(fn, **keywords)
    optional = {k: texts.get(f"{id}/{k}") for k in ("no-warnings", "keeps-inputs")}
    ex = Exercise(
        id=id,
        reference=fn,
        mistakes=mistakes,
        hint=text(id),
        errors={pattern: text(f"{id}/{name}") for name, pattern in (errors or {}).items()},
        no_warnings=(optional["no-warnings"] or True) if no_warnings else False,
        keeps_inputs=(optional["keeps-inputs"] or True) if keeps_inputs else False,
        rules=tuple(rules),
        rule_texts={r.name: text(f"{id}/{r.name}") for r in rules},
        gaps={
            way: texts[f"{id}/gap-{way}"].render(True) for way in GAPS if f"{id}/gap-{way}" in texts
        },
        **fields,
    )
    return register(ex)
