"""course_lib.widgets.explorer: chapter 02's attention explorer, driven from code on the
synthetic coreference data; what it draws is course_lib.experiments.coref's attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.experiments import coref

pytest.importorskip("ipywidgets")

from course_lib.widgets.explorer import AttentionExplorer, attention_maps  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return coref.make_dataset(max_per_template=60, seed=0)


def test_explorer_runs_headless_and_redraws(data):
    train, test = data
    torch.manual_seed(0)
    model = coref.make_model(train.vocab, d_model=8)
    ex = AttentionExplorer({"a": model}, train.vocab, test.sentences[:3])
    assert "attention-explorer" in ex.widget._dom_classes
    assert ex.query.label.endswith("it") and ex.draws == 1
    # the summary exists as plain text too (what a notebook prints), with the same content
    assert "<" not in ex.summary_text and ex.summary_text.startswith("a model, layer 2")
    assert "<b>a</b> model" in ex.summary.value and "'it' →" in ex.summary_text
    # the layer buttons sit in the first row, beside their label, without a description
    first_row = ex.widget.children[0].children
    assert ex.layer in first_row and ex.layer.description == ""
    assert any(getattr(c, "value", None) == "layer" for c in first_row)
    png, draws = ex.plot.value, ex.draws
    ex.query.value = 1
    assert ex.draws == draws + 1 and ex.plot.value != png
    ex.causal.value = True
    tokens, w = ex.current()
    assert abs(w.sum(-1) - 1).max() < 1e-5 and abs(w[0, 1:]).max() == 0
    ex.text.value = "the cat did not cross the road because it was too wide"
    assert ex.sentence.value.startswith("the cat") and ex.tokens[ex.query.value] == "it"
    ex.text.value = "the zebra"
    assert "zebra" in ex.summary.value
    toks, maps = attention_maps(model, train.vocab, "the cat was too wide", scaled=False)
    assert toks == ["the", "cat", "was", "too", "wide"] and maps[0].shape == (5, 5)
    # unscaled = scale 1 instead of 1/sqrt(d): the same model, different weights
    scaled = attention_maps(model, train.vocab, "the cat was too wide")[1]
    assert not np.allclose(maps[0], scaled[0])
    # the layer buttons pick the layer that is drawn
    ex.text.value = "the cat did not cross the road because it was too wide"
    ex.layer.value = "1"
    assert np.allclose(
        ex.current()[1], attention_maps(model, train.vocab, ex.sentence.value, causal=True)[1][0]
    )
    with pytest.raises(ValueError, match="positions up to"):
        attention_maps(model, train.vocab, " ".join(["the"] * 17))


def test_attention_maps_are_the_models_weights(data):
    train, _ = data
    torch.manual_seed(1)
    model = coref.make_model(train.vocab, d_model=8)
    sentence = "the cat was too wide"
    tokens, maps = attention_maps(model, train.vocab, sentence, causal=True, scaled=False)
    with torch.no_grad():
        want = model(torch.tensor([train.vocab.encode(sentence)]), is_causal=True, scale=1.0)
    assert len(maps) == len(want) == model.num_layers
    for got, w in zip(maps, want):
        np.testing.assert_allclose(got, w[0].numpy())


def test_the_summary_names_the_top_keys_of_the_drawn_row(data):
    train, test = data
    torch.manual_seed(2)
    models = {
        "one": coref.make_model(train.vocab, d_model=8),
        "two": coref.make_model(train.vocab, d_model=8),
    }
    ex = AttentionExplorer(models, train.vocab, test.sentences[:2])
    tokens, weights = ex.current()
    row = ex.row()
    np.testing.assert_allclose(row, weights[ex.query.value])
    top = np.argsort(-row)[:3]
    assert ex.summary_text.endswith(", ".join(f"'{tokens[j]}' {row[j]:.2f}" for j in top))
    # the model dropdown picks the model whose weights are drawn
    ex.model.value = "two"
    want = attention_maps(models["two"], train.vocab, ex.sentence.value)[1][-1]
    np.testing.assert_allclose(ex.current()[1], want)
    assert ex.summary_text.startswith("two model") and ex.draws == 2
    # a new sentence starts at its pronoun again
    ex.query.value = 0
    ex.sentence.value = test.sentences[1]
    assert ex.tokens[ex.query.value] == "it"


def test_it_needs_a_model_and_a_sentence(data):
    train, test = data
    model = coref.make_model(train.vocab, d_model=8)
    with pytest.raises(ValueError, match="at least one model"):
        AttentionExplorer({}, train.vocab, test.sentences[:1])
    with pytest.raises(ValueError, match="at least one sentence"):
        AttentionExplorer({"a": model}, train.vocab, [])
