"""Tokenizers with the course's interface (``encode``, ``decode``, ``show``) for real checkpoints:
a Hugging Face tokenizer wrapped, and UTF-8 bytes for a tiny random checkpoint that has none.
(A GGUF file's tokenizer is the course's own BPE, :mod:`course_lib.gpt.bpe`.)"""

from __future__ import annotations

import torch

__all__ = ["ByteTokenizer", "HFTokenizer"]


class HFTokenizer:
    """A Hugging Face tokenizer with the course's interface: ``encode``, ``decode``, ``show``."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)

    def encode(self, text: str) -> torch.Tensor:
        """``text`` → ids ``[N]`` (int64), without special tokens."""
        return torch.tensor(self.tokenizer.encode(text, add_special_tokens=False))  # (N,)

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.tokenizer.decode(ids)

    def show(self, ids) -> list[str]:
        """One printable label per token (``␣`` for a leading space, ``⏎`` for a newline)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        labels = [self.tokenizer.decode([i]) for i in ids]
        return [s.replace(" ", "␣").replace("\n", "⏎") or "∅" for s in labels]

    def __repr__(self) -> str:
        return f"HFTokenizer({self.tokenizer.name_or_path!r}, vocab_size={self.vocab_size})"


class ByteTokenizer:
    """UTF-8 bytes as token ids ``0..255``: the stand-in for a tiny random checkpoint."""

    vocab_size = 256

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)  # (N,)

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def show(self, ids) -> list[str]:
        return [{"\n": "⏎", " ": "␣"}.get(c, c) for c in self.decode(ids)]

    def __repr__(self) -> str:
        return "ByteTokenizer(vocab_size=256)"
