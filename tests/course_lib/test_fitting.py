"""course_lib.fitting.fit: the experiments' training loop."""

from __future__ import annotations

import torch
from torch import nn

from course_lib.fitting import fit


def _regression(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, generator=gen)  # (N, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1  # (N,)
    model = nn.Linear(3, 1)
    return model, lambda: ((model(x).squeeze(-1) - y) ** 2).mean()


def test_fit_takes_its_steps_learns_and_leaves_eval_mode():
    torch.manual_seed(0)
    model, step_loss = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = fit(model, opt, 50, step_loss)
    assert len(losses) == 50 and all(isinstance(v, float) for v in losses)
    assert losses[-1] < 0.01 * losses[0], (losses[0], losses[-1])
    assert not model.training


def test_clip_caps_the_gradient_norm_of_each_step():
    """With SGD, one step moves the parameters by lr times the (clipped) gradient."""
    torch.manual_seed(0)
    model, step_loss = _regression()
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    fit(model, opt, 1, step_loss, clip=0.01)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert 0 < (after - before).norm() <= 0.01 + 1e-6
