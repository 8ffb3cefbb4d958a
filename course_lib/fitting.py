r"""The training loop the course's small CPU experiments share (chapters 01 and 08).

Each experiment says what one step's loss is (a fresh batch through the model); :func:`fit`
takes the optimiser steps. The GPT of chapter 07 has its own loop, with a schedule and
evaluation (:mod:`course_lib.gpt.training`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def fit(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    step_loss: Callable[[], torch.Tensor],
    *,
    clip: float | None = None,
) -> list[float]:
    r"""``steps`` optimiser steps on ``step_loss()``; returns the loss of every step.

    Each step: :math:`\mathcal{L} =` ``step_loss()`` (a scalar, from a fresh batch), the
    gradient :math:`\nabla_\theta \mathcal{L}`, its norm capped at ``clip`` if given, then
    ``opt.step()``. The model trains in train mode and is left in eval mode.
    """
    losses = []
    model.train()
    for _ in range(int(steps)):
        loss = step_loss()  # scalar
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses
