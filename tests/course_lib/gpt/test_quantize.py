"""course_lib.gpt.quantize: the formats' kernels hold to their readable formulas, bytes are counted."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.gpt import GPT, causal_lm_loss
from course_lib.gpt import gguf_checkpoint as G
from course_lib.gpt import quantize as Q
from tests.support.tiny_gguf import TINY, random_tiny_model, write_gguf

TOKENS = torch.tensor([[5, 17, 200, 3, 99, 42, 7, 150, 8, 61]])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = random_tiny_model()
    path = write_gguf(
        tmp_path_factory.mktemp("q") / "q4.gguf", model, qtype=gguf.GGMLQuantizationType.Q4_1
    )
    loaded = G.load_gguf(path)  # the float32 model holds the file's 4-bit weights, widened
    return loaded, {t.name: t for t in G.read_gguf(path).tensors}


def test_int8_rows_round_to_their_scale_and_the_kernel_computes_the_formula():
    w = torch.randn(48, 64) * torch.linspace(0.1, 3, 48)[:, None]  # rows of different sizes
    layer = Q.Int8Linear(w)
    deq = layer.dequantized()  # (48, 64)
    scale = w.abs().amax(1) / 127  # (48,) the rounding step of each row
    kept = layer.scale.float()  # (48,) the scale as the kernel reads it, in bfloat16
    bound = 0.5 * scale + 127 * (kept - scale).abs()  # rounding + the scale's own rounding
    assert ((deq - w).abs() <= bound[:, None] * 1.001).all()
    assert (deq - w).abs().max() > 0.2 * scale.min()  # it is a rounding, not a copy
    x = torch.randn(3, 5, 64)
    want = F.linear(x.bfloat16().float(), deq)  # (3, 5, 48)
    got = layer(x).float()  # (3, 5, 48) from the int8 kernel
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


def test_q4_1_blocks_read_what_gguf_dequantizes():
    w = np.random.default_rng(0).normal(size=(16, 96)).astype(np.float32)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1)  # (16, 60) bytes
    q, d, m = Q.q4_1_blocks(raw, 16, 96)  # (16, 96), (16, 3), (16, 3)
    assert q.max() <= 15 and q.dtype == torch.uint8
    mine = d.repeat_interleave(32, 1) * q.float() + m.repeat_interleave(32, 1)  # (16, 96)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_1)  # (16, 96)
    np.testing.assert_array_equal(mine.numpy(), want)


def test_int4_kernel_computes_d_q_plus_m():
    rng = np.random.default_rng(1)
    w = rng.normal(size=(64, 64)).astype(np.float32)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1)
    q, d, m = Q.q4_1_blocks(raw, 64, 64)
    layer = Q.Int4Linear(q, d, m)
    exact = torch.from_numpy(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_1))
    # the kernel's d and m are bfloat16: its matrix is the file's to about 1 part in 100
    assert (layer.dequantized() - exact).abs().max() < 0.02 * exact.abs().max()
    x = torch.randn(2, 3, 64)
    want = F.linear(x.bfloat16().float(), layer.dequantized())  # (2, 3, 64)
    torch.testing.assert_close(layer(x).float(), want, rtol=2e-2, atol=2e-2 * want.abs().max())


def test_int4_refuses_rows_that_are_not_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 32"):
        Q.Int4Linear(torch.zeros(8, 40, dtype=torch.uint8), torch.ones(8, 1), torch.zeros(8, 1))


def test_every_format_runs_the_same_model_and_counts_its_bytes(tiny):
    model, tensors = tiny
    base = model(TOKENS)  # (1, N, V)
    n_matrices = sum(p.numel() for n, p in model.named_parameters() if p.ndim == 2)
    n_norms = sum(p.numel() for p in model.parameters() if p.ndim == 1)
    bytes_ = {}
    for fmt in Q.FORMATS:
        copy = Q.quantized_copy(model, fmt, tensors)
        logits = copy(TOKENS).float()  # (1, N, V)
        gap = (logits - base).abs().max().item()
        assert gap < 0.1 * base.abs().max().item(), (fmt, gap)
        assert torch.equal(logits.argmax(-1)[0, :3], base.argmax(-1)[0, :3]), fmt
        bytes_[fmt] = Q.bytes_per_token(copy)
    assert bytes_["float32"] == 4 * (n_matrices + n_norms)  # the tied embedding once
    assert bytes_["bfloat16"] == 2 * (n_matrices + n_norms)
    assert bytes_["float32"] / 4.2 < bytes_["int8"] < bytes_["float32"] / 3.5  # 1 byte + scales
    assert bytes_["q4_1"] < bytes_["int8"]
    assert isinstance(model.block(0).attn.W_Q, torch.nn.Linear)  # the original is untouched
    assert next(model.parameters()).dtype == torch.float32


def test_q4_1_uses_the_files_blocks_unchanged(tiny):
    model, tensors = tiny
    copy = Q.quantized_copy(model, "q4_1", tensors)
    layer = copy.block(1).mlp.W_2
    assert isinstance(layer, Q.Int4Linear)
    q, _, _ = Q.q4_1_blocks(tensors["blk.1.ffn_down.weight"].data, *layer._q.shape)
    assert torch.equal(layer._q, q)  # the file's integers, not re-quantized
    # and it is the matrix the float32 model was loaded with, to bfloat16 scales
    want = model.block(1).mlp.W_2.weight
    assert (layer.dequantized() - want).abs().max() < 0.02 * want.abs().max()


def test_q4_1_needs_the_file_and_a_format_must_be_known(tiny):
    model, _ = tiny
    with pytest.raises(ValueError, match="gguf_tensors"):
        Q.quantized_copy(model, "q4_1")
    with pytest.raises(ValueError, match="fmt must be one of"):
        Q.quantized_copy(model, "fp8")


def test_a_matrix_of_another_type_is_named(tiny):
    model, tensors = tiny
    other = dict(tensors)
    t = other["blk.0.attn_q.weight"]
    other["blk.0.attn_q.weight"] = type(t)(
        t.name, t.shape, gguf.GGMLQuantizationType.Q8_0, t.data, t.n_elements, t.n_bytes
    )
    with pytest.raises(ValueError, match="blk.0.attn_q.weight.*not Q4_1"):
        Q.quantized_copy(model, "q4_1", other)


def test_perplexity_is_the_exponential_of_the_loss():
    torch.manual_seed(0)
    model = GPT(TINY).eval()
    with torch.no_grad():
        want = math.exp(float(causal_lm_loss(model(TOKENS), TOKENS)))
    assert Q.perplexity(model, TOKENS) == pytest.approx(want, rel=1e-6)
    assert Q.perplexity(model, TOKENS) == pytest.approx(TINY.vocab_size, rel=0.5)  # untrained
