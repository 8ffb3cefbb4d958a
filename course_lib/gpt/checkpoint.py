r"""Saving and loading trained models as plain tensors and numbers (``torch.load(weights_only=True)``).

The shipped checkpoint, ``course_lib/data/induction_heads.pt``, holds chapter 07's
induction-head models; ``tools/make_induction_checkpoint.py`` makes it.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import torch

from .model import GPT, GPTConfig
from .training import History

__all__ = ["INDUCTION_CHECKPOINT", "load_induction_checkpoint", "save_induction_checkpoint"]

# the package data folder course_lib/data, found as package data (works from a wheel too)
INDUCTION_CHECKPOINT = Path(str(files("course_lib") / "data" / "induction_heads.pt"))


def save_induction_checkpoint(
    models: dict[str, tuple[GPT, History]], path: str | Path = INDUCTION_CHECKPOINT
) -> Path:
    """Save models (weights, config, training record) as plain tensors and numbers."""
    payload = {}
    for name, (model, history) in models.items():
        payload[name] = {
            "config": {k: getattr(model.config, k) for k in model.config.__dataclass_fields__},
            "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "history": {
                "step": torch.tensor(history.step, dtype=torch.int32),
                "train_loss": torch.tensor(history.train_loss, dtype=torch.float32),
                "lr": torch.tensor(history.lr, dtype=torch.float32),
                "probes": history.probes,
                "seconds": history.seconds,
            },
        }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)
    return path


def load_induction_checkpoint(
    path: str | Path = INDUCTION_CHECKPOINT,
) -> dict[str, tuple[GPT, History]]:
    """The models saved by :func:`save_induction_checkpoint` (``tools/make_induction_checkpoint.py``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no induction-head checkpoint at {path}: make it with "
            "`python tools/make_induction_checkpoint.py`"
        )
    payload = torch.load(path, map_location="cpu", weights_only=True)
    out = {}
    for name, item in payload.items():
        model = GPT(GPTConfig(**item["config"]))
        model.load_state_dict(item["state_dict"])
        model.eval()
        h = item["history"]
        history = History(
            step=h["step"].tolist(),
            train_loss=h["train_loss"].tolist(),
            lr=h["lr"].tolist(),
            probes=h["probes"],
            seconds=h["seconds"],
        )
        out[name] = (model, history)
    return out
