"""Tiny GGUF files for the tests: the course's GPT saved the way llama.cpp saves a Llama.

Shared by tests/course_lib/gpt/test_gguf_checkpoint.py and tests/benchmarks (gguf.GGUFWriter).
"""

from __future__ import annotations

import gguf
import torch

from course_lib.gpt import GPT, GPTConfig
from course_lib.gpt import bpe as B
from course_lib.gpt import gguf_checkpoint as G

TINY = GPTConfig(
    vocab_size=300, seq_len=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64,
    positions="rope", rope_base=10000.0, norm="rmsnorm", norm_eps=1e-5, activation="swiglu",
)  # fmt: skip
COURSE_TO_GGUF = {course: name for name, course, _ in G._rows(TINY)}


def tiny_tokenizer_fields() -> dict:
    """A byte-level vocabulary: the 256 bytes, three merges, one control token."""
    alphabet = [B.bytes_to_unicode()[b] for b in range(256)]
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = alphabet + ["Ġt", "he", "Ġthe", "<|endoftext|>"]
    tokens += [f"<unused{i}>" for i in range(TINY.vocab_size - len(tokens))]
    types = [1] * 259 + [3] + [1] * (len(tokens) - 260)
    return {"tokens": tokens, "merges": merges, "types": types}


def write_gguf(path, model: GPT, *, arch="llama", qtype=None, drop=(), extra=(), keys=None):
    """Save ``model`` as llama.cpp does (interleaved W_Q/W_K rows, GGUF names)."""
    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_layers)
    w.add_context_length(cfg.seq_len)
    w.add_embedding_length(cfg.d_model)
    w.add_feed_forward_length(cfg.ff_width)
    w.add_head_count(cfg.num_heads)
    w.add_head_count_kv(cfg.kv_heads)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_rope_dimension_count(cfg.head_dim)
    for key, value in (keys or {}).items():
        w.add_uint32(key, value)
    tok = tiny_tokenizer_fields()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tok["tokens"])
    w.add_token_types(tok["types"])
    w.add_token_merges(tok["merges"])
    for course, value in model.state_dict().items():
        name = COURSE_TO_GGUF[course]
        if name in drop:
            continue
        array = value.detach().float().numpy()
        if qtype is not None and array.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, array)
    for name, array in extra:
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def random_tiny_model(seed: int = 0) -> GPT:
    """The tiny config with weights large enough that every mapping shows in the logits."""
    torch.manual_seed(seed)
    model = GPT(TINY).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:  # RMSNorm gains near 1, so a swapped norm shows
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    return model
