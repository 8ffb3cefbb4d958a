"""Unit tests of course_lib.experiments.recall: the marker and pair recall tasks, learned by
one causal attention layer, softmax or linear."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import scaled_dot_product_attention
from course_lib.experiments import recall
from course_lib.rnn import make_recall_batch
from course_lib.variants.linear_attention import linear_attention


def test_pair_recall_batch_is_consistent():
    b = recall.make_pair_recall_batch(
        5, 6, 4, num_keys=10, num_values=3, generator=torch.Generator().manual_seed(0)
    )
    assert b.keys.shape == b.values.shape == (5, 10) and b.targets.shape == (5, 4)
    for row in range(5):
        pairs = dict(zip(b.keys[row, :6].tolist(), b.values[row, :6].tolist()))
        assert len(pairs) == 6  # distinct keys
        assert (b.values[row, 6:] == 3).all()  # the "?" value
        for key, target in zip(b.keys[row, 6:].tolist(), b.targets[row].tolist()):
            assert pairs[key] == target
    with pytest.raises(ValueError, match="num_pairs"):
        recall.make_pair_recall_batch(2, 11, num_keys=10)


@pytest.mark.parametrize("attention", recall.ATTENTIONS)
def test_recall_models_train_and_report_accuracy(attention):
    torch.manual_seed(0)
    m = recall.PairRecallModel(16, 4, 16, attention=attention)
    losses = recall.train_pair_recall(m, 2, steps=25, num_queries=4)
    assert len(losses) == 25 and sum(losses[-5:]) < sum(losses[:5])
    assert 0.0 <= recall.pair_recall_accuracy(m, 2, n=32) <= 1.0
    r = recall.RecallModel(4, 8, attention=attention)
    assert len(recall.train_marker_recall(r, steps=3, seq_len=6, vocab_size=4)) == 3
    d, acc = recall.marker_recall_accuracy(r, seq_len=6, vocab_size=4, n=8)
    assert d.tolist() == [1, 2, 3, 4, 5] and acc.shape == (5,)
    with pytest.raises(ValueError, match="attention must be"):
        recall.RecallModel(4, attention="sparse")


def test_pair_recall_batch_checks_its_sizes():
    for kwargs in (dict(batch_size=0), dict(num_queries=0), dict(num_values=1)):
        args = dict(batch_size=2, num_pairs=3, num_queries=2, num_values=4) | kwargs
        with pytest.raises(ValueError, match="expected batch_size >= 1"):
            recall.make_pair_recall_batch(**args)
    with pytest.raises(ValueError, match="num_pairs must lie in 1..num_keys=64"):
        recall.make_pair_recall_batch(2, 0)


@pytest.mark.parametrize("attention", recall.ATTENTIONS)
def test_the_models_are_causal_and_use_the_chosen_attention(attention, monkeypatch):
    """Changing a later token never changes an earlier output; and the attention is the
    chapter's: softmax (chapter 02) or linear (course_lib.variants.linear_attention)."""
    torch.manual_seed(0)
    model = recall.PairRecallModel(10, 5, 8, attention=attention).eval()
    b = recall.make_pair_recall_batch(2, 4, 3, num_keys=10, num_values=5,
                                      generator=torch.Generator().manual_seed(1))  # fmt: skip
    keys = b.keys.clone()
    keys[:, 5:] = (keys[:, 5:] + 1) % 10
    with torch.no_grad():
        out, changed = model(b.keys, b.values), model(keys, b.values)
    assert out.shape == (2, 7, 5)
    torch.testing.assert_close(out[:, :5], changed[:, :5])
    assert not torch.allclose(out[:, 5:], changed[:, 5:])
    called = []
    name, real, causal = {
        "softmax": ("scaled_dot_product_attention", scaled_dot_product_attention, "is_causal"),
        "linear": ("linear_attention", linear_attention, "causal"),
    }[attention]
    monkeypatch.setattr(recall, name, lambda *a, **kw: called.append(kw) or real(*a, **kw))
    marker = recall.RecallModel(4, 8, attention=attention)
    batch = make_recall_batch(3, 6, 4, generator=torch.Generator().manual_seed(2))
    assert marker(batch.tokens, batch.marker).shape == (3, 6, 4)
    assert called == [{causal: True}]


def test_accuracies_are_the_fraction_answered_right(monkeypatch):
    """A model that always answers value 0 scores the share of targets equal to 0."""
    model = recall.PairRecallModel(16, 4, 8)
    b = recall.make_pair_recall_batch(64, 3, 4, num_keys=16, num_values=4,
                                      generator=torch.Generator().manual_seed(99))  # fmt: skip

    def always_zero(keys, values):
        logits = torch.zeros(*keys.shape, 4)
        logits[..., 0] = 1.0
        return logits

    monkeypatch.setattr(model, "forward", always_zero)
    acc = recall.pair_recall_accuracy(model, 3, n=64, num_queries=4, seed=99)
    assert acc == pytest.approx(float((b.targets == 0).float().mean()))
    assert not model.training  # evaluated in eval mode


def test_marker_accuracy_by_distance_from_the_marker(monkeypatch):
    """Marked at position 0: an oracle that outputs the marked token is right at every
    distance 1..N-1; position 0 itself is not counted."""
    model = recall.RecallModel(5, 8)

    def oracle(tokens, marker):
        marked = (tokens * marker).sum(1).long()  # (n,) the marked token (marker is 1.0 there)
        return (
            torch.nn.functional.one_hot(marked, 5).float()[:, None].expand(-1, tokens.shape[1], -1)
        )

    monkeypatch.setattr(model, "forward", oracle)
    d, acc = recall.marker_recall_accuracy(model, seq_len=7, vocab_size=5, n=16)
    assert d.tolist() == list(range(1, 7)) and torch.equal(acc, torch.ones(6))
