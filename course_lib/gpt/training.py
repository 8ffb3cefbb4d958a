r"""Training the GPT: the language-modelling loss, AdamW with warm-up and cosine decay, evaluation.

(The module is ``training``, not ``train``: ``course_lib.gpt.train`` is the training
function, and a submodule of the same name would hide it or be hidden by it.)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from .data import Corpus, get_batch
from .model import GPT, GPTConfig

__all__ = [
    "History",
    "TrainConfig",
    "budget_configs",
    "causal_lm_loss",
    "evaluate",
    "loss_per_position",
    "lr_at",
    "lr_schedule",
    "train",
]


def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    r"""Next-token cross-entropy, in nats per predicted token: the language-modelling loss.

    Position :math:`n` predicts token :math:`n+1`, so the targets are the tokens shifted
    left by one and the last position has no target:

    .. math::

        \mathcal{L} = -\frac{1}{B (N-1)} \sum_{b} \sum_{n=1}^{N-1}
        \log \mathrm{softmax}(\text{logits}_{b,n})_{t_{b,n+1}}

    ``logits [B, N, V]``, ``tokens [B, N]``.
    """
    if logits.ndim != 3 or tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"expected logits [B, N, V] and tokens [B, N], got "
            f"{tuple(logits.shape)} and {tuple(tokens.shape)}"
        )
    pred = logits[:, :-1]  # (B, N-1, V) positions that have a next token
    targets = tokens[:, 1:]  # (B, N-1) the next tokens
    return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), targets.reshape(-1))


def loss_per_position(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """Loss ``[N-1]`` of predicting token ``n+1`` at each position ``n``, averaged over the batch."""
    with torch.no_grad():
        logits = model(tokens)  # (B, N, V)
        nll = F.cross_entropy(
            logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
        )  # (B, N-1)
    return nll.mean(0)  # (N-1,)


# =========================================================================== training


@dataclass(frozen=True)
class TrainConfig:
    """How to train: steps, batch, AdamW with warm-up + cosine, gradient clipping."""

    steps: int = 2000
    batch_size: int = 32
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_windows: int = 128
    seed: int = 0


def lr_at(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, num_steps: int) -> float:
    r"""The learning rate at ``step`` (0-based): linear warm-up, then cosine decay.

    .. math::

        \eta_s = \begin{cases}
            \eta_\max \,\dfrac{s+1}{W} & s < W \\[4pt]
            \eta_\min + \tfrac12 (\eta_\max - \eta_\min)
            \big(1 + \cos \pi\, \tfrac{s - W}{N_\text{steps} - 1 - W}\big)
            & W \le s < N_\text{steps}
        \end{cases}

    so the first step already moves (:math:`\eta_\max/W`), steps :math:`W-1` and :math:`W`
    are at :math:`\eta_\max` and the last step, :math:`N_\text{steps}-1`, at
    :math:`\eta_\min`. Warm-up keeps the first updates small while AdamW's second-moment
    estimates are still noisy (AdamW: Loshchilov and Hutter, 2019, "Decoupled Weight Decay
    Regularization"; the cosine: Loshchilov and Hutter, 2017, "SGDR: Stochastic Gradient
    Descent with Warm Restarts").
    """
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    span = max(num_steps - 1 - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def lr_schedule(num_steps: int, max_lr: float, min_lr: float, warmup_steps: int) -> np.ndarray:
    """:func:`lr_at` for every step: ``[num_steps]`` float64."""
    return np.array(
        [
            lr_at(s, max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, num_steps=num_steps)
            for s in range(num_steps)
        ]
    )


@torch.no_grad()
def evaluate(
    model: GPT,
    data: torch.Tensor,
    *,
    seq_len: int | None = None,
    num_windows: int = 128,
    batch_size: int = 64,
) -> float:
    """Mean loss over ``num_windows`` fixed, evenly spaced windows of ``data``.

    Fixed windows (not random ones) make every evaluation of every model comparable: the
    differences between two numbers are the models', not the sampling's.
    """
    seq_len = model.config.seq_len if seq_len is None else seq_len
    was_training = model.training
    model.eval()
    starts = torch.linspace(0, data.numel() - seq_len - 1, num_windows).long()  # (W,)
    offsets = torch.arange(seq_len)  # (N,)
    total = 0.0
    for i in range(0, num_windows, batch_size):
        tokens = data[starts[i : i + batch_size, None] + offsets[None, :]]  # (b, N)
        total += float(causal_lm_loss(model(tokens), tokens)) * tokens.shape[0]
    model.train(was_training)
    return total / num_windows


@dataclass
class History:
    """What :func:`train` recorded: one entry per step, validation every ``eval_every``."""

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val_step: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    probes: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def smoothed_train_loss(self, window: int = 20) -> np.ndarray:
        """A moving average of the training loss (the raw curve is noisy batch to batch)."""
        x = np.asarray(self.train_loss)
        window = max(1, min(window, len(x)))
        return np.convolve(x, np.ones(window) / window, mode="valid")

    def plot(self, ax=None, title: str | None = None):
        """Training loss (raw and smoothed) and validation loss against the step."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 3.6))
        ax.plot(self.step, self.train_loss, color="tab:blue", alpha=0.25, lw=0.8)
        smooth = self.smoothed_train_loss()
        ax.plot(
            self.step[len(self.step) - len(smooth) :],
            smooth,
            color="tab:blue",
            label="train (moving average)",
        )
        ax.plot(self.val_step, self.val_loss, "o-", color="tab:orange", label="validation")
        ax.set(xlabel="step", ylabel="loss (nats / token)", title=title)
        ax.legend()
        return ax


def train(
    model: GPT,
    corpus_or_data,
    config: TrainConfig,
    *,
    val: torch.Tensor | None = None,
    progress: bool = True,
    batch_fn=None,
    probe=None,
) -> History:
    r"""Train with AdamW, linear warm-up + cosine decay and gradient-norm clipping.

    ``corpus_or_data``: a :class:`Corpus` (trains on ``.train``, validates on ``.val``) or
    a 1-D token tensor (then ``val`` is optional). ``batch_fn(step, generator)`` replaces
    the batches drawn from the text (the induction-head experiment uses it);
    ``probe(model) -> dict`` is called at every evaluation and its results are kept in
    ``history.probes`` (the induction-head experiment measures its heads with it). Weight decay
    applies to matrices only, not to LayerNorm gains and biases (as in nanoGPT). A
    ``tqdm`` progress bar shows the loss as it goes (``progress=False`` hides it).
    """
    if isinstance(corpus_or_data, Corpus):
        data, val = corpus_or_data.train, corpus_or_data.val
    else:
        data = corpus_or_data
    gen = torch.Generator().manual_seed(config.seed)
    opt = _adamw(model, config)
    history = History()
    bar = _progress(config.steps, progress)
    model.train()
    t0 = time.perf_counter()
    for step in range(config.steps):
        lr = lr_at(
            step,
            max_lr=config.max_lr,
            min_lr=config.min_lr,
            warmup_steps=config.warmup_steps,
            num_steps=config.steps,
        )
        for group in opt.param_groups:
            group["lr"] = lr
        tokens = (
            batch_fn(step, gen)
            if batch_fn is not None
            else get_batch(data, config.batch_size, model.config.seq_len, gen)
        )  # (B, N)
        loss = causal_lm_loss(model(tokens), tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        history.step.append(step)
        history.train_loss.append(loss.item())
        history.lr.append(lr)
        last = step == config.steps - 1
        if last or (config.eval_every and (step + 1) % config.eval_every == 0):
            _evaluate_now(model, history, step, val, probe, config)
        _show_progress(bar, history, last)
    if bar is not None:
        bar.close()
    history.seconds = time.perf_counter() - t0
    model.eval()
    return history


def _adamw(model: GPT, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only, not on LayerNorm gains and biases."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.max_lr,
        betas=(0.9, 0.95),
    )


def _evaluate_now(model: GPT, history: History, step: int, val, probe, config: TrainConfig):
    """Validation loss (when there is validation data) and the probe's measurements, in
    ``history``; the model trains on afterwards."""
    if val is not None:
        history.val_step.append(step)
        history.val_loss.append(evaluate(model, val, num_windows=config.eval_windows))
    if probe is not None:
        model.eval()
        history.probes.append({"step": step, **probe(model)})
        model.train()


def _show_progress(bar, history: History, last: bool) -> None:
    """One step on the progress bar; the latest losses every 10 steps and at the end."""
    if bar is None:
        return
    bar.update(1)
    step = history.step[-1]
    if step % 10 == 0 or last:
        post = {"loss": f"{history.train_loss[-1]:.3f}"}
        if history.val_loss:
            post["val"] = f"{history.val_loss[-1]:.3f}"
        bar.set_postfix(post, refresh=False)


def _progress(total: int, show: bool):
    if not show:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, desc="training", mininterval=0.5)


def budget_configs(budget: str | None = None) -> tuple[GPTConfig, TrainConfig]:
    """The lecture's model and training run for a budget (``course_lib.env.budget()``).

    ``"full"``: the learner's default, a few minutes on a laptop CPU. ``"ci"``: the test
    suite's short run, seconds. Every claim the lecture asserts holds in both.
    """
    from .. import env

    budget = env.budget() if budget is None else budget
    if budget == "full":
        return (
            GPTConfig(seq_len=128, d_model=128, num_layers=3, num_heads=4),
            TrainConfig(
                steps=600, batch_size=16, max_lr=6e-3, min_lr=6e-4, warmup_steps=30, eval_every=100
            ),
        )
    if budget == "ci":
        return (
            GPTConfig(seq_len=64, d_model=64, num_layers=2, num_heads=4),
            TrainConfig(
                steps=300, batch_size=16, max_lr=1e-2, min_lr=1e-3, warmup_steps=30, eval_every=100
            ),
        )
    raise ValueError(f"budget must be 'full' or 'ci', got {budget!r}")
