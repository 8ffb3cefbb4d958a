r"""Recall with softmax attention and with linear attention: where the fixed state shows.

Two tasks, each learned by one causal attention layer whose attention is either softmax
(chapter 02) or linear (``course_lib.variants.linear_attention``); everything else is the same.

* **Marker recall**, chapter 01's task (``course_lib.rnn.make_recall_batch``): random
  symbols, one marked; after the marker, output the marked symbol. One thing to remember.
* **Pair recall**, the same idea with many things to remember: a sequence of
  :math:`P` (key, value) pairs, then :math:`Q` queries "which value went with key
  :math:`a`?" (multi-query associative recall; Arora et al., 2023, "Zoology: Measuring and
  Improving Recall in Efficient Language Models"). Each pair is one token (its key and
  value embeddings added), so one attention layer can solve it: the query's key must find
  the token with the same key, among :math:`P`.

Softmax attention keeps the :math:`P` tokens apart in its KV cache. Linear attention
folds them into one :math:`d \times d` state, which cannot keep more than about :math:`d`
keys apart: its accuracy falls as :math:`P` grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import scaled_dot_product_attention
from ..fitting import fit
from ..rnn import make_recall_batch, recall_loss
from ..variants.linear_attention import linear_attention

__all__ = [
    "ATTENTIONS",
    "PairRecallBatch",
    "PairRecallModel",
    "RecallModel",
    "make_pair_recall_batch",
    "marker_recall_accuracy",
    "pair_recall_accuracy",
    "train_marker_recall",
    "train_pair_recall",
]

ATTENTIONS = ("softmax", "linear")


def _attend(kind: str, q, k, v):
    if kind == "softmax":
        out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, N, d)
        return out
    return linear_attention(q, k, v, causal=True)  # (B, N, d)


def _check_kind(attention: str) -> str:
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    return attention


class _OneLayer(nn.Module):
    """Projections, one causal attention (softmax or linear), a read-out."""

    def __init__(self, d_model: int, n_out: int, attention: str) -> None:
        super().__init__()
        self.attention = _check_kind(attention)
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.readout = nn.Linear(d_model, n_out)

    def attend(self, e: torch.Tensor) -> torch.Tensor:
        q, k, v = self.W_Q(e), self.W_K(e), self.W_V(e)  # (B, N, D) each
        return self.readout(_attend(self.attention, q, k, v))  # (B, N, n_out)


# --------------------------------------------------------------------------- marker recall


class RecallModel(_OneLayer):
    r"""Chapter 01's ``RecallAttention`` with a choice of attention: embedding + a learned
    marker vector :math:`u`, one causal attention layer, a read-out at every step."""

    def __init__(self, vocab_size: int, d_model: int = 32, *, attention: str = "softmax"):
        super().__init__(d_model, vocab_size, attention)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.marker_vec = nn.Parameter(torch.randn(d_model))

    def forward(self, tokens: torch.Tensor, marker: torch.Tensor) -> torch.Tensor:
        e = self.embed(tokens) + marker.unsqueeze(-1) * self.marker_vec  # (B, N, D)
        return self.attend(e)  # (B, N, V)


def train_marker_recall(
    model: RecallModel,
    *,
    steps: int,
    batch_size: int = 32,
    seq_len: int = 32,
    vocab_size: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Adam on fresh batches of chapter 01's recall task; the loss of every step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step_loss():
        b = make_recall_batch(batch_size, seq_len, vocab_size, generator=gen)
        return recall_loss(model(b.tokens, b.marker), b)  # every step after the marker

    return fit(model, opt, steps, step_loss)


@torch.no_grad()
def marker_recall_accuracy(
    model: RecallModel, *, seq_len: int = 32, vocab_size: int = 8, n: int = 256, seed: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(distances [N-1], accuracy [N-1])`` on ``n`` sequences marked at position 0."""
    gen = torch.Generator().manual_seed(seed)
    b = make_recall_batch(
        n, seq_len, vocab_size, positions=torch.zeros(n, dtype=torch.long), generator=gen
    )
    model.eval()
    pred = model(b.tokens, b.marker).argmax(-1)  # (n, N)
    correct = (pred == b.target[:, None]).float()  # (n, N)
    return torch.arange(1, seq_len), correct[:, 1:].mean(dim=0)  # (N-1,), (N-1,)


# --------------------------------------------------------------------------- pair recall


@dataclass
class PairRecallBatch:
    """``keys [B, P+Q]`` and ``values [B, P+Q]`` of every token (value ``num_values`` = "?"
    on the queries), ``targets [B, Q]`` the values the queries ask for."""

    keys: torch.Tensor
    values: torch.Tensor
    targets: torch.Tensor


def make_pair_recall_batch(
    batch_size: int,
    num_pairs: int,
    num_queries: int = 8,
    *,
    num_keys: int = 64,
    num_values: int = 16,
    generator: torch.Generator | None = None,
) -> PairRecallBatch:
    """``num_pairs`` (key, value) tokens with distinct keys, then ``num_queries`` queries.

    Keys are drawn without repetition from ``num_keys`` symbols, values uniformly from
    ``num_values`` (chance accuracy ``1/num_values``); each query asks for a random pair.
    """
    if not 1 <= num_pairs <= num_keys:
        raise ValueError(f"num_pairs must lie in 1..num_keys={num_keys}, got {num_pairs}")
    if batch_size < 1 or num_queries < 1 or num_values < 2:
        raise ValueError(
            f"expected batch_size >= 1, num_queries >= 1, num_values >= 2, got "
            f"{batch_size}, {num_queries}, {num_values}"
        )
    order = torch.rand(batch_size, num_keys, generator=generator).argsort(dim=-1)  # (B, K)
    keys = order[:, :num_pairs]  # (B, P) distinct keys
    values = torch.randint(num_values, (batch_size, num_pairs), generator=generator)  # (B, P)
    asked = torch.randint(num_pairs, (batch_size, num_queries), generator=generator)  # (B, Q)
    query_keys = keys.gather(1, asked)  # (B, Q)
    targets = values.gather(1, asked)  # (B, Q)
    unknown = torch.full((batch_size, num_queries), num_values)  # (B, Q) the "?" value
    return PairRecallBatch(
        torch.cat([keys, query_keys], 1), torch.cat([values, unknown], 1), targets
    )


class PairRecallModel(_OneLayer):
    """Key embedding + value embedding per token, one causal attention layer, a read-out."""

    def __init__(
        self,
        num_keys: int = 64,
        num_values: int = 16,
        d_model: int = 32,
        *,
        attention: str = "softmax",
    ) -> None:
        super().__init__(d_model, num_values, attention)
        self.key_embed = nn.Embedding(num_keys, d_model)
        self.value_embed = nn.Embedding(num_values + 1, d_model)  # + the "?" of a query

    def forward(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        e = self.key_embed(keys) + self.value_embed(values)  # (B, P+Q, D)
        return self.attend(e)  # (B, P+Q, num_values)


def _pair_loss(model: PairRecallModel, b: PairRecallBatch) -> tuple[torch.Tensor, torch.Tensor]:
    n_q = b.targets.shape[1]
    logits = model(b.keys, b.values)[:, -n_q:]  # (B, Q, num_values) the queries' outputs
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.targets.reshape(-1)), logits


def train_pair_recall(
    model: PairRecallModel,
    num_pairs: int,
    *,
    steps: int,
    batch_size: int = 32,
    num_queries: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Adam on fresh pair-recall batches; the loss of every step."""
    gen = torch.Generator().manual_seed(seed)
    num_keys = model.key_embed.num_embeddings
    num_values = model.value_embed.num_embeddings - 1
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step_loss():
        b = make_pair_recall_batch(
            batch_size, num_pairs, num_queries, num_keys=num_keys, num_values=num_values,
            generator=gen,
        )  # fmt: skip
        return _pair_loss(model, b)[0]

    return fit(model, opt, steps, step_loss)


@torch.no_grad()
def pair_recall_accuracy(
    model: PairRecallModel, num_pairs: int, *, n: int = 512, num_queries: int = 8, seed: int = 99
) -> float:
    """The fraction of ``n x num_queries`` fresh queries answered correctly."""
    gen = torch.Generator().manual_seed(seed)
    b = make_pair_recall_batch(
        n,
        num_pairs,
        num_queries,
        num_keys=model.key_embed.num_embeddings,
        num_values=model.value_embed.num_embeddings - 1,
        generator=gen,
    )
    model.eval()
    _, logits = _pair_loss(model, b)
    return float((logits.argmax(-1) == b.targets).float().mean())
