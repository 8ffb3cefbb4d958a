"""course_lib.gpt.winograd: the course's sentence pairs and the attention to each noun."""

from __future__ import annotations

import torch

from course_lib.gpt import winograd


def test_at_least_60_pairs_each_naming_both_nouns_and_it():
    assert len(winograd.PAIRS) >= 60
    for template, cue_a, cue_b, first, second in winograd.PAIRS:
        assert cue_a != cue_b and first != second
        text = template.format(cue_a)
        assert text.index(" " + first) < text.index(" " + second) < text.index(" it ")
    assert len({p[0] for p in winograd.PAIRS}) == len(winograd.PAIRS), "no sentence twice"


def test_items_flip_the_answer_so_both_rules_score_half():
    items = winograd.items()
    assert len(items) == 2 * len(winograd.PAIRS)
    assert [it.answer for it in items[:4]] == [0, 1, 0, 1]
    assert sum(it.answer == 0 for it in items) == len(winograd.PAIRS)


def test_candidate_spans_cover_the_nouns_tokens():
    pieces = ["The", "␣tro", "phy", "␣did", "␣not", "␣fit", "␣in", "␣it"]
    assert winograd.candidate_spans(pieces, "trophy") == [1, 2]
    assert winograd.candidate_spans(pieces, "it") == [7]


def test_noun_attention_sums_each_span():
    w = torch.zeros(1, 2, 4, 4)
    w[0, 0, 3] = torch.tensor([0.1, 0.2, 0.3, 0.4])
    out = winograd.noun_attention([w, w], 3, [[0, 1], [2]])
    assert out.shape == (2, 2, 2)
    torch.testing.assert_close(out[0, 0], torch.tensor([0.3, 0.3]))


def test_split_halves_are_disjoint_and_cover():
    a, b = winograd.split_halves(62)
    assert len(a) == len(b) == 31 and sorted(a + b) == list(range(62))


def test_sentence_rows_are_both_versions_of_each_pair():
    rows = winograd.sentence_rows([0, 3])
    assert rows == [0, 1, 6, 7]
    its = winograd.items()
    assert {its[r].pair for r in rows} == {0, 3} and [its[r].answer for r in rows] == [0, 1, 0, 1]
