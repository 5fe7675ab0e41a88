"""Every timing.tsv and comparison.tsv figure recomputed from timing_trials.tsv with pandas
alone (numpy for the bootstrap's draws, scipy for Student's t), as an analyst would, from
the definitions docs/timing-verdicts.md#definitions states -- no harness code computes them.

The tables come from the pipeline's own time step (harness.pipeline.decisions.time_step
answered by simulated launches, tests/unit/timing_sim.py), written by the campaign's table
writer (harness.campaign.store.write_derived). Tolerances: the TSVs print six decimals, so
figures agree to 1e-6 and the interval (a bootstrap over the printed trial medians) to 1e-4.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from timing_sim import run_time_step, simulated_context

from harness.campaign import store
from harness.results.layout import COMPARISON_TSV, TIMING_TRIALS_TSV, TIMING_TSV

RESAMPLES, SEED = 20_000, 20_260_101      # docs/timing-verdicts.md: the bootstrap's constants
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


def read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t", keep_default_na=False, na_values=[""])


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trials")
    ctx, answer = simulated_context(ratios={"fast": 0.9, "same": 1.0}, launches=3, trials=3,
                                    seed=7, control=True)
    run_time_step(ctx, answer)
    store.write_derived(root, ctx.runbook, ctx.selection, ctx.timing, ctx.comparison,
                        ctx.trials)
    return root


def bootstrap_se(b: np.ndarray, a: np.ndarray) -> float:
    """The paired two-stage bootstrap of docs/timing-verdicts.md, draw for draw."""
    rng = np.random.default_rng(SEED)
    launches = a.shape[0]
    idx = rng.integers(0, launches, size=(RESAMPLES, launches))

    def draw(m: np.ndarray) -> np.ndarray:
        trial = rng.integers(0, m.shape[1], size=(RESAMPLES, launches, m.shape[1]))
        return np.median(m[idx[:, :, None], trial].reshape(RESAMPLES, -1), axis=1)

    return float(np.std(np.log(draw(b) / draw(a)), ddof=1))


def test_timing_tsv_from_the_trials(results):
    trials, timing = read(results / TIMING_TRIALS_TSV), read(results / TIMING_TSV)
    assert len(timing) == 4 and len(trials) > 0
    for _, row in timing.iterrows():
        mine = trials[(trials.model == row.model) & (trials.backend == row.backend)]
        assert row.launches == mine.launch.nunique()
        for phase in ("dispatch", "combine"):
            ms = mine[mine.phase == phase].ms
            assert row[f"{phase}_ms_median"] == pytest.approx(ms.median(), abs=1e-6)
            assert row[f"{phase}_ms_p10"] == pytest.approx(ms.quantile(0.1), abs=1e-6)
            assert row[f"{phase}_ms_p90"] == pytest.approx(ms.quantile(0.9), abs=1e-6)
        per_launch = mine.groupby(["launch", "phase"]).ms.median().groupby("launch").sum()
        spread = 100 * (per_launch.max() - per_launch.min()) / per_launch.median()
        assert row.noise_floor_pct == pytest.approx(spread, abs=1e-4)


def test_comparison_tsv_from_the_trials(results):
    trials, comparison = read(results / TIMING_TRIALS_TSV), read(results / COMPARISON_TSV)
    timing = read(results / TIMING_TSV).set_index(["model", "backend"])
    assert len(comparison) == 6
    for _, row in comparison.iterrows():
        arm = trials[(trials.model == row.model) & (trials.phase == row.phase)]
        b, a = arm[arm.backend == row.backend], arm[arm.backend == row.baseline]
        ratio = b.ms.median() / a.ms.median()
        assert row.ratio_median == pytest.approx(ratio, rel=1e-6, abs=1e-6)
        shown = (timing.loc[(row.model, row.backend), f"{row.phase}_ms_median"]
                 / timing.loc[(row.model, row.baseline), f"{row.phase}_ms_median"])
        assert row.ratio_median == pytest.approx(shown, rel=1e-5, abs=1e-6)   # the medians timing.tsv shows
        assert row.cv_backend == pytest.approx(b.ms.std() / b.ms.mean(), rel=1e-5, abs=1e-6)
        assert row.cv_baseline == pytest.approx(a.ms.std() / a.ms.mean(), rel=1e-5, abs=1e-6)
        rounds = sorted(set(b.launch) & set(a.launch))
        assert row.launches == len(rounds)
        mb = np.array([b[b.launch == r].sort_values("trial").ms for r in rounds])
        ma = np.array([a[a.launch == r].sort_values("trial").ms for r in rounds])
        se = bootstrap_se(mb, ma)
        t = T975[len(rounds) - 1]
        assert row.ci_low == pytest.approx(ratio * math.exp(-t * se), rel=1e-4)
        assert row.ci_high == pytest.approx(ratio * math.exp(t * se), rel=1e-4)
        assert row.halfwidth == pytest.approx(math.expm1(t * se), rel=1e-4)
        t90 = float(sps.t.ppf(0.90, len(rounds) - 1))
        assert row.mde == pytest.approx(math.expm1((t + t90) * se), rel=1e-3)
        verdict = ("too_noisy" if max(row.cv_backend, row.cv_baseline) > 0.25 else
                   "indistinguishable" if row.ci_low <= 1 <= row.ci_high else
                   "slower" if row.ci_low > 1 else "faster")
        assert row.verdict == verdict
