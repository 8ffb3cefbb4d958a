"""Unit tests for course_lib.gpt: the tiny GPT, its data, its training loop, its probes."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from course_lib import gpt
from course_lib.gpt import GPT, GPTConfig

TINY = GPTConfig(vocab_size=23, seq_len=16, d_model=32, num_layers=2, num_heads=2)


def _model(config: GPTConfig = TINY, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(config).eval()


def _tokens(b: int, n: int, v: int = TINY.vocab_size, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, v, (b, n), generator=torch.Generator().manual_seed(seed))


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


def test_config_derived_sizes():
    cfg = GPTConfig(d_model=64, num_heads=8, num_kv_heads=2)
    assert (cfg.head_dim, cfg.kv_heads, cfg.num_groups, cfg.ff_width) == (8, 2, 4, 256)
    assert GPTConfig(d_model=64, num_heads=8).kv_heads == 8
    # chapter 04's formula: 2 (K and V) x L x Hkv x d_h x N x B x bytes
    assert cfg.kv_cache_bytes(100, 3, 2) == 2 * cfg.num_layers * 2 * 8 * 100 * 3 * 2


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
    new = gpt.equal_params_config(base, num_kv_heads)
    assert new.kv_heads == num_kv_heads
    assert _model(new).num_params() == _model(base).num_params()
    assert base.kv_cache_bytes() == new.kv_cache_bytes() * 4 // num_kv_heads


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


def test_forward_rejects_float_tokens():
    with pytest.raises(ValueError, match=r"integer tokens of shape \[B, N\]"):
        _model()(torch.zeros(2, 3))


def test_the_model_is_causal():
    """Changing token 6 changes no logit at positions 0..5."""
    m = _model()
    a = _tokens(2, 10)
    b = a.clone()
    b[:, 6] = (b[:, 6] + 1) % TINY.vocab_size
    la, lb = m(a), m(b)
    torch.testing.assert_close(la[:, :6], lb[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(la[:, 6:], lb[:, 6:], atol=1e-4)


def test_embeddings_are_tied():
    m = _model()
    x = torch.randn(1, 4, TINY.d_model)
    expected = m.ln_f(x) @ m.embed.weight.T
    assert not any(n.startswith("lm_head") for n, _ in m.named_parameters())
    torch.testing.assert_close(m.ln_f(x) @ m.embed.weight.T, expected)


def test_initial_loss_is_near_log_vocab():
    m = _model(replace(TINY, vocab_size=97))
    tokens = _tokens(8, 16, 97)
    loss = gpt.causal_lm_loss(m(tokens), tokens).item()
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
        gpt.causal_lm_loss(logits, tokens).backward()
        results.append((logits.detach(), {n: p.grad for n, p in m.named_parameters()}))
    (ref_logits, ref_grads), (logits, grads) = results
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-4)
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-5, rtol=1e-3, msg=name)


def test_flash_backend_takes_fewer_tokens_than_heads_and_decodes_with_a_cache():
    """A prompt shorter than the number of heads, and each cached decode step (one query),
    run through the Triton kernel as through the course's attention: the layout is named,
    so (B, H, N, d_h) with N < H is never read as (B, N, H, d_h)."""
    pytest.importorskip("triton")
    cfg = GPTConfig(vocab_size=23, seq_len=16, d_model=64, num_layers=1, num_heads=4)
    tokens = _tokens(1, 3, v=23)  # (1, 3): 3 tokens, 4 heads
    course = _model(cfg).eval()
    flash = _model(replace(cfg, attention="flash")).eval()
    flash.load_state_dict(course.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(flash(tokens), course(tokens), atol=1e-5, rtol=1e-4)
        ref = course.generate(tokens, 4, temperature=0.0)  # (1, 7)
        got = flash.generate(tokens, 4, temperature=0.0)  # (1, 7)
    assert torch.equal(got, ref)


def test_flash_backend_refuses_an_explicit_mask():
    q = torch.randn(1, 2, 3, 16)
    with pytest.raises(ValueError, match="is_causal only"):
        gpt.attend(q, q, q, backend="flash", mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="backend must be one of"):
        gpt.attend(q, q, q, backend="cuda")


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


def test_cached_greedy_generation_equals_uncached():
    m = _model()
    prompt = _tokens(2, 4)
    a = m.generate(prompt, 20, temperature=0, use_cache=True)
    b = m.generate(prompt, 20, temperature=0, use_cache=False)
    assert a.shape == (2, 24) and torch.equal(a, b) and torch.equal(a[:, :4], prompt)


def test_windowed_generation_is_cached_or_not_the_same_and_stays_in_context():
    m = _model(replace(TINY, positions="learned"))  # learned positions fail past seq_len
    prompt = _tokens(2, 5)
    a = m.generate(prompt, 40, temperature=0, use_cache=True, window=TINY.seq_len)
    b = m.generate(prompt, 40, temperature=0, use_cache=False, window=TINY.seq_len)
    assert a.shape == (2, 45) and torch.equal(a, b)
    with pytest.raises(ValueError, match="learned positions stop at seq_len=16"):
        m.generate(prompt, 40, temperature=0)


def test_sampled_generation_is_reproducible_with_a_generator():
    m = _model()
    prompt = _tokens(1, 3)
    runs = [
        m.generate(
            prompt,
            15,
            temperature=1.0,
            top_k=5,
            use_cache=c,
            generator=torch.Generator().manual_seed(7),
        )
        for c in (True, True, False)
    ]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_generation_restores_training_mode():
    m = _model().train()
    m.generate(_tokens(1, 2), 2, temperature=0)
    assert m.training


def test_positions_computed_counts_what_the_model_sees():
    m = _model()
    seen = []
    hook = m.embed.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[1]))
    for use_cache in (True, False):
        seen.clear()
        m.generate(_tokens(1, 5), 7, temperature=0, use_cache=use_cache)
        assert sum(seen) == gpt.positions_computed(5, 7, use_cache)
    hook.remove()
    assert gpt.positions_computed(5, 0, False) == 0
    assert gpt.positions_computed(1, 100, False) == 100 * 101 // 2


# --------------------------------------------------------------------------- sampling


def test_top_k_probs():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 3.0]])
    p = gpt.top_k_probs(logits, 2)
    assert torch.equal(p > 0, torch.tensor([[True, False, False, False, True]]))
    torch.testing.assert_close(p.sum(-1), torch.ones(1))
    torch.testing.assert_close(p[0, [0, 4]], torch.softmax(torch.tensor([2.0, 3.0]), -1))
    torch.testing.assert_close(gpt.top_k_probs(logits, None, 0.5), torch.softmax(logits / 0.5, -1))
    torch.testing.assert_close(gpt.top_k_probs(logits, 99), torch.softmax(logits, -1))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        gpt.top_k_probs(logits, 2, 0.0)


def test_sample_next_greedy_and_top1():
    logits = torch.randn(4, 10)
    greedy = gpt.sample_next(logits, temperature=0)
    assert torch.equal(greedy, logits.argmax(-1, keepdim=True))
    assert torch.equal(gpt.sample_next(logits, top_k=1), greedy)


def test_sampling_frequencies_follow_the_distribution():
    logits = torch.tensor([[0.0, 1.0, 2.0]]).repeat(4000, 1)
    draws = gpt.sample_next(logits, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws[:, 0], minlength=3).float() / 4000
    torch.testing.assert_close(freq, torch.softmax(logits[0], -1), atol=0.03, rtol=0)


# --------------------------------------------------------------------------- the loss


def test_causal_lm_loss_shifts_the_targets():
    logits = torch.randn(2, 5, 7)
    tokens = torch.randint(0, 7, (2, 5))
    manual = -torch.log_softmax(logits, -1)[:, :-1].gather(-1, tokens[:, 1:, None]).mean()
    torch.testing.assert_close(gpt.causal_lm_loss(logits, tokens), manual)
    with pytest.raises(ValueError, match=r"logits \[B, N, V\] and tokens \[B, N\]"):
        gpt.causal_lm_loss(logits, tokens[:, :-1])


def test_uniform_logits_cost_log_vocab():
    tokens = torch.randint(0, 11, (3, 8))
    loss = gpt.causal_lm_loss(torch.zeros(3, 8, 11), tokens)
    assert abs(loss.item() - math.log(11)) < 1e-6


def test_loss_per_position_averages_to_the_loss():
    m = _model()
    tokens = _tokens(4, 9)
    per = gpt.loss_per_position(m, tokens)
    assert per.shape == (8,)
    with torch.no_grad():
        assert abs(per.mean().item() - gpt.causal_lm_loss(m(tokens), tokens).item()) < 1e-5


# --------------------------------------------------------------------------- data


def test_tokenizer_round_trip_and_unknowns():
    tok = gpt.CharTokenizer()
    assert tok.vocab_size == 97 and tok.chars[0] == "\n" and tok.chars[1] == " "
    text = "def f(x):\n    return x ** 2  # ~{}|\n"
    ids = tok.encode(text)
    assert ids.dtype == torch.int64 and ids.shape == (len(text),)
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode("a\tb é")) == "a\ufffdb \ufffd"
    assert tok.show(tok.encode("a b\n")) == ["a", "␣", "b", "⏎"]


def test_corpus_splits_by_module_without_leaks():
    corpus = gpt.load_corpus()
    assert not set(corpus.train_modules) & set(corpus.val_modules)
    assert corpus.train.numel() > 500_000 and corpus.val.numel() > 50_000
    assert corpus.train.dtype == torch.int64
    # text of a validation file never appears in training: take a long line from it
    val_text = corpus.tokenizer.decode(corpus.val[:20_000])
    line = max(val_text.splitlines(), key=len)
    assert len(line) > 40
    assert line not in corpus.tokenizer.decode(corpus.train)
    # almost everything is in the fixed vocabulary
    assert (corpus.train == corpus.tokenizer.unknown_id).float().mean() < 1e-3


def test_corpus_skips_modules_without_source(monkeypatch):
    real = gpt.module_source
    monkeypatch.setattr(
        gpt.data, "module_source", lambda name: None if name == "csv" else real(name)
    )
    with pytest.warns(UserWarning, match="csv"):
        corpus = gpt.load_corpus()
    assert corpus.missing == ["csv"] and "csv" not in corpus.train_modules
    monkeypatch.setattr(gpt.data, "module_source", lambda name: None)
    with pytest.raises(RuntimeError, match="too little source text"), pytest.warns(UserWarning):
        gpt.load_corpus()


def test_frozen_modules_are_read_from_the_stdlib_folder():
    assert "class ABCMeta" in gpt.module_source("abc")  # frozen into Python >= 3.11


def test_get_batch_returns_windows_of_the_data():
    data = torch.arange(100)
    batch = gpt.get_batch(data, 5, 8, torch.Generator().manual_seed(0))
    assert batch.shape == (5, 8)
    assert torch.all(batch[:, 1:] - batch[:, :-1] == 1)  # consecutive tokens
    with pytest.raises(ValueError, match="fewer than seq_len"):
        gpt.get_batch(torch.arange(8), 2, 8)


def test_unigram_cross_entropy():
    train = torch.tensor([0, 0, 1, 1])
    # add-one counts 3, 3, 1 over V=3: p = (3/7, 3/7, 1/7)
    assert (
        abs(
            gpt.unigram_cross_entropy(train, torch.tensor([0, 2]), 3)
            - (-(math.log(3 / 7) + math.log(1 / 7)) / 2)
        )
        < 1e-12
    )
    uniform = torch.arange(50).repeat(20)
    assert abs(gpt.unigram_cross_entropy(uniform, uniform, 50) - math.log(50)) < 1e-9


# --------------------------------------------------------------------------- training


def test_lr_schedule_endpoints():
    lrs = gpt.lr_schedule(20, 1e-2, 1e-3, 4)
    assert lrs.shape == (20,)
    assert lrs[0] == pytest.approx(2.5e-3) and lrs[3] == pytest.approx(1e-2)
    assert lrs[4] == pytest.approx(1e-2) and lrs[-1] == pytest.approx(1e-3)
    assert np.all(np.diff(lrs[:4]) > 0) and np.all(np.diff(lrs[4:]) < 0)
    assert gpt.lr_schedule(5, 1.0, 0.1, 0)[0] == pytest.approx(1.0)


def test_training_lowers_the_loss_and_records_history():
    data = torch.arange(23).repeat(50)  # a cyclic sequence: next token = this one + 1
    m = _model(replace(TINY, num_layers=1))
    cfg = gpt.TrainConfig(
        steps=60,
        batch_size=8,
        max_lr=1e-2,
        min_lr=1e-3,
        warmup_steps=5,
        eval_every=20,
        eval_windows=8,
    )
    before = gpt.evaluate(m, data, num_windows=8)
    hist = gpt.train(m, data, cfg, val=data, progress=False)
    assert len(hist.step) == len(hist.train_loss) == len(hist.lr) == 60
    assert hist.val_step == [19, 39, 59] and len(hist.val_loss) == 3
    assert hist.val_loss[-1] < 0.3 * before
    assert hist.lr[-1] == pytest.approx(1e-3) and not m.training
    assert len(hist.smoothed_train_loss(10)) == 51


def test_training_is_reproducible():
    data = torch.randint(0, 23, (2000,), generator=torch.Generator().manual_seed(1))
    cfg = gpt.TrainConfig(steps=5, batch_size=4, warmup_steps=2, eval_every=0)
    runs = [gpt.train(_model(seed=3), data, cfg, progress=False).train_loss for _ in range(2)]
    assert runs[0] == runs[1]


def test_evaluate_is_deterministic_and_restores_mode():
    m = _model().train()
    data = torch.randint(0, 23, (500,), generator=torch.Generator().manual_seed(2))
    assert gpt.evaluate(m, data, num_windows=10) == gpt.evaluate(m, data, num_windows=10)
    assert m.training


def test_budget_configs():
    for budget in ("ci", "full"):
        model_cfg, train_cfg = gpt.budget_configs(budget)
        assert model_cfg.head_dim >= 16  # the flash kernel's smallest head
        assert train_cfg.warmup_steps < train_cfg.steps
    assert gpt.budget_configs("ci")[1].steps < gpt.budget_configs("full")[1].steps
    with pytest.raises(ValueError, match="budget must be"):
        gpt.budget_configs("huge")


# --------------------------------------------------------------------------- probes


def test_repeated_and_random_period_tokens():
    g = torch.Generator().manual_seed(0)
    rep = gpt.repeated_random_tokens(3, 5, 20, copies=3, generator=g)
    assert rep.shape == (3, 15) and torch.equal(rep[:, :5], rep[:, 10:])
    rows = gpt.random_period_tokens(50, 32, 20, min_period=4, max_period=9, generator=g)
    assert rows.shape == (50, 32)
    for row in rows:
        periods = [t for t in range(4, 10) if torch.equal(row[t:], row[:-t])]
        assert periods, row


def test_induction_and_previous_token_scores():
    n, period = 8, 4
    w = torch.zeros(1, 2, n, n)
    for i in range(n):  # head 0: induction head; head 1: previous-token head
        w[0, 0, i, i - period + 1 if i >= period else 0] = 1.0
        w[0, 1, i, max(i - 1, 0)] = 1.0
    torch.testing.assert_close(gpt.induction_scores(w, period), torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(gpt.previous_token_scores(w), torch.tensor([1 / 7, 1.0]))
    with pytest.raises(ValueError, match=r"period must be in \[1, N=8\)"):
        gpt.induction_scores(w, 8)
    with pytest.raises(ValueError, match=r"\[B, H, N, N\]"):
        gpt.induction_scores(w[0], 4)


# --------------------------------------------------------------------------- the widget


def test_head_explorer_runs_headless():
    from course_lib.widgets.heads import HeadExplorer, head_weights

    m = _model(replace(TINY, vocab_size=97))
    tok = gpt.CharTokenizer()
    labels, weights = head_weights(m, tok, "x = 1\n")
    assert labels == ["x", "␣", "=", "␣", "1", "⏎"] and weights.shape == (2, 2, 6, 6)
    ex = HeadExplorer(m, tok, ["def f(x):", "x = 1\n"])
    assert ex.draws == 1 and ex.query.value == 8
    ex.head.value = "1"
    ex.layer.value = "0"
    assert ex.draws == 3
    assert ex.current()[1].shape == (9, 9) and abs(ex.row().sum() - 1) < 1e-5
    ex.typed.value = "ab"
    assert ex.text.value == "ab" and len(ex.current()[0]) == 2
    ex.typed.value = "a"
    assert "cannot use that text" in ex.summary.value
    assert ex.plot.value[:4] == b"\x89PNG"


# --------------------------------------------------------------------------- induction models


def test_induction_checkpoint_round_trip(tmp_path):
    m = _model()
    history = gpt.History(
        step=[0, 1],
        train_loss=[3.0, 2.5],
        lr=[1e-3, 1e-3],
        probes=[{"step": 1, "induction": [[0.1, 0.2]]}],
        seconds=1.5,
    )
    path = gpt.save_induction_checkpoint({"tiny": (m, history)}, tmp_path / "c.pt")
    loaded, h = gpt.load_induction_checkpoint(path)["tiny"]
    assert loaded.config == m.config and not loaded.training
    tokens = _tokens(2, 6)
    torch.testing.assert_close(loaded(tokens), m(tokens))
    assert h.train_loss == [3.0, 2.5] and h.probes[0]["induction"] == [[0.1, 0.2]]
    with pytest.raises(FileNotFoundError, match="make_induction_checkpoint"):
        gpt.load_induction_checkpoint(tmp_path / "missing.pt")


def test_the_shipped_induction_models_have_the_heads_the_lecture_claims():
    models = gpt.load_induction_checkpoint()
    two, history = models["two_layers"]
    one, _ = models["one_layer"]
    assert two.config == gpt.INDUCTION_CONFIG and one.config.num_layers == 1
    assert len(history.train_loss) == gpt.INDUCTION_TRAIN.steps
    probe = gpt.induction_probe(two, period=16)
    assert probe["second_copy_loss"] < 0.25 * probe["first_copy_loss"]
    assert max(probe["induction"][1]) > 0.5 and max(probe["induction"][0]) < 0.2
    assert gpt.induction_probe(one, period=16)["second_copy_loss"] > 1.5


def test_induction_probe_on_an_untrained_model():
    cfg = replace(gpt.INDUCTION_CONFIG, d_model=16, num_heads=2)
    probe = gpt.induction_probe(_model(cfg), period=6, batch_size=8)
    assert abs(probe["first_copy_loss"] - math.log(cfg.vocab_size)) < 0.3
    assert len(probe["induction"]) == 2 and len(probe["induction"][0]) == 2


# --------------------------------------------------------------------------- the package


@pytest.mark.parametrize(
    "module",
    [
        "model",
        "generate",
        "data",
        "training",
        "probes",
        "induction",
        "checkpoint",
        "ablations",
        "pretrained",
    ],
)
def test_the_package_hands_on_every_public_name(module):
    import importlib

    sub = importlib.import_module(f"course_lib.gpt.{module}")
    for name in sub.__all__:
        if name == module:  # generate.generate: the package's name is the module
            continue
        assert getattr(gpt, name) is getattr(sub, name), f"course_lib.gpt.{name} is not {module}'s"


def test_model_reads_on_its_own():
    """model.py imports only torch, the earlier chapters and the decoding loop."""
    import ast
    import inspect

    from course_lib.gpt import model

    tree = ast.parse(inspect.getsource(model))
    local = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1}
    assert local <= {"generate"}, f"model.py depends on {local - {'generate'}}"
