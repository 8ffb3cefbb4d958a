"""The chapter 07 exercises: references agree with the lecture's model, mistakes are told apart."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib import gpt
from course_lib.checks import CheckFailed, check
from course_lib.checks.core import cases_for, get_exercise

IDS = ["07.1", "07.2", "07.3", "07.4", "07.5", "07.6"]


def test_mistakes_are_told_apart():
    """Each wrong twin is named by its own hint, not by another mistake's hint."""
    for ex_id in IDS:
        ex = get_exercise(ex_id)
        for hint, wrong in ex.mistakes.items():
            with pytest.raises(CheckFailed) as failure:
                check(ex_id, wrong, quiet=True)
            named = [h for h in ex.mistakes if h in str(failure.value)]
            assert named == [hint], (ex_id, hint[:50], [n[:50] for n in named])


def test_07_1_accepts_a_float_and_explains_an_unreduced_loss():
    def as_float(logits, tokens):
        return float(gpt.causal_lm_loss(logits, tokens))

    assert check("07.1", as_float, hidden=True).passed

    def per_token(logits, tokens):
        return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")

    with pytest.raises(CheckFailed, match="expected shape"):
        check("07.1", per_token, quiet=True)


def test_07_1_reference_is_the_training_loss():
    for case in cases_for("07.1") + list(cases_for("07.1", hidden=True)):
        ref = get_exercise("07.1").reference(*case.args)
        torch.testing.assert_close(ref, gpt.causal_lm_loss(*case.args))


def test_07_2_tanh_gelu_fails_with_the_hint():
    from course_lib.checks.ch07 import _block

    def tanh_gelu(x, params, num_heads):
        return _block(x, params, num_heads, act=lambda t: F.gelu(t, approximate="tanh"))

    with pytest.raises(CheckFailed, match="values are off") as failure:
        check("07.2", tanh_gelu, quiet=True)
    assert "Hint:" in str(failure.value)


def test_07_2_reference_equals_the_models_block():
    from course_lib.checks.ch07 import block_forward_reference

    cfg = gpt.GPTConfig(
        vocab_size=5, seq_len=8, d_model=12, num_layers=1, num_heads=3, positions="none"
    )
    torch.manual_seed(0)
    block = gpt.Block(cfg).double()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.3)
    a = block.attn
    params = {
        "ln_1.weight": block.ln_1.weight,
        "ln_1.bias": block.ln_1.bias,
        "W_Q": a.W_Q.weight.T,
        "W_K": a.W_K.weight.T,
        "W_V": a.W_V.weight.T,
        "W_O": a.W_O.weight.T,
        "ln_2.weight": block.ln_2.weight,
        "ln_2.bias": block.ln_2.bias,
        "W_1": block.mlp.W_1.weight.T,
        "W_2": block.mlp.W_2.weight.T,
    }
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(block(x)[0], block_forward_reference(x, params, 3))


def test_07_3_output_is_a_distribution_over_the_top_k():
    for case in cases_for("07.3") + list(cases_for("07.3", hidden=True)):
        logits, k, _ = case.args
        p = get_exercise("07.3").reference(*case.args)
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[0], dtype=p.dtype))
        kept = (p > 0).sum(-1)
        assert torch.all(kept == (logits.shape[-1] if k is None else min(k, logits.shape[-1])))


def test_07_4_reference_is_the_models_cached_step():
    """The exercise's step equals one cached step of the lecture's attention module."""
    from course_lib.checks.ch07 import rope_decode_step_reference
    from course_lib.multihead import KVCache, split_heads

    cfg = gpt.GPTConfig(
        vocab_size=5, seq_len=16, d_model=16, num_layers=1, num_heads=4, num_kv_heads=2
    )
    torch.manual_seed(1)
    attn = gpt.CausalSelfAttention(cfg).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    cache = KVCache()
    with torch.no_grad():
        attn(x[:, :5], cache)  # prefill 5 tokens
        k_cache, v_cache = cache.k.clone(), cache.v.clone()
        out_module, _ = attn(x[:, 5:], cache)  # (B, 1, D): the cached step
        new = x[:, 5:]
        q = split_heads(attn.W_Q(new), 4)  # (B, H, 1, d_h) unrotated
        k = split_heads(attn.W_K(new), 2)
        v = split_heads(attn.W_V(new), 2)
        heads, k_all, v_all = rope_decode_step_reference(q, k, v, k_cache, v_cache)
        out_ref = attn.W_O(heads.transpose(1, 2).reshape(2, 1, 16))
    torch.testing.assert_close(out_ref, out_module)
    torch.testing.assert_close(k_all, cache.k)
    torch.testing.assert_close(v_all, cache.v)


def test_07_4_position_zero_is_right_only_for_an_empty_cache():
    """The 'rotated at position 0' mistake passes the empty-cache case and fails the rest."""
    from course_lib.checks.ch07 import _decode

    ex = get_exercise("07.4")
    for case in cases_for("07.4", hidden=True):
        wrong = _decode(*case.args, from_zero=True)
        right = ex.reference(*case.args)
        same = all(torch.allclose(a, b) for a, b in zip(wrong, right))
        assert same == (case.args[3].shape[-2] == 0), case.name


def test_07_5_accepts_numpy_and_matches_a_planted_head():
    def numpy_version(weights, period):
        w = weights.numpy()
        q = np.arange(period, w.shape[-1])
        return w[:, :, q, q - period + 1].mean(axis=(0, 2))

    assert check("07.5", numpy_version, hidden=True).passed
    case = cases_for("07.5")[1]  # head 0 is a perfect induction head
    assert get_exercise("07.5").reference(*case.args)[0] == pytest.approx(1.0)


def test_07_6_accepts_a_list_and_matches_training():
    def as_list(num_steps, max_lr, min_lr, warmup_steps):
        return gpt.lr_schedule(num_steps, max_lr, min_lr, warmup_steps).tolist()

    assert check("07.6", as_list, hidden=True).passed
    cfg = gpt.TrainConfig(steps=40, max_lr=1e-2, min_lr=1e-3, warmup_steps=4)
    data = torch.arange(23).repeat(20)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=23, seq_len=8, d_model=16, num_layers=1, num_heads=2))
    history = gpt.train(model, data, cfg, progress=False)
    ref = get_exercise("07.6").reference(40, 1e-2, 1e-3, 4)
    np.testing.assert_allclose(history.lr, ref, rtol=1e-12)
    assert math.isclose(ref[-1], 1e-3) and math.isclose(ref.max(), 1e-2)
