"""course_lib.gpt.model: the config, the attention and its backends, the MLP, the norms, the
block and the model (its forward pass with and without a KV cache)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from gpt_lab import TINY, one_thread  # noqa: F401  (one_thread: an autouse fixture)
from gpt_lab import tiny_model as _model
from gpt_lab import tiny_tokens as _tokens

from course_lib.gpt import model as M
from course_lib.gpt.model import GPT, GPTConfig
from course_lib.gpt.training import causal_lm_loss

# --------------------------------------------------------------------------- config


def test_config_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="d_model=30 is not divisible by num_heads=4"):
        GPTConfig(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="num_heads=4 is not divisible by num_kv_heads=3"):
        GPTConfig(d_model=32, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="positions must be one of"):
        GPTConfig(positions="sinusoidal")
    with pytest.raises(ValueError, match="attention must be one of"):
        GPTConfig(attention="xformers")
    with pytest.raises(ValueError, match="head_dim=3 must be even"):
        GPTConfig(d_model=6, num_heads=2)
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        GPTConfig(num_layers=0)
    with pytest.raises(ValueError, match="norm must be one of"):
        GPTConfig(norm="batchnorm")
    with pytest.raises(ValueError, match="activation must be one of"):
        GPTConfig(activation="relu")
    with pytest.raises(ValueError, match="vocab_size must be a positive integer, got True"):
        GPTConfig(vocab_size=True)
    # an odd head size is fine without RoPE: only RoPE rotates pairs
    assert GPTConfig(d_model=6, num_heads=2, positions="learned").head_dim == 3


def test_config_derived_sizes():
    cfg = GPTConfig(d_model=64, num_heads=8, num_kv_heads=2)
    assert (cfg.head_dim, cfg.kv_heads, cfg.num_groups, cfg.ff_width) == (8, 2, 4, 256)
    assert GPTConfig(d_model=64, num_heads=8).kv_heads == 8
    assert GPTConfig(d_model=64, d_ff=100).ff_width == 100
    # chapter 04's formula: 2 (K and V) x L x Hkv x d_h x N x B x bytes
    assert cfg.kv_cache_bytes(100, 3, 2) == 2 * cfg.num_layers * 2 * 8 * 100 * 3 * 2
    assert cfg.kv_cache_bytes() == 2 * cfg.num_layers * 2 * 8 * cfg.seq_len * 1 * 4


def test_parameter_count_matches_the_formula():
    cfg = TINY
    d, v, dff, h_kv = cfg.d_model, cfg.vocab_size, cfg.ff_width, cfg.kv_heads
    per_layer = (
        2 * d * d
        + 2 * d * h_kv * cfg.head_dim  # W_Q, W_O, W_K, W_V
        + 2 * d * dff  # W_1, W_2
        + 4 * d
    )  # two LayerNorms (gain and bias)
    expected = v * d + cfg.num_layers * per_layer + 2 * d  # tied embedding, final LayerNorm
    assert _model(cfg).num_params() == expected


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_equal_params_config_keeps_the_parameter_count(num_kv_heads):
    base = GPTConfig(vocab_size=23, seq_len=16, d_model=32, num_layers=2, num_heads=4)
    new = M.equal_params_config(base, num_kv_heads)
    assert new.kv_heads == num_kv_heads
    assert _model(new).num_params() == _model(base).num_params()
    assert base.kv_cache_bytes() == new.kv_cache_bytes() * 4 // num_kv_heads


def test_equal_params_config_refuses_what_it_cannot_balance():
    with pytest.raises(ValueError, match="no SwiGLU, no biases"):
        M.equal_params_config(replace(TINY, activation="swiglu"), 1)
    with pytest.raises(ValueError, match="no SwiGLU, no biases"):
        M.equal_params_config(replace(TINY, bias=True), 1)


# --------------------------------------------------------------------------- the parts


def test_rms_norm_is_the_formula_and_keeps_the_dtype():
    norm = M.RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 7.0))
    x = torch.randn(2, 3, 6)
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * torch.arange(1.0, 7.0)
    torch.testing.assert_close(norm(x), want)
    half = norm(x.to(torch.bfloat16))
    assert half.dtype == torch.float32  # the float32 gain times the bfloat16 result
    torch.testing.assert_close(half, want, atol=3e-2, rtol=1e-2)
    # LayerNorm by default, RMSNorm on request, with the configured eps
    assert isinstance(_model().ln_f, torch.nn.LayerNorm)
    rms = _model(replace(TINY, norm="rmsnorm", norm_eps=1e-3))
    assert isinstance(rms.ln_f, M.RMSNorm) and rms.ln_f.eps == 1e-3


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "swiglu"])
def test_mlp_computes_its_activation(activation):
    cfg = replace(TINY, activation=activation, d_ff=8)
    torch.manual_seed(0)
    mlp = M.MLP(cfg)
    x = torch.randn(2, 3, cfg.d_model)
    h = x @ mlp.W_1.weight.T  # (B, N, d_ff)
    if activation == "swiglu":
        h = F.silu(h) * (x @ mlp.W_3.weight.T)
    else:
        h = F.gelu(h, approximate="tanh" if activation == "gelu_tanh" else "none")
    torch.testing.assert_close(mlp(x), h @ mlp.W_2.weight.T)
    assert (mlp.W_3 is not None) == (activation == "swiglu")


def test_biases_exist_only_when_asked_and_start_at_zero():
    plain = _model()
    assert not any("W_" in n and n.endswith("bias") for n, _ in plain.named_parameters())
    biased = _model(replace(TINY, bias=True))
    biases = {n: p for n, p in biased.named_parameters() if n.endswith("bias") and "W_" in n}
    assert len(biases) == TINY.num_layers * 6  # W_Q, W_K, W_V, W_O, W_1, W_2
    assert all(torch.all(p == 0) for p in biases.values())


def test_residual_projections_start_smaller_with_depth():
    """GPT-2's init: W_O and W_2 have std 0.02 / sqrt(2L), the other matrices 0.02."""
    cfg = GPTConfig(vocab_size=23, seq_len=8, d_model=64, num_layers=8, num_heads=2)
    m = _model(cfg)
    stds = {n: p.std().item() for n, p in m.named_parameters() if p.ndim == 2}
    small = 0.02 / math.sqrt(2 * cfg.num_layers)
    for name, std in stds.items():
        want = small if name.endswith(("W_O.weight", "W_2.weight")) else 0.02
        assert abs(std - want) < 0.1 * want, (name, std, want)


# --------------------------------------------------------------------------- the model


def test_forward_shapes_and_weights():
    m = _model()
    tokens = _tokens(3, 10)
    logits = m(tokens)
    assert logits.shape == (3, 10, TINY.vocab_size)
    logits2, weights = m(tokens, need_weights=True)
    torch.testing.assert_close(logits, logits2)
    assert len(weights) == TINY.num_layers
    assert weights[0].shape == (3, TINY.num_heads, 10, 10)
    rows = weights[1].sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows))
    assert torch.all(weights[0].triu(1) == 0)  # causal: nothing above the diagonal


def test_forward_rejects_float_tokens_and_a_wrong_number_of_caches():
    with pytest.raises(ValueError, match=r"integer tokens of shape \[B, N\]"):
        _model()(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"integer tokens of shape \[B, N\]"):
        _model()(torch.zeros(3, dtype=torch.long))
    m = _model()
    with pytest.raises(ValueError, match=r"one cache per layer \(2\), got 1"):
        m(_tokens(1, 3), m.new_caches()[:1])


def test_the_model_is_causal():
    """Changing token 6 changes no logit at positions 0..5."""
    m = _model()
    a = _tokens(2, 10)
    b = a.clone()
    b[:, 6] = (b[:, 6] + 1) % TINY.vocab_size
    la, lb = m(a), m(b)
    torch.testing.assert_close(la[:, :6], lb[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(la[:, 6:], lb[:, 6:], atol=1e-4)


def _read_out_input(m: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """The normalised residual stream that the read-out multiplies: ``[B, N, d_model]``."""
    x = m.embed(tokens)
    for block in m.blocks:
        x, _ = block(x)
    return m.ln_f(x)


def test_embeddings_are_tied_unless_asked_otherwise():
    m = _model()
    tokens = _tokens(1, 4)
    assert m.lm_head is None
    assert not any(n.startswith("lm_head") for n, _ in m.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(m(tokens), _read_out_input(m, tokens) @ m.embed.weight.T)
    untied = _model(replace(TINY, tie_embeddings=False))
    assert untied.num_params() == m.num_params() + TINY.vocab_size * TINY.d_model
    with torch.no_grad():
        want = _read_out_input(untied, tokens) @ untied.lm_head.weight.T
        torch.testing.assert_close(untied(tokens), want)


def test_initial_loss_is_near_log_vocab():
    m = _model(replace(TINY, vocab_size=97))
    tokens = _tokens(8, 16, 97)
    loss = causal_lm_loss(m(tokens), tokens).item()
    assert abs(loss - math.log(97)) < 0.1


def test_without_positions_one_layer_sees_a_bag_of_earlier_tokens():
    """No positions, one layer: swapping two earlier tokens leaves the last logits unchanged.

    With two layers the causal mask leaks order (position 1 sees different tokens after
    the swap, and layer 2 reads its output), and with RoPE order is seen directly.
    """
    tokens = _tokens(1, 8)
    swapped = tokens.clone()
    swapped[0, [1, 3]] = swapped[0, [3, 1]]
    nope = _model(replace(TINY, positions="none", num_layers=1))
    torch.testing.assert_close(nope(tokens)[:, -1], nope(swapped)[:, -1], atol=1e-6, rtol=0)
    for cfg in (replace(TINY, positions="none"), replace(TINY, num_layers=1)):
        m = _model(cfg)
        assert not torch.allclose(m(tokens)[:, -1], m(swapped)[:, -1], atol=1e-5)


def test_learned_positions_are_a_table_of_seq_len_rows():
    m = _model(replace(TINY, positions="learned"))
    assert m.pos_embed.weight.shape == (TINY.seq_len, TINY.d_model)
    assert m(_tokens(1, TINY.seq_len)).shape == (1, TINY.seq_len, TINY.vocab_size)
    with pytest.raises(
        ValueError, match="learned positions stop at seq_len=16; got positions up to 16"
    ):
        m(_tokens(1, TINY.seq_len + 1))
    assert _model().pos_embed is None  # RoPE: no table


def test_unscaled_attention_uses_scale_one():
    cfg = replace(TINY, scaled=False, num_layers=1)
    m = _model(cfg)
    x = torch.randn(2, 5, cfg.d_model)
    attn = m.blocks[0].attn
    _, w = attn(x, need_weights=True)
    from course_lib.multihead import split_heads
    from course_lib.positional import apply_rope

    q = apply_rope(split_heads(attn.W_Q(x), cfg.num_heads))
    k = apply_rope(split_heads(attn.W_K(x), cfg.num_heads))
    scores = (q @ k.transpose(-2, -1)).masked_fill(~torch.ones(5, 5).tril().bool(), -math.inf)
    torch.testing.assert_close(w, torch.softmax(scores, -1), atol=1e-6, rtol=1e-5)


def test_the_two_rope_pairings_are_different_models():
    """``rope_interleaved=False`` pairs features (i, i + d/2): the same weights give other
    logits, and each pairing is still causal."""
    inter = _model()
    half = _model(replace(TINY, rope_interleaved=False))
    half.load_state_dict(inter.state_dict())
    tokens = _tokens(1, 8)
    with torch.no_grad():
        assert not torch.allclose(half(tokens), inter(tokens), atol=1e-4)
        cut = half(tokens[:, :5])
        torch.testing.assert_close(half(tokens)[:, :5], cut, atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", ["torch", "flash"])
@pytest.mark.parametrize("num_kv_heads", [2, 1])
def test_backends_give_the_same_logits_and_gradients(backend, num_kv_heads):
    """course, torch SDPA and the Triton kernel (interpreter on a CPU) agree."""
    if backend == "flash":
        pytest.importorskip("triton")
    cfg = GPTConfig(
        vocab_size=23, seq_len=16, d_model=32, num_layers=1, num_heads=2, num_kv_heads=num_kv_heads
    )
    tokens = _tokens(1, 16)
    results = []
    for b in ("course", backend):
        m = _model(replace(cfg, attention=b)).train()
        logits = m(tokens)
        causal_lm_loss(logits, tokens).backward()
        results.append((logits.detach(), {n: p.grad for n, p in m.named_parameters()}))
    (ref_logits, ref_grads), (logits, grads) = results
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-4)
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-5, rtol=1e-3, msg=name)


def test_use_backend_switches_every_layer():
    m = _model()
    assert m.use_backend("torch") is m
    assert m.config.attention == "torch"
    assert all(block.attn.config.attention == "torch" for block in m.blocks)
    tokens = _tokens(1, 6)
    with torch.no_grad():
        via_torch = m(tokens)
        torch.testing.assert_close(m.use_backend("course")(tokens), via_torch, atol=1e-5, rtol=1e-4)


def test_flash_backend_takes_fewer_tokens_than_heads_and_decodes_with_a_cache():
    """A prompt shorter than the number of heads, and each cached decode step (one query),
    run through the Triton kernel as through the course's attention: the layout is named,
    so (B, H, N, d_h) with N < H is never read as (B, N, H, d_h)."""
    pytest.importorskip("triton")
    cfg = GPTConfig(vocab_size=23, seq_len=16, d_model=64, num_layers=1, num_heads=4)
    cfg = replace(cfg, num_kv_heads=2)  # grouped: the decode kernel shares a key/value head
    tokens = _tokens(1, 3, v=23)  # (1, 3): 3 tokens, 4 heads
    course = _model(cfg).eval()
    flash = _model(replace(cfg, attention="flash")).eval()
    flash.load_state_dict(course.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(flash(tokens), course(tokens), atol=1e-5, rtol=1e-4)
        ref = course.generate(tokens, 4, temperature=0.0)  # (1, 7)
        got = flash.generate(tokens, 4, temperature=0.0)  # (1, 7)
        caches, ref_caches = flash.new_caches(), course.new_caches()
        flash(tokens, caches), course(tokens, ref_caches)
        step = flash(tokens[:, :1], caches)  # (1, 1, V): one query, 3 cached keys: decode kernel
        torch.testing.assert_close(step, course(tokens[:, :1], ref_caches), atol=1e-5, rtol=1e-4)
    assert torch.equal(got, ref)


def test_attend_agrees_across_backends_and_refuses_what_it_cannot_do():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g) for _ in range(3))
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    ref = M.attend(q, k, v, is_causal=True)
    torch.testing.assert_close(M.attend(q, k, v, mask=mask), ref)
    torch.testing.assert_close(M.attend(q, k, v, backend="torch", is_causal=True), ref)
    torch.testing.assert_close(
        M.attend(q, k, v, backend="torch", scale=1.0), M.attend(q, k, v, scale=1.0)
    )
    with pytest.raises(ValueError, match="is_causal only"):
        M.attend(q, q, q, backend="flash", mask=torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="backend must be one of"):
        M.attend(q, q, q, backend="cuda")


@pytest.mark.parametrize(
    "n, nk, causal, mask",
    [
        (1, 7, False, None),  # decoding one token against a cache
        (5, 5, True, None),  # a prompt
        (3, 8, False, "chunk"),  # chunked prefill: the triangle aligned bottom-right
        (4, 4, False, "empty"),  # a caller's mask that blocks a whole row
        (2, 6, False, "per_head"),  # a mask with a head axis: the heads are repeated
    ],
)
@pytest.mark.parametrize("groups", [1, 3])
def test_grouped_query_attention_is_attention_with_the_heads_repeated(n, nk, causal, mask, groups):
    from course_lib.attention import scaled_dot_product_attention
    from course_lib.multihead import repeat_kv

    g = torch.Generator().manual_seed(n * 10 + nk)
    hkv = 2
    q = torch.randn(2, hkv * groups, n, 8, generator=g)  # (B, H, N, d)
    k, v = (torch.randn(2, hkv, nk, 8, generator=g) for _ in range(2))  # (B, Hkv, Nk, d)
    m = None
    if mask == "chunk":
        m = torch.ones(n, nk, dtype=torch.bool).tril(nk - n)  # (N, Nk)
    elif mask == "empty":
        m = torch.ones(n, nk, dtype=torch.bool)
        m[1] = False  # query 1 may attend to nothing
    elif mask == "per_head":
        m = torch.rand(1, hkv * groups, n, nk, generator=g) > 0.3  # (1, H, N, Nk)
    out, w = M.grouped_query_attention(q, k, v, m, is_causal=causal)
    want, want_w = scaled_dot_product_attention(
        q, repeat_kv(k, groups), repeat_kv(v, groups), m, is_causal=causal
    )
    torch.testing.assert_close(out, want)  # (B, H, N, d)
    torch.testing.assert_close(w, want_w)  # (B, H, N, Nk)
    assert not out.isnan().any()
    if mask == "empty":
        assert (w[:, :, 1] == 0).all() and (out[:, :, 1] == 0).all()


def test_a_decoding_step_computes_rope_once_and_copies_no_cache(monkeypatch):
    cfg = replace(TINY, num_heads=4, num_kv_heads=2, positions="rope")
    model = _model(cfg).eval()
    tokens = _tokens(1, 6, v=cfg.vocab_size)  # (1, 6)
    caches = model.new_caches()
    with torch.no_grad():
        model(tokens[:, :5], caches)  # prefill
        calls = []
        real = M.rope_cos_sin
        monkeypatch.setattr(M, "rope_cos_sin", lambda *a, **kw: calls.append(1) or real(*a, **kw))

        def no_repeat(*_):
            raise AssertionError("a decoding step repeated the cached keys")

        monkeypatch.setattr(M, "repeat_kv", no_repeat)
        step = model(tokens[:, 5:], caches)  # (1, 1, V): one token, every layer
    assert len(calls) == 1 and cfg.num_layers > 1  # once per forward pass, not per layer
    monkeypatch.undo()
    with torch.no_grad():
        torch.testing.assert_close(step[:, -1], model(tokens)[:, -1], atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- the KV cache


@pytest.mark.parametrize("positions", ["rope", "learned", "none"])
def test_cached_forward_equals_full_forward(positions):
    """Prefill 5 tokens, then chunks of 1 and 3 (chunked prefill): the same logits."""
    m = _model(replace(TINY, num_heads=4, num_kv_heads=2, positions=positions))
    tokens = _tokens(2, 12)
    full = m(tokens)
    caches = m.new_caches()
    parts = [m(tokens[:, a:b], caches) for a, b in ((0, 5), (5, 6), (6, 9), (9, 12))]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    assert len(caches[0]) == 12
    assert caches[0].k.shape == (2, 2, 12, TINY.d_model // 4)  # (B, Hkv, N, d_h)


def test_new_caches_are_one_empty_cache_per_layer():
    caches = _model().new_caches()
    assert len(caches) == TINY.num_layers and all(len(c) == 0 for c in caches)
    assert caches[0] is not caches[1]


# --------------------------------------------------------------------------- the module


def test_model_reads_on_its_own():
    """model.py imports only torch, the earlier chapters and the decoding loop."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(M))
    local = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1}
    assert local <= {"generate"}, f"model.py depends on {local - {'generate'}}"
