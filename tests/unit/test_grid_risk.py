"""Drop risk (harness.grid.risk): the zero-drop bound, the GEV tail fit, risk-targeted selection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import genextreme

from harness.errors import BadInput
from harness.grid.capacity import budget_tokens, is_executable, step_up
from harness.grid.risk import (
    MIN_FIT_STEPS,
    drop_risk_95,
    fit_risk,
    no_fit_reason,
    percent,
    select_for_risk,
)

TRUE = dict(c=0.2, loc=2400.0, scale=30.0)


def gev_peaks(n: int, seed: int = 1) -> list[int]:
    x = genextreme.rvs(TRUE["c"], loc=TRUE["loc"], scale=TRUE["scale"], size=n,
                       random_state=seed)
    return [int(v) for v in np.round(x)]


def test_drop_risk_95_is_the_exact_zero_drop_bound():
    assert drop_risk_95(65) == pytest.approx(1 - 0.05 ** (1 / 65), rel=1e-12)
    assert drop_risk_95(65) == pytest.approx(0.04504, abs=1e-5)   # "below 4.5% at 95%"
    assert drop_risk_95(1) == pytest.approx(0.95)
    assert drop_risk_95(1000) == pytest.approx(3 / 1000, rel=0.01)   # the rule of three
    # the defining property: with p at the bound, n clean steps have probability 5%
    assert (1 - drop_risk_95(7)) ** 7 == pytest.approx(0.05)
    assert drop_risk_95(0) is None


def test_large_sample_fit_recovers_the_distribution():
    model = fit_risk(gev_peaks(5000), resamples=100)
    assert model.c == pytest.approx(TRUE["c"], abs=0.04)
    assert model.loc == pytest.approx(TRUE["loc"], abs=2)
    assert model.scale == pytest.approx(TRUE["scale"], rel=0.05)
    for budget in (2420, 2460, 2500):
        truth = genextreme.sf(budget + 0.5, TRUE["c"], TRUE["loc"], TRUE["scale"])
        est = model.at(budget)
        assert est.value == pytest.approx(truth, rel=0.2, abs=0.002)


def test_small_sample_interval_is_ordered_reproducible_and_monotone():
    peaks = gev_peaks(65, seed=3)
    model = fit_risk(peaks)
    est = model.at(2460)
    assert est.low <= est.value <= est.high and est.steps == 65
    assert fit_risk(peaks).at(2460) == est                      # fixed bootstrap seed
    assert fit_risk(peaks, seed=7).at(2460) != est
    # more budget, less risk
    values = [model.at(b) for b in range(2380, 2560, 20)]
    assert all(a.value >= b.value and a.high >= b.high for a, b in zip(values, values[1:], strict=False))


def test_coverage_of_the_interval_over_repeated_small_samples():
    """The interval is a 95% one: over 40 samples of 65 steps it holds the truth >= 85%."""
    truth = genextreme.sf(2450.5, TRUE["c"], TRUE["loc"], TRUE["scale"])
    hits = 0
    for seed in range(40):
        est = fit_risk(gev_peaks(65, seed=100 + seed), resamples=300).at(2450)
        hits += est.low <= truth <= est.high
    assert hits >= 34


def test_no_fit_is_a_reason_not_a_number():
    assert "needs at least" in fit_risk([2400 + i for i in range(MIN_FIT_STEPS - 1)])
    assert no_fit_reason([2048] * 30).startswith("every step peaked at exactly 2048 slots")
    assert "only 2 distinct" in fit_risk([2048, 2049] * 15)
    assert no_fit_reason(list(range(MIN_FIT_STEPS))) is None


def test_no_fit_when_ties_leave_the_bootstrap_nothing_to_fit():
    """Eleven identical peaks and two others: three distinct values, but most bootstrap
    resamples hold fewer than three, so the '95% bound' would be a resample of identical
    peaks (the earlier code fitted it and printed that bound)."""
    peaks = [2048] * 11 + [2049, 2050]
    reason = fit_risk(peaks)
    assert isinstance(reason, str) and "11 of 13 steps peaked at exactly 2048" in reason
    assert no_fit_reason(peaks) == reason
    assert not isinstance(fit_risk(gev_peaks(13, seed=3)), str)     # distinct peaks still fit


def test_select_for_risk_is_the_smallest_rung_meeting_the_target():
    n, pad = 2048, 128
    model = fit_risk(gev_peaks(65, seed=5))
    for target in (0.2, 0.05, 1e-3):
        sel = select_for_risk(model, target, peak=2500, uniform_tokens=n, pad_multiple=pad)
        assert not isinstance(sel, str)
        assert is_executable(sel.capacity, n, pad)
        assert sel.budget == budget_tokens(sel.capacity, n)
        assert sel.estimate.high <= target
        below = sel.budget - pad
        assert model.at(below).high > target            # one rung lower misses the target
    # at slot resolution (pad 1) the bisection itself is exact: one slot less misses
    for target in (0.3, 0.1, 0.05, 0.02, 0.01, 3e-3, 1e-3):
        exact = select_for_risk(model, target, peak=2500, uniform_tokens=n, pad_multiple=1)
        assert exact.estimate.high <= target < model.at(exact.budget - 1).high
    legacy = select_for_risk(model, 1e-3, peak=2500, uniform_tokens=65536, decimals=2)
    assert legacy.capacity.count(".") == 1 and len(legacy.capacity.split(".")[1]) == 2
    assert model.at(budget_tokens(step_up("1.00", 65536), 65536)).value < 1


def test_select_for_risk_bad_target_and_unreachable_target():
    model = fit_risk(gev_peaks(65, seed=5))
    for bad in (0, 1, -0.1, 1.5):
        with pytest.raises(BadInput):
            select_for_risk(model, bad, peak=2500, uniform_tokens=2048)
    heavy = fit_risk([int(1000 * math.exp(i / 3)) for i in range(12)])   # Frechet-like tail
    reason = select_for_risk(heavy, 1e-12, peak=60000, uniform_tokens=2048)
    assert isinstance(reason, str) and "no budget up to" in reason


@pytest.mark.parametrize("p,text", [(None, "n/a"), (0.0, "0%"), (0.04504, "4.5%"),
                                    (0.0002, "0.02%"), (0.00021, "0.021%"),
                                    (3e-7, "< 0.0001%"), (0.5, "50.0%")])
def test_percent(p, text):
    assert percent(p) == text
