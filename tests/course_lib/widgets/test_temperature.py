"""course_lib.widgets.temperature: chapter 03's temperature explorer, driven from code; its
entropy and Jacobian size are course_lib.scaling's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib.scaling import jacobian_abs_sum, softmax_entropy

pytest.importorskip("ipywidgets")

from course_lib.widgets.temperature import TemperatureExplorer, weights_at  # noqa: E402


def test_temperature_explorer_headless():
    ex = TemperatureExplorer(d_k=256, n_keys=16)
    assert "temperature-explorer" in ex.widget._dom_classes
    assert "temperature-explorer-slider" in ex.slider._dom_classes
    assert ex.slider.description == "temperature τ"
    assert ex.slider.value == pytest.approx(16.0)
    draws, png = ex.draws, ex.plot.value
    assert png[:4] == b"\x89PNG"
    standard_max, standard_entropy = ex.max_weight, ex.entropy
    ex.slider.value = 1.0  # no scaling: sharp
    assert ex.draws == draws + 1 and ex.plot.value != png
    assert ex.max_weight > standard_max and ex.entropy < 0.5 * standard_entropy
    assert "largest weight" in ex.summary.value
    sharp = ex.entropy
    ex.slider.value = 100.0  # very hot: nearly uniform
    assert ex.entropy > sharp and ex.entropy > 0.95 * math.log(16)
    ex.dk.value = 16  # switching d_k resets tau to sqrt(d_k), one redraw
    before = ex.draws
    ex.dk.value = 64
    assert ex.slider.value == pytest.approx(8.0) and ex.draws == before + 1
    ex.slider.value = 1.0
    ex.reset.click()
    assert ex.slider.value == pytest.approx(8.0)
    with pytest.raises(ValueError, match="temperature"):
        weights_at(torch.zeros(3), 0.0)


def test_weights_at_is_softmax_of_the_scores_over_tau_in_float64():
    scores = torch.tensor([[1.0, 2.0, 4.0], [0.0, 0.0, 0.0]], dtype=torch.float32)
    w = weights_at(scores, 2.0)
    assert w.dtype == torch.float64
    torch.testing.assert_close(w, torch.softmax(scores.double() / 2.0, -1))
    torch.testing.assert_close(w[1], torch.full((3,), 1 / 3, dtype=torch.float64))
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature must be positive"):
            weights_at(scores, bad)


def test_the_scores_are_seeded_by_seed_and_d_k():
    a, b = TemperatureExplorer(d_k=16, seed=1), TemperatureExplorer(d_k=16, seed=1)
    assert torch.equal(a.scores(), b.scores()) and a.scores().shape == (16,)
    assert not torch.equal(a.scores(), TemperatureExplorer(d_k=16, seed=2).scores())
    a.dk.value = 64
    assert not torch.equal(a.scores(), b.scores())
    # q . k of unit-variance components: scores of variance about d_k
    ex = TemperatureExplorer(d_k=64, n_keys=64)
    many = []
    for seed in range(8):
        ex.seed = seed
        many.append(ex.scores())
    many = torch.cat(many)
    assert 0.6 * 64 < many.var().item() < 1.5 * 64


def test_the_summary_shows_the_librarys_numbers():
    ex = TemperatureExplorer(d_ks=(4, 16), d_k=16, n_keys=8, temperature=2.0)
    assert ex.slider.value == pytest.approx(2.0)
    p = weights_at(ex.scores(), ex.slider.value)
    np.testing.assert_allclose(ex.weights, p.numpy())
    assert ex.max_weight == pytest.approx(p.max().item())
    assert ex.entropy == pytest.approx(softmax_entropy(p).item())
    summary = ex.summary.value
    assert f"entropy <b>{softmax_entropy(p).item():.2f}</b> nats" in summary
    assert f"Σ|J| = {jacobian_abs_sum(p).item():.3f}" in summary
    assert f"(uniform: {math.log(8):.2f})" in summary and "0.50·√d_k" in summary
    with pytest.raises(ValueError, match="d_k=32 is not one of the choices"):
        TemperatureExplorer(d_ks=(4, 16), d_k=32)
