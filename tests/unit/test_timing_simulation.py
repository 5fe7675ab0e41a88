"""Simulated campaigns through the pipeline's own time step (harness.pipeline.decisions.
time_step -> harness.timing.verdicts -> harness.timing.stats): arms with known ratios 1.00
(the A/A control), 1.03 and 1.10 and a realistic launch-to-launch spread (timing_sim.Spread).

- `timing.resolution: 0.03`: every campaign either reaches the width on every comparison
  (stopped_by resolution) or says it hit the cap (stopped_by max_launches, launches = cap);
- the A/A arm's false verdicts (faster/slower) stay at most 5% over 200 campaigns;
- the stated minimum detectable effect holds what it claims: of the rows whose mde is at
  most the true effect, at least 90% call it (slower), and the 95% CIs cover the truth.

Speed: the bootstrap runs with 2,000 resamples here (stats.RESAMPLES patched; its se is
within about 2% of the 20,000-resample one), so the 600-odd simulated campaigns take
seconds. Everything else is the campaign's code.
"""

from __future__ import annotations

import numpy as np
import pytest
from timing_sim import MODEL, Spread, run_time_step, simulated_context

from harness.timing import stats, verdicts

RESOLUTION = 0.03


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    monkeypatch.setattr(stats, "RESAMPLES", 2_000)


def campaign(seed: int, ratios: dict[str, float], spread: Spread | None = None,
             launches: int = 3, resolution: float | None = RESOLUTION,
             max_launches: int | None = 12, control: bool = True) -> list:
    """One simulated model's comparison rows."""
    ctx, answer = simulated_context(ratios, launches=launches, trials=3, seed=seed,
                                    spread=spread, resolution=resolution,
                                    max_launches=max_launches if resolution else None,
                                    control=control)
    return run_time_step(ctx, answer).comparison[MODEL]


def test_resolution_is_reached_or_the_cap_is_said():
    outcomes = {verdicts.STOP_RESOLUTION: 0, verdicts.STOP_MAX: 0}
    quiet = Spread(launch_sd=0.015)
    for seed in range(20):
        rows = campaign(seed, {"small": 1.03, "big": 1.10}, spread=quiet)
        stop = {r.stopped_by for r in rows}
        assert len(stop) == 1
        stop_by = stop.pop()
        outcomes[stop_by] += 1
        if stop_by == verdicts.STOP_RESOLUTION:
            assert all(r.halfwidth <= RESOLUTION and r.resolved for r in rows)
        else:
            assert all(r.launches == 12 for r in rows)
            assert not all(r.resolved for r in rows)
        assert all(r.resolution == RESOLUTION for r in rows)
    assert outcomes[verdicts.STOP_RESOLUTION] >= 15        # the width is reachable here ...
    noisy = campaign(0, {"small": 1.03}, spread=Spread(launch_sd=0.15), max_launches=5)
    assert {r.stopped_by for r in noisy} == {verdicts.STOP_MAX}   # ... and the cap is said
    assert all(r.launches == 5 and not r.resolved for r in noisy)


def test_fixed_launches_stop_at_launches():
    rows = campaign(1, {"small": 1.03}, resolution=None)
    assert {(r.stopped_by, r.launches, r.resolved) for r in rows} == \
        {(verdicts.STOP_LAUNCHES, 3, None)}


@pytest.mark.slow
def test_a_a_false_verdicts_at_most_five_percent():
    false_rows = rows_seen = false_campaigns = 0
    for seed in range(200):
        rows = [r for r in campaign(1000 + seed, {}) if verdicts.is_control(r.backend)]
        wrong = [r for r in rows if r.verdict in (stats.FASTER, stats.SLOWER)]
        false_rows += len(wrong)
        rows_seen += len(rows)
        false_campaigns += bool(wrong)
    assert rows_seen == 400
    print(f"A/A false verdicts: {false_rows} of {rows_seen} rows, {false_campaigns} of 200 campaigns")
    assert false_rows / rows_seen <= 0.05, (false_rows, false_campaigns)


@pytest.mark.slow
def test_the_stated_mde_holds_what_it_claims():
    """Launch spreads from 0.5% to 6%, three to six fixed launches: rows whose stated mde
    is at most the true effect (3% or 10%) must call it in at least 90% of cases."""
    rng = np.random.default_rng(5)
    claimed = called = covered = total = 0
    for seed in range(150):
        spread = Spread(launch_sd=float(rng.uniform(0.005, 0.06)))
        launches = int(rng.integers(3, 7))
        for r in campaign(2000 + seed, {"small": 1.03, "big": 1.10}, spread=spread,
                          launches=launches, resolution=None, control=False):
            truth = 1.03 if r.backend == "small" else 1.10
            total += 1
            covered += r.ci_low <= truth <= r.ci_high
            if r.mde <= truth - 1:
                claimed += 1
                called += r.verdict == stats.SLOWER
    assert claimed >= 100                                   # enough claims to judge
    print(f"mde claims {claimed}: called {called}; CI covered {covered} of {total}")
    assert called / claimed >= 0.90, (called, claimed)
    assert covered / total >= 0.90, (covered, total)
