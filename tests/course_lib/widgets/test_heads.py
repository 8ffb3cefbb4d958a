"""course_lib.widgets.heads: chapter 07's head explorer on a tiny GPT, driven from code; what
it draws is the model's own attention (``need_weights=True``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.gpt import GPT, CharTokenizer, GPTConfig

pytest.importorskip("ipywidgets")

from course_lib.widgets.heads import HeadExplorer, head_weights  # noqa: E402

TINY = GPTConfig(vocab_size=97, seq_len=16, d_model=32, num_layers=2, num_heads=2)


@pytest.fixture
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(TINY).eval()


def test_head_explorer_runs_headless(model):
    tok = CharTokenizer()
    labels, weights = head_weights(model, tok, "x = 1\n")
    assert labels == ["x", "␣", "=", "␣", "1", "⏎"] and weights.shape == (2, 2, 6, 6)
    ex = HeadExplorer(model, tok, ["def f(x):", "x = 1\n"])
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


def test_head_weights_are_the_models_and_leave_its_mode(model):
    tok = CharTokenizer()
    model.train()
    labels, weights = head_weights(model, tok, "abc")
    assert model.training and labels == ["a", "b", "c"]
    with torch.no_grad():
        _, want = model.eval()(tok.encode("abc")[None], need_weights=True)
    torch.testing.assert_close(weights, torch.stack([w[0] for w in want]))
    with pytest.raises(ValueError, match="at least two characters"):
        head_weights(model, tok, "a")


def test_the_drawn_head_and_summary_follow_the_buttons(model):
    tok = CharTokenizer()
    ex = HeadExplorer(model, tok, ["for i in x:"], layer=0, head=1, query=3)
    assert (ex.layer.value, ex.head.value, ex.query.value) == ("0", "1", 3)
    _, weights = head_weights(model, tok, "for i in x:")
    np.testing.assert_allclose(ex.current()[1], weights[0, 1].numpy())
    np.testing.assert_allclose(ex.row(), weights[0, 1, 3].numpy())
    row = ex.row()
    top = np.argsort(-row)[:3]
    assert ex.summary.value.startswith("layer 0, head 1: query 3 '␣' → ")
    assert ex.summary.value.endswith(
        ", ".join(f"{j} '{ex.current()[0][j]}' {row[j]:.2f}" for j in top)
    )
    ex.layer.value = "1"
    np.testing.assert_allclose(ex.current()[1], weights[1, 1].numpy())
    assert ex.row()[4:].sum() == 0  # causal: query 3 sees keys 0..3 only


def test_a_typed_text_is_added_once_and_the_parts_carry_classes(model):
    tok = CharTokenizer()
    ex = HeadExplorer(model, tok, ["ab"])
    ex.typed.value = "xyz"
    ex.typed.value = "   "  # blank: ignored
    ex.typed.value = "ab"
    assert list(ex.text.options) == ["ab", "xyz"] and ex.text.value == "ab"
    assert ex.query.value == 1  # a new text starts at its last position
    assert "head-explorer" in ex.widget._dom_classes
    for name in ("text", "typed", "layer", "head", "query", "summary", "plot"):
        assert f"head-explorer-{name}" in getattr(ex, name)._dom_classes
    with pytest.raises(ValueError, match="at least one text"):
        HeadExplorer(model, tok, [])
