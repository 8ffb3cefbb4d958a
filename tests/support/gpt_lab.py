"""A tiny GPT for the tests of course_lib.gpt's modules (model, generate, training): its
config, a model and tokens drawn from a seed, and one thread for the whole test."""

from __future__ import annotations

import pytest
import torch

from course_lib.gpt.model import GPT, GPTConfig
from course_lib.timing import single_thread

TINY = GPTConfig(vocab_size=23, seq_len=16, d_model=32, num_layers=2, num_heads=2)


@pytest.fixture(autouse=True)
def one_thread():
    """Models this small run fastest on one thread (several only fight on a busy machine).
    Autouse in every test module that imports it."""
    with single_thread():
        yield


def tiny_model(config: GPTConfig = TINY, seed: int = 0) -> GPT:
    """A model of ``config`` with weights drawn from ``seed``, in eval mode."""
    torch.manual_seed(seed)
    return GPT(config).eval()


def tiny_tokens(b: int, n: int, v: int = TINY.vocab_size, seed: int = 0) -> torch.Tensor:
    """``[b, n]`` token ids below ``v``, drawn from ``seed``."""
    return torch.randint(0, v, (b, n), generator=torch.Generator().manual_seed(seed))
