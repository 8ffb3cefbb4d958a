"""course_lib.gpt.training: the loss, the learning-rate schedule, evaluation, the training
loop and its record, and the lecture's budgets."""

from __future__ import annotations

import math
from dataclasses import replace

import matplotlib
import numpy as np
import pytest
import torch
from gpt_lab import TINY, one_thread  # noqa: F401  (one_thread: an autouse fixture)
from gpt_lab import tiny_model as _model
from gpt_lab import tiny_tokens as _tokens

from course_lib.gpt import training as T
from course_lib.gpt.data import CharTokenizer, Corpus

# --------------------------------------------------------------------------- the loss


def test_causal_lm_loss_shifts_the_targets():
    logits = torch.randn(2, 5, 7)
    tokens = torch.randint(0, 7, (2, 5))
    manual = -torch.log_softmax(logits, -1)[:, :-1].gather(-1, tokens[:, 1:, None]).mean()
    torch.testing.assert_close(T.causal_lm_loss(logits, tokens), manual)
    with pytest.raises(ValueError, match=r"logits \[B, N, V\] and tokens \[B, N\]"):
        T.causal_lm_loss(logits, tokens[:, :-1])
    with pytest.raises(ValueError, match=r"logits \[B, N, V\] and tokens \[B, N\]"):
        T.causal_lm_loss(logits[0], tokens[0])


def test_uniform_logits_cost_log_vocab():
    tokens = torch.randint(0, 11, (3, 8))
    loss = T.causal_lm_loss(torch.zeros(3, 8, 11), tokens)
    assert abs(loss.item() - math.log(11)) < 1e-6


def test_loss_per_position_averages_to_the_loss():
    m = _model()
    tokens = _tokens(4, 9)
    per = T.loss_per_position(m, tokens)
    assert per.shape == (8,) and not per.requires_grad
    with torch.no_grad():
        assert abs(per.mean().item() - T.causal_lm_loss(m(tokens), tokens).item()) < 1e-5
        logits = m(tokens)
    first = -torch.log_softmax(logits[:, 0], -1).gather(-1, tokens[:, 1:2]).mean()
    torch.testing.assert_close(per[0], first)


# --------------------------------------------------------------------------- the schedule


def test_lr_schedule_endpoints():
    lrs = T.lr_schedule(20, 1e-2, 1e-3, 4)
    assert lrs.shape == (20,) and lrs.dtype == np.float64
    assert lrs[0] == pytest.approx(2.5e-3) and lrs[3] == pytest.approx(1e-2)
    assert lrs[4] == pytest.approx(1e-2) and lrs[-1] == pytest.approx(1e-3)
    assert np.all(np.diff(lrs[:4]) > 0) and np.all(np.diff(lrs[4:]) < 0)
    assert T.lr_schedule(5, 1.0, 0.1, 0)[0] == pytest.approx(1.0)


def test_lr_at_is_warm_up_then_the_cosine():
    kw = {"max_lr": 1.0, "min_lr": 0.2, "warmup_steps": 10, "num_steps": 31}
    assert [T.lr_at(s, **kw) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    # halfway through the decay the cosine is at 0: the mean of max and min
    assert T.lr_at(20, **kw) == pytest.approx(0.6)
    assert T.lr_at(30, **kw) == pytest.approx(0.2)
    assert T.lr_at(99, **kw) == pytest.approx(0.2)  # past the end: stays at min_lr
    assert T.lr_at(15, **kw) == pytest.approx(0.2 + 0.4 * (1 + math.cos(math.pi * 5 / 20)))


# --------------------------------------------------------------------------- evaluation


def test_evaluate_is_deterministic_and_restores_mode():
    m = _model().train()
    data = torch.randint(0, 23, (500,), generator=torch.Generator().manual_seed(2))
    assert T.evaluate(m, data, num_windows=10) == T.evaluate(m, data, num_windows=10)
    assert m.training


def test_evaluate_averages_the_loss_over_evenly_spaced_windows():
    m = _model()
    data = torch.randint(0, 23, (200,), generator=torch.Generator().manual_seed(3))
    starts = torch.linspace(0, 200 - 8 - 1, 5).long()
    windows = torch.stack([data[s : s + 8] for s in starts])  # (5, 8)
    with torch.no_grad():
        want = T.causal_lm_loss(m(windows), windows).item()
    # batches of 2 windows: the mean over windows, not over batches
    got = T.evaluate(m, data, seq_len=8, num_windows=5, batch_size=2)
    assert got == pytest.approx(want, rel=1e-5)


# --------------------------------------------------------------------------- the record


def test_history_smooths_with_a_moving_average():
    h = T.History(step=[0, 1, 2, 3], train_loss=[4.0, 2.0, 0.0, 2.0])
    np.testing.assert_allclose(h.smoothed_train_loss(2), [3.0, 1.0, 1.0])
    np.testing.assert_allclose(h.smoothed_train_loss(99), [2.0])  # the window shrinks to fit
    np.testing.assert_allclose(h.smoothed_train_loss(0), h.train_loss)


def test_history_plots_both_curves():
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    h = T.History(
        step=list(range(30)), train_loss=[3.0 - 0.05 * s for s in range(30)], val_step=[9, 29],
        val_loss=[2.8, 1.9],
    )  # fmt: skip
    ax = Figure().subplots()
    assert h.plot(ax, title="run") is ax
    raw, smooth, val = ax.get_lines()
    assert len(raw.get_xdata()) == 30 and len(smooth.get_xdata()) == 30 - 20 + 1
    assert list(val.get_xdata()) == [9, 29] and list(val.get_ydata()) == [2.8, 1.9]
    assert ax.get_title() == "run" and ax.get_xlabel() == "step"


# --------------------------------------------------------------------------- training


def test_training_lowers_the_loss_and_records_history():
    data = torch.arange(23).repeat(50)  # a cyclic sequence: next token = this one + 1
    m = _model(replace(TINY, num_layers=1))
    cfg = T.TrainConfig(
        steps=60,
        batch_size=8,
        max_lr=1e-2,
        min_lr=1e-3,
        warmup_steps=5,
        eval_every=20,
        eval_windows=8,
    )
    before = T.evaluate(m, data, num_windows=8)
    hist = T.train(m, data, cfg, val=data, progress=False)
    assert hist.step == list(range(60)) and len(hist.train_loss) == len(hist.lr) == 60
    assert hist.val_step == [19, 39, 59] and len(hist.val_loss) == 3
    assert hist.val_loss[-1] < 0.3 * before
    assert hist.lr == pytest.approx(list(T.lr_schedule(60, 1e-2, 1e-3, 5)))
    assert hist.lr[-1] == pytest.approx(1e-3) and not m.training and hist.seconds > 0
    assert len(hist.smoothed_train_loss(10)) == 51


def test_training_is_reproducible():
    data = torch.randint(0, 23, (2000,), generator=torch.Generator().manual_seed(1))
    cfg = T.TrainConfig(steps=5, batch_size=4, warmup_steps=2, eval_every=0)
    runs = [T.train(_model(seed=3), data, cfg, progress=False) for _ in range(2)]
    assert runs[0].train_loss == runs[1].train_loss
    # no validation data and no eval_every: nothing validated
    assert runs[0].val_step == [] and runs[0].probes == []


def test_training_on_a_corpus_validates_on_its_val_split():
    g = torch.Generator().manual_seed(0)
    corpus = Corpus(
        CharTokenizer(),
        torch.randint(0, 23, (400,), generator=g),
        torch.randint(0, 23, (100,), generator=g),
        ["train"],
        ["val"],
    )
    cfg = T.TrainConfig(steps=3, batch_size=2, warmup_steps=1, eval_every=2, eval_windows=4)
    m = _model()
    hist = T.train(m, corpus, cfg, progress=False)
    assert hist.val_step == [1, 2]  # every eval_every steps, and at the last one
    assert hist.val_loss[-1] == pytest.approx(T.evaluate(m, corpus.val, num_windows=4))


def test_batch_fn_and_probe_replace_the_batches_and_record_the_heads():
    fed, modes = [], []

    def batch_fn(step, generator):
        fed.append(step)
        assert isinstance(generator, torch.Generator)
        return torch.arange(8).repeat(2, 1)  # (2, 8)

    def probe(model):
        modes.append(model.training)
        return {"calls": len(modes)}

    m = _model()
    cfg = T.TrainConfig(steps=4, batch_size=99, warmup_steps=1, eval_every=2)
    hist = T.train(m, None, cfg, progress=False, batch_fn=batch_fn, probe=probe)
    assert fed == [0, 1, 2, 3]
    assert hist.probes == [{"step": 1, "calls": 1}, {"step": 3, "calls": 2}]
    assert modes == [False, False]  # probed in eval mode, trained on afterwards
    assert hist.val_loss == []  # no validation data


def test_weight_decay_applies_to_matrices_only():
    m = _model()
    opt = T._adamw(m, T.TrainConfig(weight_decay=0.25))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.25 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(m.parameters()))
    assert decay["betas"] == (0.9, 0.95)


def test_budget_configs(monkeypatch):
    for budget in ("ci", "full"):
        model_cfg, train_cfg = T.budget_configs(budget)
        assert model_cfg.head_dim >= 16  # the flash kernel's smallest head
        assert train_cfg.warmup_steps < train_cfg.steps
    assert T.budget_configs("ci")[1].steps < T.budget_configs("full")[1].steps
    with pytest.raises(ValueError, match="budget must be"):
        T.budget_configs("huge")
    # without an argument: the budget of the environment (course_lib.env.budget())
    monkeypatch.setenv("COURSE_BUDGET", "full")
    assert T.budget_configs() == T.budget_configs("full")
    monkeypatch.setenv("COURSE_BUDGET", "ci")
    assert T.budget_configs() == T.budget_configs("ci")
