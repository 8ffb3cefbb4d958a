"""course_lib.gpt.induction: the induction-head experiment's recipe, its probe, its training
run, and the shipped models it produced."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from course_lib.gpt import induction as I
from course_lib.gpt.checkpoint import load_induction_checkpoint
from course_lib.gpt.model import GPT
from course_lib.gpt.probes import repeated_random_tokens
from course_lib.gpt.training import loss_per_position

SMALL = replace(I.INDUCTION_CONFIG, d_model=16, num_heads=2)


def _model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(SMALL).eval()


def test_the_recipe_is_attention_only_at_a_constant_rate():
    cfg, train = I.INDUCTION_CONFIG, I.INDUCTION_TRAIN
    assert not cfg.mlp and cfg.num_layers == 2
    assert train.min_lr == train.max_lr and train.warmup_steps < train.steps
    lo, hi = I.INDUCTION_PERIODS
    assert lo < I.INDUCTION_PROBE_PERIOD < hi and 2 * hi <= cfg.seq_len


def test_induction_probe_on_an_untrained_model():
    probe = I.induction_probe(_model(), period=6, batch_size=8)
    assert abs(probe["first_copy_loss"] - math.log(SMALL.vocab_size)) < 0.3
    assert len(probe["induction"]) == 2 and len(probe["induction"][0]) == 2


def test_the_probe_splits_the_loss_at_the_second_copy():
    m = _model()
    probe = I.induction_probe(m, period=5, batch_size=4, seed=9)
    tokens = repeated_random_tokens(
        4, 5, SMALL.vocab_size, generator=torch.Generator().manual_seed(9)
    )
    per = loss_per_position(m, tokens)  # (9,): positions 0..3 predict the first copy
    assert probe["first_copy_loss"] == float(per[:4].mean())
    assert probe["second_copy_loss"] == float(per[4:].mean())
    assert probe == I.induction_probe(m, period=5, batch_size=4, seed=9)  # seeded


def test_train_induction_model_on_one_thread_with_random_periods(monkeypatch):
    seen = []
    real = I.random_period_tokens

    def recording(batch_size, seq_len, vocab_size, **kw):
        seen.append(
            (batch_size, seq_len, kw["min_period"], kw["max_period"], torch.get_num_threads())
        )
        return real(batch_size, seq_len, vocab_size, **kw)

    monkeypatch.setattr(I, "random_period_tokens", recording)
    threads = torch.get_num_threads()
    run = replace(I.INDUCTION_TRAIN, steps=3, batch_size=4, warmup_steps=1, eval_every=2)
    torch.set_num_threads(2)  # so that one thread inside is the function's doing
    try:
        model, history = I.train_induction_model(SMALL, run, periods=(4, 6), progress=False)
        assert seen == [(4, SMALL.seq_len, 4, 6, 1)] * 3 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert [p["step"] for p in history.probes] == [1, 2]
    assert set(history.probes[-1]) == {"step", "first_copy_loss", "second_copy_loss", "induction"}
    assert history.probes[-1]["induction"] == I.induction_probe(model)["induction"]
    again, _ = I.train_induction_model(SMALL, run, periods=(4, 6), progress=False)
    for name, value in model.state_dict().items():  # seeded: the same model
        assert torch.equal(again.state_dict()[name], value), name


def test_the_shipped_induction_models_have_the_heads_the_lecture_claims():
    models = load_induction_checkpoint()
    two, history = models["two_layers"]
    one, _ = models["one_layer"]
    assert two.config == I.INDUCTION_CONFIG and one.config.num_layers == 1
    assert len(history.train_loss) == I.INDUCTION_TRAIN.steps
    probe = I.induction_probe(two, period=16)
    assert probe["second_copy_loss"] < 0.25 * probe["first_copy_loss"]
    assert max(probe["induction"][1]) > 0.5 and max(probe["induction"][0]) < 0.2
    assert I.induction_probe(one, period=16)["second_copy_loss"] > 1.5
