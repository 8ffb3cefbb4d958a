r"""Checks for chapter 10 (real models: GPT-2's and Llama's weights in the course's own model).

Three exercises, each a function the learner writes:

* 10.1 ``gpt2_block_to_course(tensors, i, d_model)``: one GPT-2 block's tensors under the
  course's names, returned as a list of ``(key, tensor)`` pairs (what ``state_dict().items()``
  gives; ``dict(pairs)`` is what ``load_state_dict`` takes), Conv1D weights transposed,
  ``c_attn`` split into queries, keys, values. A list, not a dict: the grader records lists and
  tuples of tensors, and the statement asks for exactly what the check takes;
* 10.2 ``half_to_interleaved_rows(w, num_heads)``: a Llama :math:`W_Q` / :math:`W_K`
  permuted within each head so that the course's interleaved RoPE reproduces the half split.
  A wrong answer is told which row of which head holds which row of ``w``, never the code;
* 10.3 ``induction_heads(weights, period, threshold)``: the heads whose induction score
  passes a threshold, strongest first. The planted heads score between 0.3 and 0.9, as real
  models' do (SmolLM2-135M's best three: 0.91, 0.80, 0.77), and the cases use four thresholds,
  so a threshold written into the function fails; feedback shows the scores to three decimals.

The cases are built with torch alone (no ``transformers``): tensors named as in a GPT-2
checkpoint, random rows of a projection, attention weights with planted heads. Each reference
function takes a keyword for each common mistake (a *slip*); what the checks say is in
``ch10.md``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from ..gpt.hf_checkpoint import gpt2_block_state_dict, half_to_interleaved_rows
from ..gpt.probes import induction_scores
from ..positional import rope_permutation
from .core import Case, Diagnosed, compare_values, get_exercise, to_numpy
from .declare import exercise
from .kit import randn
from .texts import text

# --------------------------------------------------------------------------- 10.1 GPT-2 block


def gpt2_block_reference(tensors, i, d_model, *, transpose="all", split_dim=1) -> list:
    r"""Block ``i`` of a GPT-2 checkpoint under the course's names, as ``(key, tensor)`` pairs,
    by the loader's own table: a Conv1D weight :math:`W \in \mathbb{R}^{d_{in} \times d_{out}}`
    becomes :math:`W^\top` (``nn.Linear``'s ``[out, in]``), ``c_attn`` :math:`[d, 3d]` is split
    along its output axis into :math:`W_Q, W_K, W_V`, biases and LayerNorms are copied."""
    if split_dim != 1:  # along the input axis: one part of [d, 3d], so unpacking three fails
        _q, _k, _v = tensors[f"h.{i}.attn.c_attn.weight"].split(d_model, dim=split_dim)
    block = gpt2_block_state_dict(tensors, i, d_model)  # the loader's own table
    pairs = [(key.removeprefix(f"blocks.{i}."), w) for key, w in block.items()]
    if transpose == "none":  # every Conv1D weight as stored, [in, out]
        return [(key, w.T if w.ndim == 2 else w) for key, w in pairs]
    if transpose == "non-square":  # only the MLP's transposed: W_Q, W_K, W_V, W_O as stored
        return [(key, w.T if w.ndim == 2 and key.startswith("attn.") else w) for key, w in pairs]
    return pairs


def gpt2_tensors(rng: np.random.Generator, num_layers: int, d_model: int) -> dict:
    """Random tensors named and shaped as in a GPT-2 checkpoint (Conv1D weights ``[in, out]``)."""
    d = d_model
    out = {}
    for i in range(num_layers):
        p = f"h.{i}."
        out[p + "ln_1.weight"], out[p + "ln_1.bias"] = 1 + randn(rng, d, std=0.1), randn(rng, d)
        out[p + "attn.c_attn.weight"], out[p + "attn.c_attn.bias"] = (
            randn(rng, d, 3 * d),
            randn(rng, 3 * d),
        )
        out[p + "attn.c_proj.weight"], out[p + "attn.c_proj.bias"] = randn(rng, d, d), randn(rng, d)
        out[p + "ln_2.weight"], out[p + "ln_2.bias"] = 1 + randn(rng, d, std=0.1), randn(rng, d)
        out[p + "mlp.c_fc.weight"], out[p + "mlp.c_fc.bias"] = (
            randn(rng, d, 4 * d),
            randn(rng, 4 * d),
        )
        out[p + "mlp.c_proj.weight"], out[p + "mlp.c_proj.bias"] = (
            randn(rng, 4 * d, d),
            randn(rng, d),
        )
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
            f"expected a list of (key, tensor) pairs, got {kind}: the statement asks for "
            "list(block.items()) of your dict (dict(pairs) is what load_state_dict takes)."
        )
    counts = Counter(k for k, _ in got)  # linear: a learner's list may be very long
    repeated = sorted(k for k, n in counts.items() if n > 1)
    if repeated:
        shown = repeated[:5] + (["..."] if len(repeated) > 5 else [])
        return Diagnosed(
            f"the key(s) {shown} appear more than once among your pairs: each course key "
            "names one tensor, so give each exactly once."
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
        off = compare_values(pairs[key], expected[key], 1e-12, 0.0, where=key)
        if off:
            mistake = _likely_block_mistake(pairs, case)
            if mistake is None:
                return Diagnosed(off, cause=text("10.1"), label="Hint")
            return Diagnosed(off, cause=mistake)
    return None


def _likely_block_mistake(pairs: dict, case) -> str | None:
    """The declared mistake whose pairs the learner's match, key by key in any order."""
    for hint, slip in get_exercise("10.1").mistakes.items():
        try:
            out = dict(slip(*case.args, **case.kwargs))
        except Exception:
            continue
        if all(compare_values(pairs[k], out[k], 1e-12, 0.0) is None for k in out):
            return hint
    return None


exercise(
    "10.1",
    gpt2_block_reference,
    target="gpt2_block_to_course",
    title="one GPT-2 block under the course's names",
    points=2,
    cases=_gpt2_cases,
    atol=1e-12,
    rtol=0.0,
    compare=_compare_state_dict,
    slips={
        "square-as-stored": dict(transpose="non-square"),
        "none-transposed": dict(transpose="none"),
        "split-input-axis": dict(split_dim=0),
    },
)


# --------------------------------------------------------------------------- 10.2 RoPE rows


def rope_rows_reference(
    w, num_heads, *, forward=False, across_heads=False, columns=False, head_minor=False
) -> torch.Tensor:
    r"""The rows of a Llama :math:`W_Q` or :math:`W_K` ``[H d_h, d]`` for the interleaved RoPE:
    within each head, new row :math:`2i` is old row :math:`i` and new row :math:`2i+1` old row
    :math:`i + d_h/2`, the inverse of :func:`~course_lib.positional.rope_permutation`."""
    rows, d = w.shape
    head_dim = rows // num_heads
    back = torch.argsort(rope_permutation(head_dim))  # (d_h,) the inverse permutation
    if forward:  # rope_permutation itself, the way there
        return w.reshape(num_heads, head_dim, d)[:, rope_permutation(head_dim)].reshape(rows, d)
    if across_heads:  # all H d_h rows permuted at once
        return w[torch.argsort(rope_permutation(rows))]  # (H d_h, d)
    if columns:  # the input features moved
        return w[:, torch.argsort(rope_permutation(d))]  # (H d_h, d)
    if head_minor:  # the rows split as [d_h, H]
        return w.reshape(head_dim, num_heads, d)[back].reshape(rows, d)  # (H d_h, d)
    return half_to_interleaved_rows(w, num_heads)  # (H d_h, d), the loader's own


def _rope_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("W_Q of 2 heads, d_h=8, d_model=16", (randn(rng, 16, 16), 2)),
            Case("W_K of 3 key/value heads, d_h=8, d_model=24", (randn(rng, 24, 24), 3)),
        ]
    return [
        Case("4 heads of d_h=16, d_model=32", (randn(rng, 64, 32), 4)),
        Case("1 head of d_h=12", (randn(rng, 12, 10), 1)),
    ]


def _source_row(row: int, head_dim: int) -> int:
    """The row of ``w`` that the answer's row ``row`` holds: 2i <- i, 2i+1 <- i + d_h/2."""
    head, j = divmod(row, head_dim)
    return head * head_dim + j // 2 + (head_dim // 2 if j % 2 else 0)


def _compare_rope_rows(got, expected, case) -> str | None:
    """The usual comparison; when it fails, which row of which head holds which row of ``w``.

    The note names the first misplaced row and where its content comes from, in the terms of
    the statement (row i of a head, i + d_h/2), so a learner can fix the index without being
    handed the code."""
    msg = compare_values(got, expected, 0.0, 0.0)
    if msg is None:
        return None
    w, num_heads = case.args[0], case.args[1]
    mine, rows = to_numpy(got), to_numpy(w)
    if not isinstance(mine, np.ndarray) or mine.shape != rows.shape:
        return msg
    head_dim = rows.shape[0] // num_heads
    for r in range(rows.shape[0]):
        same = np.flatnonzero(np.isclose(rows, mine[r], rtol=1e-6, atol=1e-9).all(axis=1))
        head, j = divmod(r, head_dim)
        if not same.size:
            return msg + (
                f"\n    Your row {r} (row {j} of head {head}) is no row of w at all: the "
                "answer only moves w's rows, so each of its rows is one of w's, unchanged."
            )
        want = _source_row(r, head_dim)
        if same[0] != want:
            have_head, have_j = divmod(int(same[0]), head_dim)
            i, odd = j // 2, j % 2
            source = f"row {i} + d_h/2 = {i + head_dim // 2}" if odd else f"row {i}"
            return msg + (
                f"\n    Row {j} of head {head} (row {r} of the matrix) should hold the same "
                f"head's {source} (w's row {want}, since {j} = 2·{i}{' + 1' if odd else ''}); "
                f"yours holds row {have_j} of head {have_head} (w's row {int(same[0])})."
            )
    return msg


exercise(
    "10.2",
    rope_rows_reference,
    target="half_to_interleaved_rows",
    title="Llama's half-split RoPE rows for the course's interleaved RoPE",
    points=1,
    cases=_rope_cases,
    atol=0.0,
    rtol=0.0,
    compare=_compare_rope_rows,
    slips={
        "forward": dict(forward=True),
        "across-heads": dict(across_heads=True),
        "columns": dict(columns=True),
        "head-minor": dict(head_minor=True),
    },
)


# --------------------------------------------------------------------------- 10.3 induction heads

# Head kinds of planted_weights, each with the key its queries attend to (query n, period T):
#   an *induction* head: key n - T + 1, the token after the previous occurrence of the current
#     token, which is the token to predict (Olsson et al., 2022);
#   a *duplicate-token* head: key n - T, the previous occurrence of the current token itself
#     (Wang et al., 2022, found such heads in GPT-2 small: they tell later heads "this token
#     was seen before");
#   a *previous-token* head: key n - 1 (the first half of the induction circuit).
KINDS = {"induction": 1, "duplicate": 0, "previous": None}


def induction_heads_reference(
    weights, period, threshold=0.4, *, attends="induction", ascending=False, swap=False, fixed=None
) -> list:
    r"""The heads whose induction score passes ``threshold``, strongest first, as
    ``(layer, head)``: head :math:`h` of layer :math:`\ell` scores the mean weight its queries
    :math:`n \ge T` of the second copy put on key :math:`n - T + 1`, the token after the
    previous occurrence of the current one (:func:`~course_lib.gpt.induction_scores`)."""
    rows = []
    for w in weights:  # (B, H, N, N)
        if attends == "induction":
            rows.append(induction_scores(w, period))  # (H,)
        else:  # the duplicate-token heads' key n - T, or the previous-token heads' n - 1
            shift = period if attends == "duplicate" else 1
            queries = torch.arange(shift, w.shape[-1])  # (n_q,)
            rows.append(w[:, :, queries, queries - shift].mean(dim=(0, 2)))  # (H,)
    scores = torch.stack(rows)  # (L, H)
    if fixed is not None:  # the threshold argument ignored
        threshold = fixed
    above = (scores > threshold).nonzero()  # (K, 2) the (layer, head) places above it
    order = scores[above[:, 0], above[:, 1]].argsort(descending=not ascending, stable=True)
    found = [(int(layer), int(head)) for layer, head in above[order]]  # strongest first
    return [(head, layer) for layer, head in found] if swap else found


# The strengths of the planted induction heads. Over 200 seeds their scores landed in
# [0.886, 0.895], [0.656, 0.688], [0.486, 0.521] and [0.315, 0.372] (the rest of a planted row
# keeps its random weights), the random heads' in [0.044, 0.132]: at least 0.028 from every
# threshold of the cases, with periods of 8 or more (shorter ones raise the random heads').
STRENGTHS = (0.88, 0.64, 0.46, 0.28)
THRESHOLDS = (0.4, 0.25, 0.6, 0.75)


def planted_weights(
    rng: np.random.Generator, num_layers: int, num_heads: int, period: int, planted=None
) -> list[torch.Tensor]:
    """Causal attention weights ``L x [B, H, 2T, 2T]`` on repeated tokens, with planted heads.

    ``planted`` maps ``(layer, head)`` to ``(kind, strength)``, kind one of :data:`KINDS`:
    that head's queries put ``strength`` of their weight on the kind's key and keep the rest
    of their random weights, scaled by ``1 - strength``. The default plants four induction
    heads of the strengths :data:`STRENGTHS` (scores about 0.89, 0.67, 0.5, 0.34), a
    duplicate-token head and a previous-token head; the other heads attend at random (an
    induction score near :math:`1/n`, as for uniform attention).
    """
    if planted is None:
        planted = default_planting(num_layers, num_heads)
    n, b = 2 * period, 2
    mask = torch.ones(n, n, dtype=torch.bool).tril()  # (N, N)
    layers = []
    for _ in range(num_layers):
        scores = randn(rng, b, num_heads, n, n, std=0.5)  # (B, H, N, N)
        layers.append(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1))
    for (layer, head), (kind, strength) in planted.items():
        back = KINDS[kind]
        queries = torch.arange(1, n) if back is None else torch.arange(period, n)  # (n_q,)
        keys = queries - 1 if back is None else queries - period + back  # (n_q,)
        w = layers[layer][:, head]  # (B, N, N) a view
        w[:, queries] *= 1.0 - strength
        w[:, queries, keys] += strength
    return layers


def default_planting(num_layers: int, num_heads: int) -> dict:
    """Four induction heads (one per strength), a duplicate-token and a previous-token head,
    at places where layer and head differ (so that (head, layer) is a different head)."""
    spots = [(layer, head) for layer in range(num_layers) for head in range(num_heads)]
    spots = [s for s in spots if s[0] != s[1]]
    order = np.random.default_rng(num_layers * 100 + num_heads).permutation(len(spots))
    chosen = [spots[i] for i in order[:6]]
    kinds = [("induction", s) for s in STRENGTHS] + [("duplicate", 0.7), ("previous", 0.8)]
    return dict(zip(chosen, kinds))


def _heads_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "3 layers of 4 heads, period 8, the default threshold 0.4",
                (planted_weights(rng, 3, 4, 8), 8),
            ),
            Case(
                "4 layers of 3 heads, period 8, threshold 0.25",
                (planted_weights(rng, 4, 3, 8), 8),
                {"threshold": 0.25},
            ),
            Case(
                "3 layers of 5 heads, period 9, threshold 0.6",
                (planted_weights(rng, 3, 5, 9), 9, 0.6),
            ),
        ]
    return [
        Case("4 layers of 6 heads, period 10", (planted_weights(rng, 4, 6, 10), 10)),
        Case("threshold 0.75: the strongest head only", (planted_weights(rng, 3, 4, 8), 8, 0.75)),
        Case(
            "2 layers of 6 heads, period 9, threshold 0.25",
            (planted_weights(rng, 2, 6, 9), 9),
            {"threshold": 0.25},
        ),
    ]


def _case_scores(case: Case) -> tuple[torch.Tensor, float]:
    weights, period = case.args[0], case.args[1]
    threshold = case.args[2] if len(case.args) > 2 else case.kwargs.get("threshold", 0.4)
    return torch.stack([induction_scores(w, period) for w in weights]), float(threshold)


def _compare_heads(got, expected, case) -> str | None:
    scores, threshold = _case_scores(case)  # (L, H)
    if isinstance(got, (str, bytes, dict)) or not isinstance(got, (list, tuple, torch.Tensor)):
        return Diagnosed(
            f"expected a list of (layer, head) pairs, got {type(got).__name__} {got!r:.80}."
        )
    items = got.tolist() if isinstance(got, torch.Tensor) else list(got)
    if any(isinstance(p, (list, tuple)) and len(p) == 3 for p in items):
        return Diagnosed(
            "your items have three entries: return (layer, head) pairs only, without the score "
            "(sort by the score, then leave it out)."
        )
    try:
        got_list = [tuple(int(x) for x in pair) for pair in items]
    except (TypeError, ValueError):
        return Diagnosed(
            f"expected a list of (layer, head) pairs, got {type(got).__name__} {got!r:.80}."
        )
    if any(len(p) != 2 for p in got_list):
        return Diagnosed("expected (layer, head) pairs: two integers each.")
    if got_list == expected:
        return None

    def scored(pairs):
        inside = all(0 <= lay < scores.shape[0] and 0 <= h < scores.shape[1] for lay, h in pairs)
        if not inside:
            return str(pairs)
        return (
            "[" + ", ".join(f"({lay}, {h}) {float(scores[lay, h]):.3f}" for lay, h in pairs) + "]"
        )

    msg = (
        f"expected the heads {scored(expected)} as (layer, head) with their induction scores, "
        f"strongest first, for threshold {threshold:g}; got {scored(got_list)}."
    )
    missing = [p for p in expected if p not in got_list]
    extra = [p for p in got_list if p not in expected]
    if missing:
        msg += f" Missing: {scored(missing[:2])}, above {threshold:g}."
    if extra and all(0 <= lay < scores.shape[0] and 0 <= h < scores.shape[1] for lay, h in extra):
        msg += f" Not induction heads at this threshold: {scored(extra[:2])}."
    return msg


exercise(
    "10.3",
    induction_heads_reference,
    target="induction_heads",
    title="finding the induction heads",
    points=1,
    cases=_heads_cases,
    compare=_compare_heads,
    slips={
        "duplicate-token": dict(attends="duplicate"),
        "previous-token": dict(attends="previous"),
        "weakest-first": dict(ascending=True),
        "head-layer": dict(swap=True),
        "fixed-threshold": dict(fixed=0.4),
    },
)
