"""course_lib.gpt.transparent: the transparent forward equals the model's forward; its masks,
ablation and per-token losses."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from course_lib.gpt.circuits import ablated_heads
from course_lib.gpt.model import GPT, GPTConfig
from course_lib.gpt.transparent import run_model, sliding_window_mask, token_losses

LLAMA = GPTConfig(
    vocab_size=50,
    seq_len=64,
    d_model=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    norm="rmsnorm",
    activation="swiglu",
    rope_base=10000.0,
)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(LLAMA).eval()


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 50, (2, 24), generator=torch.Generator().manual_seed(1))


def test_run_model_is_the_models_forward(model, tokens):
    run = run_model(model, tokens, need_weights=True, capture=True)
    with torch.no_grad():
        logits, weights = model(tokens, need_weights=True)
    torch.testing.assert_close(run.logits, logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(run.weights[1], weights[1], atol=1e-6, rtol=1e-5)
    assert run.q[0].shape == (2, 4, 24, 8) and run.k_raw[1].shape == (2, 2, 24, 8)


@pytest.mark.parametrize(
    "change",
    [{"tie_embeddings": False}, {"scaled": False}, {"mlp": False}],
    ids=["untied read-out", "unscaled scores", "attention only"],
)
def test_run_model_is_the_forward_of_every_kind_of_model(tokens, change):
    torch.manual_seed(2)
    other = GPT(replace(LLAMA, **change)).eval()
    with torch.no_grad():
        # weights large enough that a missing scale or a wrong read-out shows in the logits
        for p in other.parameters():
            p.mul_(3.0)
        expected = other(tokens)
    torch.testing.assert_close(run_model(other, tokens).logits, expected, atol=1e-5, rtol=1e-5)


def test_shifted_positions_change_nothing_and_a_gap_does(model, tokens):
    base = run_model(model, tokens).logits
    shifted = run_model(model, tokens, positions=torch.arange(24) + 1000).logits
    torch.testing.assert_close(shifted, base, atol=1e-4, rtol=1e-4)
    gap = torch.cat([torch.arange(12), torch.arange(12, 24) + 500])
    moved = run_model(model, tokens, positions=gap).logits
    torch.testing.assert_close(moved[:, :12], base[:, :12], atol=1e-5, rtol=1e-5)
    assert (moved[:, 12:] - base[:, 12:]).abs().max() > 1e-5


def test_a_window_as_wide_as_the_text_is_full_attention(model, tokens):
    full = run_model(model, tokens).logits
    wide = run_model(model, tokens, mask=sliding_window_mask(24, 24)).logits
    torch.testing.assert_close(wide, full)
    narrow = run_model(model, tokens, mask=sliding_window_mask(24, 4)).logits
    torch.testing.assert_close(narrow[:, :4], full[:, :4], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(narrow[:, 8:], full[:, 8:], atol=1e-3)


def test_mean_ablation_matches_the_circuits_hook(model, tokens):
    heads = [(0, 1), (1, 3)]
    with ablated_heads(model, heads, mode="mean"), torch.no_grad():
        want = model(tokens)
    torch.testing.assert_close(
        run_model(model, tokens, ablate=heads).logits, want, atol=1e-5, rtol=1e-5
    )


def test_ablate_with_runs_a_given_ablation_and_the_exercise_reference_is_the_default(model, tokens):
    from course_lib.checks.ch11 import mean_ablate_reference

    heads = [(0, 1), (1, 3)]
    default = run_model(model, tokens, ablate=heads).logits
    theirs = run_model(model, tokens, ablate=heads, ablate_with=mean_ablate_reference).logits
    torch.testing.assert_close(theirs, default)
    untouched = run_model(model, tokens, ablate=heads, ablate_with=lambda out, h: out).logits
    torch.testing.assert_close(untouched, run_model(model, tokens).logits)
    assert (untouched - default).abs().max() > 1e-4


def test_sliding_window_mask():
    m = sliding_window_mask(6, 2, sinks=1)
    assert m.tolist()[5] == [True, False, False, False, True, True]
    assert m.tolist()[1] == [True, True, False, False, False, False]
    assert torch.equal(sliding_window_mask(5), torch.ones(5, 5, dtype=torch.bool).tril())
    with pytest.raises(ValueError, match="window >= 1"):
        sliding_window_mask(4, 0)


def test_token_losses_of_uniform_logits_are_log_v():
    tokens = torch.randint(0, 7, (2, 5))
    losses = token_losses(torch.zeros(2, 5, 7), tokens)
    assert losses.shape == (2, 4)
    torch.testing.assert_close(losses, torch.full((2, 4), math.log(7), dtype=torch.float64))
