r"""The chapter's text: Python's own standard library, read from this interpreter, as characters.

The corpus is the source code of a fixed list of Python standard-library modules, read from
the running interpreter's own installation: nothing is downloaded. It is licensed under the
Python Software Foundation License (PSF-2.0). Its exact bytes differ between Python
versions, so nothing in the course depends on them. The tokenizer has a fixed vocabulary
(newline, printable ASCII, one unknown token), the same on every Python.
"""

from __future__ import annotations

import importlib.util
import sysconfig
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "CharTokenizer",
    "Corpus",
    "TRAIN_MODULES",
    "VAL_MODULES",
    "get_batch",
    "load_corpus",
    "module_source",
    "unigram_cross_entropy",
]

# Pure-Python standard-library modules present and stable in Python 3.10-3.13. Validation
# modules are whole files the model never trains on, so no text leaks between the splits.
TRAIN_MODULES = (
    "abc",
    "argparse",
    "bisect",
    "calendar",
    "colorsys",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "getopt",
    "glob",
    "heapq",
    "json.decoder",
    "json.encoder",
    "keyword",
    "linecache",
    "numbers",
    "operator",
    "pprint",
    "queue",
    "random",
    "reprlib",
    "sched",
    "shlex",
    "statistics",
    "string",
    "textwrap",
    "tokenize",
    "traceback",
    "types",
    "weakref",
)
VAL_MODULES = ("configparser", "gettext", "cmd", "filecmp")


def module_source(name: str) -> str | None:
    """The source text of a standard-library module, or None where it has none (.pyc only)."""
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):  # frozen into the interpreter (e.g. abc)
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        candidates = [
            stdlib / (name.replace(".", "/") + ".py"),
            stdlib / name.replace(".", "/") / "__init__.py",
        ]
        origin = next((str(c) for c in candidates if c.is_file()), None)
        if origin is None:
            return None
    return Path(origin).read_text(encoding="utf-8")


class CharTokenizer:
    r"""Characters to ids and back, over a *fixed* vocabulary: newline and printable ASCII.

    ``vocab_size`` = 97: ``"\n"``, the 95 printable ASCII characters (space to ``~``) and
    one unknown token ``"\ufffd"`` (shown as �) for anything else (a tab, a non-ASCII
    letter). The vocabulary does not depend on the corpus, so it is the same on every
    Python version.
    """

    UNKNOWN = "\ufffd"

    def __init__(self) -> None:
        self.chars = ["\n"] + [chr(c) for c in range(32, 127)] + [self.UNKNOWN]
        self.vocab_size = len(self.chars)
        self.unknown_id = self.vocab_size - 1
        self._ids = np.full(128, self.unknown_id, dtype=np.int64)
        for i, ch in enumerate(self.chars[:-1]):
            self._ids[ord(ch)] = i

    def encode(self, text: str) -> torch.Tensor:
        """``text`` → ids ``[len(text)]`` (int64)."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # one per character
        ids = np.where(codes < 128, self._ids[np.minimum(codes, 127)], self.unknown_id)
        return torch.from_numpy(ids.astype(np.int64))  # (len(text),)

    def decode(self, ids) -> str:
        """ids (any integer sequence or tensor) → text."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return "".join(self.chars[int(i)] for i in ids)

    def show(self, ids) -> list[str]:
        """One printable label per token, for plot axes: ``"⏎"`` for newline, ``"␣"`` for space."""
        return [{"\n": "⏎", " ": "␣"}.get(c, c) for c in self.decode(ids)]

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


@dataclass
class Corpus:
    """The text split by module, as token ids: ``train`` and ``val`` are 1-D int64 tensors."""

    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor
    train_modules: list[str]
    val_modules: list[str]
    missing: list[str] = field(default_factory=list)

    @property
    def num_chars(self) -> int:
        return int(self.train.numel() + self.val.numel())

    def __repr__(self) -> str:
        return (
            f"Corpus(train={self.train.numel():,} chars from {len(self.train_modules)} "
            f"modules, val={self.val.numel():,} chars from {len(self.val_modules)} "
            f"modules, vocab_size={self.tokenizer.vocab_size})"
        )


def load_corpus(
    train_modules: Sequence[str] = TRAIN_MODULES, val_modules: Sequence[str] = VAL_MODULES
) -> Corpus:
    """Read the modules' source from this Python's installation and tokenize it.

    Files are joined with a blank line between them. A module without source (an
    installation that ships only bytecode) is skipped and listed in ``missing``; too few
    characters left is an error that says why.
    """
    tok = CharTokenizer()
    texts: dict[str, list[str]] = {"train": [], "val": []}
    used: dict[str, list[str]] = {"train": [], "val": []}
    missing = []
    for split, names in (("train", train_modules), ("val", val_modules)):
        for name in names:
            src = module_source(name)
            if src is None:
                missing.append(name)
                continue
            texts[split].append(src)
            used[split].append(name)
    if missing:
        warnings.warn(f"no source found for {missing}: skipped", stacklevel=2)
    train_text, val_text = "\n\n".join(texts["train"]), "\n\n".join(texts["val"])
    if len(train_text) < 100_000 or len(val_text) < 10_000:
        raise RuntimeError(
            f"too little source text was found ({len(train_text)} training, "
            f"{len(val_text)} validation characters): this Python installation "
            f"ships no .py files for {missing}"
        )
    return Corpus(
        tok, tok.encode(train_text), tok.encode(val_text), used["train"], used["val"], missing
    )


def get_batch(
    data: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``batch_size`` random windows of ``seq_len`` consecutive tokens: ``tokens [B, N]``."""
    if data.numel() <= seq_len:
        raise ValueError(f"the data has {data.numel()} tokens, fewer than seq_len={seq_len}+1")
    starts = torch.randint(0, data.numel() - seq_len + 1, (batch_size,), generator=generator)
    offsets = torch.arange(seq_len)  # (N,)
    return data[starts[:, None] + offsets[None, :]]  # (B, N)


def unigram_cross_entropy(train: torch.Tensor, val: torch.Tensor, vocab_size: int) -> float:
    r"""The loss of the best model that ignores context: nats per token on ``val``.

    It predicts every token with the training frequencies :math:`\hat p(c)` (add-one
    smoothed, so an unseen token costs a finite amount):
    :math:`-\frac{1}{|val|}\sum_{t \in val} \log \hat p(t)`. A language model that beats
    it has learned something from context.
    """
    counts = torch.bincount(train, minlength=vocab_size).double() + 1.0  # (V,)
    log_p = torch.log(counts / counts.sum())  # (V,)
    return float(-log_p[val].mean())
