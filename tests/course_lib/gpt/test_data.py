"""course_lib.gpt.data: the corpus (Python's own standard library), its character tokenizer,
random batches and the unigram baseline."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.gpt import data as D

# --------------------------------------------------------------------------- the tokenizer


def test_tokenizer_round_trip_and_unknowns():
    tok = D.CharTokenizer()
    assert tok.vocab_size == 97 and tok.chars[0] == "\n" and tok.chars[1] == " "
    text = "def f(x):\n    return x ** 2  # ~{}|\n"
    ids = tok.encode(text)
    assert ids.dtype == torch.int64 and ids.shape == (len(text),)
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode("a\tb é")) == "a\ufffdb \ufffd"
    assert tok.show(tok.encode("a b\n")) == ["a", "␣", "b", "⏎"]


def test_tokenizer_ids_are_fixed_and_decode_takes_any_sequence():
    tok = D.CharTokenizer()
    assert tok.encode("\n !~").tolist() == [0, 1, 2, 95]
    assert tok.unknown_id == 96 and tok.chars[96] == tok.UNKNOWN
    assert tok.encode("\x7f😀").tolist() == [96, 96]  # DEL and beyond ASCII: unknown
    assert tok.decode([0, 1, 2]) == tok.decode(torch.tensor([0, 1, 2])) == "\n !"
    assert tok.encode("").shape == (0,) and repr(tok) == "CharTokenizer(vocab_size=97)"


# --------------------------------------------------------------------------- the corpus


def test_corpus_splits_by_module_without_leaks():
    corpus = D.load_corpus()
    assert corpus.train_modules == list(D.TRAIN_MODULES) and corpus.missing == []
    assert not set(corpus.train_modules) & set(corpus.val_modules)
    assert corpus.train.numel() > 500_000 and corpus.val.numel() > 50_000
    assert corpus.train.dtype == torch.int64
    assert corpus.num_chars == corpus.train.numel() + corpus.val.numel()
    assert repr(corpus).startswith(f"Corpus(train={corpus.train.numel():,} chars from 36 modules")
    # text of a validation file never appears in training: take a long line from it
    val_text = corpus.tokenizer.decode(corpus.val[:20_000])
    line = max(val_text.splitlines(), key=len)
    assert len(line) > 40
    assert line not in corpus.tokenizer.decode(corpus.train)
    # almost everything is in the fixed vocabulary
    assert (corpus.train == corpus.tokenizer.unknown_id).float().mean() < 1e-3


def test_the_corpus_is_the_modules_joined_by_a_blank_line():
    train, val = ("abc", "argparse"), ("cmd",)
    corpus = D.load_corpus(train, val)
    joined = D.module_source("abc") + "\n\n" + D.module_source("argparse")
    assert torch.equal(corpus.train, corpus.tokenizer.encode(joined))
    assert torch.equal(corpus.val, corpus.tokenizer.encode(D.module_source("cmd")))
    assert (corpus.train_modules, corpus.val_modules) == (list(train), list(val))


def test_corpus_skips_modules_without_source(monkeypatch):
    real = D.module_source
    monkeypatch.setattr(D, "module_source", lambda name: None if name == "csv" else real(name))
    with pytest.warns(UserWarning, match="csv"):
        corpus = D.load_corpus()
    assert corpus.missing == ["csv"] and "csv" not in corpus.train_modules
    monkeypatch.setattr(D, "module_source", lambda name: None)
    with pytest.raises(RuntimeError, match="too little source text"), pytest.warns(UserWarning):
        D.load_corpus()


def test_module_source_reads_files_packages_and_frozen_modules():
    assert "class ABCMeta" in D.module_source("abc")  # frozen into Python >= 3.11
    assert "class JSONDecoder" in D.module_source("json.decoder")  # a module of a package
    assert "def dumps" in D.module_source("json")  # a package: its __init__.py
    assert D.module_source("sys") is None  # built in: no source anywhere


# --------------------------------------------------------------------------- batches


def test_get_batch_returns_windows_of_the_data():
    data = torch.arange(100)
    batch = D.get_batch(data, 5, 8, torch.Generator().manual_seed(0))
    assert batch.shape == (5, 8)
    assert torch.all(batch[:, 1:] - batch[:, :-1] == 1)  # consecutive tokens
    with pytest.raises(ValueError, match="fewer than seq_len"):
        D.get_batch(torch.arange(8), 2, 8)


def test_get_batch_reaches_both_ends_and_follows_its_generator():
    data = torch.arange(10)
    starts = D.get_batch(data, 400, 8, torch.Generator().manual_seed(0))[:, 0]
    assert set(starts.tolist()) == {0, 1, 2}  # every window that fits, and only those
    again = D.get_batch(data, 400, 8, torch.Generator().manual_seed(0))[:, 0]
    assert torch.equal(starts, again)


# --------------------------------------------------------------------------- the baseline


def test_unigram_cross_entropy():
    train = torch.tensor([0, 0, 1, 1])
    # add-one counts 3, 3, 1 over V=3: p = (3/7, 3/7, 1/7)
    want = -(math.log(3 / 7) + math.log(1 / 7)) / 2
    assert abs(D.unigram_cross_entropy(train, torch.tensor([0, 2]), 3) - want) < 1e-12
    uniform = torch.arange(50).repeat(20)
    assert abs(D.unigram_cross_entropy(uniform, uniform, 50) - math.log(50)) < 1e-9
