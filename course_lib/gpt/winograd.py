r"""How a language model resolves a pronoun in chapter 11's sentences, measured three ways.

The sentences live in :mod:`course_lib.gpt.coref_sentences`: Winograd-style pairs (Levesque et
al., 2012, "The Winograd Schema Challenge"), two versions of a sentence that differ in one word
after the pronoun and so flip its antecedent, and agreement groups, where the pronoun itself
(it / they, he / she) names the antecedent by number or gender.

1. **Attention** (:func:`resolve`, :func:`pronoun_attention`): per layer and head, how much
   attention the pronoun, or the last token of a question appended to the sentence, puts on
   each candidate noun's tokens.
2. **The model's answer** (:func:`resolve`): after the sentence and the question
   (:func:`suffix`), which whole noun the model gives more probability next.
3. **Substitution** (:func:`substitution_scores`), the way language models are scored on
   Winograd schemas (Trinh and Le, 2018, "A Simple Method for Commonsense Reasoning"; Radford
   et al., 2019; Brown et al., 2020): put each candidate in the pronoun's place and compare the
   log-probability of the words after it (*partial* scoring) or of the whole sentence (*full*).

:func:`prior_choice` is the baseline that knows which noun is more frequent and nothing of the
sentence. A sentence whose noun or pronoun cannot be found is not fatal: it is named in
``problems`` (row → reason) and its rows are NaN.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field

import torch

from .coref_sentences import AGREEMENT_GROUPS, WINOGRAD_PAIRS

__all__ = [
    "PAIRS",
    "PRIOR_PROMPT",
    "SUFFIX",
    "Coreference",
    "Item",
    "Substitution",
    "agreement_items",
    "candidate_spans",
    "find_word",
    "items",
    "locate",
    "noun_attention",
    "noun_logprobs",
    "prior_choice",
    "problems",
    "pronoun_attention",
    "resolve",
    "sentence_rows",
    "split_halves",
    "substitute",
    "substitution_scores",
    "substitution_tokens",
    "suffix",
    "word_span",
]

PAIRS = WINOGRAD_PAIRS  # the name earlier chapters' code uses
_QUESTION = ' In that sentence, "{}" means the'
PRIOR_PROMPT = "The"  # what :func:`prior_choice` conditions on: no sentence, one word


def suffix(pronoun: str) -> str:
    """The question appended to a sentence so that the model must name the noun next."""
    if not isinstance(pronoun, str) or not pronoun.strip():
        raise ValueError(f"the pronoun must be a non-empty string, got {pronoun!r}")
    return _QUESTION.format(pronoun)


SUFFIX = suffix("it")


@dataclass(frozen=True)
class Item:
    """One sentence: its text, its two candidate nouns (first, second), which one the pronoun
    means (``answer``: 0 first, 1 second), its pair's (or group's) index and the pronoun."""

    text: str
    nouns: tuple[str, str]
    answer: int
    pair: int
    pronoun: str = "it"


def _fields(row, n: int, what: str) -> tuple:
    if isinstance(row, str) or len(row) < n:
        raise ValueError(f"each {what} needs at least {n} fields, got {row!r}")
    return tuple(row[:n])


def items(pairs=WINOGRAD_PAIRS) -> list[Item]:
    """Both versions of every pair, in pair order: ``2 * len(pairs)`` items. A row is (template
    with ``{}`` for the cue, first cue, second cue, first noun, second noun, pronoun); any
    further fields are ignored, and a row of five means the pronoun "it"."""
    out = []
    for p, row in enumerate(pairs):
        template, cue_a, cue_b, first, second = _fields(row, 5, "Winograd pair")
        pronoun = row[5] if len(row) > 5 else "it"
        out.append(Item(template.format(cue_a), (first, second), 0, p, pronoun))
        out.append(Item(template.format(cue_b), (first, second), 1, p, pronoun))
    return out


def agreement_items(groups=AGREEMENT_GROUPS) -> list[Item]:
    """Two items per agreement group (template with ``{}`` for the pronoun, pronoun meaning
    the first noun, pronoun meaning the second, first noun, second noun): answer 0 with the
    first pronoun, 1 with the second; ``pair`` is the group's index."""
    out = []
    for g, row in enumerate(groups):
        template, pron_a, pron_b, first, second = _fields(row, 5, "agreement group")
        out.append(Item(template.format(pron_a), (first, second), 0, g, pron_a))
        out.append(Item(template.format(pron_b), (first, second), 1, g, pron_b))
    return out


# =========================================================================== finding words


def find_word(text: str, word: str, after: int = 0) -> tuple[int, int]:
    """``(start, end)`` characters of the first *whole-word* occurrence of ``word`` in ``text``
    at or after character ``after``: "it" is not found in "item" nor "cat" in "catalogue"; the
    first letter matches either case, so "the" finds "The" and a name opens a sentence."""
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"the word to find must be a non-empty string, got {word!r}")
    word = word.strip()
    head = f"[{word[0].lower()}{word[0].upper()}]" if word[0].isalpha() else re.escape(word[0])
    found = re.compile(rf"(?<!\w){head}{re.escape(word[1:])}(?!\w)").search(text, after)
    if found is None:
        where = f" after character {after}" if after else ""
        raise ValueError(f"{word!r} is not a whole word in {text!r}{where}")
    return found.span()


def _join(pieces: list[str]) -> tuple[str, list[int]]:
    """The text that ``pieces`` (a tokenizer's ``show``) spell, and each piece's start."""
    text, starts = "", []
    for piece in pieces:
        starts.append(len(text))
        text += piece.replace("␣", " ").replace("⏎", "\n").replace("∅", "")
    return text, starts


def _covering(starts: list[int], end: int, lo: int, hi: int) -> list[int]:
    """The pieces that overlap characters ``lo:hi`` (pieces start at ``starts``, end at ``end``)."""
    ends = starts[1:] + [end]
    return [i for i, (s, e) in enumerate(zip(starts, ends)) if s < hi and e > lo]


def word_span(pieces: list[str], word: str, after: int = 0) -> list[int]:
    """Token positions of the first whole-word occurrence of ``word`` (:func:`find_word`) in
    the text that ``pieces`` spell ("␣" marks a space), at or after character ``after``."""
    text, starts = _join(pieces)
    lo, hi = find_word(text, word, after)
    return _covering(starts, len(text), lo, hi)


def candidate_spans(pieces: list[str], noun: str) -> list[int]:
    """:func:`word_span` from the start of the text (the name earlier code uses)."""
    return word_span(pieces, noun)


def locate(pieces: list[str], item: Item) -> tuple[list[int], list[int], list[int]]:
    """Token positions of the first noun, the second noun and the pronoun of ``item`` in
    ``pieces`` (its text, perhaps followed by more). The nouns are their first whole-word
    occurrences in the item's text; the pronoun is its first after both nouns."""
    text, starts = _join(pieces)
    sentence = text[: len(item.text)]
    nouns = [find_word(sentence, noun) for noun in item.nouns]
    pron = find_word(sentence, item.pronoun, after=max(end for _, end in nouns))
    first, second, pronoun = (_covering(starts, len(text), *span) for span in (*nouns, pron))
    return first, second, pronoun


def problems(tok, sentences: list[Item]) -> dict[int, str]:
    """Row → reason for every sentence whose nouns or pronoun :func:`locate` cannot find."""
    out = {}
    for row, item in enumerate(sentences):
        try:
            locate(tok.show(tok.encode(item.text)), item)
        except ValueError as err:
            out[row] = str(err)
    return out


# =========================================================================== running the model


def _forward(model, rows: list[torch.Tensor], need_weights: bool = False):
    """``model`` once on ``rows`` right-padded with id 0 (harmless: the model is causal, so no
    real token sees the padding, and no padded position is read): logits ``[B, N, V]``, and
    with ``need_weights`` the per-layer attention ``[B, H, N, N]`` too."""
    if not rows:
        raise ValueError("no sentences to run")
    width = max(len(r) for r in rows)
    batch = torch.zeros(len(rows), width, dtype=torch.long)  # (B, N)
    for b, r in enumerate(rows):
        batch[b, : len(r)] = r
    with torch.no_grad():
        return model(batch, need_weights=True) if need_weights else model(batch)


def _noun_logprobs(model, prompts, nouns, last=None) -> torch.Tensor:
    r"""``[S, K]``: the log-probability of every token of each candidate ``nouns[s][k]`` (ids)
    after ``prompts[s]`` (ids), in float64:

    .. math:: \log P(\text{noun} \mid \text{prompt}) = \sum_j \log P(n_j \mid \text{prompt},
        n_{<j})

    One padded run of prompt + noun for the candidates that need it; with ``last [S, V]``
    (the logits at each prompt's last token, already computed) a one-token noun is read there.
    """
    out = torch.empty(len(prompts), len(nouns[0]), dtype=torch.float64)  # (S, K)
    rows, where = [], []
    for s, (prompt, cands) in enumerate(zip(prompts, nouns)):
        for k, noun in enumerate(cands):
            if len(noun) == 0 or len(prompt) == 0:
                raise ValueError(f"row {s}: the prompt and candidate {k} each need a token")
            if last is not None and len(noun) == 1:
                out[s, k] = torch.log_softmax(last[s].double(), -1)[noun[0]]  # () from (V,)
            else:
                rows.append(torch.cat([prompt, noun]))  # (P + T,)
                where.append((s, k, len(prompt)))
    if rows:
        logits = _forward(model, rows)  # (R, N, V)
        for r, (s, k, start) in enumerate(where):
            lp = torch.log_softmax(logits[r, start - 1 : len(rows[r]) - 1].double(), -1)  # (T, V)
            out[s, k] = lp.gather(-1, rows[r][start:, None]).sum()  # () from (T, 1)
    return out


def noun_logprobs(model, tok, prompts: list[str], nouns) -> torch.Tensor:
    """``[S, K]``: log P(" " + noun, every token of it | prompt) for each prompt and each of its
    candidate ``nouns[s]``, in one padded run (a noun's tokens are encoded on their own)."""
    if len(prompts) != len(nouns) or not prompts:
        raise ValueError(f"need one list of nouns per prompt, got {len(prompts)} and {len(nouns)}")
    ids = [[tok.encode(" " + n) for n in cands] for cands in nouns]  # S x K x (T,)
    return _noun_logprobs(model, [tok.encode(p) for p in prompts], ids)


def noun_attention(weights, query: int, spans) -> torch.Tensor:
    """``[L, H, 2]``: each head's attention from position ``query`` to each candidate's
    tokens (summed over the noun's tokens), from ``weights`` = per layer ``[1, H, N, N]``."""
    w = torch.stack([x[0, :, query] for x in weights])  # (L, H, N)
    return torch.stack([w[..., list(s)].sum(-1) for s in spans], dim=-1)  # (L, H, 2)


def _attention(weights, pieces, sentences, query):
    """``([S, L, H, 2], problems)``: :func:`noun_attention` for every row (``pieces[b]``: its
    tokens as ``show`` prints them), from the pronoun's last token (``query="pronoun"``: the one
    that has read the whole word) or from the row's last token (``"end"``); NaN where
    :func:`locate` fails, with the reason in ``problems``."""
    layers, heads = len(weights), weights[0].shape[1]
    out = torch.full((len(sentences), layers, heads, 2), math.nan)  # (S, L, H, 2)
    bad = {}
    for b, (item, shown) in enumerate(zip(sentences, pieces)):
        try:
            first, second, pron = locate(shown, item)
        except ValueError as err:
            bad[b] = str(err)
            continue
        at = pron[-1] if query == "pronoun" else len(shown) - 1
        out[b] = noun_attention([w[b : b + 1] for w in weights], at, (first, second))  # (L, H, 2)
    return out, bad


def _sentences(sentences) -> list[Item]:
    sentences = items() if sentences is None else list(sentences)
    if not sentences:
        raise ValueError("no sentences given")
    bad = [type(s).__name__ for s in sentences if not isinstance(s, Item)]
    if bad:
        raise ValueError(f"sentences must be winograd.Item (see items()), got {bad[0]}")
    return sentences


def _nan_rows(x: torch.Tensor, rows) -> torch.Tensor:
    x[list(rows)] = math.nan  # (S, ...) with those rows NaN
    return x


# =========================================================================== attention and answer


@dataclass
class Coreference:
    """What :func:`resolve` measures on ``S`` sentences. Per sentence, layer and head, the
    attention to each candidate noun from the pronoun (``at_it [S, L, H, 2]``, whatever the
    pronoun) and from the last token of the question (``at_end``); the model's answer after the
    question, on whole nouns: ``log_odds [S]`` = log P(second) - log P(first), and
    :attr:`choice`; ``answers [S]``. Rows named in ``problems`` (row → reason) are NaN
    everywhere."""

    at_it: torch.Tensor
    at_end: torch.Tensor
    answers: torch.Tensor
    log_odds: torch.Tensor
    problems: dict[int, str] = field(default_factory=dict)

    @property
    def choice(self) -> torch.Tensor:
        """``[S]``: 1 where the model names the second noun (``log_odds > 0``), NaN on problems."""
        named = (self.log_odds > 0).double()  # (S,)
        return named.masked_fill(self.log_odds.isnan(), math.nan)

    def right(self, where: str = "end") -> torch.Tensor:
        """``[S, L, H]``: 1 where the head puts more attention on the right noun, 0 where not,
        NaN on the rows named in ``problems``. ``where``: ``"end"`` or ``"it"``."""
        if where not in ("end", "it"):
            raise ValueError(f'where must be "end" or "it", got {where!r}')
        att = self.at_end if where == "end" else self.at_it  # (S, L, H, 2)
        hit = (
            (att[..., 1] > att[..., 0]).long() == self.answers[:, None, None]
        ).float()  # (S, L, H)
        return _nan_rows(hit, self.problems)  # (S, L, H)


def resolve(model, tok, sentences=None, suffix: str | None = None) -> Coreference:
    r"""Run ``model`` on every sentence + its question (:func:`suffix` of its own pronoun,
    or the string ``suffix`` after every sentence) in one padded run with attention weights, and read per head
    where the pronoun and the last token look; then score each whole candidate noun after
    the question (a second run, only for nouns of more than one token):

    .. math:: \text{log-odds} = \log P(\text{␣second} \mid \text{prompt})
        - \log P(\text{␣first} \mid \text{prompt})

    A sentence whose noun or pronoun is not found is named in ``problems``; the others stand.
    """
    sentences = _sentences(sentences)
    prompts = [
        s.text + (_QUESTION.format(s.pronoun) if suffix is None else suffix) for s in sentences
    ]
    encoded = [tok.encode(p) for p in prompts]  # S x (N_s,)
    logits, weights = _forward(model, encoded, need_weights=True)  # (S, N, V), L x (S, H, N, N)
    pieces = [tok.show(e) for e in encoded]
    at_it, bad = _attention(weights, pieces, sentences, "pronoun")  # (S, L, H, 2)
    at_end, _ = _attention(weights, pieces, sentences, "end")  # (S, L, H, 2)
    last = torch.stack([logits[b, len(e) - 1] for b, e in enumerate(encoded)])  # (S, V)
    nouns = [[tok.encode(" " + n) for n in s.nouns] for s in sentences]  # S x 2 x (T,)
    scores = _noun_logprobs(model, encoded, nouns, last)  # (S, 2)
    log_odds = _nan_rows(scores[:, 1] - scores[:, 0], bad)  # (S,)
    answers = torch.tensor([s.answer for s in sentences])  # (S,)
    return Coreference(at_it, at_end, answers, log_odds, bad)


def pronoun_attention(model, tok, sentences) -> torch.Tensor:
    """``[S, L, H, 2]``: per layer and head, the attention from the pronoun (its last token)
    to each candidate's tokens (summed), from one padded run of the bare sentences. Rows that
    :func:`problems` names are NaN, and a warning lists them."""
    sentences = _sentences(sentences)
    encoded = [tok.encode(s.text) for s in sentences]  # S x (N_s,)
    _, weights = _forward(model, encoded, need_weights=True)  # L x (S, H, N, N)
    out, bad = _attention(weights, [tok.show(e) for e in encoded], sentences, "pronoun")
    if bad:
        warnings.warn(f"pronoun_attention: rows left NaN: {bad}", stacklevel=2)
    return out  # (S, L, H, 2)


def prior_choice(model, tok, sentences) -> torch.Tensor:
    """``[S]``: 1 where the model, shown only :data:`PRIOR_PROMPT` ("The", no sentence), gives
    the second noun's whole tokens more probability than the first's: a baseline that knows
    how common each noun is and nothing else. One padded run over the distinct nouns."""
    sentences = _sentences(sentences)
    nouns = sorted({n for s in sentences for n in s.nouns})
    prompt = tok.encode(PRIOR_PROMPT)  # (P,)
    ids = [[tok.encode(" " + n)] for n in nouns]  # U x 1 x (T,)
    scores = _noun_logprobs(model, [prompt] * len(nouns), ids)  # (U, 1)
    score = dict(zip(nouns, scores[:, 0].tolist()))
    return torch.tensor([float(score[s.nouns[1]] > score[s.nouns[0]]) for s in sentences])  # (S,)


# =========================================================================== substitution


def substitute(item: Item) -> tuple[tuple[str, str], str]:
    """``((prefix with the first noun, prefix with the second), continuation)``: the text up
    to the pronoun with each candidate in its place, and the text after the pronoun. A
    candidate is named as the sentence names it: "the trophy" where the text has "the trophy"
    or "The trophy", the bare noun (a name) otherwise; capitalised where the pronoun opens a
    sentence."""
    text = item.text
    nouns = [find_word(text, noun) for noun in item.nouns]
    lo, hi = find_word(text, item.pronoun, after=max(end for _, end in nouns))
    before = text[:lo].rstrip()
    opens = before == "" or before[-1] in ".!?"
    prefixes = []
    for noun, (start, _) in zip(item.nouns, nouns):
        article = re.search(r"(?<!\w)[Tt]he\s+$", text[:start]) is not None
        phrase = ("the " if article else "") + noun.strip()
        if opens:
            phrase = phrase[0].upper() + phrase[1:]
        prefixes.append(text[:lo] + phrase)
    return (prefixes[0], prefixes[1]), text[hi:]


def substitution_tokens(tok, item: Item) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(ids with the first noun, ids with the second, C)``: each prefix of :func:`substitute`
    encoded on its own, followed by the continuation encoded once on its own (with its
    leading space), so the last ``C`` ids are the same tokens for both candidates."""
    (first, second), rest = substitute(item)
    tail = tok.encode(rest) if rest else torch.zeros(0, dtype=torch.long)  # (C,)
    a, b = (
        torch.cat([tok.encode(first), tail]),
        torch.cat([tok.encode(second), tail]),
    )  # (N_a,), (N_b,)
    return a, b, len(tail)


@dataclass
class Substitution:
    """What :func:`substitution_scores` measures: per sentence and candidate, the partial
    score ``partial [S, 2]`` and the full score ``full [S, 2]`` (nats); ``answers [S]``.
    Rows named in ``problems`` (row → reason) are NaN."""

    partial: torch.Tensor
    full: torch.Tensor
    answers: torch.Tensor
    problems: dict[int, str] = field(default_factory=dict)

    def _scores(self, kind: str) -> torch.Tensor:
        if kind not in ("partial", "full"):
            raise ValueError(f'kind must be "partial" or "full", got {kind!r}')
        return self.partial if kind == "partial" else self.full  # (S, 2)

    def choice(self, kind: str = "partial") -> torch.Tensor:
        """``[S]``: 1 where the second candidate scores higher (a tie goes to the first), NaN
        on the rows named in ``problems``."""
        s = self._scores(kind)  # (S, 2)
        return _nan_rows((s[:, 1] > s[:, 0]).double(), self.problems)  # (S,)

    def right(self, kind: str = "partial") -> torch.Tensor:
        """``[S]``: 1 where :meth:`choice` is the answer, 0 where not, NaN on problems."""
        hit = (self.choice(kind) == self.answers).double()  # (S,)
        return _nan_rows(hit, self.problems)


def substitution_scores(model, tok, sentences) -> Substitution:
    r"""Score every sentence by substitution, both candidates in one padded run. With
    :math:`x_1 \dots x_N` the tokens of the sentence with candidate :math:`c` in the pronoun's
    place (:func:`substitution_tokens`) and the continuation its last :math:`C` tokens:

    .. math:: \text{partial}(c) = \sum_{t = N - C + 1}^{N} \log P(x_t \mid x_{<t}), \qquad
        \text{full}(c) = \sum_{t=2}^{N} \log P(x_t \mid x_{<t})

    (Trinh and Le, 2018). The first token is left out of the full score, having no context to
    be predicted from; it comes before both candidates, so it is the same for both. The full
    score is not divided by length: a noun of more tokens pays for each. Only the real tokens
    of each row are summed (the padding is never read).
    """
    sentences = _sentences(sentences)
    rows, tails, kept, bad = [], [], [], {}
    for s, item in enumerate(sentences):
        try:
            first, second, n = substitution_tokens(tok, item)
        except ValueError as err:
            bad[s] = str(err)
            continue
        rows += [first, second]
        tails += [n, n]
        kept.append(s)
    partial = torch.full((len(sentences), 2), math.nan, dtype=torch.float64)  # (S, 2)
    full = partial.clone()  # (S, 2)
    if rows:
        logits = _forward(model, rows)  # (2K, N, V)
        for r, (ids, n) in enumerate(zip(rows, tails)):
            lp = torch.log_softmax(logits[r, : len(ids) - 1].double(), -1)  # (N-1, V)
            lp = lp.gather(-1, ids[1:, None]).squeeze(-1)  # (N-1,)
            partial[kept[r // 2], r % 2] = lp[len(lp) - n :].sum()  # () from (C,)
            full[kept[r // 2], r % 2] = lp.sum()
    answers = torch.tensor([s.answer for s in sentences])  # (S,)
    return Substitution(partial, full, answers, bad)


# =========================================================================== halves


def sentence_rows(pairs) -> list[int]:
    """The rows of :func:`items` (both versions of each pair) for pair indices ``pairs``."""
    return [2 * p + v for p in pairs for v in (0, 1)]


def split_halves(n_pairs: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Pairs shuffled by ``seed`` and cut in two: (selection pairs, test pairs)."""
    order = torch.randperm(n_pairs, generator=torch.Generator().manual_seed(seed)).tolist()
    half = n_pairs // 2
    return sorted(order[:half]), sorted(order[half:])
