r"""Checks for chapter 10 (real models: GPT-2's and Llama's weights in the course's own model).

Three exercises, each a function the learner writes:

* 10.1 ``gpt2_block_to_course(tensors, i, d_model)``: one GPT-2 block's tensors under the
  course's names, as ``(key, tensor)`` pairs (``dict(pairs)`` is what ``load_state_dict``
  takes), Conv1D weights transposed, ``c_attn`` split into queries, keys, values
* 10.2 ``half_to_interleaved_rows(w, num_heads)``: a Llama :math:`W_Q` / :math:`W_K`
  permuted within each head so that the course's interleaved RoPE reproduces the half split
* 10.3 ``induction_heads(weights, period, threshold)``: the heads whose induction score
  passes a threshold, strongest first

The cases are built with torch alone (no ``transformers``): tensors named as in a GPT-2
checkpoint, random rows of a projection, attention weights with planted heads.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from ..gpt.pretrained import gpt2_block_state_dict, half_to_interleaved_rows
from ..gpt.probes import induction_scores
from ..positional import rope_permutation
from .core import Case, Diagnosed, Exercise, Hint, compare_values, register, render_hint

DT = torch.float64


def _t(rng: np.random.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return torch.from_numpy(rng.normal(scale=std, size=shape)).to(DT)


# --------------------------------------------------------------------------- 10.1 GPT-2 block


def gpt2_block_reference(tensors: dict, i: int, d_model: int) -> list:
    prefix = f"blocks.{i}."
    block = gpt2_block_state_dict(tensors, i, d_model)  # the loader's own table
    return [(k.removeprefix(prefix), v) for k, v in block.items()]


def _gpt2_block_twin(tensors, i, d_model, *, transpose="all", split_axis=1):
    """A learner's mapping with one switch per mistake."""
    p = f"h.{i}."

    def lin(w, square):
        if transpose == "none" or (transpose == "non_square" and square):
            return w
        return w.T

    qkv = tensors[p + "attn.c_attn.weight"]  # (d, 3d)
    if split_axis == 0:
        qkv = qkv.T  # (3d, d), then split along the wrong axis
        q, k, v = qkv.split(d_model, dim=1)
    else:
        q, k, v = qkv.split(d_model, dim=1)  # 3 x (d, d)
    bq, bk, bv = tensors[p + "attn.c_attn.bias"].split(d_model)
    out = {
        "ln_1.weight": tensors[p + "ln_1.weight"],
        "ln_1.bias": tensors[p + "ln_1.bias"],
        "attn.W_Q.weight": lin(q, True),
        "attn.W_K.weight": lin(k, True),
        "attn.W_V.weight": lin(v, True),
        "attn.W_Q.bias": bq,
        "attn.W_K.bias": bk,
        "attn.W_V.bias": bv,
        "attn.W_O.weight": lin(tensors[p + "attn.c_proj.weight"], True),
        "attn.W_O.bias": tensors[p + "attn.c_proj.bias"],
        "ln_2.weight": tensors[p + "ln_2.weight"],
        "ln_2.bias": tensors[p + "ln_2.bias"],
        "mlp.W_1.weight": lin(tensors[p + "mlp.c_fc.weight"], False),
        "mlp.W_1.bias": tensors[p + "mlp.c_fc.bias"],
        "mlp.W_2.weight": lin(tensors[p + "mlp.c_proj.weight"], False),
        "mlp.W_2.bias": tensors[p + "mlp.c_proj.bias"],
    }
    return list(out.items())


def gpt2_tensors(rng: np.random.Generator, num_layers: int, d_model: int) -> dict:
    """Random tensors named and shaped as in a GPT-2 checkpoint (Conv1D weights ``[in, out]``)."""
    d = d_model
    out = {}
    for i in range(num_layers):
        p = f"h.{i}."
        out[p + "ln_1.weight"], out[p + "ln_1.bias"] = 1 + _t(rng, d, std=0.1), _t(rng, d)
        out[p + "attn.c_attn.weight"], out[p + "attn.c_attn.bias"] = (
            _t(rng, d, 3 * d),
            _t(rng, 3 * d),
        )
        out[p + "attn.c_proj.weight"], out[p + "attn.c_proj.bias"] = _t(rng, d, d), _t(rng, d)
        out[p + "ln_2.weight"], out[p + "ln_2.bias"] = 1 + _t(rng, d, std=0.1), _t(rng, d)
        out[p + "mlp.c_fc.weight"], out[p + "mlp.c_fc.bias"] = _t(rng, d, 4 * d), _t(rng, 4 * d)
        out[p + "mlp.c_proj.weight"], out[p + "mlp.c_proj.bias"] = _t(rng, 4 * d, d), _t(rng, d)
        out[p + "attn.bias"] = torch.ones(1, 1, 8, 8).tril()  # the stored causal mask: no weight
    return out


def _gpt2_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("block 0 of a 1-layer model, d_model=8", (gpt2_tensors(rng, 1, 8), 0, 8)),
            Case("block 1 of a 2-layer model, d_model=12", (gpt2_tensors(rng, 2, 12), 1, 12)),
        ]
    return [
        Case("block 2 of 3, d_model=16", (gpt2_tensors(rng, 3, 16), 2, 16)),
        Case("block 0 of 2, d_model=4", (gpt2_tensors(rng, 2, 4), 0, 4)),
    ]


_GPT2_MISTAKES = {
    Hint(
        "your square matrices (W_Q, W_K, W_V, W_O) are GPT-2's Conv1D weights as stored: only "
        "the MLP's were transposed. load_state_dict accepts a square matrix either way round, "
        "so it never complained: the Conv1D trap.",
        "Conv1D stores [in, out] and computes x @ W; nn.Linear stores [out, in] and computes "
        "x @ W.T. Transpose every Conv1D weight, square or not.",
    ): partial(_gpt2_block_twin, transpose="non_square"),
    Hint(
        "no weight is transposed: GPT-2's Conv1D stores [in, out], nn.Linear [out, in].",
        "Take .T of c_attn's three parts, c_proj, c_fc and the MLP's c_proj; biases and "
        "LayerNorm parameters are copied as they are.",
    ): partial(_gpt2_block_twin, transpose="none"),
    Hint(
        "you split c_attn along its input axis: it is [d_model, 3 d_model], queries, keys and "
        "values side by side along the *output* axis.",
        "q, k, v = w.split(d_model, dim=1), then transpose each (or transpose first and split "
        "along dim=0).",
    ): partial(_gpt2_block_twin, split_axis=0),
}


def _as_pairs(got) -> dict | None:
    """The learner's ``(key, tensor)`` pairs as a dict, or None when they are not pairs."""
    if isinstance(got, (str, bytes, dict)) or not isinstance(got, (list, tuple)):
        return None
    if not all(isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) for p in got):
        return None
    return {k: v for k, v in got}


def _compare_state_dict(got, expected, case) -> str | None:
    pairs = _as_pairs(got)
    if pairs is None:
        kind = "a dict" if isinstance(got, dict) else type(got).__name__
        return Diagnosed(
            f"expected a list of (key, tensor) pairs, got {kind}: return "
            "list(your_dict.items()) (dict(pairs) is what load_state_dict takes)."
        )
    expected = dict(expected)
    missing, extra = sorted(set(expected) - set(pairs)), sorted(set(pairs) - set(expected))
    if missing or extra:
        msg = f"missing keys {missing}" if missing else ""
        msg += ("; " if msg else "") + (f"unexpected keys {extra}" if extra else "")
        if any(k.endswith(".bias") for k in missing):
            msg += (
                ". GPT-2 has a bias in every linear layer (c_attn's is split like its weight) "
                "and in every LayerNorm."
            )
        return Diagnosed(msg + f" The keys are those of Block.state_dict(): {sorted(expected)}.")
    for key in expected:
        msg = compare_values(pairs[key], expected[key], 1e-12, 0.0, where=key)
        if msg:
            return Diagnosed(msg + _likely_block_mistake(pairs, case))
    return None


def _likely_block_mistake(pairs: dict, case) -> str:
    for hint, twin in _GPT2_MISTAKES.items():
        try:
            out = dict(twin(*case.args, **case.kwargs))
        except Exception:
            continue
        if all(compare_values(pairs[k], out[k], 1e-12, 0.0) is None for k in out):
            return f"\n    Likely cause: {render_hint(hint, True)}"
    return (
        "\n    Hint: map each checkpoint tensor by the table: Conv1D weights transposed, "
        "c_attn split in three along its output axis, everything else copied."
    )


register(
    Exercise(
        id="10.1",
        title="one GPT-2 block under the course's names",
        points=2,
        target="gpt2_block_to_course",
        cases=_gpt2_cases,
        reference=gpt2_block_reference,
        atol=1e-12,
        rtol=0.0,
        compare=_compare_state_dict,
        mistakes=_GPT2_MISTAKES,
        hint="Conv1D weights are [in, out]: transpose them; split c_attn along dim=1.",
    )
)


# --------------------------------------------------------------------------- 10.2 RoPE rows


def rope_rows_reference(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    return half_to_interleaved_rows(w, num_heads)  # (H d_h, d)


def _rope_rows_twin(w, num_heads, *, forward=False, whole=False, columns=False, head_minor=False):
    out_features, d = w.shape
    head_dim = out_features // num_heads
    perm = rope_permutation(head_dim)  # (d_h,) 2i -> i, i + d_h/2 -> 2i+1 read the other way
    index = perm if forward else torch.argsort(perm)  # (d_h,)
    if columns:
        return w[:, torch.argsort(rope_permutation(d))]  # (H d_h, d) the input features moved
    if whole:
        return w[torch.argsort(rope_permutation(out_features))]  # (H d_h, d) across heads
    if head_minor:
        heads = w.reshape(head_dim, num_heads, d)  # (d_h, H, d) the wrong split of the rows
        return heads[index].reshape(out_features, d)
    return w.reshape(num_heads, head_dim, d)[:, index].reshape(out_features, d)  # (H d_h, d)


def _rope_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("W_Q of 2 heads, d_h=8, d_model=16", (_t(rng, 16, 16), 2)),
            Case("W_K of 3 key/value heads, d_h=8, d_model=24", (_t(rng, 24, 24), 3)),
        ]
    return [
        Case("4 heads of d_h=16, d_model=32", (_t(rng, 64, 32), 4)),
        Case("1 head of d_h=12", (_t(rng, 12, 10), 1)),
    ]


register(
    Exercise(
        id="10.2",
        title="Llama's half-split RoPE rows for the course's interleaved RoPE",
        points=1,
        target="half_to_interleaved_rows",
        cases=_rope_cases,
        reference=rope_rows_reference,
        atol=0.0,
        rtol=0.0,
        mistakes={
            Hint(
                "you applied rope_permutation itself: it maps the interleaved order *to* the "
                "half split, and you need the way back.",
                "New row 2i is old row i and new row 2i+1 is old row i + d_h/2: index the rows "
                "of each head with torch.argsort(rope_permutation(d_h)).",
            ): partial(_rope_rows_twin, forward=True),
            Hint(
                "you permuted all H·d_h rows at once: rows of different heads were mixed.",
                "Reshape to [H, d_h, d_model], permute axis 1 (within each head), reshape back.",
            ): partial(_rope_rows_twin, whole=True),
            Hint(
                "you permuted the columns (the input features): RoPE pairs the *output* "
                "features of W_Q and W_K, which are its rows.",
                "nn.Linear's weight is [out, in]; permute axis 0, per head.",
            ): partial(_rope_rows_twin, columns=True),
            Hint(
                "you split the rows as [d_h, H]: the heads are the slow axis, rows h·d_h to "
                "(h+1)·d_h - 1 belong to head h.",
                "w.reshape(num_heads, head_dim, d_model), not w.reshape(head_dim, num_heads, d).",
            ): partial(_rope_rows_twin, head_minor=True),
        },
        hint=Hint(
            "within each head, move row i to 2i and row i + d_h/2 to 2i+1.",
            "w.reshape(H, d_h, d)[:, torch.argsort(rope_permutation(d_h))].reshape(H * d_h, d).",
        ),
    )
)


# --------------------------------------------------------------------------- 10.3 induction heads


def induction_heads_reference(weights, period: int, threshold: float = 0.4) -> list:
    scores = torch.stack([induction_scores(w, period) for w in weights])  # (L, H)
    found = [(int(layer), int(head)) for layer, head in (scores > threshold).nonzero()]
    return sorted(found, key=lambda lh: -float(scores[lh]))


def _heads_twin(weights, period, threshold=0.4, *, offset=None, ascending=False, swap=False):
    rows = []
    for w in weights:
        n = w.shape[-1]
        if offset is None:
            rows.append(induction_scores(w, period))  # (H,)
            continue
        shift = period if offset == "dup" else offset  # key n - period, or n - 1
        queries = torch.arange(shift, n)  # (n_q,)
        rows.append(w[:, :, queries, queries - shift].mean(dim=(0, 2)))  # (H,)
    scores = torch.stack(rows)  # (L, H)
    found = [(int(layer), int(head)) for layer, head in (scores > threshold).nonzero()]
    found = sorted(found, key=lambda lh: float(scores[lh]) * (1 if ascending else -1))
    return [(h, layer) for layer, h in found] if swap else found


def planted_weights(rng: np.random.Generator, num_layers: int, num_heads: int, period: int):
    """Causal attention weights ``L x [B, H, 2T, 2T]`` with planted heads.

    Head (L-1, 1) is a perfect induction head (key n - T + 1), head (1, H-1) a partial one
    (60 % of its weight there), head (0, 2) a duplicate-token head (key n - T), head (0, 0) a
    previous-token head (key n - 1); the others attend at random.
    """
    n, b = 2 * period, 2
    mask = torch.ones(n, n, dtype=torch.bool).tril()  # (N, N)
    layers = []
    q = torch.arange(period, n)  # (T,) the queries of the second copy
    for _ in range(num_layers):
        scores = _t(rng, b, num_heads, n, n, std=1.0)  # (B, H, N, N)
        layers.append(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1))
    layers[-1][:, 1, q] = 0.0
    layers[-1][:, 1, q, q - period + 1] = 1.0  # induction
    layers[1][:, -1, q] *= 0.4
    layers[1][:, -1, q, q - period + 1] += 0.6  # a weaker induction head
    layers[0][:, 2, q] = 0.0
    layers[0][:, 2, q, q - period] = 1.0  # duplicate token
    every = torch.arange(1, n)  # (N-1,)
    layers[0][:, 0, every] = 0.0
    layers[0][:, 0, every, every - 1] = 1.0  # previous token
    return layers


def _heads_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "3 layers of 4 heads, period 6, threshold 0.4", (planted_weights(rng, 3, 4, 6), 6)
            ),
            Case(
                "2 layers of 5 heads, period 8, threshold 0.3",
                (planted_weights(rng, 2, 5, 8), 8),
                {"threshold": 0.3},
            ),
        ]
    return [
        Case("4 layers of 6 heads, period 10", (planted_weights(rng, 4, 6, 10), 10)),
        Case("threshold 0.9: the perfect head only", (planted_weights(rng, 3, 4, 5), 5, 0.9)),
    ]


def _compare_heads(got, expected, case) -> str | None:
    try:
        got_list = [tuple(int(x) for x in pair) for pair in got]
    except (TypeError, ValueError):
        return Diagnosed(
            f"expected a list of (layer, head) pairs, got {type(got).__name__} {got!r:.80}."
        )
    if got_list == expected:
        return None
    return f"expected the heads {expected} as (layer, head), strongest first; got {got_list}."


register(
    Exercise(
        id="10.3",
        title="finding the induction heads",
        points=1,
        target="induction_heads",
        cases=_heads_cases,
        reference=induction_heads_reference,
        compare=_compare_heads,
        mistakes={
            Hint(
                "you found the duplicate-token heads (weight on key n - period, the previous "
                "occurrence of the current token itself).",
                "An induction head attends to the token *after* the previous occurrence, key "
                "n - period + 1: course_lib.gpt.induction_scores measures exactly that.",
            ): partial(_heads_twin, offset="dup"),
            Hint(
                "you found the previous-token heads (weight on key n - 1).",
                "That is the first half of the induction circuit; the induction score reads key "
                "n - period + 1, for the queries of the second copy.",
            ): partial(_heads_twin, offset=1),
            Hint(
                "your heads are sorted weakest first.",
                "Sort by score, descending: sorted(found, key=lambda lh: -scores[lh]).",
            ): partial(_heads_twin, ascending=True),
            Hint(
                "your pairs are (head, layer): the layer comes first.",
                "scores has shape [L, H]; (scores > threshold).nonzero() gives (layer, head) rows.",
            ): partial(_heads_twin, swap=True),
        },
        hint=Hint(
            "score each layer with induction_scores(w, period) (a [H] tensor), stack to "
            "[L, H], keep the pairs above the threshold, strongest first.",
            "scores = torch.stack([induction_scores(w, period) for w in weights]); "
            "pairs = (scores > threshold).nonzero(); sort them by -scores[l, h].",
        ),
    )
)
