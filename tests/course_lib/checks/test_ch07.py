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

IDS = ["07.1", "07.2", "07.3", "07.4", "07.5", "07.6", "07.7"]


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


def _learner_block(x, p, num_heads, *, gelu="none", parallel=False, split="heads", use_W_O=True):
    """A block as a learner writes it, with one switch per mistake."""
    b, n, d = x.shape
    dh = d // num_heads

    def heads(t):
        if split == "interleaved":
            return t.reshape(b, n, dh, num_heads).permute(0, 3, 1, 2)
        return t.reshape(b, n, num_heads, dh).transpose(1, 2)

    h = F.layer_norm(x, (d,), p["ln_1.weight"], p["ln_1.bias"])
    q, k, v = heads(h @ p["W_Q"]), heads(h @ p["W_K"]), heads(h @ p["W_V"])
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(dh)).masked_fill(~causal, -math.inf), -1)
    o = w @ v  # (B, H, N, d_h)
    if split == "interleaved":
        o = o.permute(0, 2, 3, 1).reshape(b, n, d)
    elif split == "reshape-merge":
        o = o.reshape(b, n, d)
    else:
        o = o.transpose(1, 2).reshape(b, n, d)
    attn = o @ p["W_O"] if use_W_O else o
    h2 = F.layer_norm(x if parallel else x + attn, (d,), p["ln_2.weight"], p["ln_2.bias"])
    mlp = F.gelu(h2 @ p["W_1"], approximate=gelu) @ p["W_2"]
    return x + attn + mlp


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"gelu": "tanh"}, "tanh approximation of GELU"),
        ({"parallel": True}, "'parallel' block"),
        ({"split": "interleaved"}, "interleaved features"),
        ({"split": "reshape-merge"}, "merged the heads with a reshape"),
        ({"use_W_O": False}, "skips the output projection W_O"),
    ],
)
def test_07_2_learner_mistakes_are_named(kwargs, named):
    assert check("07.2", lambda x, p, h: _learner_block(x, p, h), quiet=True).passed
    with pytest.raises(CheckFailed, match=named):
        check("07.2", lambda x, p, h: _learner_block(x, p, h, **kwargs), quiet=True)


def test_07_1_learner_mistakes_are_named():
    def classes_last(logits, tokens):  # F.cross_entropy on [B, N-1, V]: a RuntimeError
        return F.cross_entropy(logits[:, :-1], tokens[:, 1:])

    with pytest.raises(CheckFailed, match="wants the classes on axis 1"):
        check("07.1", classes_last, quiet=True)

    def rolled(logits, tokens):
        targets = torch.roll(tokens, -1, dims=1)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    with pytest.raises(CheckFailed, match="you rolled the tokens"):
        check("07.1", rolled, quiet=True)


def test_07_3_learner_mistakes_are_named():
    def no_none(logits, k, temperature):
        z = logits / temperature
        kth = torch.topk(z, k, dim=-1).values[:, -1:]
        return torch.softmax(z.masked_fill(z < kth, -math.inf), -1)

    with pytest.raises(CheckFailed, match="torch.topk cannot take None"):
        check("07.3", no_none, hidden=True, quiet=True)

    def zero_fill(logits, k, temperature):
        z = logits / temperature
        kth = torch.topk(z, k, dim=-1).values[:, -1:]
        return torch.softmax(z.masked_fill(z < kth, 0.0), -1)

    with pytest.raises(CheckFailed, match="not to -inf"):
        check("07.3", zero_fill, quiet=True)


def _learner_decode(q_new, k_new, v_new, k_cache, v_cache, *, repeat=True, **rope):
    from course_lib.attention import scaled_dot_product_attention
    from course_lib.positional import apply_rope

    pos = torch.tensor([k_cache.shape[-2]])
    q = apply_rope(q_new, pos, **rope)
    k_all = torch.cat([k_cache, apply_rope(k_new, pos, **rope)], -2)
    v_all = torch.cat([v_cache, v_new], -2)
    g = q.shape[1] // k_all.shape[1] if repeat else 1
    out, _ = scaled_dot_product_attention(
        q, k_all.repeat_interleave(g, 1), v_all.repeat_interleave(g, 1)
    )
    return out, k_all, v_all


def test_07_4_learner_mistakes_are_named():
    assert check("07.4", _learner_decode, quiet=True).passed
    with pytest.raises(CheckFailed, match="did not repeat the KV heads"):
        check("07.4", lambda *a: _learner_decode(*a, repeat=False), quiet=True)
    with pytest.raises(CheckFailed, match="half-split RoPE"):
        check("07.4", lambda *a: _learner_decode(*a, interleaved=False), quiet=True)

    def int_position(q_new, k_new, v_new, k_cache, v_cache):
        from course_lib.positional import apply_rope

        return apply_rope(q_new, k_cache.shape[-2]), k_cache, v_cache

    with pytest.raises(CheckFailed, match="a tensor, not a Python int"):
        check("07.4", int_position, quiet=True)


def test_07_6_learner_mistakes_are_named():
    def unguarded(num_steps, max_lr, min_lr, warmup_steps):
        out = []
        for s in range(num_steps):
            if s < warmup_steps:
                out.append(max_lr * (s + 1) / warmup_steps)
            else:
                progress = (s - warmup_steps) / (num_steps - 1 - warmup_steps)
                out.append(min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress)))
        return out

    with pytest.raises(CheckFailed, match="which is 0 here"):
        check("07.6", unguarded, quiet=True)


def _learner_schedule(num_steps, max_lr, min_lr, warmup_steps, *, warm, angle):
    out = []
    for s in range(num_steps):
        if s < warmup_steps:
            out.append(warm(s, warmup_steps) * max_lr)
        else:
            progress = (s - warmup_steps) / max(num_steps - 1 - warmup_steps, 1)
            out.append(min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(angle * progress)))
    return np.array(out)


def test_07_6_mistakes_of_a_learner_who_derives_the_schedule_are_named():
    """The statement gives properties, not the formula: the two ways of misreading them."""
    from_zero_to_w_minus_1 = lambda *a: _learner_schedule(  # noqa: E731
        *a, warm=lambda s, w: s / max(w - 1, 1), angle=math.pi
    )
    with pytest.raises(CheckFailed, match="from 0 at step 0 to max_lr at step W - 1"):
        check("07.6", from_zero_to_w_minus_1, quiet=True)
    whole_period = lambda *a: _learner_schedule(  # noqa: E731
        *a, warm=lambda s, w: (s + 1) / w, angle=2 * math.pi
    )
    with pytest.raises(CheckFailed, match="runs a whole period"):
        check("07.6", whole_period, quiet=True)
    right = lambda *a: _learner_schedule(*a, warm=lambda s, w: (s + 1) / w, angle=math.pi)  # noqa: E731
    assert check("07.6", right, quiet=True).passed


def test_07_6_a_float32_schedule_is_a_right_answer():
    """float32 holds a learning rate to about 7 digits, far more than training needs."""

    def float32(num_steps, max_lr, min_lr, warmup_steps):
        return torch.tensor(gpt.lr_schedule(num_steps, max_lr, min_lr, warmup_steps)).float()

    assert check("07.6", float32, quiet=True).passed
    assert check("07.6", float32, hidden=True, quiet=True).passed

    def float16(num_steps, max_lr, min_lr, warmup_steps):  # 3 digits: too coarse
        return torch.tensor(gpt.lr_schedule(num_steps, max_lr, min_lr, warmup_steps)).half()

    with pytest.raises(CheckFailed):
        check("07.6", float16, quiet=True)


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
    from course_lib.checks.ch07 import rope_decode_step_reference

    ex = get_exercise("07.4")
    for case in cases_for("07.4", hidden=True):
        wrong = rope_decode_step_reference(*case.args, from_zero=True)
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


def _learner_initial_loss(vocab_size, d_model, seed, *, bits=False):
    """07.7 written another way: its own batch shape and F.cross_entropy on shifted targets."""
    torch.manual_seed(seed + 1)
    cfg = gpt.GPTConfig(
        vocab_size=vocab_size, seq_len=32, d_model=d_model, num_layers=1, num_heads=2
    )
    model = gpt.GPT(cfg)
    tokens = torch.randint(0, vocab_size, (4, 32))
    with torch.no_grad():
        logits = model(tokens)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab_size), tokens[:, 1:].reshape(-1))
    return float(loss) / (math.log(2) if bits else 1.0)


def test_07_7_another_correct_experiment_passes_and_shows_the_prediction(capsys):
    assert check("07.7", _learner_initial_loss, prediction=lambda v, d, s: math.log(v)).passed
    assert check("07.7", _learner_initial_loss, hidden=True).passed
    assert "you predicted 4.575, measured 4.5" in capsys.readouterr().out


def test_07_7_a_loss_in_bits_is_named():
    with pytest.raises(CheckFailed, match="your loss is in bits"):
        check("07.7", lambda *a: _learner_initial_loss(*a, bits=True), quiet=True)
