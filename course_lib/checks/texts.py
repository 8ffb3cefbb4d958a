r"""What the checks say, read from ``course_lib/checks/chNN.md``: prose kept as prose.

Each chapter's hints, named mistakes, error causes and prediction gaps are Markdown sections
keyed by what they explain, beside the chapter's declarations in ``chNN.py``::

    ## 02.1/unscaled
    your scores are too large by a factor sqrt(d_k).

    Divide the scores by sqrt(d_k) = sqrt(q.shape[-1]) before the softmax.

A section's first paragraph is the *nudge* (shown on a first failure), the paragraphs after
it the *detail* (shown when the same check fails again). Lines of a paragraph are joined with
spaces, so the file can be wrapped as an editor likes. A heading may name several keys
(``## 02.1/overflow, 02.4/overflow``) when two exercises share a text. Text above the first
``##`` heading is a note for authors and is never shown.

Keys: ``02.1`` is the exercise's general hint; ``02.1/<name>`` a named mistake (a slip), an
error pattern's cause, or one of the special texts ``no-warnings``, ``keeps-inputs``,
``gap-high``, ``gap-low`` and ``gap-right`` (see :func:`course_lib.checks.declare.exercise`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from .core import Hint

HERE = Path(__file__).parent
_HEADING = re.compile(r"^## +(.+?)\s*$")
_KEY = re.compile(r"^\d{2}\.\d+(/[a-z0-9][a-z0-9-]*)?$")


def parse(text: str, source: str = "<text>") -> dict[str, Hint]:
    """``{key: Hint(nudge, detail, key)}`` from a chapter's Markdown; ValueError names the
    line of a malformed key, a repeated key or an empty section."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        heading = _HEADING.match(line)
        if heading:
            current = []
            for key in (k.strip() for k in heading.group(1).split(",")):
                if not _KEY.match(key):
                    raise ValueError(f"{source}:{number}: {key!r} is not a key like 02.1/name")
                if key in sections:
                    raise ValueError(f"{source}:{number}: {key!r} appears twice")
                sections[key] = current  # the same list for every key of the heading
        elif current is not None:
            current.append(line)
    texts = {}
    for key, lines in sections.items():
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", "\n".join(lines))]
        paragraphs = [p for p in paragraphs if p]
        if not paragraphs:
            raise ValueError(f"{source}: the section {key!r} is empty")
        texts[key] = Hint(paragraphs[0], " ".join(paragraphs[1:]), key=key)
    return texts


@functools.cache
def chapter_texts(chapter: str) -> dict[str, Hint]:
    """Every text of chapter ``chapter`` (``"02"``), from ``chNN.md`` beside this module."""
    path = HERE / f"ch{chapter}.md"
    if not path.exists():
        return {}
    return parse(path.read_text(encoding="utf-8"), str(path))


def text(key: str) -> Hint:
    """The text under ``## key``; KeyError names the file to add it to."""
    chapter = key.split(".")[0]
    try:
        return chapter_texts(chapter)[key]
    except KeyError:
        raise KeyError(f"no text for {key!r}: add a '## {key}' section to ch{chapter}.md") from None
