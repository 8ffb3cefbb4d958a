"""course_lib.gpt.hf_checkpoint: the weight tables and the row permutation, on tiny random
checkpoints saved by transformers (the logits against transformers: test_pretrained.py)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from course_lib.gpt import hf_checkpoint as HF
from course_lib.gpt.pretrained import load_pretrained
from course_lib.gpt.tiny_checkpoints import make_tiny_checkpoint
from course_lib.positional import apply_rope, rope_permutation

FAMILIES = ("gpt2", "llama")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {f: make_tiny_checkpoint(f, tmp_path_factory.mktemp(f)) for f in FAMILIES}


def test_half_to_interleaved_rows_moves_each_pair_to_adjacent_rows():
    head_dim, heads, d = 8, 2, 5
    w = torch.randn(heads * head_dim, d, dtype=torch.float64)
    out = HF.half_to_interleaved_rows(w, heads)  # (H d_h, d)
    for h in range(heads):
        for i in range(head_dim // 2):
            assert torch.equal(out[h * head_dim + 2 * i], w[h * head_dim + i])
            assert torch.equal(out[h * head_dim + 2 * i + 1], w[h * head_dim + i + head_dim // 2])
    # the rotation property: interleaved RoPE of the permuted q = permuted half RoPE of q
    q = torch.randn(1, 1, 6, head_dim, dtype=torch.float64)  # (B, H, N, head_dim)
    inverse = torch.argsort(rope_permutation(head_dim))
    torch.testing.assert_close(
        apply_rope(q[..., inverse], interleaved=True),
        apply_rope(q, interleaved=False)[..., inverse],
    )
    with pytest.raises(ValueError, match="do not split into 3 heads"):
        HF.half_to_interleaved_rows(w, 3)


def test_the_gpt2_block_table_is_what_the_loader_uses(folders):
    tensors = load_file(folders["gpt2"] / "model.safetensors")
    block = HF.gpt2_block_state_dict(tensors, 1, d_model=32)
    state = load_pretrained(folders["gpt2"]).state_dict()
    assert set(block) == {k for k in state if k.startswith("blocks.1.")}
    for name, value in block.items():
        assert torch.equal(value, state[name]), name
    # the Conv1D trap: the checkpoint's c_proj weight is the transpose of W_O's
    w = tensors["transformer.h.1.attn.c_proj.weight"]
    assert torch.equal(block["blocks.1.attn.W_O.weight"], w.T) and not torch.equal(w, w.T)


def test_a_missing_or_unknown_tensor_is_named(folders):
    tensors = load_file(folders["llama"] / "model.safetensors")
    config = load_pretrained(folders["llama"]).config
    missing = {k: v for k, v in tensors.items() if "layers.1.mlp.up_proj" not in k}
    with pytest.raises(KeyError, match=r"no tensor 'model.layers.1.mlp.up_proj.weight'"):
        HF.state_dict_from_hf(missing, "llama", config, "model.safetensors")
    extra = dict(tensors, **{"model.layers.0.self_attn.q_norm.weight": torch.ones(16)})
    with pytest.raises(KeyError, match="no row for.*q_norm"):
        HF.state_dict_from_hf(extra, "llama", config, "model.safetensors")


def test_config_from_hf_reads_a_config_dict_and_names_what_it_cannot_map(folders):
    hf = json.loads((folders["llama"] / "config.json").read_text())
    config = HF.config_from_hf(hf)
    assert (config.d_model, config.num_heads, config.kv_heads) == (64, 4, 2)
    assert (
        not config.rope_interleaved and HF.config_from_hf(hf, rope="interleaved").rope_interleaved
    )
    with pytest.raises(ValueError, match="rope must be 'half' or 'interleaved'"):
        HF.config_from_hf(hf, rope="sideways")
    with pytest.raises(ValueError, match="model_type='t5'"):
        HF.config_from_hf(dict(hf, model_type="t5"))


def test_read_safetensors_reads_shards_and_names_what_is_missing(folders, tmp_path):
    tensors, name = HF.read_safetensors(folders["gpt2"])
    assert name == "model.safetensors" and "transformer.wte.weight" in tensors
    from safetensors.torch import save_file

    shard = tmp_path / "sharded"
    shard.mkdir()
    names = sorted(tensors)
    half = len(names) // 2
    save_file({k: tensors[k].contiguous() for k in names[:half]}, shard / "a.safetensors")
    save_file({k: tensors[k].contiguous() for k in names[half:]}, shard / "b.safetensors")
    index = {
        "weight_map": {
            k: "a.safetensors" if i < half else "b.safetensors" for i, k in enumerate(names)
        }
    }
    (shard / "model.safetensors.index.json").write_text(json.dumps(index))
    again, source = HF.read_safetensors(shard)
    assert source == "model.safetensors.index.json" and sorted(again) == names
    (shard / "b.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="names shards that .* lacks"):
        HF.read_safetensors(shard)
