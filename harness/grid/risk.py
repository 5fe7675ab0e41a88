"""Per-step drop risk of a budget (docs/spec.md#pipeline, step 4): two figures, each with its method.

- `drop_risk_95(n)`: the exact one-sided 95% upper bound on the per-step drop probability
  after n held-out steps with no drop, 1 - 0.05^(1/n) (the "rule of three", about 3/n).
- `fit_risk(peaks)`: a generalized-extreme-value (GEV) fit of the per-step peaks, by
  L-moments (Hosking, Wallis & Wood 1985: closed form, steadier than maximum likelihood at
  the 10-100 steps a campaign has), evaluated in closed form (scipy.stats.genextreme's
  parametrization and expression, without importing scipy.stats: ~0.5 s a process). Its `at(budget)`
  gives P(step peak > budget) with a percentile-bootstrap 95% interval (resampled steps,
  fixed seed). No fit (too few steps, constant or nearly constant peaks, or ties so heavy
  that the bootstrap's resamples are mostly identical peaks) is a stated reason, never a
  number.

Peaks are integer slots, so P(peak > b) is read from the continuous fit at b + 0.5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import BadInput
from harness.grid.capacity import budget_tokens, round_up_to_grid
from harness.vocab import DEFAULT_PAD_MULTIPLE

ALPHA = 0.05                # 1 - confidence of every bound and interval here
MIN_FIT_STEPS = 10          # fewer steps: no tail fit (a 3-parameter fit needs some data)
MIN_DISTINCT_PEAKS = 3      # fewer distinct peaks: nothing to fit a tail to
RESAMPLES = 1000            # bootstrap resamples of the steps
BOOTSTRAP_SEED = 20261201   # fixed: the same peaks always give the same interval
SHAPE_LIMITS = (-0.9, 3.0)  # GEV shape (scipy's c) kept where L-moment formulas are defined
MAX_SEARCH_FACTOR = 4       # risk-targeted search looks at budgets up to 4 x the peak
METHOD = "GEV by L-moments, percentile bootstrap"


def drop_risk_95(steps: int) -> float | None:
    """1 - 0.05^(1/n): 95% upper bound on the per-step drop probability after n clean steps."""
    if steps <= 0:
        return None
    return 1.0 - ALPHA ** (1.0 / steps)


def drop_risk_upper(dropped: int, steps: int) -> float | None:
    """Exact one-sided 95% upper bound on the per-step drop probability after `dropped` of
    `steps` held-out steps dropped (Clopper-Pearson); with none dropped it is
    `drop_risk_95(steps)`, the bound the selection states (docs/frontier.md)."""
    if steps <= 0 or not 0 <= dropped <= steps:
        return None
    if dropped == 0:
        return drop_risk_95(steps)
    if dropped == steps:
        return 1.0
    from scipy.special import betaincinv  # Beta(dropped + 1, steps - dropped)'s quantile

    return float(betaincinv(dropped + 1, steps - dropped, 1.0 - ALPHA))


def _lmoment_gev(sorted_x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GEV (c, loc, scale) in scipy's convention for each row of an ascending-sorted array.

    Sample probability-weighted moments -> L-moments -> Hosking's approximation of the
    shape k (= scipy's c) from the L-skewness; rows with no spread get scale 0.
    """
    n = sorted_x.shape[-1]
    i = np.arange(n, dtype=np.float64)
    b0 = sorted_x.mean(axis=-1)
    b1 = (sorted_x * (i / (n - 1))).mean(axis=-1)
    b2 = (sorted_x * (i * (i - 1) / ((n - 1) * (n - 2)))).mean(axis=-1)
    l1, l2, l3 = b0, 2 * b1 - b0, 6 * b2 - 6 * b1 + b0
    spread = l2 > 0
    t3 = np.where(spread, l3 / np.where(spread, l2, 1.0), 0.0)
    z = 2.0 / (3.0 + t3) - math.log(2) / math.log(3)
    k = np.clip(7.8590 * z + 2.9554 * z * z, *SHAPE_LIMITS)
    small = np.abs(k) < 1e-6
    ks = np.where(small, 1.0, k)
    g = np.exp(_lgamma(1.0 + ks))
    scale = np.where(small, l2 / math.log(2), l2 * ks / ((1.0 - 2.0 ** -ks) * g))
    loc = np.where(small, l1 - 0.5772156649015329 * scale, l1 - scale * (1.0 - g) / ks)
    return k, loc, np.where(spread, scale, 0.0)


def _lgamma(x: np.ndarray) -> np.ndarray:
    """log Gamma, elementwise (math.lgamma: no scipy import on the pipeline's path)."""
    return np.vectorize(math.lgamma, otypes=[np.float64])(x)


def _sf(c: np.ndarray, loc: np.ndarray, scale: np.ndarray, x: float) -> np.ndarray:
    """P(X > x) under GEV(c, loc, scale) in scipy.stats.genextreme's convention and by its
    expression: -expm1(-t) with t = (1 - c z)^(1/c) = exp(log1p(-c z) / c), exp(-z) at c = 0,
    z = (x - loc) / scale; 1 below the support's lower end (c < 0), 0 above its upper end
    (c > 0); a zero scale is a point mass at loc."""
    c, loc, scale = np.asarray(c, np.float64), np.asarray(loc, np.float64), np.asarray(scale, np.float64)
    point = scale <= 0
    z = (x - loc) / np.where(point, 1.0, scale)
    inside = 1.0 - c * z > 0
    shaped = c != 0
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        loglog = np.where(shaped, np.log1p(-np.where(inside, c * z, 0.0)) / np.where(shaped, c, 1.0),
                          -z)
        sf = -np.expm1(-np.exp(loglog))
    sf = np.where(inside, sf, np.where(c > 0, 0.0, 1.0))
    return np.where(point, (loc > x).astype(np.float64), sf)


@dataclass(frozen=True)
class RiskEstimate:
    """P(step peak > budget) from a tail fit, with its bootstrap 95% interval."""

    budget: int
    value: float
    low: float
    high: float
    steps: int
    method: str = METHOD


@dataclass(frozen=True)
class RiskModel:
    """A GEV fit of per-step peaks and its bootstrap refits; `at(budget)` evaluates it."""

    c: float
    loc: float
    scale: float
    steps: int
    boot: tuple[np.ndarray, np.ndarray, np.ndarray]

    def at(self, budget: int) -> RiskEstimate:
        """Predicted per-step drop probability at `budget` slots, with its 95% interval."""
        x = budget + 0.5
        value = float(_sf(np.array(self.c), np.array(self.loc), np.array(self.scale), x))
        boot = _sf(*self.boot, x)
        low, high = np.quantile(boot, [ALPHA / 2, 1.0 - ALPHA / 2])
        return RiskEstimate(budget, value, float(low), float(high), self.steps)


def _resamples(x: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """The bootstrap's resamples of the sorted peaks (fixed seed), each row sorted."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(x, size=(resamples, len(x)), replace=True), axis=1)


def no_fit_reason(peaks: Sequence[int], resamples: int = RESAMPLES,
                  seed: int = BOOTSTRAP_SEED) -> str | None:
    """Why these per-step peaks admit no tail fit, or None when they do: too few steps, too
    few distinct peaks, or ties so heavy that more than ALPHA/2 of the bootstrap resamples
    hold fewer than MIN_DISTINCT_PEAKS distinct values (the interval's upper end would then
    be a resample of identical peaks, not a tail)."""
    n, distinct = len(peaks), len(set(peaks))
    if n < MIN_FIT_STEPS:
        return f"{n} steps: a tail fit needs at least {MIN_FIT_STEPS} (run more iterations)"
    if distinct == 1:
        return (f"every step peaked at exactly {peaks[0]} slots (a balanced or rebalancing "
                "backend): no tail to fit")
    if distinct < MIN_DISTINCT_PEAKS:
        return f"only {distinct} distinct step peaks in {n} steps: no tail to fit"
    sample = _resamples(np.sort(np.asarray(peaks, dtype=np.float64)), resamples, seed)
    kinds = 1 + np.count_nonzero(np.diff(sample, axis=1), axis=1)
    tied = float(np.mean(kinds < MIN_DISTINCT_PEAKS))
    if tied > ALPHA / 2:
        top = max(set(peaks), key=list(peaks).count)
        return (f"{list(peaks).count(top)} of {n} steps peaked at exactly {top} slots: "
                f"{100 * tied:.0f}% of the bootstrap resamples hold fewer than "
                f"{MIN_DISTINCT_PEAKS} distinct peaks, so a 95% bound would be a resample of "
                "identical peaks, not a tail")
    return None


def fit_risk(peaks: Sequence[int], resamples: int = RESAMPLES,
             seed: int = BOOTSTRAP_SEED) -> RiskModel | str:
    """A RiskModel of these exact (not lower-bound) per-step peaks, or why none is possible."""
    reason = no_fit_reason(list(peaks), resamples, seed)
    if reason is not None:
        return reason
    x = np.sort(np.asarray(peaks, dtype=np.float64))
    c, loc, scale = (float(v[0]) for v in _lmoment_gev(x[None, :]))
    sample = _resamples(x, resamples, seed)
    return RiskModel(c, loc, scale, len(x), _lmoment_gev(sample))


@dataclass(frozen=True)
class RiskSelection:
    """The smallest executable capacity whose upper-bound predicted risk meets a target."""

    capacity: str
    budget: int
    estimate: RiskEstimate


def select_for_risk(model: RiskModel, target: float, peak: int, uniform_tokens: int,
                    pad_multiple: int = DEFAULT_PAD_MULTIPLE,
                    decimals: int | None = None) -> RiskSelection | str:
    """Smallest grid capacity with upper-bound predicted P(step drop) <= target, or why not.

    The bound is non-increasing in the budget, so the smallest slot count meeting it is
    found by bisection, then rounded up onto the grid (any smaller rung misses the target).
    """
    if not 0 < target < 1:
        raise BadInput(f"must be a probability in (0, 1), got {target}", field="drop_risk")
    lo, hi = 1, MAX_SEARCH_FACTOR * max(peak, 1)
    if model.at(hi).high > target:
        return (f"no budget up to {hi} slots ({MAX_SEARCH_FACTOR} x the peak) has an "
                f"upper-bound predicted drop risk <= {target:g}")
    while lo < hi:
        mid = (lo + hi) // 2
        if model.at(mid).high <= target:
            hi = mid
        else:
            lo = mid + 1
    capacity = round_up_to_grid(lo, uniform_tokens, pad_multiple, decimals)
    budget = budget_tokens(capacity, uniform_tokens)
    return RiskSelection(capacity, budget, model.at(budget))


def percent(p: float | None) -> str:
    """A probability as a short percentage: 4.5%, 0.021%, < 0.0001%."""
    if p is None:
        return "n/a"
    if p <= 0:
        return "0%"
    if p < 1e-6:
        return "< 0.0001%"
    if p >= 0.01:
        return f"{100 * p:.1f}%"
    return f"{100 * p:.2g}%"
