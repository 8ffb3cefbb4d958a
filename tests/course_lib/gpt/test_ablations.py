"""course_lib.gpt.ablations: paired ablations over seeds (run on a tiny corpus and a few
steps), and the word statistics of samples."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from course_lib.gpt import ablations as A
from course_lib.gpt.data import CharTokenizer, Corpus
from course_lib.gpt.model import GPT, GPTConfig
from course_lib.gpt.training import TrainConfig, train

TINY = GPTConfig(vocab_size=97, seq_len=8, d_model=16, num_layers=1, num_heads=2)
RUN = TrainConfig(steps=2, batch_size=2, warmup_steps=1, eval_every=5, eval_windows=2)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    tok = CharTokenizer()
    train_text = "def add(a, b):\n    return a + b\n\n" * 8
    val_text = "def sub(a, b):\n    return a - b\n" * 2
    return Corpus(tok, tok.encode(train_text), tok.encode(val_text), ["toy"], ["toy_val"])


def test_run_ablation_returns_one_final_validation_loss_per_seed(corpus):
    configs = {"rope": TINY, "none": replace(TINY, positions="none")}
    losses = A.run_ablation(configs, corpus, RUN, seeds=[0, 1], progress=False)
    assert list(losses) == ["rope", "none"]
    assert all(len(v) == 2 and all(math.isfinite(x) for x in v) for v in losses.values())
    # each entry is the validation loss of that config trained with that seed, nothing else
    torch.manual_seed(1)
    model = GPT(configs["none"])
    history = train(model, corpus, replace(RUN, seed=1, eval_every=0), progress=False)
    assert losses["none"][1] == history.val_loss[-1]


def test_the_seed_is_shared_so_the_differences_are_paired(corpus):
    """The same architecture under two names gives the same numbers seed by seed (weights
    and batches both come from the seed); another seed gives another number."""
    losses = A.run_ablation({"a": TINY, "b": TINY}, corpus, RUN, seeds=[3, 4], progress=False)
    assert losses["a"] == losses["b"]
    assert losses["a"][0] != losses["a"][1]


def test_the_runs_use_one_thread_and_give_the_setting_back(corpus, monkeypatch):
    threads, seen = torch.get_num_threads(), []
    real = A.train

    def recording(model, corpus_or_data, config, **kw):
        seen.append((torch.get_num_threads(), config.seed, config.eval_every))
        return real(model, corpus_or_data, config, **kw)

    monkeypatch.setattr(A, "train", recording)
    torch.set_num_threads(2)  # so that one thread inside is the function's doing
    try:
        A.run_ablation({"x": TINY}, corpus, replace(RUN, seed=99), seeds=[5, 6], progress=False)
        assert seen == [(1, 5, 0), (1, 6, 0)] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_the_progress_bar_counts_every_run(corpus, monkeypatch):
    bars = []

    class Bar:
        def __init__(self):
            self.n, self.closed, self.description = 0, False, None
            bars.append(self)

        def set_description(self, text):
            self.description = text

        def update(self, k):
            self.n += k

        def close(self):
            self.closed = True

    monkeypatch.setattr(A, "_progress", lambda total, show: Bar() if show else None)
    A.run_ablation({"a": TINY, "b": TINY}, corpus, RUN, seeds=[0, 1, 2], progress=True)
    assert len(bars) == 1 and bars[0].n == 6 and bars[0].closed
    assert bars[0].description == "ablation runs"


def test_known_word_fraction_counts_words_of_two_letters_or_more():
    words = {"def", "return", "self_x"}
    assert A.known_word_fraction("def f(x): return self_x + y2", words) == pytest.approx(3 / 3)
    assert A.known_word_fraction("def foo(): pass", words) == pytest.approx(1 / 3)
    assert A.known_word_fraction("1 + 2 = 3", words) == 0.0  # no words: no division by zero


def test_corpus_words_are_the_words_of_the_training_text(corpus):
    assert A.corpus_words(corpus) == {"def", "add", "return"}
