"""course_lib.gpt.pretrained: load_pretrained against transformers on tiny random checkpoints.

No network: each checkpoint is a tiny GPT-2 or Llama made by transformers with random
weights, saved as a model folder (config.json + model.safetensors), then loaded by the
course's loader. The real models are the same code with another folder.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers

from course_lib.gpt import GPT, GPTConfig
from course_lib.gpt import pretrained as P
from course_lib.gpt.tiny_checkpoints import make_tiny_checkpoint

FAMILIES = ("gpt2", "llama")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {f: make_tiny_checkpoint(f, tmp_path_factory.mktemp(f)) for f in FAMILIES}


def _reference(folder, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


def _tokens(b=2, n=20, seed=0):
    return torch.randint(0, 256, (b, n), generator=torch.Generator().manual_seed(seed))


def _copy(folder, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(folder, out)
    return out


# --------------------------------------------------------------------------- equal logits


@pytest.mark.parametrize("rope", ["half", "interleaved"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_the_reference_in_float32(folders, family, rope):
    model = P.load_pretrained(folders[family], rope=rope)
    tokens = _tokens()
    with torch.no_grad():
        ours, theirs = model(tokens), _reference(folders[family])(tokens).logits  # (B, N, V)
    assert theirs.abs().max() > 1.0  # random weights large enough for a mistake to show
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=5e-5)


def test_gpt2_logits_equal_the_reference_in_float64(folders):
    model = P.load_pretrained(folders["gpt2"], dtype=torch.float64)
    tokens = _tokens()
    with torch.no_grad():
        ours = model(tokens)  # (B, N, V)
        theirs = _reference(folders["gpt2"], torch.float64)(tokens).logits  # (B, N, V)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def test_llama_logits_in_float64_differ_only_by_the_references_float32_parts(folders):
    """transformers' Llama computes RMSNorm and the RoPE angles in float32 even for a float64
    model; the course's stay in float64, so the two agree to float32 rounding only."""
    model = P.load_pretrained(folders["llama"], dtype=torch.float64)
    tokens = _tokens()
    with torch.no_grad():
        ours = model(tokens)  # (B, N, V)
        theirs = _reference(folders["llama"], torch.float64)(tokens).logits  # (B, N, V)
        ours32 = P.load_pretrained(folders["llama"])(tokens)  # (B, N, V)
    gap = (ours - theirs).abs().max().item()
    assert gap < 1e-4
    assert (ours32.double() - ours).abs().max().item() > 1e-8  # float32 is visibly coarser


def test_the_two_rope_pairings_give_the_same_model(folders):
    half = P.load_pretrained(folders["llama"], rope="half", dtype=torch.float64)
    inter = P.load_pretrained(folders["llama"], rope="interleaved", dtype=torch.float64)
    assert (half.config.rope_interleaved, inter.config.rope_interleaved) == (False, True)
    w_half, w_inter = half.blocks[0].attn.W_Q.weight, inter.blocks[0].attn.W_Q.weight
    assert not torch.equal(w_half, w_inter)  # the rows moved...
    tokens = _tokens()
    with torch.no_grad():  # ...and the logits did not
        torch.testing.assert_close(half(tokens), inter(tokens), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- generation, backends


@pytest.mark.parametrize("family", FAMILIES)
def test_kv_cache_generation_equals_the_reference_and_recomputation(folders, family):
    model = P.load_pretrained(folders[family])
    prompt = _tokens(2, 8, seed=1)
    cached = model.generate(prompt, 12, temperature=0)  # (B, 20)
    recomputed = model.generate(prompt, 12, temperature=0, use_cache=False)  # (B, 20)
    theirs = _reference(folders[family]).generate(
        prompt, max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(prompt)
    )  # (B, 20)
    assert torch.equal(cached, recomputed)
    assert torch.equal(cached, theirs)
    assert len(set(cached[0, 8:].tolist())) > 1  # not one token repeated: a real test


@pytest.mark.parametrize("family", FAMILIES)
def test_every_attention_backend_gives_the_same_logits(folders, family):
    model = P.load_pretrained(folders[family])
    tokens = _tokens(1, 16)
    logits = {}
    for backend in ("course", "torch", "flash"):  # flash: Triton's interpreter on a CPU
        with torch.no_grad():
            logits[backend] = model.use_backend(backend)(tokens)  # (1, N, V)
    torch.testing.assert_close(logits["torch"], logits["course"], rtol=1e-4, atol=5e-5)
    torch.testing.assert_close(logits["flash"], logits["course"], rtol=1e-4, atol=5e-5)


# --------------------------------------------------------------------------- the tables


def test_the_config_tables_map_each_family(folders):
    g = P.load_pretrained(folders["gpt2"]).config
    assert (g.positions, g.bias, g.norm, g.activation, g.tie_embeddings) == (
        "learned",
        True,
        "layernorm",
        "gelu_tanh",
        True,
    )
    assert (g.seq_len, g.d_model, g.num_layers, g.num_heads, g.ff_width) == (128, 32, 2, 2, 128)
    m = P.load_pretrained(folders["llama"]).config
    assert (m.positions, m.bias, m.norm, m.activation, m.rope_interleaved) == (
        "rope",
        False,
        "rmsnorm",
        "swiglu",
        False,
    )
    assert (m.num_heads, m.kv_heads, m.ff_width, m.norm_eps, m.tie_embeddings) == (
        4,
        2,
        96,
        1e-6,
        False,
    )


def test_gqa_cache_bytes_per_token_follow_the_kv_heads(folders):
    g = P.load_pretrained(folders["gpt2"]).config
    m = P.load_pretrained(folders["llama"]).config
    per_token = {c: c.kv_cache_bytes(seq_len=1, bytes_per_value=2) for c in (g, m)}
    assert per_token[g] == 2 * g.num_layers * g.num_heads * g.head_dim * 2
    assert per_token[m] == 2 * m.num_layers * m.kv_heads * m.head_dim * 2  # H_kv, not H


def test_the_course_model_is_unchanged_by_the_new_switches():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, seq_len=8, d_model=16, num_layers=1, num_heads=2))
    assert sorted(model.state_dict()) == [
        "blocks.0.attn.W_K.weight",
        "blocks.0.attn.W_O.weight",
        "blocks.0.attn.W_Q.weight",
        "blocks.0.attn.W_V.weight",
        "blocks.0.ln_1.bias",
        "blocks.0.ln_1.weight",
        "blocks.0.ln_2.bias",
        "blocks.0.ln_2.weight",
        "blocks.0.mlp.W_1.weight",
        "blocks.0.mlp.W_2.weight",
        "embed.weight",
        "ln_f.bias",
        "ln_f.weight",
    ]


# --------------------------------------------------------------------------- errors


def test_a_missing_file_is_named(folders, tmp_path):
    folder = _copy(folders["gpt2"], tmp_path)
    (folder / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        P.load_pretrained(folder)
    folder = _copy(folders["gpt2"], tmp_path / "b")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match=r"no model.safetensors.*pytorch_model.bin"):
        P.load_pretrained(folder)
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        P.load_pretrained(tmp_path / "nowhere")


def _with_config(folder, tmp_path, **changes):
    out = _copy(folder, tmp_path)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(changes)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.mark.parametrize(
    ("family", "change", "message"),
    [
        ("gpt2", {"model_type": "bert"}, "model_type='bert'"),
        ("gpt2", {"activation_function": "relu"}, "activation_function='relu' does not map"),
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ("llama", {"attention_bias": True}, "attention_bias=True does not map"),
        ("llama", {"head_dim": 8}, "head_dim=8 is not hidden_size / num_attention_heads"),
        (
            "llama",
            {"rope_parameters": {"rope_theta": 1e4, "rope_type": "linear", "factor": 2.0}},
            "rope_scaling",
        ),
    ],
)
def test_an_unmappable_config_field_is_named(folders, tmp_path, family, change, message):
    folder = _with_config(folders[family], tmp_path, **change)
    with pytest.raises(ValueError, match=message):
        P.load_pretrained(folder)


def test_a_tied_llama_like_smollm2_loads(tmp_path):
    folder = make_tiny_checkpoint("llama", tmp_path / "tied", tie_word_embeddings=True)
    model = P.load_pretrained(folder)
    assert model.config.tie_embeddings and model.lm_head is None
    tokens = _tokens()
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), _reference(folder)(tokens).logits)


def test_a_bfloat16_checkpoint_loads_in_the_dtype_asked_for(folders, tmp_path):
    folder = tmp_path / "bf16"
    _reference(folders["llama"]).to(torch.bfloat16).save_pretrained(folder)
    from safetensors.torch import load_file

    assert load_file(folder / "model.safetensors")["model.norm.weight"].dtype == torch.bfloat16
    model = P.load_pretrained(folder)  # float32 by default
    assert next(model.parameters()).dtype == torch.float32
    tokens = _tokens()
    with torch.no_grad():
        ours, theirs = model(tokens), _reference(folder)(tokens).logits  # both float32
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=5e-5)
