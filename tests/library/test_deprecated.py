"""Names retired by docs/notation.md still work for old notebooks, and say what to use."""

from __future__ import annotations

import warnings

import pytest
import torch

from course_lib import _deprecated, multihead, positional, rnn, scaling
from course_lib.experiments import coref


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(_deprecated, "_warned", set())


def test_an_old_keyword_gives_the_same_result_and_warns_once():
    new = positional.sinusoidal_encoding(seq_len=6, d_model=4)
    with pytest.warns(FutureWarning, match=r"n_positions.*seq_len.*docs/notation.md"):
        old = positional.sinusoidal_encoding(n_positions=6, d_model=4)
    assert torch.equal(old, new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second use is silent
        positional.sinusoidal_encoding(n_positions=6, d_model=4)


def test_old_and_new_keyword_together_is_an_error():
    with pytest.raises(TypeError, match="both"), pytest.warns(FutureWarning):
        positional.sinusoidal_encoding(n_positions=6, seq_len=6, d_model=4)


@pytest.mark.parametrize(
    "call",
    [
        lambda: rnn.dependency_graph("rnn", n_tokens=3, n_layers=2),
        lambda: rnn.recurrent_matrix(d_h=4, rho=0.5),
        lambda: rnn.make_recall_batch(batch=2, seq_len=5, vocab=3),
        lambda: rnn.RecallRNN(vocab=4),
        lambda: multihead.repeat_kv(torch.zeros(1, 2, 3, 4), n_rep=2),
        lambda: scaling.multihead_scores(
            torch.zeros(1, 2, 4), w_q=torch.eye(4), w_k=torch.eye(4), num_heads=2
        ),
        lambda: scaling.multihead_scores(
            torch.zeros(1, 2, 4), torch.eye(4), torch.eye(4), 2, scale_by="d_head"
        ),
    ],
)
def test_every_retired_keyword_still_works(call):
    with pytest.warns(FutureWarning, match="docs/notation.md"):
        call()


def test_retired_attributes_read_the_new_ones():
    mha = multihead.MultiHeadAttention(8, 2)
    with pytest.warns(FutureWarning, match=r"q_proj.*W_Q"):
        assert mha.q_proj is mha.W_Q
    with pytest.warns(FutureWarning, match=r"out_proj.*W_O"):
        assert mha.out_proj is mha.W_O
    model = coref.CorefAttention(10, num_layers=2)
    with pytest.warns(FutureWarning, match=r"n_layers.*num_layers"):
        assert model.n_layers == 2
    assert "q_proj" not in dict(mha.named_modules())  # the state dict uses the new names
