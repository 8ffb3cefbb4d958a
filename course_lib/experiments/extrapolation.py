r"""Train short, test long: a tiny character model with RoPE or with ALiBi.

Press, Smith and Lewis (2022, "Train Short, Test Long: Attention with Linear Biases Enables
Input Length Extrapolation") trained language models on sequences of :math:`N` tokens and
evaluated them on longer ones: with sinusoidal or rotary positions the loss rises past
:math:`N`, with ALiBi it stays low. This module reproduces the experiment at laptop scale:
a two-layer decoder over characters, trained on text that ships with Python (the
documentation topics of ``pydoc_data``), evaluated position by position on sequences
several times longer than any it was trained on.

What the two models see at a position past :math:`N`:

* RoPE (chapter 05): query–key pairs at distances never met in training, i.e. rotation
  angles the model never learned to read;
* ALiBi (``course_lib.variants.alibi``): only a larger penalty for the far keys, which pushes their
  weights further towards zero.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F
from torch import nn

from ..fitting import fit
from ..positional import apply_rope
from ..variants.alibi import alibi_bias

__all__ = ["POSITIONS", "TinyLM", "char_corpus", "loss_by_position", "train_lm"]

POSITIONS = ("rope", "alibi")


def _python_text() -> str:
    """English text that every Python install carries: the pydoc topic pages, or else
    the docstrings of a few standard modules."""
    try:
        topics = importlib.import_module("pydoc_data.topics").topics
        return "".join(topics[k] for k in sorted(topics))
    except (ImportError, AttributeError):  # some distributions strip pydoc_data
        parts = []
        for name in (
            "collections",
            "functools",
            "itertools",
            "json",
            "pathlib",
            "re",
            "typing",
            "unittest",
            "argparse",
            "logging",
            "subprocess",
            "inspect",
        ):
            mod = importlib.import_module(name)
            parts += [obj.__doc__ or "" for obj in vars(mod).values()]
        return "\n".join(p for p in parts if p)


def char_corpus(val_fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """``(train_ids, val_ids, chars)``: the text as character ids, split at the end."""
    text = _python_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)  # (T,)
    n_val = int(len(ids) * val_fraction)
    return ids[:-n_val], ids[-n_val:], chars


def _windows(data: torch.Tensor, batch_size: int, seq_len: int, gen: torch.Generator):
    start = torch.randint(len(data) - seq_len - 1, (batch_size,), generator=gen)  # (B,)
    idx = start[:, None] + torch.arange(seq_len + 1)  # (B, N+1)
    chunk = data[idx]  # (B, N+1)
    return chunk[:, :-1], chunk[:, 1:]  # tokens, targets (shifted left by one)


class _Block(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int, position: str) -> None:
        super().__init__()
        self.num_heads, self.position = num_heads, position
        self.ln1 = nn.LayerNorm(d_model)
        self.W_QKV = nn.Linear(d_model, 3 * d_model)
        self.W_O = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.num_heads
        qkv = self.W_QKV(self.ln1(x)).reshape(b, n, 3, h, d // h)  # (B, N, 3, H, d_h)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, N, d_h)
        if self.position == "rope":
            q, k = apply_rope(q), apply_rope(k)  # rotated by positions 0..N-1
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, N, d_h)
        else:
            bias = alibi_bias(h, n, dtype=x.dtype).to(x.device)  # (H, N, N)
            bias = bias.masked_fill(
                ~torch.ones(n, n, dtype=torch.bool, device=x.device).tril(), float("-inf")
            )
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, N, d_h)
        x = x + self.W_O(out.transpose(1, 2).reshape(b, n, d))  # (B, N, D)
        return x + self.mlp(self.ln2(x))  # (B, N, D)


class TinyLM(nn.Module):
    """A small pre-norm decoder: embedding, ``num_layers`` blocks, a read-out; positions
    only through the attention (``position="rope"`` or ``"alibi"``), none added to x."""

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int = 64,
        num_heads: int = 8,
        num_layers: int = 2,
        d_ff: int = 128,
        position: str = "rope",
    ) -> None:
        super().__init__()
        if position not in POSITIONS:
            raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.position = position
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            _Block(d_model, num_heads, d_ff, position) for _ in range(num_layers)
        )
        self.ln = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # (B, N, D)
        for block in self.blocks:
            x = block(x)  # (B, N, D)
        return self.readout(self.ln(x))  # (B, N, V)


def train_lm(
    model: TinyLM,
    data: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 32,
    seq_len: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """AdamW on random windows of ``seq_len`` characters; the loss of every step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step_loss():
        tokens, targets = _windows(data, batch_size, seq_len, gen)  # (B, N) each
        logits = model(tokens)  # (B, N, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return fit(model, opt, steps, step_loss)


@torch.no_grad()
def loss_by_position(
    model: TinyLM, data: torch.Tensor, *, seq_len: int, n: int = 16, seed: int = 123
) -> torch.Tensor:
    """``[seq_len]``: the mean cross-entropy at each position over ``n`` random windows."""
    gen = torch.Generator().manual_seed(seed)
    tokens, targets = _windows(data, n, seq_len, gen)  # (n, N)
    model.eval()
    logits = model(tokens)  # (n, N, V)
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    )  # (n*N,)
    return loss.reshape(n, seq_len).mean(dim=0)  # (N,)
