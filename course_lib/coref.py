"""A synthetic Winograd-style coreference task and a tiny two-layer attention model for it.

Levesque, Davis and Morgenstern (2012, "The Winograd Schema Challenge") built sentence
pairs that differ in one word, where that word flips what a pronoun refers to:
"the trophy did not fit in the suitcase because *it* was too big / small". We generate
such pairs from templates: two candidate nouns, the pronoun "it", and a *deciding word*
at the end. Each sentence comes with its *twin*, the same sentence with a deciding word
of the other kind, whose referent is the other noun.

The model (:class:`CorefAttention`) is attention only: token + position embeddings, then
``n_layers`` single-head attention layers. The last layer's attention row of the pronoun
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

from .attention import padding_mask, scaled_dot_product_attention

__all__ = [
    "CorefAttention",
    "CorefData",
    "Template",
    "TEMPLATES",
    "Vocab",
    "describe",
    "make_dataset",
    "make_model",
    "one_layer_ratio_is_blind",
    "pointer_accuracy",
    "pointer_loss",
    "pronoun_weights",
    "train",
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


def _vocab() -> Vocab:
    words = set()
    for t in TEMPLATES:
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


def make_dataset(
    test_fraction: float = 0.25, seed: int = 0, max_per_template: int | None = 600
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
    vocab = _vocab()
    split: dict[str, list[dict]] = {"train": [], "test": []}
    # noun pairs go wholly to train or test, across templates that share them
    pairs = sorted({p for t in TEMPLATES for p in itertools.product(t.nouns_a, t.nouns_b)})
    order = rng.permutation(len(pairs))
    test_pairs = {pairs[i] for i in order[: max(1, round(test_fraction * len(pairs)))]}
    for t in TEMPLATES:
        pairs = list(itertools.product(t.nouns_a, t.nouns_b))
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
            which = "test" if (a, b) in test_pairs else "train"
            if limits[which] is not None and counts[which] >= limits[which]:
                continue
            rows = _rows_for(t, a, b, wa, wb)
            base = len(split[which])
            rows[0]["twin"], rows[1]["twin"] = base + 1, base
            split[which].extend(rows)
            counts[which] += 2
    return _build(split["train"], vocab), _build(split["test"], vocab)


# --------------------------------------------------------------------------- model


class CorefAttention(nn.Module):
    r"""Token + position embeddings, then ``n_layers`` single-head attention layers.

    Layer :math:`\ell` (residual, no MLP):

    .. math:: X^{(\ell)} = X^{(\ell-1)} + \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d}}
        + M\right) V W_O, \quad Q = X^{(\ell-1)} W_Q,\ K = X^{(\ell-1)} W_K,\
        V = X^{(\ell-1)} W_V .

    The last layer's weights are the pointer; its values are never used by the loss.
    """

    def __init__(self, vocab_size: int, max_len: int = 16, d_model: int = 32, n_layers: int = 2):
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be at least 1, got {n_layers}")
        self.d_model, self.n_layers = d_model, n_layers
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.q = nn.ModuleList(nn.Linear(d_model, d_model, bias=False) for _ in range(n_layers))
        self.k = nn.ModuleList(nn.Linear(d_model, d_model, bias=False) for _ in range(n_layers))
        self.v = nn.ModuleList(nn.Linear(d_model, d_model, bias=False) for _ in range(n_layers - 1))
        self.o = nn.ModuleList(nn.Linear(d_model, d_model, bias=False) for _ in range(n_layers - 1))

    def forward(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> list[torch.Tensor]:
        """Attention weights of every layer, each ``[S, L, L]``, for ``tokens [S, L]``."""
        n = tokens.shape[-1]
        if n > self.pos.num_embeddings:
            raise ValueError(
                f"sentences of {n} tokens are longer than max_len={self.pos.num_embeddings}"
            )
        x = self.tok(tokens) + self.pos(torch.arange(n, device=tokens.device))  # (S, L, d)
        maps = []
        for layer in range(self.n_layers):
            q, k = self.q[layer](x), self.k[layer](x)  # (S, L, d) each
            if layer < self.n_layers - 1:
                v = self.v[layer](x)  # (S, L, d)
                out, w = scaled_dot_product_attention(
                    q, k, v, mask, is_causal=is_causal, scale=scale
                )  # (S, L, d), (S, L, L)
                x = x + self.o[layer](out)  # (S, L, d)
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
    history = []
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small: thread start-up costs more than it saves
    try:
        _train_loop(model, data, opt, steps, log_every, callback, history)
    finally:
        torch.set_num_threads(threads)
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
    vocab: Vocab, n_layers: int = 2, d_model: int = 32, seed: int = 0, max_len: int = 16
) -> CorefAttention:
    """A freshly initialised :class:`CorefAttention` (seeded)."""
    torch.manual_seed(seed)
    return CorefAttention(len(vocab), max_len=max_len, d_model=d_model, n_layers=n_layers)


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


def describe(history: list[tuple[int, float, float]]) -> str:
    """One line per logged step."""
    return "\n".join(
        f"step {s:4d}  loss {loss:.3f}  train accuracy {acc:.1%}" for s, loss, acc in history
    )
