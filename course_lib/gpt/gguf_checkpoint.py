r"""llama.cpp's GGUF files in the course's model: config, weights and tokenizer from one file.

A GGUF file (llama.cpp's format, version 3) is a header and a blob:

* **metadata**: typed key-value pairs. ``general.architecture`` names the family (``"llama"``);
  the shape lives under that prefix (``llama.block_count``, ``llama.embedding_length``, ...);
  the tokenizer under ``tokenizer.ggml.*`` (the vocabulary, the merges, the token types);
* **tensor infos**: a name, a shape (written innermost axis first: ``[576, 49152]`` is a
  ``[49152, 576]`` matrix), a type (``F32``, ``Q8_0``, ``Q4_1``, ...) and an offset;
* **the data**, aligned; :mod:`course_lib.gpt.gguf_file` maps it into memory without reading it.

Loading is the same two tables as for the other families (:mod:`course_lib.gpt.pretrained`):
a **config table** (:data:`GGUF_CONFIG`: metadata key → :class:`GPTConfig` field, plus the keys
whose value the course's model cannot change, :data:`GGUF_REQUIRED`) and a **weight table**
(:data:`GGUF_WEIGHTS`, :data:`GGUF_BLOCK`: tensor name → parameter). A tensor of the file that
no row names is an error, so a file of another architecture is never half-loaded.

**Dequantization.** Q4_1 stores a row in blocks of 32 weights: two float16 numbers, a scale
:math:`d` and a minimum :math:`m`, and 32 unsigned 4-bit integers :math:`q_j \in \{0..15\}`
(20 bytes for 32 weights, 5 bits each):

.. math:: w_j = d\, q_j + m.

Q8_0 (the tied embedding here) keeps a float16 scale and 32 signed bytes,
:math:`w_j = d\, q_j`. ``gguf.quants.dequantize`` (numpy) computes these; the course holds the
results in float32 (or ``dtype``). The 4-bit rounding happened when the file was made: the
float32 model computes exactly with the rounded weights, which transformers' GGUF route
dequantizes the same way, so the two agree to float32 rounding (not to the original bf16
checkpoint, which neither has).

**RoPE's pairing.** llama.cpp's converter permutes the rows of :math:`W_Q` and :math:`W_K` of
Hugging Face's checkpoint within each head from the half-split pairing :math:`(i, i + d_h/2)`
back to Meta's interleaved pairing :math:`(2i, 2i+1)`, which is the course's default. So
``rope="interleaved"`` (the default here) reads the rows as stored; ``rope="half"`` permutes
them to the half-split order (:func:`interleaved_to_half_rows`) and switches the model's
pairing, which gives the same logits. The stored rows under the half-split pairing without the
permutation are a different model (chapter 05's pairing lesson; SmolLM2's logits move by ~20).
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..positional import interleaved_to_half, per_head_rows
from .bpe import BPETokenizer
from .gguf_file import GGUFFile, TruncatedGGUF, map_gguf
from .model import GPT, GPTConfig

__all__ = [
    "GGUF_ARCHITECTURES",
    "GGUF_BLOCK",
    "GGUF_CONFIG",
    "GGUF_REQUIRED",
    "GGUF_WEIGHTS",
    "config_from_gguf",
    "gguf_metadata",
    "interleaved_to_half_rows",
    "load_gguf",
    "load_gguf_tokenizer",
    "read_gguf",
    "state_dict_from_gguf",
]

# The families the course's model can express; the keys below are "<architecture>.<key>".
GGUF_ARCHITECTURES = ("llama",)

# =========================================================================== config table

# (metadata key after "<architecture>.", field of GPTConfig). A missing optional key keeps
# GPTConfig's default; vocab_size falls back to the length of tokenizer.ggml.tokens.
GGUF_CONFIG = (
    ("vocab_size", "vocab_size"),
    ("context_length", "seq_len"),
    ("embedding_length", "d_model"),
    ("block_count", "num_layers"),
    ("attention.head_count", "num_heads"),
    ("attention.head_count_kv", "num_kv_heads"),
    ("feed_forward_length", "d_ff"),
    ("attention.layer_norm_rms_epsilon", "norm_eps"),
    ("rope.freq_base", "rope_base"),
)
# What llama's architecture fixes: RoPE (in llama.cpp's interleaved pairing), RMSNorm,
# SwiGLU, no biases. tie_embeddings is read from the tensors (no output.weight: tied).
GGUF_FIXED = {"positions": "rope", "bias": False, "norm": "rmsnorm", "activation": "swiglu"}
# (key after "<architecture>.", the value the course's model needs or "head_dim", default).
GGUF_REQUIRED = (
    ("rope.dimension_count", "head_dim", "head_dim"),  # RoPE on every feature of a head
    ("attention.key_length", "head_dim", "head_dim"),
    ("attention.value_length", "head_dim", "head_dim"),
    ("rope.scaling.type", "none", "none"),
    ("expert_count", 0, 0),  # a mixture of experts
)

# =========================================================================== weight table

# (GGUF tensor name, course parameter name, how): "copy", or "rope_rows" (W_Q, W_K: permuted
# to the half-split order when rope="half"). "{i}" is the layer.
GGUF_WEIGHTS = (
    ("token_embd.weight", "embed.weight", "copy"),
    ("output_norm.weight", "ln_f.weight", "copy"),
)
GGUF_UNTIED = (("output.weight", "lm_head.weight", "copy"),)
GGUF_BLOCK = (
    ("blk.{i}.attn_norm.weight", "blocks.{i}.ln_1.weight", "copy"),
    ("blk.{i}.attn_q.weight", "blocks.{i}.attn.W_Q.weight", "rope_rows"),
    ("blk.{i}.attn_k.weight", "blocks.{i}.attn.W_K.weight", "rope_rows"),
    ("blk.{i}.attn_v.weight", "blocks.{i}.attn.W_V.weight", "copy"),
    ("blk.{i}.attn_output.weight", "blocks.{i}.attn.W_O.weight", "copy"),
    ("blk.{i}.ffn_norm.weight", "blocks.{i}.ln_2.weight", "copy"),
    ("blk.{i}.ffn_gate.weight", "blocks.{i}.mlp.W_1.weight", "copy"),
    ("blk.{i}.ffn_up.weight", "blocks.{i}.mlp.W_3.weight", "copy"),
    ("blk.{i}.ffn_down.weight", "blocks.{i}.mlp.W_2.weight", "copy"),
)

# =========================================================================== the file


def _gguf():
    try:
        import gguf
    except ImportError as err:  # pragma: no cover - a dependency of the course
        raise ImportError(
            "reading a .gguf file needs llama.cpp's reader: pip install gguf"
        ) from err
    return gguf


@functools.lru_cache(maxsize=2)
def _reader(path: str, size: int, mtime_ns: int) -> GGUFFile:
    try:
        return map_gguf(path)
    except (TruncatedGGUF, struct.error) as err:
        raise ValueError(
            f"{Path(path).name} ({size:,} bytes) is truncated or corrupt: {err}"
        ) from err


def read_gguf(path: str | Path) -> GGUFFile:
    """The parsed file at ``path`` (:class:`~course_lib.gpt.gguf_file.GGUFFile`: metadata and
    tensors mapped from the file; the last two files read are kept).

    Raises ``FileNotFoundError``, or ``ValueError`` for a file that is not GGUF, or one cut
    short or damaged (the header names more data than the file holds).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    stat = path.stat()
    return _reader(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def gguf_metadata(reader: GGUFFile, *, arrays: bool = False) -> dict:
    """The file's metadata as a dict; arrays (the vocabulary, the merges) only with ``arrays``."""
    return {
        key: value
        for key, value in reader.metadata.items()
        if arrays or key.startswith("general.") or not isinstance(value, list)
    }


# =========================================================================== the config


def config_from_gguf(
    meta: dict, shapes: dict, *, rope: str = "interleaved", attention: str = "course"
) -> GPTConfig:
    """The :class:`GPTConfig` of a GGUF file's metadata, through :data:`GGUF_CONFIG`.

    ``shapes``: tensor name -> shape ``[out, in]``; they say whether the read-out is tied
    (no ``output.weight``) and give the vocabulary size when the metadata does not. Raises ``ValueError`` naming ``general.architecture`` when the course's model cannot
    express that family, or the key whose value it cannot express.
    """
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(
            f"general.architecture={arch!r}: the course's model expresses "
            f"{list(GGUF_ARCHITECTURES)} only"
        )
    if rope not in ("half", "interleaved"):
        raise ValueError(f"rope must be 'half' or 'interleaved', got {rope!r}")
    kwargs: dict[str, Any] = dict(
        GGUF_FIXED, attention=attention, rope_interleaved=rope == "interleaved"
    )
    for key, name in GGUF_CONFIG:
        if f"{arch}.{key}" in meta:
            kwargs[name] = meta[f"{arch}.{key}"]
    if "vocab_size" not in kwargs and "token_embd.weight" in shapes:
        kwargs["vocab_size"] = shapes["token_embd.weight"][0]
    for name in ("rope_base", "norm_eps"):
        if name in kwargs:
            kwargs[name] = float(kwargs[name])
    kwargs["tie_embeddings"] = "output.weight" not in shapes
    config = GPTConfig(**kwargs)
    for key, value, default in GGUF_REQUIRED:
        need = config.head_dim if value == "head_dim" else value
        have = meta.get(f"{arch}.{key}", need if default == "head_dim" else default)
        if have != need:
            raise ValueError(
                f"{arch}.{key}={have!r} does not map to the course's model, which needs "
                f"{key}={need!r}"
            )
    return config


# =========================================================================== the weights


def interleaved_to_half_rows(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""Rows of :math:`W_Q` or :math:`W_K` ``[H d_h, d]`` from the interleaved to the half-split pairing.

    Within each head, new row :math:`j` is old row ``perm[j]`` (:func:`rope_permutation`):
    rows :math:`2i, 2i+1` (the pair llama.cpp rotates) become rows :math:`i, i + d_h/2`
    (the pair Hugging Face rotates). The inverse of
    :func:`~course_lib.gpt.pretrained.half_to_interleaved_rows`.
    """
    return per_head_rows(w, num_heads, interleaved_to_half)  # (H d_h, d)


def _dequantize(tensor, source: str) -> torch.Tensor:
    r"""One GGUF tensor as a float32 torch tensor in the usual ``[out, in]`` order."""
    gguf = _gguf()
    name, qtype = tensor.name, tensor.tensor_type
    try:
        data = np.asarray(tensor.data).view(np.ndarray)  # (rows, bytes per row) or values
        values = gguf.quants.dequantize(data, qtype)  # (*shape reversed) float32
    except NotImplementedError as err:
        raise ValueError(
            f"{source}: tensor {name!r} has type {qtype.name}, which gguf "
            f"{getattr(gguf, '__version__', '')} cannot dequantize ({err})"
        ) from err
    shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF writes the inner axis first
    values = np.asarray(values, dtype=np.float32)
    if values.size != int(np.prod(shape)):
        raise ValueError(f"{source}: tensor {name!r} holds {values.size} values, not {shape}")
    if not values.flags.writeable:  # F32 tensors come back as views of the file
        values = values.copy()
    return torch.from_numpy(values.reshape(shape))  # (out, in) or (d,)


def _rows(config: GPTConfig) -> list:
    top = GGUF_WEIGHTS if config.tie_embeddings else GGUF_WEIGHTS + GGUF_UNTIED
    return list(top) + [
        (g.format(i=i), c.format(i=i), how)
        for i in range(config.num_layers)
        for g, c, how in GGUF_BLOCK
    ]


def state_dict_from_gguf(reader, config: GPTConfig, source: str = "file.gguf") -> dict:
    """The course's state dict from a GGUF file's tensors, through the weight table.

    Each tensor is dequantized when its row is reached (no float32 copy of the file is
    written anywhere). Raises ``KeyError`` naming a tensor the table needs and the file
    lacks, or tensors the file holds and the table does not know.
    """
    tensors = {t.name: t for t in reader.tensors}
    rows = _rows(config)
    unknown = sorted(set(tensors) - {row[0] for row in rows})
    if unknown:
        raise KeyError(
            f"{source} holds tensors the GGUF table has no row for: {unknown[:5]}"
            f"{' ...' if len(unknown) > 5 else ''} (another architecture?)"
        )
    out = {}
    for name, course, how in rows:
        if name not in tensors:
            raise KeyError(f"{source} has no tensor {name!r} (needed for {course})")
        value = _dequantize(tensors[name], source)
        if how == "rope_rows" and not config.rope_interleaved:
            heads = config.num_heads if "W_Q" in course else config.kv_heads
            value = interleaved_to_half_rows(value, heads)
        out[course] = value
    return out


def load_gguf(
    path: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    rope: str = "interleaved",
    attention: str = "course",
) -> GPT:
    """A :class:`GPT` holding a GGUF file's dequantized weights, in eval mode.

    ``rope="interleaved"`` (the file's pairing) or ``"half"`` (rows permuted, the same logits).
    """
    reader = read_gguf(path)
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
    config = config_from_gguf(gguf_metadata(reader), shapes, rope=rope, attention=attention)
    state = state_dict_from_gguf(reader, config, Path(path).name)
    model = GPT(config)  # (building on the "meta" device would skip the random initialisation,
    # but its first use imports torch's compiler stack: slower than the initialisation)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return model.to(dtype).eval()


def load_gguf_tokenizer(path: str | Path, *, pre: str | None = None) -> BPETokenizer:
    """The byte-level BPE tokenizer a GGUF file describes (:class:`BPETokenizer`).

    ``pre=None``: the ids of transformers' GGUF route (``AutoTokenizer.from_pretrained(folder,
    gguf_file=...)``); ``pre="smollm"``: llama.cpp's split for SmolLM2, digits one by one first
    (:data:`~course_lib.gpt.bpe.PRE_TOKENIZERS` says where the two differ).
    """
    meta = read_gguf(path).metadata
    keys = [f"tokenizer.ggml.{k}" for k in ("model", "pre", "tokens", "merges", "token_type")]
    fields = {key: meta[key] for key in keys if key in meta}
    return BPETokenizer.from_gguf_fields(fields, pre=pre, name=Path(path).name)
