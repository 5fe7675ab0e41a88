"""Drop risk (harness.grid.risk): the zero-drop bound, the GEV tail fit, risk-targeted selection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln
from scipy.stats import beta, genextreme

from harness.errors import BadInput
from harness.grid import risk
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


# The closed forms against scipy's own (an implementation this file did not write): the GEV
# survival function (harness.grid.risk._sf, scipy.stats.genextreme.sf) and the Clopper-Pearson
# bound (drop_risk_upper, scipy.stats.beta.ppf), on generated shapes, scales and points --
# inside, at and beyond both ends of the support, c = 0 and c near 0, and a point mass.
@settings(max_examples=400, deadline=None)
@given(c=st.one_of(st.just(0.0), st.floats(-0.9, 3.0), st.floats(-1e-8, 1e-8)),
       loc=st.floats(-1e4, 1e5), scale=st.one_of(st.just(0.0), st.floats(1e-3, 1e4)),
       spread=st.floats(-60.0, 60.0))
def test_survival_function_is_scipys_genextreme(c, loc, scale, spread):
    x = loc + spread * (scale or 1.0)
    mine = float(risk._sf(np.array(c), np.array(loc), np.array(scale), x))
    theirs = float(loc > x) if scale == 0 else float(genextreme.sf(x, c, loc, scale))
    assert mine == pytest.approx(theirs, rel=1e-12, abs=1e-300)


@settings(max_examples=300, deadline=None)
@given(steps=st.integers(1, 5000), share=st.floats(0.0, 1.0))
def test_drop_risk_upper_is_the_clopper_pearson_bound(steps, share):
    dropped = round(share * steps)
    theirs = 1.0 if dropped == steps else float(beta.ppf(0.95, dropped + 1, steps - dropped))
    assert risk.drop_risk_upper(dropped, steps) == pytest.approx(theirs, rel=1e-12)


def test_lgamma_is_scipys_gammaln():
    x = np.linspace(0.1, 4.0, 997)          # 1 + shape over SHAPE_LIMITS, where the fit reads it
    assert np.allclose(risk._lgamma(x), gammaln(x), rtol=1e-13, atol=1e-15)


def test_the_pipelines_risk_figures_import_no_scipy_stats():
    """The driver fits and reads a tail at every accepted validation: importing scipy.stats
    for it cost the default campaign ~0.5 s at its first validation (issue 44's overhead)."""
    import subprocess
    import sys
    code = ("import sys; from harness.grid import heldout, risk; "
            "m = risk.fit_risk(list(range(1000, 1040)) * 2); m.at(1050); "
            "risk.drop_risk_upper(0, 30); "
            "print(sorted(n for n in sys.modules if n.startswith('scipy.stats')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
