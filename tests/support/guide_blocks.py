"""The instructors' guide's command blocks: each fenced block with the doc-test marker above
it (``<!-- doc-test: instructor -->``, ``learner`` or ``skip: why``). Used by
``tests/grader/test_instructors_guide.py`` (which runs them on a simulated hub) and
``tests/site/test_hub.py`` (the collect and grade blocks on a real hub's homes)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "instructors.md"
MARKER = re.compile(r"^<!-- doc-test: (instructor|learner|skip: .+) -->$")


@dataclass
class Block:
    role: str  # instructor | learner | skip: why
    lang: str
    body: str
    line: int


def blocks(text: str) -> list[Block]:
    """The fenced blocks with an info string, each with the marker above it ('' if none)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\w+)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j] != "```":
            j += 1
        before = next((s.strip() for s in reversed(lines[:start]) if s.strip()), "")
        mm = MARKER.match(before)
        out.append(
            Block(mm.group(1) if mm else "", m.group(1), "\n".join(lines[i + 1 : j]), start + 1)
        )
        i = j + 1
    return out
