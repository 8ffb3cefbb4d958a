r"""The induction-head experiment of chapter 07: its recipe, its probe, its training run.

A 2-layer attention-only model on rows that repeat with a random period (so that "copy from
T back" is no solution). With this recipe the heads formed after 1300 to 1700 steps for
seeds 0, 1, 2 (a sudden drop of the loss: the phase change of Olsson et al., 2022). The
learning rate stays constant after the warm-up (``min_lr = max_lr``): a decaying rate delays
the phase change. ``tools/make_induction_checkpoint.py`` trains it and saves the result
(:mod:`course_lib.gpt.checkpoint`).
"""

from __future__ import annotations

import torch

from ..rnn import single_thread
from .model import GPT, GPTConfig
from .probes import induction_scores, random_period_tokens, repeated_random_tokens
from .training import History, TrainConfig, loss_per_position, train

__all__ = [
    "INDUCTION_CONFIG",
    "INDUCTION_PERIODS",
    "INDUCTION_PROBE_PERIOD",
    "INDUCTION_TRAIN",
    "induction_probe",
    "train_induction_model",
]

INDUCTION_CONFIG = GPTConfig(
    vocab_size=30, seq_len=32, d_model=64, num_layers=2, num_heads=4, mlp=False
)
INDUCTION_TRAIN = TrainConfig(
    steps=2500,
    batch_size=32,
    max_lr=1e-2,
    min_lr=1e-2,
    warmup_steps=50,
    weight_decay=0.0,
    eval_every=100,
)
INDUCTION_PERIODS = (8, 16)
INDUCTION_PROBE_PERIOD = 12


def induction_probe(
    model: GPT, period: int = INDUCTION_PROBE_PERIOD, batch_size: int = 64, seed: int = 123
) -> dict:
    """Loss on each copy of repeated random tokens, and each layer's best induction score."""
    tokens = repeated_random_tokens(
        batch_size, period, model.config.vocab_size, generator=torch.Generator().manual_seed(seed)
    )  # (B, 2T)
    per_position = loss_per_position(model, tokens)  # (2T-1,)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # L x (B, H, 2T, 2T)
    return {
        "first_copy_loss": float(per_position[: period - 1].mean()),
        "second_copy_loss": float(per_position[period - 1 :].mean()),
        "induction": [induction_scores(w, period).tolist() for w in weights],
    }


def train_induction_model(
    config: GPTConfig = INDUCTION_CONFIG,
    train_config: TrainConfig = INDUCTION_TRAIN,
    *,
    periods: tuple[int, int] = INDUCTION_PERIODS,
    progress: bool = True,
) -> tuple[GPT, History]:
    """Train the induction-head experiment's model; ``history.probes`` tracks its heads.

    On one CPU thread, like ``tools/make_induction_checkpoint.py``: the model is small, and
    the same thread count gives the same arithmetic, so the same model, on one machine.
    """
    torch.manual_seed(train_config.seed)
    model = GPT(config)

    def batch(step, generator):
        return random_period_tokens(
            train_config.batch_size,
            config.seq_len,
            config.vocab_size,
            min_period=periods[0],
            max_period=periods[1],
            generator=generator,
        )  # (B, N)

    with single_thread():
        history = train(
            model, None, train_config, progress=progress, batch_fn=batch, probe=induction_probe
        )
    return model, history
