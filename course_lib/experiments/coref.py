"""A synthetic Winograd-style coreference task and a tiny two-layer attention model for it.

Levesque, Davis and Morgenstern (2012, "The Winograd Schema Challenge") built sentence
pairs that differ in one word, where that word flips what a pronoun refers to:
"the trophy did not fit in the suitcase because *it* was too big / small". We generate
such pairs from templates: two candidate nouns, the pronoun "it", and a *deciding word*
at the end. Each sentence comes with its *twin*, the same sentence with a deciding word
of the other kind, whose referent is the other noun.

The model (:class:`CorefAttention`) is attention only: token + position embeddings, then
``num_layers`` single-head attention layers. The last layer's attention row of the pronoun
is read as a pointer (Vinyals et al., 2015, "Pointer Networks"): training maximises the
weight that "it" puts on its antecedent. Why two layers: in the first layer the pronoun's
query is built from the embedding of "it" and its position only, so the *ratio* of its
weights on the two nouns cannot depend on the deciding word (:func:`one_layer_ratio_is_blind`
checks it). A first layer must move the deciding word's information into the residual
stream before a second layer's query can use it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..attention import padding_mask, scaled_dot_product_attention
from ..timing import single_thread

__all__ = [
    "CorefAttention",
    "CorefData",
    "Template",
    "INTERACTION_TEMPLATES",
    "TEMPLATES",
    "Vocab",
    "describe",
    "make_dataset",
    "one_word_rule",
    "make_model",
    "one_layer_ratio_is_blind",
    "pointer_accuracy",
    "pointer_loss",
    "pronoun_weights",
    "train",
    "word_class_rule",
]

ANIMALS = ["dog", "cat", "horse", "fox", "cow", "goat", "rabbit", "mouse"]
PLACES = ["street", "river", "road", "bridge", "field", "valley"]
OBJECTS = ["trophy", "ball", "book", "lamp", "guitar", "cake", "laptop", "chair"]
CONTAINERS = ["suitcase", "box", "bag", "drawer", "basket", "cupboard"]
TIRED = ["tired", "hungry", "sleepy", "scared", "weak"]  # describe an animal
WIDE = ["wide", "busy", "icy", "steep", "muddy"]  # describe a place
BIG = ["big", "large", "heavy", "tall"]  # the thing that does not fit
SMALL = ["small", "narrow", "full", "tiny"]  # the container it does not fit in


@dataclass(frozen=True)
class Template:
    """A sentence pattern with slots {a} and {b} (the candidates) and {w} (the deciding word).

    ``words_a`` decide for the noun in slot ``a``, ``words_b`` for the noun in slot ``b``.
    """

    name: str
    text: str
    nouns_a: tuple[str, ...]
    nouns_b: tuple[str, ...]
    words_a: tuple[str, ...]
    words_b: tuple[str, ...]


TEMPLATES = (
    Template(
        "cross",
        "the {a} did not cross the {b} because it was too {w}",
        tuple(ANIMALS),
        tuple(PLACES),
        tuple(TIRED),
        tuple(WIDE),
    ),
    Template(
        "crossed-by",
        "the {b} was not crossed by the {a} because it was too {w}",
        tuple(ANIMALS),
        tuple(PLACES),
        tuple(TIRED),
        tuple(WIDE),
    ),
    Template(
        "fit",
        "the {a} did not fit in the {b} because it was too {w}",
        tuple(OBJECTS),
        tuple(CONTAINERS),
        tuple(BIG),
        tuple(SMALL),
    ),
)

# A harder set, where no single word decides: the verb flips which noun the deciding word
# points to ("the dog outran the cat because it was fast": the dog; "...trailed ...": the
# cat). Every deciding word appears with both verbs, every noun in both slots, and all four
# templates have the same length, so a rule that reads any one word at any one position
# is right half of the time; the referent depends on the verb *and* the deciding word.
FAST = ["fast", "quick", "swift"]
SLOW = ["slow", "tired", "clumsy"]
FIERCE = ["fierce", "big", "angry"]
TIMID = ["timid", "small", "shy"]

INTERACTION_TEMPLATES = (
    Template(
        "outran",
        "the {a} outran the {b} because it was {w}",
        tuple(ANIMALS),
        tuple(ANIMALS),
        tuple(FAST),
        tuple(SLOW),
    ),
    Template(
        "trailed",
        "the {a} trailed the {b} because it was {w}",
        tuple(ANIMALS),
        tuple(ANIMALS),
        tuple(SLOW),
        tuple(FAST),
    ),
    Template(
        "scared",
        "the {a} scared the {b} because it was {w}",
        tuple(ANIMALS),
        tuple(ANIMALS),
        tuple(FIERCE),
        tuple(TIMID),
    ),
    Template(
        "feared",
        "the {a} feared the {b} because it was {w}",
        tuple(ANIMALS),
        tuple(ANIMALS),
        tuple(TIMID),
        tuple(FIERCE),
    ),
)

PAD = "<pad>"


class Vocab:
    """Word ↔ id; id 0 is the padding token."""

    def __init__(self, words):
        self.itos = [PAD] + sorted(set(words) - {PAD})
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, sentence: str | list[str]) -> list[int]:
        words = sentence.split() if isinstance(sentence, str) else list(sentence)
        unknown = [w for w in words if w not in self.stoi]
        if unknown:
            raise KeyError(f"words not in the vocabulary: {unknown}")
        return [self.stoi[w] for w in words]

    def decode(self, ids) -> list[str]:
        return [self.itos[int(i)] for i in ids if int(i) != 0]


@dataclass
class CorefData:
    """Sentences as padded id tensors with the positions that matter.

    ``tokens [S, L]`` (0 = padding), ``lengths [S]``, ``pronoun [S]`` (position of "it"),
    ``antecedent [S]`` (the right noun's position), ``distractor [S]`` (the other noun's),
    ``decider [S]`` (the deciding word's position), ``twin [S]`` (index of the twin
    sentence in the same set), ``template [S]`` (its name), ``sentences`` (the text).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    pronoun: torch.Tensor
    antecedent: torch.Tensor
    distractor: torch.Tensor
    decider: torch.Tensor
    twin: torch.Tensor
    template: list[str]
    sentences: list[str]
    vocab: Vocab = field(repr=False)

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def mask(self) -> torch.Tensor:
        """Key-padding mask ``[S, 1, L]``: True on real tokens."""
        return padding_mask(self.lengths, self.tokens.shape[1])


def _vocab(templates: tuple[Template, ...] = TEMPLATES) -> Vocab:
    words = set()
    for t in templates:
        words |= set(t.text.replace("{a}", "").replace("{b}", "").replace("{w}", "").split())
        words |= set(t.nouns_a) | set(t.nouns_b) | set(t.words_a) | set(t.words_b)
    return Vocab(words)


def _build(rows, vocab: Vocab) -> CorefData:
    length = max(len(r["words"]) for r in rows)
    tokens = torch.zeros(len(rows), length, dtype=torch.long)  # (S, L)
    for i, r in enumerate(rows):
        tokens[i, : len(r["words"])] = torch.tensor(vocab.encode(r["words"]))
    col = lambda key: torch.tensor([r[key] for r in rows], dtype=torch.long)  # (S,)
    return CorefData(
        tokens,
        col("length"),
        col("pronoun"),
        col("antecedent"),
        col("distractor"),
        col("decider"),
        col("twin"),
        [r["template"] for r in rows],
        [" ".join(r["words"]) for r in rows],
        vocab,
    )


def _rows_for(t: Template, a: str, b: str, wa: str, wb: str) -> list[dict]:
    """The twin pair for nouns (a, b) and deciding words (wa for a, wb for b)."""
    rows = []
    for w, right in ((wa, "a"), (wb, "b")):
        words = t.text.format(a=a, b=b, w=w).split()
        pos = {"a": words.index(a), "b": words.index(b)}
        rows.append(
            dict(
                words=words,
                length=len(words),
                pronoun=words.index("it"),
                antecedent=pos[right],
                distractor=pos["b" if right == "a" else "a"],
                decider=len(words) - 1,
                template=t.name,
            )
        )
    return rows


def _noun_pairs(t: Template) -> list[tuple[str, str]]:
    """The (noun a, noun b) pairs of a template; a noun never competes with itself."""
    return [(a, b) for a, b in itertools.product(t.nouns_a, t.nouns_b) if a != b]


def make_dataset(
    test_fraction: float = 0.25,
    seed: int = 0,
    max_per_template: int | None = 600,
    templates: tuple[Template, ...] = TEMPLATES,
) -> tuple[CorefData, CorefData]:
    """Generate (train, test) sets of twin sentences; test noun pairs never occur in train.

    Every (noun a, noun b) pair is assigned wholly to train or test, so a test sentence
    always combines two nouns the model never saw together. Each sentence's twin (same
    nouns, a deciding word of the other kind) is in the same set, so each set is balanced:
    half the referents are the first noun, half the second.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    vocab = _vocab(templates)
    split: dict[str, list[dict]] = {"train": [], "test": []}
    # noun pairs go wholly to train or test, across templates that share them; when both
    # slots take nouns of one class, (a, b) and (b, a) are the same pair
    ordered = {p for t in templates for p in _noun_pairs(t)}

    def key(a: str, b: str) -> tuple[str, str]:
        return (a, b) if (b, a) not in ordered else (min(a, b), max(a, b))

    pairs = sorted({key(a, b) for a, b in ordered})
    order = rng.permutation(len(pairs))
    test_pairs = {pairs[i] for i in order[: max(1, round(test_fraction * len(pairs)))]}
    for t in templates:
        pairs = _noun_pairs(t)
        quads = list(itertools.product(pairs, t.words_a, t.words_b))
        quads = [quads[i] for i in rng.permutation(len(quads))]
        counts = {"train": 0, "test": 0}
        limits = {
            "train": max_per_template,
            "test": None
            if max_per_template is None
            else max(2, int(max_per_template * test_fraction / (1 - test_fraction))),
        }
        for (a, b), wa, wb in quads:
            which = "test" if key(a, b) in test_pairs else "train"
            limit = limits[which]
            if limit is not None and counts[which] >= limit:
                continue
            rows = _rows_for(t, a, b, wa, wb)
            base = len(split[which])
            rows[0]["twin"], rows[1]["twin"] = base + 1, base
            split[which].extend(rows)
            counts[which] += 2
    return _build(split["train"], vocab), _build(split["test"], vocab)


# --------------------------------------------------------------------------- model


class CorefAttention(nn.Module):
    r"""Token + position embeddings, then ``num_layers`` single-head attention layers.

    Layer :math:`\ell` (residual, no MLP):

    .. math:: X^{(\ell)} = X^{(\ell-1)} + \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d}}
        + M\right) V W_O, \quad Q = X^{(\ell-1)} W_Q,\ K = X^{(\ell-1)} W_K,\
        V = X^{(\ell-1)} W_V .

    The last layer's weights are the pointer; its values are never used by the loss.
    """

    train_seconds: float  # how long :func:`train` took (set there)

    def __init__(self, vocab_size: int, max_len: int = 16, d_model: int = 32, num_layers: int = 2):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        self.d_model, self.num_layers = d_model, num_layers
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.W_Q = nn.ModuleList(nn.Linear(d_model, d_model, bias=False) for _ in range(num_layers))
        self.W_K = nn.ModuleList(nn.Linear(d_model, d_model, bias=False) for _ in range(num_layers))
        self.W_V = nn.ModuleList(
            nn.Linear(d_model, d_model, bias=False) for _ in range(num_layers - 1)
        )
        self.W_O = nn.ModuleList(
            nn.Linear(d_model, d_model, bias=False) for _ in range(num_layers - 1)
        )

    def forward(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        scale: float | None = None,
        frozen: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """Attention weights of every layer, each ``[S, L, L]``, for ``tokens [S, L]``.

        ``frozen [S, L]`` (boolean, an ablation): positions whose residual stream the layers
        before the last do not update, so that they reach the last layer knowing only their
        own token and position.
        """
        n = tokens.shape[-1]
        if n > self.pos.num_embeddings:
            raise ValueError(
                f"sentences of {n} tokens are longer than max_len={self.pos.num_embeddings}"
            )
        x = self.tok(tokens) + self.pos(torch.arange(n, device=tokens.device))  # (S, L, d)
        maps = []
        for layer in range(self.num_layers):
            q, k = self.W_Q[layer](x), self.W_K[layer](x)  # (S, L, D) each
            if layer < self.num_layers - 1:
                v = self.W_V[layer](x)  # (S, L, D)
                out, w = scaled_dot_product_attention(
                    q, k, v, mask, is_causal=is_causal, scale=scale
                )  # (S, L, d), (S, L, L)
                update = self.W_O[layer](out)  # (S, L, D)
                if frozen is not None:
                    update = update.masked_fill(frozen[..., None], 0.0)  # (S, L, D)
                x = x + update  # (S, L, D)
            else:
                _, w = scaled_dot_product_attention(
                    q, k, k, mask, is_causal=is_causal, scale=scale
                )  # (S, L, L)
            maps.append(w)
        return maps


def pronoun_weights(
    model: CorefAttention, data: CorefData, layer: int = -1, **kwargs
) -> torch.Tensor:
    """The pronoun's attention row in ``layer``, ``[S, L]``."""
    w = model(data.tokens, data.mask, **kwargs)[layer]  # (S, L, L)
    return w[torch.arange(len(data)), data.pronoun]  # (S, L)


def pointer_accuracy(model: CorefAttention, data: CorefData, **kwargs) -> float:
    """Fraction of sentences whose pronoun puts more weight on the antecedent than on the
    other noun (last layer)."""
    with torch.no_grad():
        w = pronoun_weights(model, data, **kwargs)  # (S, L)
    rows = torch.arange(len(data))
    right, wrong = w[rows, data.antecedent], w[rows, data.distractor]  # (S,) each
    return float((right > wrong).float().mean())


def pointer_loss(model: CorefAttention, data: CorefData) -> torch.Tensor:
    r"""Mean :math:`-\log w_{\text{it} \to \text{antecedent}}` over the sentences."""
    w = pronoun_weights(model, data)  # (S, L)
    right = w[torch.arange(len(data)), data.antecedent]  # (S,)
    return -torch.log(right.clamp_min(1e-9)).mean()


def train(
    model: CorefAttention,
    data: CorefData,
    *,
    steps: int = 40,
    lr: float = 0.02,
    log_every: int = 5,
    callback: Callable[[int, float, float], None] | None = None,
    seed: int = 0,
) -> list[tuple[int, float, float]]:
    """Full-batch Adam on :func:`pointer_loss`; returns ``[(step, loss, accuracy), ...]``.

    ``callback(step, loss, accuracy)`` is called every ``log_every`` steps (for progress).
    """
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()
    with single_thread():  # tensors this small: thread start-up costs more than it saves
        _train_loop(model, data, opt, steps, log_every, callback, history)
    model.train_seconds = time.perf_counter() - t0
    return history


def _train_loop(model, data, opt, steps, log_every, callback, history) -> None:
    for step in range(1, steps + 1):
        loss = pointer_loss(model, data)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % log_every == 0 or step == steps:
            acc = pointer_accuracy(model, data)
            history.append((step, loss.item(), acc))
            if callback is not None:
                callback(step, loss.item(), acc)


def make_model(
    vocab: Vocab, num_layers: int = 2, d_model: int = 32, seed: int = 0, max_len: int = 16
) -> CorefAttention:
    """A freshly initialised :class:`CorefAttention` (seeded)."""
    torch.manual_seed(seed)
    return CorefAttention(len(vocab), max_len=max_len, d_model=d_model, num_layers=num_layers)


def one_layer_ratio_is_blind(model: CorefAttention, data: CorefData) -> float:
    """Largest |log(w_a/w_b)| difference between twins in the *first* layer.

    In layer 1 the pronoun's query depends only on "it" and its position, and each noun's
    key only on that noun and its position, so :math:`\\log(w_a / w_b) = s_a - s_b` is the
    same for both twins: this returns ~0 for any weights (rounding only).
    """
    with torch.no_grad():
        w = pronoun_weights(model, data, layer=0)  # (S, L)
    rows = torch.arange(len(data))
    # the noun slots are the same positions in both twins; compare log w_a - log w_b
    first = torch.minimum(data.antecedent, data.distractor)  # (S,)
    second = torch.maximum(data.antecedent, data.distractor)  # (S,)
    log_ratio = torch.log(w[rows, first]) - torch.log(w[rows, second])  # (S,)
    return float((log_ratio - log_ratio[data.twin]).abs().max())


# --------------------------------------------------------------------------- baselines


def word_class_rule(data: CorefData, templates: tuple[Template, ...] = TEMPLATES) -> torch.Tensor:
    """A hand-written rule that reads one word: ``[S]`` predicted antecedent positions.

    The deciding word names a kind of noun (in the templates, ``tired`` describes the
    animals of ``nouns_a``, ``wide`` the places of ``nouns_b``, ...); the rule points at the
    candidate of that kind, ignoring everything else in the sentence. When both candidates
    (or neither) are of that kind, it cannot decide and points at the first one.
    """
    describes: dict[str, set[str]] = {}
    for t in templates:
        for w in t.words_a:
            describes.setdefault(w, set()).update(t.nouns_a)
        for w in t.words_b:
            describes.setdefault(w, set()).update(t.nouns_b)
    first = torch.minimum(data.antecedent, data.distractor)  # (S,)
    second = torch.maximum(data.antecedent, data.distractor)  # (S,)
    pred = first.clone()  # (S,)
    for i, sentence in enumerate(data.sentences):
        words = sentence.split()
        kind = describes.get(words[int(data.decider[i])], set())
        fits = [words[int(p)] in kind for p in (first[i], second[i])]
        if fits == [False, True]:
            pred[i] = second[i]
    return pred


def one_word_rule(train_data: CorefData, test_data: CorefData) -> tuple[float, str]:
    """The best rule that reads one word at one position, learned from the training set.

    A position is counted from the start of the sentence or from its end (so "the last
    word" is one position). For each, a table maps the word found there to the answer most
    often right in training (the first or the second candidate); the position whose table
    is most accurate *on the training set* is kept. Returns its held-out accuracy and a
    description of the position ("word 2", "word -1", ...).
    """

    def words_at(d: CorefData, p: int) -> list[int]:
        idx = torch.full_like(d.lengths, p) if p >= 0 else d.lengths + p  # (S,)
        ok = (idx >= 0) & (idx < d.lengths)  # (S,)
        got = d.tokens[torch.arange(len(d)), idx.clamp(0, d.tokens.shape[1] - 1)]  # (S,)
        return torch.where(ok, got, -1).tolist()  # -1: the sentence is too short

    def is_first(d: CorefData) -> list[bool]:
        return (d.antecedent < d.distractor).tolist()  # (S,)

    longest = max(int(train_data.lengths.max()), int(test_data.lengths.max()))
    best: tuple[float, int, dict[int, bool]] = (-1.0, 0, {})
    for p in [*range(longest), *range(-longest, 0)]:
        votes: dict[int, list[int]] = {}
        for word, first in zip(words_at(train_data, p), is_first(train_data)):
            votes.setdefault(word, [0, 0])[int(first)] += 1
        table = {w: c[1] >= c[0] for w, c in votes.items()}
        right = [table[w] == f for w, f in zip(words_at(train_data, p), is_first(train_data))]
        if sum(right) / len(right) > best[0]:
            best = (sum(right) / len(right), p, table)
    _, p, table = best
    right = [table.get(w, True) == f for w, f in zip(words_at(test_data, p), is_first(test_data))]
    return sum(right) / len(right), f"word {p}"


def describe(history: list[tuple[int, float, float]]) -> str:
    """One line per logged step."""
    return "\n".join(
        f"step {s:4d}  loss {loss:.3f}  train accuracy {acc:.1%}" for s, loss, acc in history
    )
