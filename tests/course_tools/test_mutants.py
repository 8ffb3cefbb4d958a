"""course_tools/mutants.py: the declared wrong versions of course_lib's functions, found by
name, put in place in this process (every reference to the function replaced, as a lecture
sees it) and taken out again; a few cheap ones checked to keep their shapes and be wrong.
(benchmarks/mutation_run.py, which runs the lectures with them, is tests/benchmarks.)"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import course_lib.attention
import course_lib.gpt.model
import course_lib.multihead
from course_tools import mutants as M

LECTURES = [f"{i:02d}" for i in range(12)]


@pytest.fixture(autouse=True)
def _restored():
    """No test leaves a mutant in place, whatever it asserts."""
    yield
    M.restore()


# --------------------------------------------------------------------------- the declarations


@pytest.mark.parametrize("lecture", LECTURES)
def test_every_lecture_declares_two_mutants_of_real_functions(lecture):
    declared = M.by_lecture(lecture)
    assert len(declared) >= 2, f"lecture {lecture}: {len(declared)} mutants"
    assert len({m.name for m in declared}) == len(declared)  # names unique within a lecture
    for m in declared:
        owner, attribute, current = M._resolve(m.target)
        assert callable(current) and m.claim, m.name


def test_every_mutant_names_a_lecture_a_target_and_a_claim():
    assert {m.lecture for m in M.MUTANTS} == set(LECTURES)
    for m in M.MUTANTS:
        assert m.target.count(":") == 1 and m.target.startswith("course_lib."), m.name
        assert callable(m.replacement) or m.replacement.lstrip().startswith("def "), m.name
    assert M.by_lecture("99") == []


def test_a_mutant_is_found_by_name_and_lecture():
    assert M.find("attention_without_scale").lecture == "02"  # the first declared
    assert M.find("attention_without_scale", "03").claim.startswith("with 1/sqrt(d_k)")
    with pytest.raises(KeyError, match="no mutant called 'nope'"):
        M.find("nope")
    with pytest.raises(KeyError, match="for lecture 00"):
        M.find("attention_without_scale", "00")


def test_a_target_must_be_module_colon_name_of_something_there():
    with pytest.raises(ValueError, match="module:function"):
        M._resolve("course_lib.attention.causal_mask")
    with pytest.raises(AttributeError, match="has no attribute 'nowhere'"):
        M._resolve("course_lib.attention:nowhere")
    owner, attribute, value = M._resolve("course_lib.multihead:KVCache.update")
    assert owner is course_lib.multihead.KVCache and attribute == "update" and callable(value)


# --------------------------------------------------------------------------- the injection


def test_apply_replaces_every_reference_and_restore_undoes_it(monkeypatch):
    sdpa = course_lib.attention.scaled_dot_product_attention
    probe = types.ModuleType("course_lib._mutation_probe")  # a module-level dict holds it too
    probe.BACKENDS = {"course": sdpa, "other": len}
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    mutant = M.find("attention_without_scale", "02")
    try:
        where = M.apply(mutant)
        new = course_lib.attention.scaled_dot_product_attention
        assert new is M.attention_without_scale and M.original(mutant.target) is sdpa
        assert course_lib.multihead.scaled_dot_product_attention is new  # imported by name
        assert course_lib.gpt.model.scaled_dot_product_attention is new
        assert probe.BACKENDS == {"course": new, "other": len}
        assert (
            where[0] == mutant.target
            and "course_lib.gpt.model:scaled_dot_product_attention" in where
        )
        assert "course_lib._mutation_probe:BACKENDS['course']" in where
    finally:
        M.restore()
    assert course_lib.attention.scaled_dot_product_attention is sdpa
    assert course_lib.gpt.model.scaled_dot_product_attention is sdpa
    assert probe.BACKENDS["course"] is sdpa


def test_a_method_and_a_mutant_given_as_source():
    update = course_lib.multihead.KVCache.update
    source = M.Mutant(
        "budget_from_the_module", "99", "course_lib.env:budget", "def budget():\n    return BUDGETS[1]\n", "x"
    )  # fmt: skip
    try:
        M.apply(M.find("kv_cache_drops_newest", "04"))
        assert course_lib.multihead.KVCache.update is M.kv_cache_update_drops_newest
        M.apply(source)  # run in course_lib.env's namespace: BUDGETS is the module's
        from course_lib import env

        assert env.budget() == "ci"
    finally:
        M.restore()
    assert course_lib.multihead.KVCache.update is update


def test_a_mutant_is_applied_by_name_and_listed_where_it_went():
    mask = course_lib.attention.causal_mask
    where = M.apply("causal_mask_one_ahead")
    assert where[0] == "course_lib.attention:causal_mask"
    assert course_lib.attention.causal_mask is M.causal_mask_one_ahead
    assert all(w.startswith("course_lib.") for w in where) and len(where) == len(set(where))
    M.restore()
    assert course_lib.attention.causal_mask is mask
    with pytest.raises(KeyError):
        M.original("course_lib.attention:causal_mask")  # forgotten once restored


def test_two_mutants_of_one_function_are_undone_newest_first():
    mask = course_lib.attention.causal_mask
    M.apply("causal_mask_one_ahead")
    wrong = M.Mutant(
        "x", "99", "course_lib.attention:causal_mask", M.sliding_window_mask_one_too_wide, "x"
    )
    M.apply(wrong)
    assert course_lib.attention.causal_mask is M.sliding_window_mask_one_too_wide
    assert M.original("course_lib.attention:causal_mask") is mask  # the first one's original
    M.restore()
    assert course_lib.attention.causal_mask is mask


def test_a_mutant_given_as_source_leaves_its_module_as_it_was():
    import course_lib.env as env

    before = dict(vars(env))
    mutant = M.Mutant("helper", "99", "course_lib.env:budget",
                      "HELPER = 1\ndef budget():\n    return 'x' * HELPER\n", "x")  # fmt: skip
    M.apply(mutant)
    assert env.budget() == "x" and "HELPER" not in vars(env)
    M.restore()
    assert vars(env) == before


# --------------------------------------------------------------------------- wrong, but shaped right


def test_the_causal_mask_one_ahead_lets_a_query_see_the_next_key():
    right = course_lib.attention.causal_mask(4)
    wrong = M.causal_mask_one_ahead(4)
    assert wrong.shape == right.shape and wrong.dtype == torch.bool
    assert int(wrong.sum() - right.sum()) == 3 and bool(wrong[0, 1]) and not bool(right[0, 1])


def test_the_kv_cache_bytes_without_values_are_half():
    args = (32, 8, 128, 1)
    assert M.kv_cache_bytes_keys_only(*args) * 2 == course_lib.multihead.kv_cache_bytes(*args)


def test_heads_split_by_reshape_and_tiled_kv_heads_have_the_shape_not_the_numbers():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)
    right, wrong = course_lib.multihead.split_heads(x, 2), M.split_heads_by_reshape(x, 2)
    assert right.shape == wrong.shape == (2, 2, 3, 4) and not torch.equal(right, wrong)
    kv = torch.arange(2, dtype=torch.float32).reshape(1, 2, 1, 1)
    assert M.repeat_kv_tiled(kv, 2).flatten().tolist() == [0, 1, 0, 1]
    assert course_lib.multihead.repeat_kv(kv, 2).flatten().tolist() == [0, 0, 1, 1]
    assert M.repeat_kv_tiled(kv, 1) is kv


def test_alibis_slopes_from_zero_give_head_one_slope_one():
    from course_lib.variants.alibi import _power_of_two_slopes

    assert M.power_of_two_slopes_from_zero(8)[0] == 1.0
    assert M.power_of_two_slopes_from_zero(8)[1:] == _power_of_two_slopes(8)[:-1]


def test_the_window_one_too_wide_keeps_one_more_key():
    from course_lib.variants.mask_mods import sliding_window

    q, k = torch.tensor(5), torch.tensor(2)  # three tokens back: outside a window of 3
    assert not bool(sliding_window(3)(0, 0, q, k))
    assert bool(M.sliding_window_one_too_wide(3)(0, 0, q, k))
