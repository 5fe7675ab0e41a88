"""Timing verdicts: a paired bootstrap CI of the ratio of medians, CVs and the verdict rules.

Pure (numpy only, no I/O). An *arm* is one backend's timing of one phase (dispatch or
combine) for one model: a list of launches (independent process starts), each a list of
per-trial medians in ms. The method (docs/timing-verdicts.md states it for users):

- ratio_median = median(all trial medians of the backend arm)
  / median(all trial medians of the baseline arm); > 1 means the backend is slower.
- CI: paired two-stage bootstrap, 20,000 resamples, fixed seed. Stage 1 draws L launch
  indices with replacement, the *same* indices for both arms: launch i of every arm ran in
  the same rotation round, so drift between rounds falls on both sides of the ratio. Stage 2
  draws, inside every drawn launch, that launch's T trial medians with replacement,
  independently per arm (trials of two processes are not paired). Each resample gives
  log(median(backend draws) / median(baseline draws)); se = their standard deviation. The CI
  is exp(log(ratio_median) -/+ t * se), t the 97.5% Student-t quantile on L - 1 degrees of
  freedom: only L launches replicate the run-to-run effect, and the plain 2.5/97.5
  percentiles of so few clusters cover far less than 95% (an A/A pair with launch-to-launch
  spread 10x the trial spread excluded 1 in 23% of simulated cases; this interval in 3.5%).
- CV of an arm: sample stdev (ddof 1) / mean of all its trial medians (launches x trials), so
  it holds both the run-to-run and the trial-to-trial spread.
- Verdict, in this order: `too_noisy` when either arm has fewer than MIN_LAUNCHES launches
  (run-to-run spread unmeasured: never a winner from one process start) or a CV over max_cv;
  `indistinguishable` when ci_low <= 1 <= ci_high; `slower` when ci_low > 1; `faster` when
  ci_high < 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.vocab import Verdict

RESAMPLES = 20_000
SEED = 20_260_101            # fixed resampling seed: the same data always give the same CI
MAX_CV = 0.05
MIN_LAUNCHES = 2
_Z975 = 1.959963984540054
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

FASTER, SLOWER = Verdict.FASTER, Verdict.SLOWER
INDISTINGUISHABLE, TOO_NOISY = Verdict.INDISTINGUISHABLE, Verdict.TOO_NOISY

Arm = Sequence[Sequence[float]]     # launches x per-trial medians (ms)


@dataclass(frozen=True)
class Comparison:
    """One backend arm against the baseline arm for one phase."""

    launches: int
    ratio_median: float
    ci_low: float | None            # None: fewer than MIN_LAUNCHES launches
    ci_high: float | None
    cv_backend: float | None
    cv_baseline: float | None
    verdict: str
    reason: str


def _matrix(arm: Arm, what: str) -> np.ndarray:
    """launches x trials float array; every launch must have the same, non-zero trial count."""
    if len(arm) == 0:
        raise ValueError(f"{what}: no launches")
    counts = {len(launch) for launch in arm}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"{what}: every launch needs the same non-zero number of trials, "
                         f"got {[len(launch) for launch in arm]}")
    m = np.asarray(arm, dtype=np.float64)
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise ValueError(f"{what}: trial medians must be finite and > 0")
    return m


def cv(arm: Arm) -> float | None:
    """Sample stdev / mean of all trial medians of an arm; None with fewer than two values."""
    values = _matrix(arm, "arm").ravel()
    if values.size < 2:
        return None
    return float(np.std(values, ddof=1) / np.mean(values))


def ratio_of_medians(backend: Arm, baseline: Arm) -> float:
    """median(backend trial medians) / median(baseline trial medians)."""
    return float(np.median(_matrix(backend, "backend")) / np.median(_matrix(baseline, "baseline")))


def _draw(m: np.ndarray, launch_idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per resample, the median of the drawn trials of the drawn launches (vectorised)."""
    n, launches = launch_idx.shape
    trials = m.shape[1]
    trial_idx = rng.integers(0, trials, size=(n, launches, trials))
    picked = m[launch_idx[:, :, None], trial_idx]          # n x launches x trials
    return np.median(picked.reshape(n, launches * trials), axis=1)


def t975(df: int) -> float:
    """97.5% quantile of Student's t on df degrees of freedom (table to 30, then expansion)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975                         # Cornish-Fisher expansion: < 1e-4 off for df > 30
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


def bootstrap_ci(backend: Arm, baseline: Arm, resamples: int = RESAMPLES,
                 seed: int = SEED) -> tuple[float, float]:
    """Paired two-stage bootstrap 95% CI of the ratio of medians (module docstring).

    Both arms need the same number of launches, at least 2 (launch i of each is one pair).
    """
    b, a = _matrix(backend, "backend"), _matrix(baseline, "baseline")
    if b.shape[0] != a.shape[0]:
        raise ValueError(f"paired arms need the same number of launches, got backend "
                         f"{b.shape[0]} and baseline {a.shape[0]}")
    launches = a.shape[0]
    if launches < MIN_LAUNCHES:
        raise ValueError(f"a CI needs at least {MIN_LAUNCHES} launches per arm, got {launches}")
    rng = np.random.default_rng(seed)
    launch_idx = rng.integers(0, launches, size=(resamples, launches))
    log_ratios = np.log(_draw(b, launch_idx, rng) / _draw(a, launch_idx, rng))
    half = t975(launches - 1) * float(np.std(log_ratios, ddof=1))
    centre = float(np.log(np.median(b) / np.median(a)))
    return float(np.exp(centre - half)), float(np.exp(centre + half))


def verdict(ci_low: float | None, ci_high: float | None, cv_backend: float | None, cv_baseline: float | None,
            launches: int, max_cv: float = MAX_CV) -> tuple[str, str]:
    """(verdict, reason) by the rules in the module docstring."""
    if launches < MIN_LAUNCHES:
        return TOO_NOISY, f"{launches} launch(es) < {MIN_LAUNCHES}: run-to-run spread unmeasured"
    for name, value in (("backend", cv_backend), ("baseline", cv_baseline)):
        if value is None:
            return TOO_NOISY, f"cv_{name} unknown (fewer than two trial medians)"
        if value > max_cv:
            return TOO_NOISY, f"cv_{name} {value:.4f} > max_cv {max_cv:g}"
    if ci_low is None or ci_high is None:
        return TOO_NOISY, "no confidence interval"
    if ci_low <= 1.0 <= ci_high:
        return INDISTINGUISHABLE, f"95% CI [{ci_low:.4f}, {ci_high:.4f}] includes 1"
    if ci_low > 1.0:
        return SLOWER, f"95% CI [{ci_low:.4f}, {ci_high:.4f}] above 1"
    return FASTER, f"95% CI [{ci_low:.4f}, {ci_high:.4f}] below 1"


def compare(backend: Arm, baseline: Arm, max_cv: float = MAX_CV, resamples: int = RESAMPLES,
            seed: int = SEED) -> Comparison:
    """Ratio, paired bootstrap CI, both CVs and the verdict of one phase of one backend.

    With fewer than MIN_LAUNCHES launches the CI is unknown (None) and the verdict too_noisy.
    """
    launches = len(baseline)
    lo = hi = None
    if launches >= MIN_LAUNCHES:
        lo, hi = bootstrap_ci(backend, baseline, resamples, seed)
    cv_b, cv_a = cv(backend), cv(baseline)
    v, why = verdict(lo, hi, cv_b, cv_a, launches, max_cv)
    return Comparison(launches, ratio_of_medians(backend, baseline), lo, hi, cv_b, cv_a, v, why)
