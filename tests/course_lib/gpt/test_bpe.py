"""course_lib.gpt.bpe: byte-level BPE in plain Python, on tiny hand-made vocabularies (the
tokenizer read from a GGUF file, and the real SmolLM2 one against transformers', are tested
in test_gguf_checkpoint.py)."""

from __future__ import annotations

import pytest
import torch

from course_lib.gpt import bpe as B

SPELL = B.bytes_to_unicode()
ALPHABET = [SPELL[b] for b in range(256)]  # ids 0..255: the bytes, in order


def _tok(extra=(), merges=(), special=(), pre="gpt2") -> B.BPETokenizer:
    return B.BPETokenizer(ALPHABET + list(extra), list(merges), special, pre=pre, name="toy")


def _ids(tok, *pieces) -> list[int]:
    return [tok.vocab[p] for p in pieces]


def test_bytes_are_spelled_with_256_printable_characters():
    assert len(SPELL) == 256 and len(set(SPELL.values())) == 256
    assert all(SPELL[b] == chr(b) for b in range(ord("!"), ord("~") + 1))
    assert SPELL[ord(" ")] == "Ġ" and SPELL[ord("\n")] == "Ċ" and SPELL[0] == "Ā"
    assert all(c.isprintable() and not c.isspace() for c in SPELL.values())
    assert B.bytes_to_unicode() is SPELL  # computed once


def test_without_merges_every_byte_is_a_token_and_nothing_is_unknown():
    tok = _tok()
    text = "naïve 日本 🤖\n\tx"
    ids = tok.encode(text)
    assert ids.dtype == torch.int64 and ids.tolist() == list(text.encode("utf-8"))
    assert tok.decode(ids) == text and tok.decode(ids.tolist()) == text


def test_the_best_ranked_pair_merges_first():
    extra = ["ab", "bc"]
    first_ab = _tok(extra, ["a b", "b c"])
    first_bc = _tok(extra, ["b c", "a b"])
    assert first_ab.encode("abc").tolist() == _ids(first_ab, "ab", "c")
    assert first_bc.encode("abc").tolist() == _ids(first_bc, "a", "bc")


def test_merges_repeat_until_no_listed_pair_is_left():
    tok = _tok(["aa", "aaaa", "Ġaa"], ["a a", "aa aa", "Ġ aa"])
    assert tok.encode("aaaaa").tolist() == _ids(tok, "aaaa", "a")  # a pair merges everywhere
    assert tok.encode(" aa").tolist() == _ids(tok, "Ġaa")  # "a a" first, then "Ġ aa"
    assert _tok(["aa", "Ġa"], ["a a", "Ġ a"]).encode(" aa").tolist() == [ord(" "), 256]
    assert tok.decode(tok.encode(" aa aaaaa")) == " aa aaaaa"


def test_merges_never_cross_a_chunk_edge():
    tok = _tok(["bĠ"], ["b Ġ"])
    # "ab ab": GPT-2's split gives "ab" and " ab", so b and the space never meet
    assert tok.encode("ab ab").tolist() == [ord(c) for c in "ab"] + _ids(tok, "Ġ", "a", "b")
    # inside one chunk of white space a listed pair does merge: "b" then "  " is two chunks
    assert tok.encode("b  ").tolist() == [ord("b"), ord(" "), ord(" ")]


def test_the_pre_tokenizer_decides_where_digits_may_merge():
    gpt2 = _tok(["12"], ["1 2"])
    smollm = _tok(["12"], ["1 2"], pre="smollm")
    assert gpt2.encode("x 12").tolist() == [ord("x"), ord(" "), gpt2.vocab["12"]]
    assert smollm.encode("x 12").tolist() == [ord("x"), ord(" "), ord("1"), ord("2")]
    with pytest.raises(ValueError, match="no pre-tokenizer 'bert'"):
        _tok(pre="bert")


def test_special_tokens_are_cut_out_whole_longest_first():
    tok = _tok(["<s>", "<s>!", "Ġ<"], ["Ġ <"], special=["<s>", "<s>!"])
    ids = tok.encode("a<s>! <s>")
    assert ids.tolist() == [ord("a")] + _ids(tok, "<s>!") + [ord(" ")] + _ids(tok, "<s>")
    assert tok.special_ids == set(_ids(tok, "<s>", "<s>!"))
    assert tok.decode(ids) == "a<s>! <s>"
    # not special: the same characters are plain bytes
    assert _tok(["<s>"]).encode("<s>").tolist() == [ord("<"), ord("s"), ord(">")]


def test_a_piece_missing_from_the_vocabulary_is_named():
    tok = B.BPETokenizer(ALPHABET[:128], [], name="ascii-only")
    with pytest.raises(ValueError, match=r"ascii-only: the piece 'Ã' is not in the vocabulary"):
        tok.encode("é")


def test_decode_replaces_broken_utf8_and_show_labels_every_token():
    tok = _tok()
    assert tok.decode([0xC3]) == "\ufffd"  # half of "é"
    assert tok.decode([0xC3, 0xA9]) == "é"
    assert tok.show(tok.encode("a b\n")) == ["a", "␣", "b", "⏎"]
    assert tok.show(torch.tensor([0xC3])) == ["\ufffd"]


def test_from_gguf_fields_reads_the_tokenizer_keys():
    tokens = ALPHABET + ["<|end|>", "<|user|>", "ab"]
    fields = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.token_type": [1] * 256 + [3, 4, 1],
    }
    tok = B.BPETokenizer.from_gguf_fields(fields, name="f")
    assert tok.pre == "transformers"  # transformers' GGUF route: GPT-2's split for "smollm"
    assert B.BPETokenizer.from_gguf_fields(fields, pre="smollm").pre == "smollm"
    assert set(tok.special) == {"<|end|>", "<|user|>"} and tok.vocab_size == 259
    assert tok.encode("ab<|user|>").tolist() == [258, 257]
    assert repr(tok) == "BPETokenizer('f', vocab_size=259, pre='transformers')"
    no_types = {k: v for k, v in fields.items() if k != "tokenizer.ggml.token_type"}
    assert B.BPETokenizer.from_gguf_fields(no_types).special == {}
    with pytest.raises(ValueError, match=r"tokenizer.ggml.model='llama'.*\('gpt2'\) only"):
        B.BPETokenizer.from_gguf_fields({**fields, "tokenizer.ggml.model": "llama"})
    with pytest.raises(ValueError, match="no tokenizer.ggml.merges"):
        B.BPETokenizer.from_gguf_fields(
            {k: v for k, v in fields.items() if k != "tokenizer.ggml.merges"}
        )
