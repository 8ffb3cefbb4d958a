"""course_lib.checks.texts: a chapter's Markdown into keyed two-tier hints, and every section
of every chapter is one that its checks use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course_lib.checks import texts
from course_lib.checks.core import all_exercises

CHECKS = Path(texts.__file__).parent


def test_a_section_is_a_nudge_then_a_detail_with_its_key():
    parsed = texts.parse(
        "# notes for authors, never shown\n\n"
        "## 02.1/unscaled\nyour scores are too large\nby a factor sqrt(d_k).\n\n"
        "Divide by sqrt(d_k).\n\nBefore the softmax.\n\n"
        "## 02.1, 02.4\nshared text\n"
    )
    hint = parsed["02.1/unscaled"]
    assert str(hint) == "your scores are too large by a factor sqrt(d_k)."
    assert hint.detail == "Divide by sqrt(d_k). Before the softmax."
    assert hint.key == "02.1/unscaled"
    assert str(parsed["02.1"]) == str(parsed["02.4"]) == "shared text"
    assert parsed["02.4"].key == "02.4" and parsed["02.4"].detail == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("## 02.1/Unscaled\nx\n", "not a key"),
        ("## two words\nx\n", "not a key"),
        ("## 02.1\nx\n## 02.1\ny\n", "appears twice"),
        ("## 02.1\n\n\n", "is empty"),
    ],
)
def test_a_malformed_file_names_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        texts.parse(text, "ch02.md")


def test_a_missing_text_says_which_file_to_add_it_to():
    with pytest.raises(KeyError, match=r"add a '## 02.1/nowhere' section to ch02.md"):
        texts.text("02.1/nowhere")


def _used_keys() -> set[str]:
    """Every key a chapter's checks use: the declared ones (hints, mistakes, errors, texts
    of warnings, changed inputs and gaps), and keys its module names literally."""
    used = set()
    for ex_id, ex in all_exercises().items():
        hints = [ex.hint, *ex.mistakes, *ex.errors.values(), ex.no_warnings, ex.keeps_inputs]
        hints += list(ex.rule_texts.values())
        used |= {h.key for h in hints if getattr(h, "key", "")}
        used |= {f"{ex_id}/gap-{way}" for way in ex.gaps}
    for module in CHECKS.glob("ch[0-9]*.py"):
        used |= set(re.findall(r"[\"'](\d{2}\.\d+/[a-z0-9-]+)[\"']", module.read_text()))
    return used


def test_every_section_of_every_chapter_is_used_and_every_exercise_has_a_hint():
    used = _used_keys()
    for md in sorted(CHECKS.glob("ch[0-9]*.md")):
        keys = set(texts.chapter_texts(md.stem.removeprefix("ch")))
        assert not keys - used, f"{md.name} has sections no check uses: {sorted(keys - used)}"
    for ex_id, ex in all_exercises().items():
        assert getattr(ex.hint, "key", "") == ex_id, f"{ex_id} has no '## {ex_id}' hint"
        for hint in ex.mistakes:
            assert hint.key.startswith(f"{ex_id}/"), (ex_id, str(hint)[:40])
