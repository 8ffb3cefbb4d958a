r"""Hugging Face checkpoints in the course's model: GPT-2 and Llama-family weights by two tables.

A checkpoint is a folder holding ``config.json`` and the weights as ``safetensors``. Loading
it is two tables per family:

* a **config table**: which field of ``config.json`` becomes which :class:`GPTConfig` field,
  the fields that must have one value because the course's model has no switch for the
  others (an error names the field and its value), and what the family fixes (GPT-2:
  learned positions, biases, LayerNorm; Llama: RoPE with the half-split pairing, RMSNorm,
  SwiGLU, no biases);
* a **weight table**: which checkpoint tensor becomes which parameter, and how. GPT-2 keeps
  its linear layers as ``Conv1D`` with the weight stored ``[in, out]``, the transpose of
  ``nn.Linear``'s ``[out, in]``, and its queries, keys and values in one ``c_attn`` matrix;
  Llama's projections are ``nn.Linear`` already. Every tensor of the file is either used or
  listed as ignored (GPT-2's stored causal mask); anything else is an error, so a checkpoint
  of another architecture is never half-loaded.

Hugging Face's Llama rotates the pairs :math:`(i, i + d_h/2)` of each head; the course's
default pairs :math:`(2i, 2i+1)`. ``rope="half"`` keeps the checkpoint's rows and switches
the model's pairing; ``rope="interleaved"`` keeps the course's pairing and permutes the rows
of :math:`W_Q, W_K` within each head (:func:`half_to_interleaved_rows`), which gives the same
scores, since :math:`(Pq)\cdot(Pk) = q \cdot k` for a permutation :math:`P`.

Finding the folder is :mod:`course_lib.gpt.hub_cache`'s; loading a model by name or path,
whatever its format, is :func:`course_lib.gpt.pretrained.load_pretrained`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..positional import half_to_interleaved, per_head_rows
from .model import GPTConfig

__all__ = [
    "FAMILIES",
    "GPT2_BLOCK",
    "GPT2_CONFIG",
    "GPT2_WEIGHTS",
    "LLAMA_BLOCK",
    "LLAMA_CONFIG",
    "LLAMA_WEIGHTS",
    "config_from_hf",
    "gpt2_block_state_dict",
    "half_to_interleaved_rows",
    "read_safetensors",
    "state_dict_from_hf",
]

# =========================================================================== config tables

# (field of config.json, field of GPTConfig, value map or None). A missing optional field
# keeps GPTConfig's default; "n_inner": null means 4 * d_model, as in GPTConfig.
ConfigRow = tuple[str, str, "dict[str, str] | None"]
GPT2_CONFIG: tuple[ConfigRow, ...] = (
    ("vocab_size", "vocab_size", None),
    ("n_positions", "seq_len", None),
    ("n_embd", "d_model", None),
    ("n_layer", "num_layers", None),
    ("n_head", "num_heads", None),
    ("n_inner", "d_ff", None),
    ("layer_norm_epsilon", "norm_eps", None),
    ("activation_function", "activation", {"gelu_new": "gelu_tanh", "gelu": "gelu"}),
)
GPT2_FIXED = {"positions": "learned", "bias": True, "norm": "layernorm", "tie_embeddings": True}
# fields the course's model can only take with one value: (field, the value, default if absent)
GPT2_REQUIRED = (
    ("scale_attn_weights", True, True),
    ("scale_attn_by_inverse_layer_idx", False, False),
    ("add_cross_attention", False, False),
    ("tie_word_embeddings", True, True),
)

LLAMA_CONFIG: tuple[ConfigRow, ...] = (
    ("vocab_size", "vocab_size", None),
    ("max_position_embeddings", "seq_len", None),
    ("hidden_size", "d_model", None),
    ("num_hidden_layers", "num_layers", None),
    ("num_attention_heads", "num_heads", None),
    ("num_key_value_heads", "num_kv_heads", None),
    ("intermediate_size", "d_ff", None),
    ("rms_norm_eps", "norm_eps", None),
    ("rope_theta", "rope_base", None),
    ("hidden_act", "activation", {"silu": "swiglu"}),
    ("tie_word_embeddings", "tie_embeddings", None),
)
LLAMA_FIXED = {"positions": "rope", "bias": False, "norm": "rmsnorm", "rope_interleaved": False}
LLAMA_REQUIRED = (
    ("attention_bias", False, False),
    ("mlp_bias", False, False),
    ("rope_scaling", None, None),
)

# =========================================================================== weight tables

# (checkpoint name, course parameter name(s), how). "{i}" is the layer. How:
#   "copy"       the same tensor;
#   "conv1d"     GPT-2's Conv1D weight [in, out], transposed to nn.Linear's [out, in];
#   "conv1d_qkv" c_attn's weight [d, 3d]: split the out axis into W_Q, W_K, W_V, transposed;
#   "qkv_bias"   c_attn's bias [3d]: split into the three biases;
#   "rope_rows"  Llama's q/k rows, permuted per head when rope="interleaved" (else copied).
WeightRow = tuple[str, "str | tuple[str, ...]", str]
GPT2_WEIGHTS: tuple[WeightRow, ...] = (
    ("wte.weight", "embed.weight", "copy"),
    ("wpe.weight", "pos_embed.weight", "copy"),
    ("ln_f.weight", "ln_f.weight", "copy"),
    ("ln_f.bias", "ln_f.bias", "copy"),
)
GPT2_BLOCK: tuple[WeightRow, ...] = (
    ("h.{i}.ln_1.weight", "blocks.{i}.ln_1.weight", "copy"),
    ("h.{i}.ln_1.bias", "blocks.{i}.ln_1.bias", "copy"),
    (
        "h.{i}.attn.c_attn.weight",
        ("blocks.{i}.attn.W_Q.weight", "blocks.{i}.attn.W_K.weight", "blocks.{i}.attn.W_V.weight"),
        "conv1d_qkv",
    ),
    (
        "h.{i}.attn.c_attn.bias",
        ("blocks.{i}.attn.W_Q.bias", "blocks.{i}.attn.W_K.bias", "blocks.{i}.attn.W_V.bias"),
        "qkv_bias",
    ),
    ("h.{i}.attn.c_proj.weight", "blocks.{i}.attn.W_O.weight", "conv1d"),
    ("h.{i}.attn.c_proj.bias", "blocks.{i}.attn.W_O.bias", "copy"),
    ("h.{i}.ln_2.weight", "blocks.{i}.ln_2.weight", "copy"),
    ("h.{i}.ln_2.bias", "blocks.{i}.ln_2.bias", "copy"),
    ("h.{i}.mlp.c_fc.weight", "blocks.{i}.mlp.W_1.weight", "conv1d"),
    ("h.{i}.mlp.c_fc.bias", "blocks.{i}.mlp.W_1.bias", "copy"),
    ("h.{i}.mlp.c_proj.weight", "blocks.{i}.mlp.W_2.weight", "conv1d"),
    ("h.{i}.mlp.c_proj.bias", "blocks.{i}.mlp.W_2.bias", "copy"),
)
# tensors a GPT-2 file may hold that are not weights: the stored causal mask, the read-out
# (tied: it is wte)
GPT2_IGNORED: tuple[str, ...] = ("h.{i}.attn.bias", "h.{i}.attn.masked_bias", "lm_head.weight")
GPT2_PREFIX = "transformer."  # GPT2LMHeadModel.save_pretrained prefixes the body's names

LLAMA_WEIGHTS: tuple[WeightRow, ...] = (
    ("model.embed_tokens.weight", "embed.weight", "copy"),
    ("model.norm.weight", "ln_f.weight", "copy"),
)
LLAMA_UNTIED: tuple[WeightRow, ...] = (("lm_head.weight", "lm_head.weight", "copy"),)
LLAMA_BLOCK: tuple[WeightRow, ...] = (
    ("model.layers.{i}.input_layernorm.weight", "blocks.{i}.ln_1.weight", "copy"),
    ("model.layers.{i}.self_attn.q_proj.weight", "blocks.{i}.attn.W_Q.weight", "rope_rows"),
    ("model.layers.{i}.self_attn.k_proj.weight", "blocks.{i}.attn.W_K.weight", "rope_rows"),
    ("model.layers.{i}.self_attn.v_proj.weight", "blocks.{i}.attn.W_V.weight", "copy"),
    ("model.layers.{i}.self_attn.o_proj.weight", "blocks.{i}.attn.W_O.weight", "copy"),
    ("model.layers.{i}.post_attention_layernorm.weight", "blocks.{i}.ln_2.weight", "copy"),
    ("model.layers.{i}.mlp.gate_proj.weight", "blocks.{i}.mlp.W_1.weight", "copy"),
    ("model.layers.{i}.mlp.up_proj.weight", "blocks.{i}.mlp.W_3.weight", "copy"),
    ("model.layers.{i}.mlp.down_proj.weight", "blocks.{i}.mlp.W_2.weight", "copy"),
)
LLAMA_IGNORED: tuple[str, ...] = (
    "model.layers.{i}.self_attn.rotary_emb.inv_freq",
    "lm_head.weight",
)

FAMILIES = {
    "gpt2": (GPT2_CONFIG, GPT2_FIXED, GPT2_REQUIRED),
    "llama": (LLAMA_CONFIG, LLAMA_FIXED, LLAMA_REQUIRED),
}

# =========================================================================== the config


def config_from_hf(hf: dict, *, rope: str = "half", attention: str = "course") -> GPTConfig:
    """The :class:`GPTConfig` of a checkpoint's ``config.json`` (a dict), through the tables.

    Raises ``ValueError`` naming the field whose value the course's model cannot express.
    """
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise ValueError(
            f"config.json has model_type={family!r}: the course loads {sorted(FAMILIES)} only"
        )
    if rope not in ("half", "interleaved"):
        raise ValueError(f"rope must be 'half' or 'interleaved', got {rope!r}")
    table, fixed, required = FAMILIES[family]
    hf = dict(hf)
    if family == "llama":  # transformers >= 5 keeps the RoPE settings in one dict
        params = hf.get("rope_parameters") or {}
        hf.setdefault("rope_theta", params.get("rope_theta", 10000.0))
        if params.get("rope_type", "default") != "default":
            hf["rope_scaling"] = params
        head_dim = hf.get("head_dim")
        if head_dim is not None and head_dim * hf["num_attention_heads"] != hf["hidden_size"]:
            raise ValueError(
                f"config.json: head_dim={head_dim} is not hidden_size / num_attention_heads "
                f"= {hf['hidden_size']} / {hf['num_attention_heads']}: the course's model "
                "has d_h = d_model / H"
            )
    for name, only, default in required:
        if hf.get(name, default) != only:
            raise ValueError(
                f"config.json: {name}={hf.get(name)!r} does not map to the course's model, "
                f"which supports {name}={only!r} only"
            )
    kwargs: dict[str, Any] = dict(fixed, attention=attention)
    for hf_name, name, values in table:
        if hf.get(hf_name) is None:
            continue
        value = hf[hf_name]
        if values is not None:
            if value not in values:
                raise ValueError(
                    f"config.json: {hf_name}={value!r} does not map to the course's model "
                    f"(it maps {sorted(values)})"
                )
            value = values[value]
        kwargs[name] = value
    if family == "llama" and rope == "interleaved":
        kwargs["rope_interleaved"] = True
    return GPTConfig(**kwargs)


# =========================================================================== the weights


def half_to_interleaved_rows(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""Rows of a Hugging Face Llama :math:`W_Q` or :math:`W_K` ``[H d_h, d]`` for the interleaved RoPE.

    Row :math:`i` and row :math:`i + d_h/2` of each head (the pair Hugging Face rotates)
    become rows :math:`2i` and :math:`2i + 1` (the pair the course rotates): within each head,
    new row :math:`j` is old row ``argsort(perm)[j]`` with ``perm`` = :func:`rope_permutation`.
    """
    return per_head_rows(w, num_heads, half_to_interleaved)  # 2i <- i, 2i+1 <- i + d_h/2


def _convert(how: str, tensor: torch.Tensor, config: GPTConfig, course: str) -> list:
    """One table row applied: the tensor(s) for the row's course name(s)."""
    if how == "copy":
        return [tensor]
    if how == "conv1d":
        return [tensor.T]  # [in, out] -> [out, in]
    if how == "conv1d_qkv":
        return [part.T for part in tensor.split(config.d_model, dim=1)]  # 3 x [d, d]
    if how == "qkv_bias":
        return list(tensor.split(config.d_model))  # 3 x [d]
    if how == "rope_rows":
        if not config.rope_interleaved:
            return [tensor]
        heads = config.num_heads if course.endswith("W_Q.weight") else config.kv_heads
        return [half_to_interleaved_rows(tensor, heads)]
    raise ValueError(f"unknown conversion {how!r}")  # pragma: no cover - tables are fixed


def _rows(family: str, config: GPTConfig) -> tuple[list, list]:
    """The weight table for this many layers: (rows, ignored names), "{i}" filled in."""
    if family == "gpt2":
        top, block, ignored = GPT2_WEIGHTS, GPT2_BLOCK, GPT2_IGNORED
    else:
        top, block, ignored = LLAMA_WEIGHTS, LLAMA_BLOCK, LLAMA_IGNORED
        if not config.tie_embeddings:
            top = top + LLAMA_UNTIED
            ignored = tuple(n for n in ignored if n != "lm_head.weight")

    def fill(name, i):
        return tuple(n.format(i=i) for n in name) if isinstance(name, tuple) else name.format(i=i)

    rows = list(top) + [
        (fill(hf, i), fill(course, i), how)
        for i in range(config.num_layers)
        for hf, course, how in block
    ]
    skip = [fill(name, i) for i in range(config.num_layers) for name in ignored]
    return rows, skip


def state_dict_from_hf(
    tensors: dict[str, torch.Tensor], family: str, config: GPTConfig, source: str = "checkpoint"
) -> dict[str, torch.Tensor]:
    """The course's state dict from a checkpoint's tensors, through the weight table.

    ``source`` names the file in the errors: a tensor the table needs and the file lacks,
    or one the file holds and the table does not know.
    """
    if family == "gpt2":  # GPT2LMHeadModel's files prefix the body; the hub's gpt2 does not
        tensors = {k.removeprefix(GPT2_PREFIX): v for k, v in tensors.items()}
    rows, skip = _rows(family, config)
    out: dict[str, torch.Tensor] = {}
    for hf_name, course, how in rows:
        if hf_name not in tensors:
            raise KeyError(f"{source} has no tensor {hf_name!r} (needed for {course})")
        names = course if isinstance(course, tuple) else (course,)
        for name, value in zip(names, _convert(how, tensors[hf_name], config, names[0])):
            out[name] = value.contiguous()
    used = {row[0] for row in rows} | set(skip)
    unknown = sorted(set(tensors) - used)
    if unknown:
        raise KeyError(
            f"{source} holds tensors the {family} table has no row for: {unknown[:5]}"
            f"{' ...' if len(unknown) > 5 else ''} (another architecture?)"
        )
    return out


def gpt2_block_state_dict(tensors: dict[str, torch.Tensor], i: int, d_model: int) -> dict:
    """Block ``i`` of a GPT-2 checkpoint under the course's names ``blocks.{i}.…`` (the table's rows)."""
    config = GPTConfig(d_model=d_model, num_heads=1, num_layers=i + 1, positions="learned")
    tensors = {k.removeprefix(GPT2_PREFIX): v for k, v in tensors.items()}
    out = {}
    for hf_name, course, how in GPT2_BLOCK:
        names = tuple(n.format(i=i) for n in (course if isinstance(course, tuple) else (course,)))
        for name, value in zip(
            names, _convert(how, tensors[hf_name.format(i=i)], config, names[0])
        ):
            out[name] = value
    return out


# =========================================================================== the files


def read_safetensors(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Every tensor of the checkpoint in ``folder`` (one file or shards), and the file name."""
    from safetensors.torch import load_file

    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        return load_file(single), single.name
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise FileNotFoundError(f"{index.name} names shards that {folder} lacks: {missing}")
        tensors = {}
        for shard in shards:
            tensors.update(load_file(folder / shard))
        return tensors, index.name
    other = sorted(p.name for p in folder.glob("*.bin")) + sorted(
        p.name for p in folder.glob("*.pt")
    )
    hint = f" (it holds {other}: the loader reads safetensors only)" if other else ""
    raise FileNotFoundError(f"{folder} has no model.safetensors{hint}")
