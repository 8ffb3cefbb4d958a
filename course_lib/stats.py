r"""Statistics for claims that can fail: exact binomial tests, their power, paired outcomes,
intervals over independent units, corrections for many tries, and the best of many at chance.

A test that finds no effect says something only if it could have found one. With 3 pairs
the exact two-sided sign test cannot go below :math:`2/2^3 = 0.25`, so "no effect at the
5 % level" is certain before the model runs. Every null claim here therefore comes with its
power: the smallest p-value the data could give (:func:`min_achievable_p`) or the smallest
true rate the test would find four times in five (:func:`minimum_detectable_rate`). Every
count is of the independent unit: a Winograd pair, not its two sentences; a group of rows
sharing a prompt, not the rows. Counting dependent rows as units shrinks an interval
without adding information. And the best of many tries (270 heads) is compared with the
best that chance alone reaches (:func:`best_of_chance`), or its p-value corrected
(:func:`holm`).
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

__all__ = [
    "PairedOutcomes",
    "best_of_chance",
    "best_of_chance_p",
    "binomial_power",
    "binomial_test",
    "bonferroni",
    "holm",
    "mcnemar_exact",
    "min_achievable_p",
    "minimum_detectable_rate",
    "paired_outcomes",
    "sign_flip_test",
    "sign_test",
    "unit_mean_interval",
    "wilson_interval",
]

ALTERNATIVES = ("two-sided", "greater", "less")
_EXACT_FLIPS_UP_TO = 16  # sign_flip_test enumerates all 2^n sign patterns up to this n


# --- validation -------------------------------------------------------------------------


def _count(name: str, value) -> int:
    """``value`` as a whole number >= 0, or a ValueError naming ``name``."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def _fraction(name: str, value, *, closed: bool = False) -> float:
    """``value`` as a float in (0, 1), or [0, 1] when ``closed``, or a ValueError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    ok = 0.0 <= v <= 1.0 if closed else 0.0 < v < 1.0
    if not ok:
        where = "[0, 1]" if closed else "(0, 1)"
        raise ValueError(f"{name} must lie in {where}, got {value!r}")
    return v


def _alternative(value: str) -> str:
    if value not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {value!r}")
    return value


def _finite_1d(name: str, values, least: int) -> np.ndarray:
    """``values`` as a finite 1-D float array of at least ``least`` entries."""
    try:
        v = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, got {values!r}") from None
    if v.ndim != 1 or v.size < least:
        raise ValueError(f"{name} must be 1-D with at least {least} entries, got {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError(f"{name} must be finite (no nan or inf)")
    return v


# --- the binomial distribution -----------------------------------------------------------


def _masses(n: int, p: float):
    r"""Binomial(:math:`n, p`) as ``(weights, total)``, :math:`P(X = i) =` weights[i] / total:
    at :math:`p = 1/2` the exact integers :math:`\binom{n}{i}` over :math:`2^n`, else floats
    :math:`\binom{n}{i} p^i (1-p)^{n-i}` (from log-gamma, so large :math:`n` does not overflow)
    over 1."""
    if p == 0.5:
        return [math.comb(n, i) for i in range(n + 1)], 2**n
    if p in (0.0, 1.0):
        w = [0.0] * (n + 1)
        w[0 if p == 0.0 else n] = 1.0
        return w, 1.0
    lp, lq, ln = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    w = [
        math.exp(ln - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
        for i in range(n + 1)
    ]
    return w, 1.0


def _upper_tails(n: int, p: float) -> list[float]:
    r""":math:`S(k) = P(X \ge k)` for :math:`k = 0, \dots, n + 1` under Binomial(:math:`n, p`)."""
    w, total = _masses(n, p)
    tails = list(accumulate(reversed(w)))[::-1] + [0]
    return [min(1.0, t / total) for t in tails]


def _p_values(n: int, p: float, alternative: str) -> list[float]:
    r"""The exact p-value of every outcome :math:`k = 0, \dots, n`:
    "greater" :math:`P(X \ge k)`, "less" :math:`P(X \le k)`, "two-sided"
    :math:`\sum_{i:\, P(X=i) \le P(X=k)} P(X = i)` (floats compared with a relative
    tolerance of :math:`10^{-7}`, exact integers at :math:`p = 1/2`)."""
    w, total = _masses(n, p)
    if alternative == "greater":
        sums = list(accumulate(reversed(w)))[::-1]
    elif alternative == "less":
        sums = list(accumulate(w))
    else:
        ranked = sorted(w)
        cum = list(accumulate(ranked))
        slack = 1 if isinstance(total, int) else 1 + 1e-7
        sums = [cum[bisect_right(ranked, wk * slack) - 1] for wk in w]
    return [min(1.0, s / total) for s in sums]


# --- tests on counts ---------------------------------------------------------------------


def sign_test(up: int, down: int) -> float:
    r"""Two-sided exact sign test: the chance, if each of :math:`n = \text{up} + \text{down}`
    decided pairs went either way with probability 1/2, of a split at least as uneven,
    :math:`\min\big(1, 2 \sum_{i \ge \max(u, d)} \binom{n}{i} / 2^n\big)`; 1 when none is decided."""
    if up < 0 or down < 0:
        raise ValueError(f"need counts >= 0, got {up}, {down}")
    n = up + down
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(max(up, down), n + 1))
    return min(1.0, 2 * tail / 2**n)


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    r"""95 % interval (Wilson, 1927) for a fraction :math:`k/n`:
    :math:`\frac{\hat p + z^2/2n \pm z\sqrt{\hat p(1-\hat p)/n + z^2/4n^2}}{1 + z^2/n}`."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes}, {n}")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def binomial_test(k: int, n: int, p: float = 0.5, alternative: str = "two-sided") -> float:
    r"""Exact binomial test of :math:`k` successes in :math:`n` independent units against a
    rate :math:`p`: "greater" :math:`P(X \ge k)`, "less" :math:`P(X \le k)`, "two-sided"
    the mass of every outcome no more likely than the observed one,

    .. math:: p_{\text{two}} = \sum_{i:\; P(X = i) \le P(X = k)} \binom{n}{i} p^i (1-p)^{n-i},
        \qquad X \sim \mathrm{Binomial}(n, p).

    At :math:`p = 1/2` the two-sided value equals :func:`sign_test` (``k``, ``n - k``).
    """
    n, k = _count("n", n), _count("k", k)
    if k > n:
        raise ValueError(f"k must be <= n, got k={k}, n={n}")
    return _p_values(n, _fraction("p", p), _alternative(alternative))[k]


def min_achievable_p(n: int, p: float = 0.5, alternative: str = "two-sided") -> float:
    r"""The smallest p-value the exact binomial test on :math:`n` units can give at all,
    :math:`\min_k p(k)`: two-sided at :math:`p = 1/2` it is :math:`2/2^n`, "greater"
    :math:`p^n`. A null asserted on :math:`n` units with this above :math:`\alpha` is a test
    that could not have failed (:math:`n = 3`: 0.25)."""
    n = _count("n", n)
    return min(_p_values(n, _fraction("p", p), _alternative(alternative)))


def _rejected(n: int, alpha: float, p: float, alternative: str) -> list[int]:
    """The outcomes k whose exact p-value is at most alpha (the test's rejection region)."""
    return [k for k, pv in enumerate(_p_values(n, p, alternative)) if pv <= alpha]


def _power_on(region: list[int], n: int, rate: float) -> float:
    r""":math:`P(X \in \text{region})` for :math:`X \sim` Binomial(n, rate)."""
    w, total = _masses(n, rate)
    if isinstance(total, int):
        return sum(w[k] for k in region) / total
    return min(1.0, math.fsum(w[k] for k in region))


def binomial_power(
    n: int, rate: float, alpha: float = 0.05, p: float = 0.5, alternative: str = "greater"
) -> float:
    r"""Exact power: the chance that the exact binomial test of :math:`n` units against
    :math:`p` rejects at level :math:`\alpha` when each unit succeeds at the true ``rate``
    :math:`r`,

    .. math:: \sum_{k:\; p(k) \le \alpha} \binom{n}{k} r^k (1-r)^{n-k}.

    At ``rate == p`` this is the test's size, at most :math:`\alpha`.
    """
    n = _count("n", n)
    rate = _fraction("rate", rate, closed=True)
    alpha, p = _fraction("alpha", alpha), _fraction("p", p)
    return _power_on(_rejected(n, alpha, p, _alternative(alternative)), n, rate)


def minimum_detectable_rate(
    n: int, alpha: float = 0.05, power: float = 0.8, p: float = 0.5, alternative: str = "greater"
) -> float:
    r"""The smallest true rate :math:`r > p` at which the exact test on :math:`n` units
    rejects with probability ``power``, :math:`\min\{r : \text{power}(r) \ge 1 - \beta\}`,
    found by bisection (the power of an upper rejection region grows with :math:`r`).

    Returns ``math.inf`` when no rate reaches it: :math:`n` is so small that even
    :math:`n` of :math:`n` is not significant. "two-sided" searches above :math:`p` too;
    for "less", count the failures instead (the rate :math:`1 - r` against :math:`1 - p`).
    """
    n = _count("n", n)
    alpha, power, p = _fraction("alpha", alpha), _fraction("power", power), _fraction("p", p)
    if _alternative(alternative) == "less":
        raise ValueError(
            "minimum_detectable_rate searches above p: for alternative='less' count the "
            "failures and test 1 - p with alternative='greater'"
        )
    region = _rejected(n, alpha, p, alternative)
    if _power_on(region, n, 1.0) < power:
        return math.inf
    lo, hi = p, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _power_on(region, n, mid) >= power else (mid, hi)
    return hi


# --- paired outcomes ---------------------------------------------------------------------


def mcnemar_exact(only_a: int, only_b: int) -> float:
    r"""Exact McNemar test (McNemar, 1947) of two conditions on the same units: under
    "no difference" each discordant unit (right under one condition only) is a fair coin,
    so it is the sign test on the discordant counts, :math:`p = ` sign_test(only_a, only_b)."""
    return sign_test(_count("only_a", only_a), _count("only_b", only_b))


@dataclass(frozen=True)
class PairedOutcomes:
    """Counts over independent units, each scored right (1) or wrong (0) under two
    conditions a and b (a Winograd pair: its two versions): right under both, neither,
    a only, b only."""

    both: int
    neither: int
    only_a: int
    only_b: int

    def __post_init__(self):
        for name in ("both", "neither", "only_a", "only_b"):
            _count(name, getattr(self, name))

    @property
    def n(self) -> int:
        """The number of units."""
        return self.both + self.neither + self.only_a + self.only_b

    @property
    def split(self) -> int:
        """Units right under exactly one condition (the discordant ones)."""
        return self.only_a + self.only_b

    def mcnemar(self) -> float:
        """Two-sided exact test that a and b are right equally often (:func:`mcnemar_exact`)."""
        return mcnemar_exact(self.only_a, self.only_b)

    def both_vs_neither(self) -> float:
        r"""Two-sided sign test of "both right" against "both wrong" among the concordant
        units, sign_test(both, neither). A model that always picks the same answer gets
        one version of every pair right: it lands in ``split``, and this test cannot
        credit it."""
        return sign_test(self.both, self.neither)


def paired_outcomes(a, b) -> PairedOutcomes:
    r"""Count two 0/1 sequences over the same independent units (entry :math:`i` of each:
    unit :math:`i` under condition a, under b): :math:`\text{both} = \sum_i a_i b_i`,
    :math:`\text{neither} = \sum_i (1-a_i)(1-b_i)`, :math:`\text{only}_a = \sum_i a_i (1-b_i)`,
    :math:`\text{only}_b = \sum_i (1-a_i) b_i`."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"a and b must score the same units, got lengths {len(a)}, {len(b)}")
    if not a:
        raise ValueError("a and b are empty: there is no unit to count")
    for name, seq in (("a", a), ("b", b)):
        bad = [x for x in seq if x not in (0, 1)]
        if bad:
            raise ValueError(f"{name} must hold 0/1 (or booleans), got {bad[0]!r}")
    pairs = [(int(x), int(y)) for x, y in zip(a, b)]
    return PairedOutcomes(
        both=pairs.count((1, 1)),
        neither=pairs.count((0, 0)),
        only_a=pairs.count((1, 0)),
        only_b=pairs.count((0, 1)),
    )


# --- intervals and tests over units ------------------------------------------------------


def unit_mean_interval(
    values, level: float = 0.95, draws: int = 10_000, seed: int = 0, units=None
) -> tuple[float, float, float]:
    r"""Percentile bootstrap interval (Efron, 1979) of the mean over independent units:
    resample the :math:`U` unit values :math:`x_u` with replacement ``draws`` times and take
    the :math:`(1 \mp \text{level})/2` quantiles of the resampled means
    :math:`\bar x^* = \frac1U \sum_u x^*_u`. Returns ``(mean, lo, hi)``.

    Each value must belong to one independent unit (a pair, a prompt group), not a row: rows
    of one unit move together, and counting them as units gives an interval too narrow. Pass
    rows with ``units`` (one label per row) to average each unit's rows first. Seeded
    (``numpy.random.default_rng(seed)``), so the same input gives the same interval.
    """
    x = _finite_1d("values", values, 1)
    level = _fraction("level", level)
    draws, seed = _count("draws", draws), _count("seed", seed)
    if draws < 1:
        raise ValueError("draws must be >= 1")
    if units is not None:
        labels = np.asarray(units)
        if labels.shape != x.shape:
            raise ValueError(f"units must give one label per value, got {labels.shape}")
        _, idx = np.unique(labels, return_inverse=True)
        x = np.bincount(idx, weights=x) / np.bincount(idx)  # (U,) per-unit means
    if x.size < 2:
        raise ValueError(f"need at least 2 independent units, got {x.size}")
    rng, u = np.random.default_rng(seed), x.size
    chunk = max(1, 2**22 // u)
    means = np.concatenate(
        [
            x[rng.integers(0, u, size=(min(chunk, draws - s), u))].mean(axis=1)
            for s in range(0, draws, chunk)
        ]
    )  # (draws,)
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return float(x.mean()), float(lo), float(hi)


def sign_flip_test(diffs, draws: int = 20_000, seed: int = 0) -> float:
    r"""Two-sided paired randomisation test (Fisher, 1935) of "the per-unit differences
    :math:`d_u` are symmetric about 0": under it every sign pattern :math:`s \in \{\pm1\}^U`
    is equally likely, and

    .. math:: p = P_s\Big(\big|\textstyle\sum_u s_u d_u\big| \ge \big|\sum_u d_u\big|\Big).

    Exact over all :math:`2^U` patterns when :math:`U \le 16`; else ``draws`` seeded random
    patterns, :math:`p = (1 + \#\{\ge\}) / (1 + \text{draws})` (never 0; Phipson and Smyth,
    2010). One difference per independent unit (e.g. a pair's shift in log-odds).
    """
    d = _finite_1d("diffs", diffs, 1)
    draws, seed = _count("draws", draws), _count("seed", seed)
    if draws < 1:
        raise ValueError("draws must be >= 1")
    u = d.size
    observed = abs(d.sum())
    tol = 1e-9 * np.abs(d).sum()  # float sums of the same terms in other orders
    if u <= _EXACT_FLIPS_UP_TO:
        patterns = np.arange(2**u)[:, None] >> np.arange(u)  # (2^U, U)
        signs = 1.0 - 2.0 * (patterns & 1)  # (2^U, U)
        return float(np.mean(np.abs(signs @ d) >= observed - tol))
    rng, hits = np.random.default_rng(seed), 0
    chunk = max(1, 2**22 // u)
    for start in range(0, draws, chunk):
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(min(chunk, draws - start), u))  # (D, U)
        hits += int(np.sum(np.abs(signs @ d) >= observed - tol))
    return (1 + hits) / (1 + draws)


# --- many tries --------------------------------------------------------------------------


def _p_list(pvalues) -> list[float]:
    """``pvalues`` as a list of floats in [0, 1], or a ValueError."""
    try:
        arr = np.asarray(pvalues, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"pvalues must be numbers, got {pvalues!r}") from None
    if arr.ndim != 1:
        raise ValueError(f"pvalues must be a 1-D sequence, got shape {arr.shape}")
    ps = [float(x) for x in arr]
    bad = [x for x in ps if not 0.0 <= x <= 1.0]
    if bad:
        raise ValueError(f"p-values must lie in [0, 1], got {bad[0]!r}")
    return ps


def bonferroni(pvalues) -> list[float]:
    r"""Bonferroni-adjusted p-values, :math:`\tilde p_i = \min(1, m\, p_i)` for :math:`m`
    tests: reject where :math:`\tilde p_i \le \alpha` and the chance of any false rejection
    stays :math:`\le \alpha` whatever the dependence between tests."""
    ps = _p_list(pvalues)
    return [min(1.0, len(ps) * x) for x in ps]


def holm(pvalues) -> list[float]:
    r"""Holm–Bonferroni adjusted p-values (Holm, 1979), in the order given: with
    :math:`p_{(1)} \le \dots \le p_{(m)}` sorted,

    .. math:: \tilde p_{(i)} = \max_{j \le i} \min\big(1, (m - j + 1)\, p_{(j)}\big).

    Rejecting where :math:`\tilde p \le \alpha` keeps the family-wise error (any false
    rejection among the :math:`m`) at most :math:`\alpha`, and rejects at least what
    :func:`bonferroni` does.
    """
    ps = _p_list(pvalues)
    m = len(ps)
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=ps.__getitem__)):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def best_of_chance(n: int, m: int, p: float = 0.5, quantile: float = 0.95) -> float:
    r"""The score :math:`k/n` that the best of :math:`m` independent tries, each scoring
    Binomial(:math:`n, p`) at chance, stays at or below with probability ``quantile``:

    .. math:: \min\{k/n : F(k)^m \ge q\}, \qquad F(k) = P(X \le k).

    The bar "the best of 270 heads on 31 pairs" must clear to mean anything. Heads scored
    on the same pairs are positively dependent, which makes their best less extreme: the
    bar is then conservative.
    """
    n, m = _count("n", n), _count("m", m)
    if n < 1 or m < 1:
        raise ValueError(f"need n >= 1 and m >= 1, got n={n}, m={m}")
    p, quantile = _fraction("p", p), _fraction("quantile", quantile)
    tails = _upper_tails(n, p)  # tails[k + 1] = 1 - F(k)
    log_q = math.log(quantile)
    for k in range(n + 1):
        if tails[k + 1] < 1.0 and m * math.log1p(-tails[k + 1]) >= log_q:
            return k / n
    return 1.0


def best_of_chance_p(k: int, n: int, m: int, p: float = 0.5) -> float:
    r"""The chance that the best of :math:`m` independent tries at chance scores :math:`k` or
    more of :math:`n`, :math:`1 - F(k-1)^m` with :math:`F` the Binomial(:math:`n, p`) cdf:
    the p-value of "the best try scored :math:`k`" when the best was picked after looking."""
    n, m, k = _count("n", n), _count("m", m), _count("k", k)
    if m < 1 or k > n:
        raise ValueError(f"need m >= 1 and k <= n, got k={k}, n={n}, m={m}")
    s = _upper_tails(n, _fraction("p", p))[k]  # P(X >= k) = 1 - F(k - 1)
    if s >= 1.0:
        return 1.0
    return float(-math.expm1(m * math.log1p(-s)))
