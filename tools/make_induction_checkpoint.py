"""Train chapter 07's induction-head models and save them to course_lib/data/induction_heads.pt.

The lecture's CI budget has no time to train them (the heads form after about a thousand
steps), so it loads this checkpoint; its full budget trains the same recipe live. The file
holds, for a 2-layer and a 1-layer attention-only model and each of several seeds: the
config, the weights and the training record (loss per step, and every 100 steps the loss on
each copy of a repeated sequence and every head's induction score). Seed 0's models are
``two_layers`` and ``one_layer``; seed s > 0's are ``two_layers_seed{s}`` and
``one_layer_seed{s}``. The seed sets the initial weights and the batches
(``TrainConfig.seed``), so chapter 07 can say which of its findings hold over seeds.

Reproduce it (one to two minutes per model on one CPU core; the result is deterministic
for a given platform and torch version)::

    python tools/make_induction_checkpoint.py                 # seeds 0, 1, 2
    python tools/make_induction_checkpoint.py --seeds 0 1 2 3 --add   # keep what is there

The recipe is ``course_lib.gpt.INDUCTION_CONFIG`` / ``INDUCTION_TRAIN`` / ``INDUCTION_PERIODS``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib import env, gpt  # noqa: E402

SEEDS = (0, 1, 2)


def model_name(layers: int, seed: int) -> str:
    """``two_layers`` / ``one_layer`` for seed 0, with ``_seed{s}`` appended otherwise."""
    base = {2: "two_layers", 1: "one_layer"}[layers]
    return base if seed == 0 else f"{base}_seed{seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument(
        "--add", action="store_true", help="keep the models already saved; train only the missing"
    )
    parser.add_argument("--out", type=Path, default=gpt.INDUCTION_CHECKPOINT)
    args = parser.parse_args(argv)
    env.setup(quiet=True, plots=False)
    models = gpt.load_induction_checkpoint(args.out) if args.add and args.out.is_file() else {}
    for seed in args.seeds:
        for layers in (2, 1):
            name = model_name(layers, seed)
            if name in models:
                print(f"{name}: kept")
                continue
            config = replace(gpt.INDUCTION_CONFIG, num_layers=layers)
            train_config = replace(gpt.INDUCTION_TRAIN, seed=seed)
            model, history = gpt.train_induction_model(config, train_config, progress=True)
            last = history.probes[-1]
            print(
                f"{name}: second-copy loss {last['second_copy_loss']:.3f} (first copy "
                f"{last['first_copy_loss']:.3f}); best induction score per layer "
                f"{[round(max(s), 3) for s in last['induction']]}; {history.seconds:.0f} s"
            )
            models[name] = (model, history)
            gpt.save_induction_checkpoint(models, args.out)  # after each model: resumable
    path = gpt.save_induction_checkpoint(models, args.out)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, {len(models)} models)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
