"""course_lib.gpt.coref_sentences: the mechanical shape of chapter 11's two sentence tables."""

from __future__ import annotations

import re

import pytest

from course_lib.gpt.coref_sentences import AGREEMENT_GROUPS, WINOGRAD_PAIRS

FEMALE = {"she", "girl", "queen", "actress", "waitress", "nun", "woman", "daughter"}
MALE = {"he", "boy", "king", "waiter", "actor", "monk", "man", "father", "grandfather"}
FEMALE_NAMES = {"Mary", "Anna", "Sarah", "Emma", "Lucy", "Kate", "Alice", "Helen", "Emily"}
FEMALE_NAMES |= {"Laura", "Jane"}
MALE_NAMES = {"John", "Tom", "Peter", "David", "Mark", "Paul", "Jack", "George", "Henry"}
MALE_NAMES |= {"Robert"}


def _word(word: str) -> re.Pattern:
    """A whole word, its first letter in either case."""
    head = f"[{word[0].lower()}{word[0].upper()}]"
    return re.compile(rf"\b{head}{re.escape(word[1:])}\b")


def _only_start(text: str, word: str) -> int:
    found = [m.start() for m in _word(word).finditer(text)]
    assert len(found) == 1, f"{word!r} is not exactly once a whole word in {text!r}"
    return found[0]


def test_table_sizes_and_field_counts():
    assert len(WINOGRAD_PAIRS) >= 60
    assert len(AGREEMENT_GROUPS) >= 48
    assert all(len(row) == 7 for row in WINOGRAD_PAIRS)
    assert all(len(row) == 5 for row in AGREEMENT_GROUPS)
    assert all(all(field for field in row) for row in WINOGRAD_PAIRS + AGREEMENT_GROUPS)


def test_all_sentences_are_distinct():
    wino = [t.format(c) for t, a, b, *_ in WINOGRAD_PAIRS for c in (a, b)]
    agree = [t.format(p) for t, a, b, *_ in AGREEMENT_GROUPS for p in (a, b)]
    assert len(set(wino)) == len(wino)
    assert len(set(agree)) == len(agree)
    assert not set(wino) & set(agree)


@pytest.mark.parametrize("row", WINOGRAD_PAIRS, ids=lambda r: r[3] + "/" + r[4])
def test_winograd_order_nouns_pronoun_then_cue(row):
    template, cue_a, cue_b, first, second, pronoun, note = row
    assert template.count("{}") == 1 and cue_a != cue_b and first != second
    assert pronoun == "it"
    before = template.split("{}")[0]
    positions = [_only_start(before, w) for w in (first, second, pronoun)]
    assert positions == sorted(positions), f"not first noun, second noun, pronoun: {template!r}"
    for cue in (cue_a, cue_b):
        text = template.format(cue)
        assert _word(cue).search(text, len(before)) is not None
        assert [_only_start(text, w) for w in (first, second, pronoun)] == positions


def test_every_winograd_pair_carries_its_audit_note():
    notes = [row[6] for row in WINOGRAD_PAIRS]
    assert all(n == "ok" or n.startswith("rewritten:") for n in notes)
    assert all(len(n) <= 90 for n in notes)
    for n in notes:
        if n != "ok":
            assert " -- " in n, f"a rewrite names its reason after ' -- ': {n!r}"


def _kind(row) -> str:
    pron_a, pron_b = row[1], row[2]
    if {pron_a, pron_b} == {"it", "they"}:
        return "number"
    if {pron_a, pron_b} == {"he", "she"}:
        return "gender"
    raise AssertionError(f"pronouns must be it/they or he/she: {row!r}")


@pytest.mark.parametrize("row", AGREEMENT_GROUPS, ids=lambda r: r[3] + "/" + r[4])
def test_agreement_nouns_before_the_one_pronoun(row):
    template, pron_a, pron_b, first, second = row
    assert template.count("{}") == 1 and first != second
    slot = template.index("{}")
    assert _only_start(template, first) < _only_start(template, second) < slot
    for pronoun in (pron_a, pron_b):
        text = template.format(pronoun)
        assert _only_start(text, pronoun) == slot
        for other in {"it", "they", "he", "she"} - {pronoun}:
            assert _word(other).search(text) is None, f"{other!r} also in {text!r}"


@pytest.mark.parametrize("row", AGREEMENT_GROUPS, ids=lambda r: r[3] + "/" + r[4])
def test_agreement_the_pronoun_fits_exactly_one_noun(row):
    _, pron_a, pron_b, first, second = row
    by_pronoun = {pron_a: first, pron_b: second}
    if _kind(row) == "number":
        plural, single = by_pronoun["they"], by_pronoun["it"]
        assert plural.endswith("s") and not single.endswith("s"), row
    else:
        female, male = by_pronoun["she"], by_pronoun["he"]
        assert female in FEMALE | FEMALE_NAMES and male in MALE | MALE_NAMES, row


def test_agreement_kinds_positions_and_frames_are_balanced():
    kinds = [_kind(row) for row in AGREEMENT_GROUPS]
    share_number = kinds.count("number") / len(kinds)
    assert 0.4 <= share_number <= 0.6
    first_marked = [row[1] in ("they", "she") for row in AGREEMENT_GROUPS]
    assert 0.4 <= sum(first_marked) / len(first_marked) <= 0.6
    for kind in ("number", "gender"):
        marked = [m for m, k in zip(first_marked, kinds, strict=True) if k == kind]
        assert 0.4 <= sum(marked) / len(marked) <= 0.6, kind
    frames = {_word(row[4]).sub("Y", _word(row[3]).sub("X", row[0])) for row in AGREEMENT_GROUPS}
    assert len(frames) >= 10
