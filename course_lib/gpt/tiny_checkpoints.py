"""Tiny *random* GPT-2 and Llama checkpoints, saved by ``transformers`` as real ones are.

The tests of the loaders use them, and chapter 10 uses one where the real GPT-2 is not in the
local cache: the same files as a real checkpoint (``config.json``, ``model.safetensors``),
every weight random so that a mistake in any mapping shows in the logits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["TINY", "make_tiny_checkpoint"]

TINY: dict[str, dict[str, Any]] = {
    "gpt2": {"vocab_size": 256, "n_positions": 128, "n_embd": 32, "n_layer": 2, "n_head": 2},
    "llama": {
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    },
}


def make_tiny_checkpoint(family: str, folder: str | Path, *, seed: int = 0, **overrides) -> Path:
    """Save a tiny *random* GPT-2 or Llama checkpoint with ``transformers``: a test model.

    The same files as a real checkpoint (``config.json``, ``model.safetensors``), with every
    weight drawn at random (LayerNorm gains near 1, biases non-zero) so that a mistake in any
    mapping shows in the logits. Needs ``transformers`` (``pip install transformers``).
    """
    import transformers

    if family not in TINY:
        raise ValueError(f"family must be one of {sorted(TINY)}, got {family!r}")
    cfg_class, model_class = {
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    }[family]
    kwargs = dict(TINY[family], **overrides)
    if family == "gpt2":  # the defaults' special tokens (50256) lie outside a tiny vocabulary
        kwargs.update(bos_token_id=0, eos_token_id=0)
    else:
        kwargs.update(bos_token_id=0, eos_token_id=0, pad_token_id=None)
    torch.manual_seed(seed)
    model = model_class(cfg_class(**kwargs)).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = name.endswith("weight") and p.ndim == 1  # a norm's gain
            noise = torch.randn(p.shape, generator=gen)  # (*p.shape,)
            p.copy_(1.0 + 0.1 * noise if gain else 0.2 * noise)
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    return folder
