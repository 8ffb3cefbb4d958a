r"""Chapter 07's GPT and the tools around it, one module per job.

* :mod:`~course_lib.gpt.model`: the config, the attention, the MLP, the block, the model
  (read this one first: it is the whole architecture);
* :mod:`~course_lib.gpt.generate`: sampling and the decoding loop (with and without a KV
  cache);
* :mod:`~course_lib.gpt.data`: the corpus (Python's own standard library) and its tokenizer;
* :mod:`~course_lib.gpt.training`: the loss, the learning-rate schedule, the training loop;
* :mod:`~course_lib.gpt.probes`: previous-token and induction scores on repeated tokens;
* :mod:`~course_lib.gpt.induction`: the induction-head experiment's recipe and training run;
* :mod:`~course_lib.gpt.circuits`: the induction circuit read from the weights (composition,
  copying, matching) and tested by ablation (``from course_lib.gpt import circuits``);
* :mod:`~course_lib.gpt.checkpoint`: saving and loading trained models;
* :mod:`~course_lib.gpt.ablations`: the seeded ablations and the sample statistics.

Every public name is handed on here, so ``from course_lib import gpt; gpt.GPT`` and
``from course_lib.gpt import GPT`` both work.
"""

from __future__ import annotations

from .ablations import corpus_words, known_word_fraction, run_ablation
from .checkpoint import INDUCTION_CHECKPOINT, load_induction_checkpoint, save_induction_checkpoint
from .data import (
    TRAIN_MODULES,
    VAL_MODULES,
    CharTokenizer,
    Corpus,
    get_batch,
    load_corpus,
    module_source,
    unigram_cross_entropy,
)
from .generate import positions_computed, sample_next, top_k_probs
from .induction import (
    INDUCTION_CONFIG,
    INDUCTION_PERIODS,
    INDUCTION_PROBE_PERIOD,
    INDUCTION_TRAIN,
    induction_probe,
    train_induction_model,
)
from .model import (
    ACTIVATIONS,
    BACKENDS,
    GPT,
    MLP,
    NORMS,
    POSITIONS,
    Block,
    CausalSelfAttention,
    GPTConfig,
    RMSNorm,
    attend,
    equal_params_config,
)
from .probes import (
    induction_scores,
    previous_token_scores,
    random_period_tokens,
    repeated_random_tokens,
)
from .training import (
    History,
    TrainConfig,
    budget_configs,
    causal_lm_loss,
    evaluate,
    loss_per_position,
    lr_at,
    lr_schedule,
    train,
)

__all__ = [
    "ACTIVATIONS",
    "BACKENDS",
    "Block",
    "CausalSelfAttention",
    "CharTokenizer",
    "Corpus",
    "GPT",
    "GPTConfig",
    "History",
    "INDUCTION_CHECKPOINT",
    "INDUCTION_CONFIG",
    "INDUCTION_PERIODS",
    "INDUCTION_PROBE_PERIOD",
    "INDUCTION_TRAIN",
    "MLP",
    "NORMS",
    "POSITIONS",
    "RMSNorm",
    "TRAIN_MODULES",
    "TrainConfig",
    "VAL_MODULES",
    "attend",
    "budget_configs",
    "causal_lm_loss",
    "corpus_words",
    "equal_params_config",
    "evaluate",
    "get_batch",
    "induction_probe",
    "induction_scores",
    "known_word_fraction",
    "load_corpus",
    "load_induction_checkpoint",
    "loss_per_position",
    "lr_at",
    "lr_schedule",
    "module_source",
    "positions_computed",
    "previous_token_scores",
    "random_period_tokens",
    "repeated_random_tokens",
    "run_ablation",
    "sample_next",
    "save_induction_checkpoint",
    "top_k_probs",
    "train",
    "train_induction_model",
    "unigram_cross_entropy",
]
