"""Unit tests of course_lib.experiments.extrapolation: the tiny RoPE/ALiBi character model."""

from __future__ import annotations

import pytest
import torch

from course_lib.experiments import extrapolation as X


def test_corpus_is_python_text():
    train, val, chars = X.char_corpus()
    assert len(train) > 100_000 and len(val) > 10_000
    assert int(train.max()) < len(chars) and " " in chars and "e" in chars


@pytest.mark.parametrize("position", X.POSITIONS)
def test_models_are_causal_and_run_on_longer_sequences(position):
    torch.manual_seed(0)
    m = X.TinyLM(20, d_model=16, num_heads=4, num_layers=2, d_ff=32, position=position)
    m.eval()
    t = torch.randint(20, (2, 12))
    u = t.clone()
    u[:, 8:] = (u[:, 8:] + 1) % 20
    with torch.no_grad():
        torch.testing.assert_close(m(t)[:, :8], m(u)[:, :8])
        assert m(torch.randint(20, (1, 100))).shape == (1, 100, 20)


def test_training_lowers_the_loss_and_loss_by_position_has_one_value_per_position():
    train, val, chars = X.char_corpus()
    torch.manual_seed(0)
    m = X.TinyLM(len(chars), d_model=16, num_heads=2, num_layers=1, d_ff=32, position="alibi")
    losses = X.train_lm(m, train, steps=30, batch_size=8, seq_len=16)
    assert sum(losses[-5:]) < sum(losses[:5])
    per_pos = X.loss_by_position(m, val, seq_len=40, n=4)
    assert per_pos.shape == (40,) and torch.isfinite(per_pos).all()


def test_errors():
    with pytest.raises(ValueError, match="position must be"):
        X.TinyLM(10, position="sinusoidal")
    with pytest.raises(ValueError, match="divisible"):
        X.TinyLM(10, d_model=10, num_heads=4)
