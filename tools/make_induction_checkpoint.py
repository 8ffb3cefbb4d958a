"""Train chapter 07's induction-head models and save them to course_lib/data/induction_heads.pt.

The lecture's CI budget has no time to train them (the heads form after about a thousand
steps), so it loads this checkpoint; its full budget trains the same recipe live. The file
holds, for a 2-layer and a 1-layer attention-only model: the config, the weights and the
training record (loss per step, and every 100 steps the loss on each copy of a repeated
sequence and every head's induction score).

Reproduce it (about a minute or two on one CPU core; the result is deterministic for a
given platform and torch version)::

    python tools/make_induction_checkpoint.py

The recipe is ``course_lib.gpt.INDUCTION_CONFIG`` / ``INDUCTION_TRAIN`` / ``INDUCTION_PERIODS``.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib import env, gpt  # noqa: E402


def main() -> int:
    env.setup(quiet=True, plots=False)
    models = {}
    for name, layers in (("two_layers", 2), ("one_layer", 1)):
        config = replace(gpt.INDUCTION_CONFIG, num_layers=layers)
        model, history = gpt.train_induction_model(config, progress=True)
        last = history.probes[-1]
        print(
            f"{name}: second-copy loss {last['second_copy_loss']:.3f} (first copy "
            f"{last['first_copy_loss']:.3f}); best induction score per layer "
            f"{[round(max(s), 3) for s in last['induction']]}; {history.seconds:.0f} s"
        )
        models[name] = (model, history)
    path = gpt.save_induction_checkpoint(models)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
