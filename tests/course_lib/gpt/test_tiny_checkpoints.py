"""course_lib.gpt.tiny_checkpoints: real checkpoint files with random weights."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from course_lib.gpt.tiny_checkpoints import TINY, make_tiny_checkpoint


@pytest.mark.parametrize("family", sorted(TINY))
def test_a_tiny_checkpoint_is_a_real_checkpoints_files_with_random_weights(tmp_path, family):
    folder = make_tiny_checkpoint(family, tmp_path / family, seed=3)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == family and config["vocab_size"] == TINY[family]["vocab_size"]
    tensors = load_file(folder / "model.safetensors")
    gains = [t for n, t in tensors.items() if n.endswith("weight") and t.ndim == 1]
    assert gains and all(0.5 < float(g.mean()) < 1.5 and float(g.std()) > 0.01 for g in gains)
    again = load_file(
        make_tiny_checkpoint(family, tmp_path / "again", seed=3) / "model.safetensors"
    )
    assert all(torch.equal(tensors[k], again[k]) for k in tensors)  # the seed decides


def test_an_unknown_family_is_named(tmp_path):
    with pytest.raises(ValueError, match="family must be one of"):
        make_tiny_checkpoint("bert", tmp_path)
