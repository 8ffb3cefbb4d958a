"""course_lib.gpt.winograd: finding the words, and the three ways of reading a model's answer."""

from __future__ import annotations

import math
import re

import pytest
import torch

from course_lib.gpt import GPT, GPTConfig, winograd
from course_lib.gpt.winograd import Item


class WordTok:
    """A test tokenizer: one token per word (with its leading space), except that words of more
    than five letters split in two ("␣suitc" + "ase"), so that some nouns take two tokens."""

    def __init__(self) -> None:
        self.pieces = ["<pad>"]
        self.ids = {"<pad>": 0}

    def _split(self, text: str) -> list[str]:
        out = []
        for word in re.findall(r" ?\w+| ?[^\w\s]+", text):
            out += [word[:-3], word[-3:]] if len(word.strip()) > 5 else [word]
        return out

    def encode(self, text: str) -> torch.Tensor:
        for piece in self._split(text):
            self.ids.setdefault(piece, len(self.pieces))
            if self.ids[piece] == len(self.pieces):
                self.pieces.append(piece)
        return torch.tensor([self.ids[p] for p in self._split(text)], dtype=torch.long)  # (N,)

    def show(self, ids) -> list[str]:
        return [self.pieces[int(i)].replace(" ", "␣") for i in ids]

    def decode(self, ids) -> str:
        return "".join(self.pieces[int(i)] for i in ids)


class Bigram:
    """A stub model whose logits at a token depend on that token alone (``table[token]``),
    counting its calls: so a test can decide which continuation it prefers."""

    def __init__(self, vocab: int = 128) -> None:
        self.table = torch.zeros(vocab, vocab)  # (V, V)
        self.calls = 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.table[tokens]  # (B, N, V)


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=128, seq_len=64, d_model=32, num_layers=2, num_heads=4)
    return GPT(config).eval(), WordTok()


TROPHY = Item("The trophy did not fit in the suitcase because it was too big.", ("trophy", "suitcase"), 0, 0)  # fmt: skip
NAMES = Item("Mary called John because she wanted to talk.", ("Mary", "John"), 0, 1, "she")


# =========================================================================== the sentences


def test_at_least_60_pairs_each_naming_both_nouns_before_the_pronoun():
    assert winograd.PAIRS is winograd.WINOGRAD_PAIRS and len(winograd.PAIRS) >= 60
    for row in winograd.PAIRS:
        template, cue_a, cue_b, first, second, pronoun = row[:6]
        assert cue_a != cue_b and first != second
        text = template.format(cue_a)
        a, b = winograd.find_word(text, first), winograd.find_word(text, second)
        assert a[0] < b[0] < winograd.find_word(text, pronoun, after=b[1])[0]
    assert len({p[0] for p in winograd.PAIRS}) == len(winograd.PAIRS), "no sentence twice"


def test_items_flip_the_answer_so_both_rules_score_half():
    items = winograd.items()
    assert len(items) == 2 * len(winograd.PAIRS)
    assert [it.answer for it in items[:4]] == [0, 1, 0, 1]
    assert sum(it.answer == 0 for it in items) == len(winograd.PAIRS)
    assert all(it.pronoun == row[5] for it, row in zip(items[::2], winograd.PAIRS))


def test_items_read_six_fields_and_ignore_an_audit_note():
    rows = [("The cat saw the dog so {} ran.", "x", "y", "cat", "dog", "it", "a note")]
    a, b = winograd.items(rows)
    assert (a.text, a.answer, a.pronoun, b.answer) == ("The cat saw the dog so x ran.", 0, "it", 1)
    with pytest.raises(ValueError, match="at least 5 fields"):
        winograd.items([("The cat saw {}.", "x", "y")])


def test_agreement_items_give_each_pronoun_its_noun():
    groups = [
        ("The boxes fell on the key and then {} rolled away.", "they", "it", "boxes", "key"),
        ("Mary called John because {} wanted to talk.", "she", "he", "Mary", "John"),
    ]
    its = winograd.agreement_items(groups)
    assert [(i.pronoun, i.answer, i.pair) for i in its] == [
        ("they", 0, 0), ("it", 1, 0), ("she", 0, 1), ("he", 1, 1),
    ]  # fmt: skip
    assert its[3].text == "Mary called John because he wanted to talk."
    assert winograd.suffix("she") == ' In that sentence, "she" means the'
    assert winograd.SUFFIX == winograd.suffix("it")


# =========================================================================== finding words


def test_whole_words_only():
    pieces = ["The", "␣item", "␣in", "␣the", "␣catalogue", "␣hit", "␣the", "␣cat", "␣so", "␣it"]
    assert winograd.word_span(pieces, "it") == [9]
    assert winograd.word_span(pieces, "cat") == [7]
    assert winograd.word_span(pieces, "the", after=20) == [6]
    with pytest.raises(ValueError, match="'dog' is not a whole word in 'The item"):
        winograd.word_span(pieces, "dog")


def test_candidate_at_the_sentence_start_and_split_nouns():
    pieces = ["Mary", "␣called", "␣John", "␣because", "␣she", "␣was", "␣late"]
    assert winograd.word_span(pieces, "Mary") == [0]
    assert winograd.locate(pieces, NAMES) == ([0], [2], [4])
    pieces = ["The", "␣tro", "phy", "␣did", "␣not", "␣fit", "␣in", "␣it"]
    assert winograd.candidate_spans(pieces, "trophy") == [1, 2]
    assert winograd.word_span(pieces, "the") == [0], "a capital first letter matches"


def test_the_pronoun_is_found_after_both_nouns():
    item = Item("It said the cup hit the jug so it broke.", ("cup", "jug"), 0, 0)
    tok = WordTok()
    pieces = tok.show(tok.encode(item.text))
    assert winograd.locate(pieces, item)[2] == [8]
    bad = Item("The cup hit the jug.", ("cup", "jug"), 0, 0)
    assert "'it' is not a whole word" in winograd.problems(tok, [item, bad])[1]


def test_noun_attention_sums_each_span():
    w = torch.zeros(1, 2, 4, 4)
    w[0, 0, 3] = torch.tensor([0.1, 0.2, 0.3, 0.4])
    out = winograd.noun_attention([w, w], 3, [[0, 1], [2]])
    assert out.shape == (2, 2, 2)
    torch.testing.assert_close(out[0, 0], torch.tensor([0.3, 0.3]))


# =========================================================================== resolve


def test_resolve_keeps_the_good_rows_and_names_the_bad_one(tiny):
    model, tok = tiny
    bad = Item("The cup hit the jug so it broke.", ("cup", "bowl"), 1, 2)
    coref = winograd.resolve(model, tok, [TROPHY, bad, NAMES])
    assert list(coref.problems) == [1] and "'bowl'" in coref.problems[1]
    assert coref.at_it.shape == coref.at_end.shape == (3, 2, 4, 2)
    for t in (coref.at_it, coref.at_end, coref.log_odds, coref.choice, coref.right("it")):
        assert t[1].isnan().all() and not t[[0, 2]].isnan().any()
    assert ((coref.at_it[[0, 2]] > 0) & (coref.at_it[[0, 2]] < 1)).all()
    torch.testing.assert_close(coref.choice[[0, 2]], (coref.log_odds[[0, 2]] > 0).double())
    with pytest.raises(ValueError, match='"end" or "it"'):
        coref.right("pronoun")


def test_whole_nouns_are_scored_and_one_token_nouns_read_the_last_position(tiny):
    model, tok = tiny
    box = Item("The box did not fit in the suitcase because it was too big.", ("box", "suitcase"), 0, 0)  # fmt: skip
    prompt = box.text + winograd.suffix("it")
    assert len(tok.encode(" box")) == 1 and len(tok.encode(" suitcase")) == 2
    scores = winograd.noun_logprobs(model, tok, [prompt], [box.nouns])  # (1, 2)
    p = tok.encode(prompt)  # (P,)
    for k, noun in enumerate(box.nouns):
        ids = torch.cat([p, tok.encode(" " + noun)])  # (P + T,)
        logp = torch.log_softmax(model(ids[None])[0].double(), -1)  # (P + T, V)
        want = sum(logp[t - 1, ids[t]] for t in range(len(p), len(ids)))
        torch.testing.assert_close(scores[0, k], want)
    # resolve reads the one-token noun at the prompt's last token (no second run for it)
    coref = winograd.resolve(model, tok, [box])
    torch.testing.assert_close(coref.log_odds[0], scores[0, 1] - scores[0, 0])


class Uniform(Bigram):
    """A stub model with one layer of one head that attends uniformly to every key so far,
    so the attention a query puts on a noun is (the noun's tokens) / (query position + 1)."""

    def __call__(self, tokens: torch.Tensor, need_weights: bool = False):
        logits = super().__call__(tokens)  # (B, N, V)
        if not need_weights:
            return logits
        b, n = tokens.shape
        w = torch.ones(n, n).tril()
        return logits, [(w / w.sum(-1, keepdim=True)).expand(b, 1, n, n)]  # 1 x (B, 1, N, N)


def test_resolve_reads_the_pronoun_the_last_token_and_the_whole_nouns():
    tok, model = WordTok(), Uniform()
    box = Item("The box did not fit in the suitcase because it was too big.", ("box", "suitcase"), 0, 0)  # fmt: skip
    ox = Item("The ox saw the cat because it was near.", ("ox", "cat"), 1, 1)
    prompts = [it.text + winograd.suffix("it") for it in (box, ox)]
    lengths = [len(tok.encode(p)) for p in prompts]  # the rows differ: one is padded
    for noun in (" box", " suitcase", " ox", " cat"):
        tok.encode(noun)
    the, box_id = tok.ids[" the"], tok.ids[" box"]
    model.table[the, box_id] = 2.0  # after "... means the", " box" is likely
    coref = winograd.resolve(model, tok, [box, ox])
    assert model.calls == 2, "one run with weights, one more for the two-token noun only"
    # box: "The box ... the suitc|ase beca|use it": the pronoun is token 11, the nouns 1 and 2 tokens
    torch.testing.assert_close(coref.at_it[0, 0, 0], torch.tensor([1 / 12, 2 / 12]))
    torch.testing.assert_close(coref.at_it[1, 0, 0], torch.tensor([1 / 8, 1 / 8]))
    for row, n in enumerate(lengths):  # from each row's own last token, not the padding
        want = torch.tensor([1.0, 2.0 if row == 0 else 1.0]) / n
        torch.testing.assert_close(coref.at_end[row, 0, 0], want)
    lp = torch.log_softmax(model.table.double(), -1)  # (V, V): log P(next | this token)
    suitcase = lp[the, tok.ids[" suitc"]] + lp[tok.ids[" suitc"], tok.ids["ase"]]
    torch.testing.assert_close(
        coref.log_odds, torch.stack([suitcase - lp[the, box_id], torch.tensor(0.0).double()])
    )
    assert coref.choice.tolist() == [0.0, 0.0] and coref.answers.tolist() == [0, 1]
    assert coref.right("it")[:, 0, 0].tolist() == [0.0, 0.0]  # box: more on the second noun
    # another question after every sentence: the last token is its own
    other = winograd.resolve(model, tok, [ox], suffix=" Who?")
    n = len(tok.encode(ox.text + " Who?"))
    torch.testing.assert_close(other.at_end[0, 0, 0], torch.tensor([1 / n, 1 / n]))
    torch.testing.assert_close(other.at_it, coref.at_it[1:])


# =========================================================================== substitution


def test_substitute_names_the_candidate_as_the_sentence_does():
    (a, b), rest = winograd.substitute(TROPHY)
    assert a.endswith("because the trophy") and b.endswith("because the suitcase")
    assert rest == " was too big."
    (a, b), rest = winograd.substitute(NAMES)
    assert (a[-12:], b[-12:], rest) == ("because Mary", "because John", " wanted to talk.")
    opens = Item("The ball hit the cup. It broke.", ("ball", "cup"), 1, 0, "it")
    (a, b), rest = winograd.substitute(opens)
    assert (a, b, rest) == ("The ball hit the cup. The ball", "The ball hit the cup. The cup", " broke.")  # fmt: skip


def test_continuation_tokens_are_the_same_for_both_candidates():
    tok = WordTok()
    first, second, n = winograd.substitution_tokens(tok, TROPHY)
    assert n == len(tok.encode(" was too big.")) == 4
    assert first[-n:].tolist() == second[-n:].tolist()
    assert tok.decode(first) == "The trophy did not fit in the suitcase because the trophy was too big."  # fmt: skip


def test_substitution_picks_the_candidate_the_model_prefers():
    tok, model = WordTok(), Bigram()
    ox = Item("The ox saw the cat because it was near.", ("ox", "cat"), 0, 0)
    cat = Item("The ox saw the cat because it ran home.", ("ox", "cat"), 1, 0)
    for text in (ox.text, cat.text):
        tok.encode(text)
    model.table[tok.ids[" ox"], tok.ids[" was"]] = 5.0  # "ox was" likely: the first noun
    model.table[tok.ids[" cat"], tok.ids[" ran"]] = 5.0  # "cat ran" likely: the second
    sub = winograd.substitution_scores(model, tok, [ox, cat])
    assert model.calls == 1, "both candidates of every sentence in one run"
    assert sub.choice("partial").tolist() == [0.0, 1.0] == sub.choice("full").tolist()
    assert sub.right("partial").tolist() == [1.0, 1.0]
    # with nothing else preferred, each score differs only by the one boosted transition
    diff = sub.partial[0, 0] - sub.partial[0, 1]  # nats
    assert diff > 0 and math.isclose(diff, float(sub.full[0, 0] - sub.full[0, 1]))
    with pytest.raises(ValueError, match='"partial" or "full"'):
        sub.choice("joint")


def test_substitution_reports_a_bad_sentence_and_keeps_the_others(tiny):
    model, tok = tiny
    bad = Item("The cup hit the jug.", ("cup", "jug"), 0, 0)
    sub = winograd.substitution_scores(model, tok, [TROPHY, bad, NAMES])
    assert list(sub.problems) == [1] and sub.partial.shape == sub.full.shape == (3, 2)
    assert sub.full[1].isnan().all() and sub.right()[1].isnan()
    assert not sub.full[[0, 2]].isnan().any() and (sub.full[[0, 2]] < sub.partial[[0, 2]]).all()


def test_pronoun_attention_and_prior_choice(tiny):
    model, tok = tiny
    bad = Item("The cup hit the jug.", ("cup", "jug"), 0, 0)
    with pytest.warns(UserWarning, match="rows left NaN"):
        att = winograd.pronoun_attention(model, tok, [TROPHY, bad, NAMES])
    assert att.shape == (3, 2, 4, 2) and att[1].isnan().all() and not att[[0, 2]].isnan().any()
    # the pronoun's attention is the same with or without the question after the sentence
    coref = winograd.resolve(model, tok, [TROPHY, NAMES])
    torch.testing.assert_close(att[[0, 2]], coref.at_it)
    prior = winograd.prior_choice(model, tok, [TROPHY, Item(TROPHY.text, ("suitcase", "trophy"), 1, 0)])  # fmt: skip
    assert prior.tolist() in ([0.0, 1.0], [1.0, 0.0]), "swapping the nouns flips the prior"


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="winograd.Item"):
        winograd.substitution_scores(Bigram(), WordTok(), ["The cat sat."])
    with pytest.raises(ValueError, match="no sentences"):
        winograd.resolve(Bigram(), WordTok(), [])
    with pytest.raises(ValueError, match="non-empty"):
        winograd.suffix("")


# =========================================================================== halves


def test_split_halves_are_disjoint_and_cover():
    a, b = winograd.split_halves(62)
    assert len(a) == len(b) == 31 and sorted(a + b) == list(range(62))


def test_sentence_rows_are_both_versions_of_each_pair():
    rows = winograd.sentence_rows([0, 3])
    assert rows == [0, 1, 6, 7]
    its = winograd.items()
    assert {its[r].pair for r in rows} == {0, 3} and [its[r].answer for r in rows] == [0, 1, 0, 1]


# =========================================================================== the real model


@pytest.mark.slow
def test_smollm2_reads_every_pronoun_without_problems():
    from course_lib.gpt.pretrained import load_pretrained, load_tokenizer, smollm2_path

    path = smollm2_path()
    model, tok = load_pretrained(path).eval(), load_tokenizer(path)
    groups = [("Mary called John because {} wanted to talk.", "she", "he", "Mary", "John")]
    sentences = winograd.items()[:2] + winograd.agreement_items(groups)
    coref = winograd.resolve(model, tok, sentences)
    layers, heads = model.config.num_layers, model.config.num_heads
    assert coref.at_it.shape == (4, layers, heads, 2) and not coref.problems
    assert not coref.log_odds.isnan().any()
    sub = winograd.substitution_scores(model, tok, sentences)
    assert not sub.problems and (sub.full < sub.partial).all()
    att = winograd.pronoun_attention(model, tok, sentences)
    torch.testing.assert_close(att, coref.at_it, atol=1e-4, rtol=1e-4)
    for item in sentences:  # the split encoding is the tokenizer's own on these sentences
        first, second, _ = winograd.substitution_tokens(tok, item)
        (a, b), rest = winograd.substitute(item)
        assert first.tolist() == tok.encode(a + rest).tolist()
        assert second.tolist() == tok.encode(b + rest).tolist()
