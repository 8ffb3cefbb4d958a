r"""Byte-level BPE, the tokenizer of GPT-2 and of SmolLM2, in plain Python: built from a vocabulary and merges.

A byte-level BPE tokenizer (Sennrich et al., 2016, "Neural Machine Translation of Rare Words
with Subword Units"; byte-level in Radford et al., 2019) turns text into ids in four steps:

1. **special tokens** (``<|im_start|>``, ``<|endoftext|>``, ...) are cut out of the text
   first and become their own ids, whole;
2. **pre-tokenization**: a regular expression cuts the rest into chunks (a word with its
   leading space, a run of digits, a run of punctuation, a run of white space); merges never
   cross a chunk's edge, so ``" dog"`` gets the same tokens wherever it stands;
3. **bytes as characters**: each chunk's UTF-8 bytes are spelled with 256 printable
   characters (:func:`bytes_to_unicode`: a space is ``Ġ``, a newline ``Ċ``), so every text,
   in any script, is a string over a 256-letter alphabet and no token is ever unknown;
4. **merges**: starting from single characters, the adjacent pair with the best (lowest)
   rank in the merge list is joined, everywhere in the chunk, until no listed pair is left;
   each final piece is a vocabulary entry.

Decoding reverses step 3: the pieces' characters back to bytes, the bytes read as UTF-8.

The vocabulary and merges come from wherever the model keeps them (:func:`from_gguf_fields`
reads llama.cpp's GGUF keys ``tokenizer.ggml.tokens``, ``.merges``, ``.token_type``,
``.pre``). The regular expressions of step 2 are a table, :data:`PRE_TOKENIZERS`.
"""

from __future__ import annotations

import functools

import regex
import torch

__all__ = ["PRE_TOKENIZERS", "BPETokenizer", "bytes_to_unicode"]

# GPT-2's split (Radford et al., 2019), as Hugging Face tokenizers' ByteLevel writes it.
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# tokenizer.ggml.pre -> the splits applied in turn (each cuts every chunk of the one before;
# text between matches stays a chunk too). "smollm" is llama.cpp's (and SmolLM2's own
# tokenizer.json's: digits one by one, then GPT-2's split); transformers' GGUF route does not
# know "smollm" and applies GPT-2's split alone ("transformers" below), which gives other ids
# only where a run of white space stands right before a digit ("a  1": Ġ Ġ 1 against ĠĠ 1).
PRE_TOKENIZERS = {
    "gpt2": (GPT2_SPLIT,),
    "default": (GPT2_SPLIT,),
    "smollm": (r"\p{N}", GPT2_SPLIT),
    "transformers": (GPT2_SPLIT,),
}

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types of special and added tokens


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's spelling of the 256 bytes: printable bytes as themselves, the others (space,
    control characters, ...) shifted to the code points from 256 upwards (``0x20 -> Ġ``)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
    printable += list(range(0xAE, 0x100))
    spelling, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelling[b] = chr(b)
        else:
            spelling[b] = chr(256 + extra)
            extra += 1
    return spelling


def _split(text: str, patterns) -> list[str]:
    """The chunks of ``text`` under the splits applied in turn (matches and the text between)."""
    chunks = [text]
    for pattern in patterns:
        out = []
        for chunk in chunks:
            last = 0
            for m in pattern.finditer(chunk):
                if m.start() > last:
                    out.append(chunk[last : m.start()])
                out.append(m.group())
                last = m.end()
            if last < len(chunk):
                out.append(chunk[last:])
        chunks = out
    return chunks


class BPETokenizer:
    """A byte-level BPE tokenizer with the course's interface: ``encode``, ``decode``, ``show``.

    ``tokens``: the vocabulary (id = position, spelled in :func:`bytes_to_unicode`'s
    alphabet); ``merges``: ``"a b"`` strings, best first; ``special``: the tokens matched
    whole in the text (control and user-defined ones); ``pre``: a key of
    :data:`PRE_TOKENIZERS`.
    """

    def __init__(self, tokens, merges, special=(), pre: str = "gpt2", name: str = "bpe") -> None:
        if pre not in PRE_TOKENIZERS:
            raise ValueError(
                f"no pre-tokenizer {pre!r}: the course knows {sorted(PRE_TOKENIZERS)} "
                "(tokenizer.ggml.pre of a GGUF file)"
            )
        self.name, self.pre = name, pre
        self.tokens = list(tokens)
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.vocab_size = len(self.tokens)
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.special = {t: self.vocab[t] for t in special}
        self.special_ids = set(self.special.values())
        longest_first = sorted(self.special, key=len, reverse=True)
        escaped = "|".join(regex.escape(t) for t in longest_first)
        self._special_re = regex.compile(f"({escaped})") if escaped else None
        self._splits = [regex.compile(p) for p in PRE_TOKENIZERS[pre]]
        self._spell = bytes_to_unicode()
        self._unspell = {c: b for b, c in self._spell.items()}
        self._bpe = functools.lru_cache(maxsize=65536)(self._merge)

    def _merge(self, chunk: str) -> tuple[int, ...]:
        """Step 4: the ids of one chunk (already spelled in the byte alphabet)."""
        parts = list(chunk)
        while len(parts) > 1:
            ranked = [(self.ranks.get(pair, -1), i) for i, pair in enumerate(zip(parts, parts[1:]))]
            known = [(r, i) for r, i in ranked if r >= 0]
            if not known:
                break
            best = parts[min(known)[1]], parts[min(known)[1] + 1]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        try:
            return tuple(self.vocab[p] for p in parts)
        except KeyError as err:
            raise ValueError(
                f"{self.name}: the piece {err.args[0]!r} is not in the vocabulary"
            ) from None

    def encode(self, text: str) -> torch.Tensor:
        """``text`` → ids ``[N]`` (int64), without added BOS/EOS (special tokens written in
        the text are kept, as one id each)."""
        ids: list[int] = []
        pieces = self._special_re.split(text) if self._special_re else [text]
        for piece in pieces:
            if not piece:
                continue
            if piece in self.special:
                ids.append(self.special[piece])
                continue
            for chunk in _split(piece, self._splits):
                spelled = "".join(self._spell[b] for b in chunk.encode("utf-8"))
                ids.extend(self._bpe(spelled))
        return torch.tensor(ids, dtype=torch.int64)  # (N,)

    def decode(self, ids) -> str:
        """Ids back to text: the tokens' characters back to bytes, the bytes read as UTF-8."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else [int(i) for i in ids]
        out = bytearray()
        for i in ids:
            token = self.tokens[i]
            if i in self.special_ids:
                out += token.encode("utf-8")
            else:
                out += bytes(self._unspell[c] for c in token)
        return out.decode("utf-8", errors="replace")

    def show(self, ids) -> list[str]:
        """One printable label per token (``␣`` for a space, ``⏎`` for a newline)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        labels = [self.decode([i]) for i in ids]
        return [s.replace(" ", "␣").replace("\n", "⏎") or "∅" for s in labels]

    def __repr__(self) -> str:
        return f"BPETokenizer({self.name!r}, vocab_size={self.vocab_size}, pre={self.pre!r})"

    @classmethod
    def from_gguf_fields(cls, fields: dict, pre: str | None = None, name: str = "gguf"):
        """From a GGUF file's tokenizer keys (``fields``: key -> value, lists for arrays).

        ``pre=None`` takes ``tokenizer.ggml.pre`` as transformers' GGUF route does (GPT-2's
        split for "smollm"); ``pre="smollm"`` is llama.cpp's (digits one by one first).
        """
        model = fields.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(
                f"{name}: tokenizer.ggml.model={model!r}; the course reads byte-level BPE "
                "('gpt2') only"
            )
        if "tokenizer.ggml.merges" not in fields:
            raise ValueError(f"{name}: no tokenizer.ggml.merges in the file")
        file_pre = fields.get("tokenizer.ggml.pre", "default")
        if pre is None:
            pre = "transformers" if file_pre == "smollm" else file_pre
        tokens = fields["tokenizer.ggml.tokens"]
        types = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        special = [t for t, k in zip(tokens, types) if k in (CONTROL, USER_DEFINED)]
        return cls(tokens, fields["tokenizer.ggml.merges"], special, pre=pre, name=name)
