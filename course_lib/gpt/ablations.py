r"""Ablations over seeds (chapter 07 ties chapters 03-05 together) and a look at samples.

Each ablation trains the same recipe with one architectural choice changed (positions, the
:math:`1/\sqrt{d_h}`, MHA/GQA/MQA at equal parameters) under shared seeds, so the
differences are paired.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import torch

from ..rnn import single_thread
from .data import Corpus
from .model import GPT, GPTConfig
from .training import TrainConfig, _progress, train

__all__ = ["corpus_words", "known_word_fraction", "run_ablation"]


def run_ablation(
    configs: dict[str, GPTConfig],
    corpus: Corpus,
    train_config: TrainConfig,
    seeds: Sequence[int],
    *,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Train every config once per seed; return the final validation losses per config.

    Seed ``s`` fixes both the initial weights and the batches, and is shared by all the
    configs, so ``losses[a][i] - losses[b][i]`` is a *paired* difference: the two runs
    differ only by the architecture. The runs use one CPU thread: models this small gain
    nothing from more, and on a busy machine lose a lot to thread synchronisation.
    """
    bar = _progress(len(configs) * len(seeds), progress)
    if bar is not None:
        bar.set_description("ablation runs")
    losses: dict[str, list[float]] = {name: [] for name in configs}
    with single_thread():
        for seed in seeds:
            for name, config in configs.items():
                torch.manual_seed(seed)
                model = GPT(config)
                run = replace(train_config, seed=seed, eval_every=0)
                history = train(model, corpus, run, progress=False)
                losses[name].append(history.val_loss[-1])
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    return losses


def known_word_fraction(text: str, words: set[str]) -> float:
    """The fraction of the words (runs of 2+ letters or ``_``) of ``text`` found in ``words``."""
    found = re.findall(r"[A-Za-z_]{2,}", text)
    return sum(w in words for w in found) / max(len(found), 1)


def corpus_words(corpus: Corpus) -> set[str]:
    """Every word (run of 2+ letters or ``_``) of the training text."""
    return set(re.findall(r"[A-Za-z_]{2,}", corpus.tokenizer.decode(corpus.train)))
