"""course_lib.gpt.tokenizers and load_tokenizer: bytes for a folder without a tokenizer, a
Hugging Face tokenizer behind the course's interface."""

from __future__ import annotations

import pytest
import torch

from course_lib.gpt import pretrained as P
from course_lib.gpt.tiny_checkpoints import make_tiny_checkpoint
from course_lib.gpt.tokenizers import ByteTokenizer, HFTokenizer


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {"gpt2": make_tiny_checkpoint("gpt2", tmp_path_factory.mktemp("gpt2"))}


def test_tokenizers_round_trip(folders):
    tok = P.load_tokenizer(folders["gpt2"])  # the tiny folder has none: bytes stand in
    assert isinstance(tok, ByteTokenizer)
    ids = tok.encode("When Mary and John")
    assert ids.dtype == torch.int64 and tok.decode(ids) == "When Mary and John"
    assert tok.show(tok.encode("a b\n")) == ["a", "␣", "b", "⏎"]


def test_a_hugging_face_tokenizer_gets_the_course_interface():
    class Fake:  # the two calls HFTokenizer makes of a transformers tokenizer
        name_or_path = "fake"

        def __len__(self):
            return 3

        def encode(self, text, add_special_tokens=False):
            return [{"a": 0, " ": 1, "b": 2}[c] for c in text]

        def decode(self, ids):
            return "".join("a b"[i] for i in ids)

    tok = HFTokenizer(Fake())
    ids = tok.encode("a b")
    assert ids.tolist() == [0, 1, 2] and ids.dtype == torch.int64 and tok.vocab_size == 3
    assert tok.decode(ids) == "a b" and tok.show(ids) == ["a", "␣", "b"]
    assert "vocab_size=3" in repr(tok)
