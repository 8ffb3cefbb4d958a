"""course_lib.validation: each input check on its own, with the message it gives (the public
functions that call them are tested with their modules)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib import validation as V

# --------------------------------------------------------------------------- general


def test_shape_of_is_a_tuple_of_ints_or_the_type_name():
    assert V.shape_of(torch.zeros(2, 3)) == (2, 3)
    assert V.shape_of(np.zeros((4,))) == (4,)
    assert V.shape_of(torch.tensor(1.0)) == ()
    assert V.shape_of([1, 2]) == "list" and V.shape_of(None) == "NoneType"


def test_require_tensor_names_the_argument_and_the_hint():
    V.require_tensor("q", torch.zeros(1))
    with pytest.raises(
        TypeError, match=r"expected q to be a torch.Tensor, got ndarray \(use numpy\)"
    ):
        V.require_tensor("q", np.zeros(1), "use numpy")
    with pytest.raises(TypeError, match="got list$"):
        V.require_tensor("x", [1.0])


def test_as_int_takes_every_integer_and_nothing_else():
    assert V.as_int(3, "n") == 3 and type(V.as_int(np.int64(4), "n")) is int
    assert V.as_int(torch.tensor(5), "n") == 5
    for bad in (True, 2.0, "3", None):
        with pytest.raises(ValueError, match=f"n must be an int, got {bad!r}"):
            V.as_int(bad, "n")


def test_as_scalar_takes_real_numbers_and_0_dim_arrays():
    assert V.as_scalar(2) == 2.0 and V.as_scalar(0.5) == 0.5
    assert V.as_scalar(np.float32(1.5)) == 1.5 and V.as_scalar(np.array(3)) == 3.0
    assert V.as_scalar(torch.tensor(0.25)) == 0.25 and type(V.as_scalar(torch.tensor(2))) is float
    for bad in (True, np.array([1.0]), torch.tensor([1.0]), torch.tensor(True), 1j, "1", None):
        assert V.as_scalar(bad) is None, bad
    assert V.as_scalar(torch.tensor(1 + 1j)) is None and V.as_scalar(np.array("a")) is None


# --------------------------------------------------------------------------- attention


def test_check_qkv_returns_the_scores_shape_with_broadcast_batches():
    q, k, v = torch.zeros(2, 1, 5, 8), torch.zeros(1, 3, 7, 8), torch.zeros(7, 4)
    assert V.check_qkv(q, k, v) == (2, 3, 5, 7)
    assert V.check_qkv(np.zeros((5, 8)), np.zeros((7, 8)), np.zeros((7, 2))) == (5, 7)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((8,), (7, 8), (7, 4)), r"expected q of shape \[\.\.\., Nq, d_k\] \(at least 2 dimensions\), got \(8,\)"),
        (((5, 8), (7,), (7, 4)), r"expected k of shape \[\.\.\., Nk, d_k\]"),
        (((5, 8), (7, 8), (4,)), r"expected v of shape \[\.\.\., Nk, d_v\]"),
        (((5, 8), (7, 6), (7, 4)), r"share the last dimension d_k.*got q \(5, 8\) and k \(7, 6\)"),
        (((5, 8), (7, 8), (6, 4)), r"same number of keys Nk.*got k \(7, 8\) and v \(6, 4\)"),
        (((2, 5, 8), (3, 7, 8), (3, 7, 4)), r"batch dimensions of q, k and v do not broadcast"),
    ],
)  # fmt: skip
def test_check_qkv_says_what_is_wrong(shapes, message):
    q, k, v = (torch.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        V.check_qkv(q, k, v)


def test_check_mask_must_broadcast_to_the_scores():
    V.check_mask(torch.ones(5, 7, dtype=torch.bool), (2, 5, 7))
    V.check_mask(torch.ones(1, 7), (2, 5, 7))
    with pytest.raises(ValueError, match=r"mask of shape \(7, 5\) does not broadcast.*\(2, 5, 7\)"):
        V.check_mask(torch.ones(7, 5), (2, 5, 7))


def test_check_scale_dropout_returns_floats():
    assert V.check_scale_dropout(None, 0) == (None, 0.0)
    scale, p = V.check_scale_dropout(torch.tensor(0.5), np.float64(0.1))
    assert (scale, p) == (0.5, 0.1) and type(scale) is float and type(p) is float
    for bad in (math.inf, math.nan, "1", torch.ones(2)):
        with pytest.raises(ValueError, match="scale must be a finite number or None"):
            V.check_scale_dropout(bad, 0.0)
    for bad in (1.0, -0.1, None, True):
        with pytest.raises(ValueError, match=r"dropout_p must be a number in \[0, 1\)"):
            V.check_scale_dropout(None, bad)


def test_validate_attention_on_tensors():
    q = torch.zeros(1, 3, 4)
    mask, scale, p = V.validate_attention(q, q, q, [[True, False, True]] * 3, 2, 0)
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and (scale, p) == (2.0, 0.0)
    float_mask = torch.zeros(3, 3)
    assert V.validate_attention(q, q, q, float_mask, None, 0.0)[0] is float_mask
    assert V.validate_attention(q, q, q, None, None, 0.0) == (None, None, 0.0)
    with pytest.raises(TypeError, match="use numpy_attention for numpy arrays"):
        V.validate_attention(np.zeros((3, 4)), q, q, None, None, 0.0)
    with pytest.raises(TypeError, match=r"got dtype torch.int64: use mask.bool\(\) for 0/1 masks"):
        V.validate_attention(q, q, q, torch.ones(3, 3, dtype=torch.long), None, 0.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        V.validate_attention(q, q, q, torch.ones(2, 2, dtype=torch.bool), None, 0.0)


def test_validate_attention_on_numpy_arrays():
    q = [[0.0, 1.0], [1.0, 0.0]]  # lists become arrays
    mask, scale, p = V.validate_attention(q, q, q, [[True, False], [True, True]], None, 0.0, numpy=True)  # fmt: skip
    assert isinstance(mask, np.ndarray) and mask.dtype == bool
    assert (
        V.validate_attention(q, q, q, np.zeros((2, 2)), None, 0.0, numpy=True)[0].dtype
        == np.float64
    )
    with pytest.raises(TypeError, match=r"use mask.astype\(bool\)"):
        V.validate_attention(q, q, q, np.ones((2, 2), dtype=int), None, 0.0, numpy=True)


# --------------------------------------------------------------------------- multi-head


def test_check_head_split():
    V.check_head_split(torch.zeros(2, 3, 8), 4)
    with pytest.raises(ValueError, match=r"expected x of shape \[B, N, H\*d_h\], got \(3, 8\)"):
        V.check_head_split(torch.zeros(3, 8), 4)
    with pytest.raises(
        ValueError, match=r"feature size 8 of x \(2, 3, 8\) is not divisible by num_heads=3"
    ):
        V.check_head_split(torch.zeros(2, 3, 8), 3)
    with pytest.raises(ValueError, match="num_heads=0"):
        V.check_head_split(torch.zeros(2, 3, 8), 0)


def test_check_mha_config():
    V.check_mha_config(64, 8, 2, 0.1)
    with pytest.raises(
        ValueError, match="d_model=30 is not divisible by num_heads=4: each head gets"
    ):
        V.check_mha_config(30, 4, 4, 0.0)
    with pytest.raises(
        ValueError, match="num_heads=8 is not divisible by num_kv_heads=3: each key/value"
    ):
        V.check_mha_config(64, 8, 3, 0.0)
    with pytest.raises(ValueError, match="num_heads must be a positive integer, got 0"):
        V.check_mha_config(64, 0, 1, 0.0)
    with pytest.raises(ValueError, match="num_kv_heads must be a positive integer, got 2.5"):
        V.check_mha_config(64, 8, 2.5, 0.0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        V.check_mha_config(64, 8, 8, 1.0)


def test_check_mha_inputs_names_the_layout_and_hints_at_sequence_first():
    x = torch.zeros(2, 5, 16)
    V.check_mha_inputs(x, torch.zeros(2, 7, 16), torch.zeros(2, 7, 16), 16)
    with pytest.raises(TypeError, match="expected value to be a torch.Tensor"):
        V.check_mha_inputs(x, x, x.numpy(), 16)
    with pytest.raises(
        ValueError, match=r"expected key of shape \[B, N, d_model=16\], got \(2, 5, 8\)"
    ):
        V.check_mha_inputs(x, torch.zeros(2, 5, 8), x, 16)
    with pytest.raises(ValueError, match=r"key and value must have the same \[B, Nk\]"):
        V.check_mha_inputs(x, x, torch.zeros(2, 6, 16), 16)
    seq_first = torch.zeros(5, 3, 16)  # (N, B, d): query N=5, key N=4, both B=3
    with pytest.raises(ValueError, match="build the module with batch_first=False"):
        V.check_mha_inputs(seq_first, torch.zeros(4, 3, 16), torch.zeros(4, 3, 16), 16)
    # given batch_first=False the message shows the tensor as the caller passed it, [N, B, d]
    with pytest.raises(ValueError, match=r"\[N, B, d_model=16\], got \(5, 3, 8\)"):
        V.check_mha_inputs(torch.zeros(3, 5, 8), x, x, 16, batch_first=False)


# --------------------------------------------------------------------------- the RNN


def _rnn(b=2, n=4, d_in=3, d_hidden=5, dtype=torch.float64):
    return [
        torch.zeros(b, n, d_in, dtype=dtype),
        torch.zeros(d_hidden, d_in, dtype=dtype),
        torch.zeros(d_hidden, d_hidden, dtype=dtype),
        torch.zeros(d_hidden, dtype=dtype),
        torch.zeros(b, d_hidden, dtype=dtype),
    ]


@pytest.mark.parametrize(
    ("which", "value", "error", "message"),
    [
        (0, torch.zeros(4, 3), ValueError, r"expected x of shape \[B, N, d_in\], got \(4, 3\)"),
        (2, torch.zeros(5, 4), ValueError, r"W_hh of shape \[d_hidden, d_hidden\] \(square\)"),
        (1, torch.zeros(5, 4), ValueError, r"W_xh of shape \[d_hidden, d_in\] = \[5, 3\].*got \(5, 4\)"),
        (3, torch.zeros(4), ValueError, r"b_h of shape \[d_hidden\] = \[5\], got \(4,\)"),
        (4, torch.zeros(3, 5), ValueError, r"h0 of shape \[B, d_hidden\] = \[2, 5\], got \(3, 5\)"),
        (4, np.zeros((2, 5)), TypeError, r"expected h0 to be a torch.Tensor, got ndarray \(or None\)"),
        (1, torch.zeros(5, 3, dtype=torch.float32), TypeError, r"W_xh to have x's dtype torch.float64.*\.to\(x.dtype\)"),
    ],
)  # fmt: skip
def test_check_rnn_inputs_says_which_shape_is_wrong(which, value, error, message):
    args = _rnn()
    V.check_rnn_inputs(*args)
    args[which] = value
    with pytest.raises(error, match=message):
        V.check_rnn_inputs(*args)


def test_check_rnn_inputs_takes_no_h0():
    V.check_rnn_inputs(*_rnn()[:4], None)


# --------------------------------------------------------------------------- positions


def test_base_scale_and_even_checks():
    V.check_base(10000.0)
    V.check_base(2)
    V.check_position_scale(0.5)
    for bad in (1.0, 0.5, math.inf, "10000", None):
        with pytest.raises(ValueError, match=r"base must be a finite number > 1"):
            V.check_base(bad)
    for bad in (0.0, -1.0, math.nan, None):
        with pytest.raises(ValueError, match=r"scale must be a finite number > 0 \(1.0 = no"):
            V.check_position_scale(bad)
    V.check_even(8, "")
    for bad in (7, 0, -2):
        with pytest.raises(ValueError, match=f"even and positive; got d={bad} here"):
            V.check_even(bad, " here")


def test_check_rope_input():
    V.check_rope_input(torch.zeros(3, 4), 10000.0, 1.0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        V.check_rope_input(np.zeros((3, 4)), 10000.0, 1.0)
    with pytest.raises(ValueError, match=r"\[\.\.\., N, d\] \(tokens, then features\), got \(4,\)"):
        V.check_rope_input(torch.zeros(4), 10000.0, 1.0)
    with pytest.raises(TypeError, match="real floating-point x, got dtype torch.int64"):
        V.check_rope_input(torch.zeros(3, 4, dtype=torch.long), 10000.0, 1.0)
    with pytest.raises(ValueError, match=r"got d=5 \(x of shape \(3, 5\)\)"):
        V.check_rope_input(torch.zeros(3, 5), 10000.0, 1.0)
    with pytest.raises(ValueError, match="base"):
        V.check_rope_input(torch.zeros(3, 4), 1.0, 1.0)
    with pytest.raises(ValueError, match="scale"):
        V.check_rope_input(torch.zeros(3, 4), 10000.0, 0.0)


def test_check_rope_layout():
    V.check_rope_layout(torch.zeros(3), None)  # None: anything goes here
    V.check_rope_layout(torch.zeros(1, 2, 3, 4), "BNHD")
    with pytest.raises(ValueError, match="layout must be None, 'BHND'.*or 'BNHD'.*got 'NHD'"):
        V.check_rope_layout(torch.zeros(1, 2, 3, 4), "NHD")
    with pytest.raises(
        ValueError, match=r"layout='BHND' names the four axes of x, but x has shape \(2, 3, 4\)"
    ):
        V.check_rope_layout(torch.zeros(2, 3, 4), "BHND")


def test_positions_for_default_and_shared_positions():
    pos = V.positions_for(None, 4, (2, 3), "cpu")
    assert pos.dtype == torch.float64 and pos.tolist() == [0.0, 1.0, 2.0, 3.0]
    got = V.positions_for([5, 6, 7, 8], 4, (2, 3), "cpu")
    assert got.dtype == torch.float64 and got.tolist() == [5.0, 6.0, 7.0, 8.0]


def test_positions_for_one_row_per_sequence_never_pairs_with_the_heads():
    rows = torch.tensor([[0, 1, 2], [10, 11, 12]])  # [B, N] with B = H = 2
    got = V.positions_for(rows, 3, (2, 2), "cpu")
    assert got.shape == (2, 1, 3) and torch.equal(got[:, 0], rows.double())
    assert V.positions_for(rows[:1], 3, (2, 2), "cpu").shape == (1, 1, 3)
    with pytest.raises(ValueError, match=r"read as \[B, N\].*batch size B=3"):
        V.positions_for(rows, 3, (3, 2), "cpu")
    per_head = torch.zeros(2, 4, 3)  # [B, H, N]: all axes given
    assert V.positions_for(per_head, 3, (2, 4), "cpu").shape == (2, 4, 3)


def test_positions_for_says_what_is_wrong():
    with pytest.raises(TypeError, match="positions must be real numbers, got dtype torch.bool"):
        V.positions_for(torch.ones(3, dtype=torch.bool), 3, (1,), "cpu")
    with pytest.raises(TypeError, match="complex"):
        V.positions_for(torch.ones(3, dtype=torch.complex64), 3, (1,), "cpu")
    with pytest.raises(
        ValueError, match=r"N=3 \(one per token of x, x.shape\[-2\]\), got shape \(4,\)\.$"
    ):
        V.positions_for(torch.arange(4), 3, (2,), "cpu")
    with pytest.raises(ValueError, match=r"x.shape\[1\]\), got shape \(\)"):
        V.positions_for(torch.tensor(1), 3, (2,), "cpu", layout="BNHD")
    # x [B, N, H, d] read as [B, H, N, d]: the positions match axis 1, and the message says so
    with pytest.raises(ValueError, match=r"match x.shape\[1\] = 6 instead.*layout='BNHD'"):
        V.positions_for(torch.arange(6), 4, (2, 6), "cpu")
    with pytest.raises(ValueError, match=r"ambiguous for x with token axes \(2, 2, 3, 4\)"):
        V.positions_for(torch.zeros(2, 3, 4), 4, (2, 2, 3), "cpu")
    with pytest.raises(ValueError, match=r"do not broadcast against x's token axes \(2, 4, 3\)"):
        V.positions_for(torch.zeros(3, 4, 3), 3, (2, 4), "cpu")


# --------------------------------------------------------------------------- FlashAttention


def test_check_flash_inputs_returns_the_scale():
    q = torch.zeros(1, 2, 3, 16)
    assert V.check_flash_inputs(q, q, q, None, who="f") == 0.25
    assert V.check_flash_inputs(q, q, q, 2, who="f") == 2.0
    for bad in (True, math.inf, "0.5", torch.tensor(0.5)):
        with pytest.raises(ValueError, match="f: scale must be a finite number or None"):
            V.check_flash_inputs(q, q, q, bad, who="f")


@pytest.mark.parametrize(
    ("k", "error", "message"),
    [
        (np.zeros((1, 2, 3, 16)), TypeError, r"kernel: expected k to be a torch.Tensor, got ndarray"),
        (torch.zeros(1, 2, 3, 8), ValueError, r"kernel: q and k must share the last dimension d_k"),
        (torch.zeros(1, 1, 3, 16), ValueError, r"kernel: q, k and v must have the same batch dimensions"),
        (torch.zeros(1, 2, 0, 16), ValueError, r"kernel: there are no keys \(Nk = 0\)"),
        (torch.zeros(1, 2, 3, 16, dtype=torch.float64), TypeError, r"kernel: q, k and v must share one dtype"),
    ],
)  # fmt: skip
def test_check_flash_inputs_says_what_is_wrong(k, error, message):
    q = torch.zeros(1, 2, 3, 16)
    v = k if isinstance(k, torch.Tensor) and k.shape[-2] == 0 else q
    with pytest.raises(error, match=message):
        V.check_flash_inputs(q, k, v, None, who="kernel")


def test_check_flash_inputs_wants_floating_point_on_one_device():
    ints = torch.zeros(1, 2, 3, 16, dtype=torch.int32)
    with pytest.raises(TypeError, match="expected floating-point q, k, v, got torch.int32"):
        V.check_flash_inputs(ints, ints, ints, None, who="k")
    q = torch.zeros(1, 2, 3, 16)
    meta = torch.zeros(1, 2, 3, 16, device="meta")
    with pytest.raises(ValueError, match="must be on the same device: got cpu, meta, cpu"):
        V.check_flash_inputs(q, meta, q, None, who="k")
