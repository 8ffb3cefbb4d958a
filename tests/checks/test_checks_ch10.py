"""The chapter 10 exercises: references agree with the loaders, each named mistake is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.checks import CheckFailed, check
from course_lib.checks.ch10 import gpt2_tensors, planted_weights
from course_lib.checks.core import cases_for, get_exercise
from course_lib.gpt import pretrained as P
from course_lib.positional import apply_rope

IDS = ["10.1", "10.2", "10.3"]


@pytest.mark.parametrize("ex_id", IDS)
def test_references_pass_visible_and_hidden(ex_id):
    ref = get_exercise(ex_id).reference
    assert check(ex_id, ref, quiet=True).passed
    assert check(ex_id, ref, hidden=True, quiet=True).passed


@pytest.mark.parametrize("ex_id", IDS)
def test_each_named_mistake_is_named_by_its_own_hint(ex_id):
    ex = get_exercise(ex_id)
    assert len(ex.mistakes) >= 3
    for hint, wrong in ex.mistakes.items():
        with pytest.raises(CheckFailed) as failure:
            check(ex_id, wrong, quiet=True)
        named = [h for h in ex.mistakes if h in str(failure.value)]
        assert named == [hint], (ex_id, hint[:50], [n[:50] for n in named])


def test_10_1_the_conv1d_trap_is_named_even_though_the_shapes_fit():
    """Leaving the square Conv1D weights as stored loads without an error (the shapes fit) and
    is wrong; the check says so by name."""
    ex = get_exercise("10.1")
    trap = next(w for h, w in ex.mistakes.items() if "Conv1D trap" in h)
    case = cases_for("10.1")[0]
    out = dict(trap(*case.args))
    block = dict(ex.reference(*case.args))
    assert all(out[k].shape == block[k].shape for k in block)  # it would load
    with pytest.raises(CheckFailed, match="Likely cause: your square matrices"):
        check("10.1", trap, quiet=True)


def test_10_1_missing_biases_and_wrong_types_are_explained():
    ex = get_exercise("10.1")

    def no_biases(tensors, i, d_model):
        pairs = ex.reference(tensors, i, d_model)
        return [(k, v) for k, v in pairs if "W_" not in k or "weight" in k]

    with pytest.raises(CheckFailed, match="missing keys.*GPT-2 has a bias in every linear layer"):
        check("10.1", no_biases, quiet=True)
    with pytest.raises(CheckFailed, match=r"got a dict: return list\(your_dict.items\(\)\)"):
        check(
            "10.1", lambda tensors, i, d_model: dict(ex.reference(tensors, i, d_model)), quiet=True
        )
    with pytest.raises(CheckFailed, match=r"expected a list of \(key, tensor\) pairs"):
        check("10.1", lambda tensors, i, d_model: list(tensors.values()), quiet=True)


def test_10_1_reference_loads_a_real_checkpoint_block(tmp_path):
    """The exercise's answer, loaded into block 1, reproduces the loader's model."""
    from safetensors.torch import load_file

    folder = P.make_tiny_checkpoint("gpt2", tmp_path)
    tensors = {
        k.removeprefix("transformer."): v
        for k, v in load_file(folder / "model.safetensors").items()
    }
    model = P.load_pretrained(folder)
    block = dict(get_exercise("10.1").reference(tensors, 1, model.config.d_model))
    for name, value in block.items():
        assert torch.equal(model.blocks[1].state_dict()[name], value), name
    assert set(block) == set(model.blocks[1].state_dict())


def test_10_2_reference_makes_interleaved_rope_equal_the_half_split():
    rng = np.random.default_rng(0)
    heads, head_dim, d = 2, 8, 12
    w = torch.from_numpy(rng.normal(size=(heads * head_dim, d)))  # (H head_dim, d)
    x = torch.from_numpy(rng.normal(size=(5, d)))  # (N, d)
    w_new = get_exercise("10.2").reference(w, heads)

    def scores(weight, interleaved):
        q = (x @ weight.T).reshape(5, heads, head_dim).transpose(0, 1)  # (H, N, head_dim)
        q = apply_rope(q, interleaved=interleaved)
        return q @ q.transpose(-1, -2)  # (H, N, N)

    torch.testing.assert_close(scores(w_new, True), scores(w, False))
    assert not torch.allclose(scores(w, True), scores(w, False))  # mixing them up is wrong


def test_10_3_reference_finds_the_planted_heads_and_accepts_other_pair_types():
    weights = planted_weights(np.random.default_rng(0), 3, 4, 6)
    ex = get_exercise("10.3")
    assert ex.reference(weights, 6) == [(2, 1), (1, 3)]
    assert ex.reference(weights, 6, 0.9) == [(2, 1)]

    def as_lists(weights, period, threshold=0.4):
        return [list(p) for p in ex.reference(weights, period, threshold)]

    def as_tensor(weights, period, threshold=0.4):
        return torch.tensor(ex.reference(weights, period, threshold))

    assert check("10.3", as_lists, quiet=True).passed
    assert check("10.3", as_tensor, quiet=True).passed
    with pytest.raises(CheckFailed, match=r"expected a list of \(layer, head\) pairs"):
        check("10.3", lambda weights, period, threshold=0.4: 3, quiet=True)


def test_cases_use_checkpoint_names():
    tensors = gpt2_tensors(np.random.default_rng(0), 2, 8)
    assert tensors["h.1.attn.c_attn.weight"].shape == (8, 24)  # Conv1D: [in, out]
    assert tensors["h.0.mlp.c_fc.weight"].shape == (8, 32)
