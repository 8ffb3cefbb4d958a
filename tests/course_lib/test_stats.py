"""course_lib.stats: every test and interval can fail both ways, on data where the answer is
known: an effect that is there is found, one that is not is not (at the stated rate)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from course_lib import stats
from course_lib.stats import (
    PairedOutcomes,
    best_of_chance,
    best_of_chance_p,
    binomial_power,
    binomial_test,
    bonferroni,
    holm,
    mcnemar_exact,
    min_achievable_p,
    minimum_detectable_rate,
    paired_outcomes,
    sign_flip_test,
    sign_test,
    unit_mean_interval,
    wilson_interval,
)


def _p_table(n, p=0.5, alternative="two-sided"):
    """The exact p-value of every outcome 0..n, to look simulated counts up in."""
    return np.array([binomial_test(k, n, p, alternative) for k in range(n + 1)])


def test_wilson_interval():
    lo, hi = wilson_interval(0, 10)
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(0.2775, abs=1e-3)
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_sign_test_is_the_exact_two_sided_binomial_tail():
    assert sign_test(3, 0) == sign_test(0, 3) == 0.25  # 2 * (1/2)^3
    assert sign_test(0, 0) == 1.0 and sign_test(2, 2) == 1.0
    assert abs(sign_test(10, 0) - 2 / 1024) < 1e-12
    assert abs(sign_test(8, 2) - 2 * (1 + 10 + 45) / 1024) < 1e-12
    with pytest.raises(ValueError, match="counts >= 0"):
        sign_test(-1, 2)


# --- the exact binomial test and what it can detect --------------------------------------


def test_binomial_test_is_the_sign_test_at_one_half_and_hand_values():
    for n in range(0, 25):
        for k in range(n + 1):
            assert binomial_test(k, n) == sign_test(k, n - k)
    assert binomial_test(9, 10) == pytest.approx(22 / 1024, rel=1e-12)  # 2 (1 + 10) / 2^10
    assert binomial_test(0, 10, alternative="greater") == 1.0
    assert binomial_test(10, 10, alternative="less") == 1.0
    assert binomial_test(9, 10, alternative="greater") == pytest.approx(11 / 1024, rel=1e-12)
    # p = 1/4, n = 4: masses (81, 108, 54, 12, 1) / 256. Two-sided sums the outcomes no more
    # likely than the observed one, which is not twice a tail when p != 1/2.
    assert binomial_test(3, 4, p=0.25) == pytest.approx(13 / 256, rel=1e-9)
    assert binomial_test(0, 4, p=0.25) == pytest.approx((81 + 54 + 12 + 1) / 256, rel=1e-9)
    assert binomial_test(1, 4, p=0.25, alternative="less") == pytest.approx(189 / 256)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: binomial_test(5, 4), "k must be <= n"),
        (lambda: binomial_test(-1, 4), "k must be >= 0"),
        (lambda: binomial_test(1.5, 4), "k must be a whole number"),
        (lambda: binomial_test(1, 4, p=1.0), "p must lie in"),
        (lambda: binomial_test(1, 4, alternative="bigger"), "alternative must be one of"),
        (lambda: min_achievable_p(-3), "n must be >= 0"),
        (lambda: binomial_power(10, 1.2), "rate must lie in"),
        (lambda: binomial_power(10, 0.7, alpha=0), "alpha must lie in"),
        (lambda: minimum_detectable_rate(10, power=1.0), "power must lie in"),
        (lambda: minimum_detectable_rate(10, alternative="less"), "count the failures"),
    ],
)
def test_the_binomial_helpers_name_the_mistake(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_three_pairs_cannot_reject_and_ten_can():
    # The old lecture asserted "no effect" from a sign test on 3 pairs: even 3 of 3 gives
    # p = 0.25, so the assertion could not fail.
    assert min_achievable_p(3) == 0.25 > 0.05
    assert sign_test(3, 0) > 0.05
    assert min_achievable_p(10) == pytest.approx(2 / 1024) and min_achievable_p(10) < 0.05
    assert min_achievable_p(5) > 0.05 > min_achievable_p(6)  # 1/16 and 1/32
    assert min_achievable_p(3, alternative="greater") == 0.125
    assert min_achievable_p(4, p=0.25, alternative="less") == pytest.approx(0.75**4)
    assert min_achievable_p(0) == 1.0


def test_power_is_at_most_alpha_at_the_null_and_exact_by_hand():
    for n in (3, 10, 31, 62):
        for alt in ("greater", "less", "two-sided"):
            size = binomial_power(n, 0.5, alpha=0.05, alternative=alt)
            assert 0.0 <= size <= 0.05
    assert binomial_power(3, 1.0) == 0.0  # 3 of 3 is p = 1/8: no rate is ever detected
    # n = 10, one-sided: P(X >= 9) = 11/1024 <= 0.05 < P(X >= 8) = 56/1024, so the test
    # rejects on 9 or 10 and its power at 0.8 is P(X >= 9).
    assert binomial_power(10, 0.8) == pytest.approx(10 * 0.8**9 * 0.2 + 0.8**10, rel=1e-12)


def test_power_matches_a_seeded_simulation():
    n, rate, alpha, runs = 20, 0.8, 0.05, 20_000
    k = np.random.default_rng(0).binomial(n, rate, size=runs)  # (runs,)
    for alt in ("greater", "two-sided"):
        simulated = np.mean(_p_table(n, alternative=alt)[k] <= alpha)
        # the simulated rate has a standard error sqrt(0.5 * 0.5 / 20000) < 0.004
        assert abs(simulated - binomial_power(n, rate, alpha, alternative=alt)) < 0.012


def test_minimum_detectable_rate_is_where_power_crosses():
    for n in (10, 20, 31):
        r = minimum_detectable_rate(n)
        assert 0.5 < r < 1.0
        assert binomial_power(n, r) >= 0.8 > binomial_power(n, r - 1e-6)
    assert minimum_detectable_rate(31) > minimum_detectable_rate(100)  # more units, finer
    assert minimum_detectable_rate(31, alternative="two-sided") > minimum_detectable_rate(31)
    assert minimum_detectable_rate(3) == math.inf  # 3 of 3 is never significant
    assert minimum_detectable_rate(4) == math.inf and minimum_detectable_rate(5) < math.inf


def test_an_effect_present_is_found_and_an_absent_one_is_not():
    rng = np.random.default_rng(1)
    right = int((rng.random(40) < 0.85).sum())  # 40 pairs, the model right on 85 %
    assert binomial_test(right, 40) < 0.01
    assert wilson_interval(right, 40)[0] > 0.5
    # 2000 null data sets of 40 pairs at chance: the test rejects at most about 5 %.
    k = rng.binomial(40, 0.5, size=2000)  # (2000,)
    assert np.mean(_p_table(40)[k] <= 0.05) <= 0.065
    outside = [lo > 0.5 or hi < 0.5 for lo, hi in (wilson_interval(int(x), 40) for x in k)]
    assert np.mean(outside) <= 0.065


# --- paired outcomes ---------------------------------------------------------------------


def test_paired_outcomes_counts_each_unit_once():
    o = paired_outcomes([1, 1, 0, 0, 1, True], [1, 0, 1, 0, 1, False])
    assert o == PairedOutcomes(both=2, neither=1, only_a=2, only_b=1)
    assert o.n == 6 and o.split == 3
    assert o.mcnemar() == mcnemar_exact(2, 1) == sign_test(2, 1)
    assert o.both_vs_neither() == sign_test(2, 1)
    with pytest.raises(ValueError, match="same units"):
        paired_outcomes([1, 0], [1])
    with pytest.raises(ValueError, match="0/1"):
        paired_outcomes([1, 2], [1, 0])
    with pytest.raises(ValueError, match="empty"):
        paired_outcomes([], [])
    with pytest.raises(ValueError, match="only_a must be >= 0"):
        mcnemar_exact(-1, 3)


def test_mcnemar_finds_a_difference_and_not_an_absent_one():
    a = [1] * 12 + [0] * 12 + [1] * 6  # condition a right on 18 of 30 units
    b = [0] * 12 + [0] * 12 + [1] * 6  # b right only where a is too
    assert paired_outcomes(a, b).mcnemar() == pytest.approx(2 / 4096)  # 12 of 12 one way
    rng = np.random.default_rng(2)
    rejections = 0
    for _ in range(400):  # two conditions right at the same rate on each unit
        skill = rng.random(30)
        a, b = rng.random(30) < skill, rng.random(30) < skill
        rejections += paired_outcomes(a.tolist(), b.tolist()).mcnemar() <= 0.05
    assert rejections / 400 <= 0.065


def test_a_model_always_giving_one_answer_is_not_credited():
    # It gets exactly one version of each Winograd pair right: 31 of 62 sentences, all in
    # the split, and nothing for "both right vs both wrong".
    o = paired_outcomes([1, 0] * 15 + [1], [0, 1] * 15 + [0])
    assert o.split == o.n == 31 and o.both_vs_neither() == 1.0
    assert paired_outcomes([1] * 20 + [0] * 11, [1] * 20 + [0] * 11).both_vs_neither() < 0.2
    assert paired_outcomes([1] * 28 + [0] * 3, [1] * 28 + [0] * 3).both_vs_neither() < 1e-4


# --- intervals over units ----------------------------------------------------------------


def test_unit_mean_interval_covers_the_true_mean_about_as_often_as_it_says():
    rng = np.random.default_rng(3)
    covered = 0
    for run in range(300):
        x = rng.normal(0.6, 0.2, size=30)  # (30,) one value per independent unit
        _, lo, hi = unit_mean_interval(x, draws=2000, seed=run)
        covered += lo <= 0.6 <= hi
    assert 0.90 <= covered / 300 <= 0.98
    mean, lo, hi = unit_mean_interval([1.0, 2.0, 3.0, 4.0], draws=500)
    assert mean == 2.5 and lo < 2.5 < hi
    assert unit_mean_interval([1.0, 2.0, 3.0, 4.0], draws=500) == (mean, lo, hi)  # seeded


def test_counting_rows_of_one_unit_as_units_gives_a_narrower_wrong_interval():
    # 31 Winograd pairs whose two sentences go the same way: 62 rows, 31 units.
    rng = np.random.default_rng(4)
    per_pair = (rng.random(31) < 0.7).astype(float)  # (31,)
    rows, pair_id = np.repeat(per_pair, 2), np.repeat(np.arange(31), 2)  # (62,), (62,)
    _, lo_rows, hi_rows = unit_mean_interval(rows, draws=4000)
    mean, lo_units, hi_units = unit_mean_interval(rows, draws=4000, units=pair_id)
    assert mean == pytest.approx(per_pair.mean())
    assert (hi_units - lo_units) > 1.2 * (hi_rows - lo_rows)  # about sqrt(2) wider
    # Over simulated clustered data the row interval misses the true mean far too often.
    hits_rows = hits_units = 0
    for run in range(100):
        effect = rng.normal(0.0, 1.0, size=20)  # (20,) each unit's own level
        x = np.repeat(effect, 5) + rng.normal(0.0, 0.2, size=100)  # (100,) 5 rows a unit
        units = np.repeat(np.arange(20), 5)
        _, lo, hi = unit_mean_interval(x, draws=1000, seed=run)
        hits_rows += lo <= 0.0 <= hi
        _, lo, hi = unit_mean_interval(x, draws=1000, seed=run, units=units)
        hits_units += lo <= 0.0 <= hi
    assert hits_rows / 100 < 0.75 and hits_units / 100 >= 0.85


def test_unit_mean_interval_names_the_mistake():
    with pytest.raises(ValueError, match="at least 2 independent units"):
        unit_mean_interval([1.0, 2.0, 3.0], units=[0, 0, 0])
    with pytest.raises(ValueError, match="one label per value"):
        unit_mean_interval([1.0, 2.0, 3.0], units=[0, 1])
    with pytest.raises(ValueError, match="finite"):
        unit_mean_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="level must lie in"):
        unit_mean_interval([1.0, 2.0], level=95)


# --- many tries --------------------------------------------------------------------------


def test_holm_and_bonferroni_by_hand():
    ps = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005 * 4 = 0.02, 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, max(0.04 * 1, 0.06) = 0.06
    assert holm(ps) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert bonferroni(ps) == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0] and bonferroni([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == [] and holm(np.array([0.2])) == [0.2]
    assert all(h <= b for h, b in zip(holm(ps), bonferroni(ps)))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        holm([0.2, 1.5])
    with pytest.raises(ValueError, match="1-D"):
        bonferroni([[0.1, 0.2]])


def test_holm_keeps_the_family_wise_error_and_still_finds_a_real_head():
    # 270 heads, each scored on 31 pairs at chance: uncorrected, some head "passes" almost
    # always; with Holm, rarely.
    rng = np.random.default_rng(5)
    k = rng.binomial(31, 0.5, size=(1000, 270))  # (runs, heads)
    p = _p_table(31)[k]  # (runs, heads)
    assert np.mean((p <= 0.05).any(axis=1)) > 0.95
    family_wise = np.mean([min(holm(row)) <= 0.05 for row in p])
    assert family_wise <= 0.05
    # One head really right on 95 % of the pairs is still found among the 270.
    k[:, 0] = rng.binomial(31, 0.95, size=1000)
    p = _p_table(31)[k]
    assert np.mean([holm(row)[0] <= 0.05 for row in p[:200]]) > 0.9


def test_the_best_of_270_chance_heads_on_31_pairs():
    bar = best_of_chance(31, 270)
    assert bar == 25 / 31  # well above 0.5: 25 of 31 is what chance's best reaches
    # the bar is the first k with P(best <= k) >= 0.95, so one more is significant and it is not
    assert best_of_chance_p(26, 31, 270) <= 0.05 < best_of_chance_p(25, 31, 270)
    assert best_of_chance_p(0, 31, 270) == 1.0
    assert best_of_chance_p(31, 31, 1) == pytest.approx(2**-31)
    assert best_of_chance(31, 1) < bar  # one head needs less
    # 2000 seeded runs of 270 coin-flip heads: the best stays at or below the bar about 95 %
    # of the time (exactly F(25)^270, a little above 0.95 because scores are whole).
    best = np.random.default_rng(6).binomial(31, 0.5, size=(2000, 270)).max(axis=1)  # (2000,)
    at_or_below = np.mean(best / 31 <= bar)
    exact = 1.0 - best_of_chance_p(26, 31, 270)
    assert exact >= 0.95 and abs(at_or_below - exact) < 0.015
    with pytest.raises(ValueError, match="need n >= 1 and m >= 1"):
        best_of_chance(31, 0)
    with pytest.raises(ValueError, match="k <= n"):
        best_of_chance_p(32, 31, 270)


# --- paired continuous differences -------------------------------------------------------


def test_sign_flip_test_exact_by_hand():
    assert sign_flip_test([0.3, 1.0, 0.2, 2.0, 0.5, 0.1, 0.7, 0.4, 0.9, 1.5]) == 2 / 1024
    assert sign_flip_test([1.0, -1.0]) == 1.0
    assert sign_flip_test([0.0, 0.0, 0.0]) == 1.0
    # the 8 sums of (+-4, +-2, +-1): |sum| >= |4 + 2 - 1| = 5 for 7, 5, -5, -7
    assert sign_flip_test([4.0, 2.0, -1.0]) == 4 / 8
    assert sign_flip_test([4.0, 2.0, 1.0]) == 2 / 8
    with pytest.raises(ValueError, match="at least 1"):
        sign_flip_test([])
    with pytest.raises(ValueError, match="draws must be >= 1"):
        sign_flip_test([1.0] * 20, draws=0)


def test_sign_flip_test_finds_a_shift_and_not_an_absent_one():
    rng = np.random.default_rng(7)
    # 50 data sets of 30 per-pair log-odds shifts of 1 sd: random path, found nearly always
    shifted = rng.normal(1.0, 1.0, size=(50, 30))  # (sets, pairs)
    found = np.mean([sign_flip_test(d, draws=2000, seed=s) < 0.01 for s, d in enumerate(shifted)])
    assert found >= 0.9
    strong = rng.normal(1.2, 1.0, size=(50, 14))  # (sets, pairs): fewer pairs, exact path
    assert np.mean([sign_flip_test(d) < 0.05 for d in strong]) >= 0.85
    exact = np.mean([sign_flip_test(rng.normal(0, 1, size=10)) <= 0.05 for _ in range(1000)])
    assert 0.03 <= exact <= 0.07  # exactly 51/1024 = 0.0498 in expectation
    drawn = [sign_flip_test(rng.standard_t(3, size=30), draws=2000, seed=s) for s in range(200)]
    assert np.mean(np.array(drawn) <= 0.05) <= 0.08


def test_the_module_names_everything_it_offers():
    own = {
        name
        for name, obj in vars(stats).items()
        if not name.startswith("_") and getattr(obj, "__module__", None) == "course_lib.stats"
    }
    assert set(stats.__all__) == own
