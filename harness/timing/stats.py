"""Timing verdicts: a paired bootstrap CI of the ratio of medians, CVs and the verdict rules.

Pure (numpy only, no I/O). An *arm* is one backend's timing of one phase (dispatch or
combine) for one model: a list of launches (independent process starts), each a list of
per-trial medians in ms. The method (docs/timing-verdicts.md states it for users):

- arm median = median of all the arm's trial medians (every usable launch, pooled): the one
  median timing.tsv prints; ratio_median = arm median(backend) / arm median(baseline), the
  ratio of the medians timing.tsv shows; > 1 means the backend is slower.
- CI: paired two-stage bootstrap, 20,000 resamples, fixed seed. Stage 1 draws L launch
  indices with replacement, the *same* indices for both arms: launch i of every arm ran in
  the same rotation round, so drift between rounds falls on both sides of the ratio. Stage 2
  draws, inside every drawn launch, that launch's T trial medians with replacement,
  independently per arm (trials of two processes are not paired). Each resample gives
  log(median(backend draws) / median(baseline draws)); se = their standard deviation. The CI
  is ratio_median * exp(-/+ t * se), t the 97.5% Student-t quantile on L - 1 degrees of
  freedom: only L launches replicate the run-to-run effect, and the plain 2.5/97.5
  percentiles of so few clusters cover far less than 95% (an A/A pair with launch-to-launch
  spread 10x the trial spread excluded 1 in 23% of simulated cases; this interval in 3.5%).
- Resolution: halfwidth = exp(t * se) - 1 (the interval's relative half-width); the minimum
  detectable effect mde = exp((t + t90) * se) - 1, t90 the 90% Student-t quantile on L - 1
  degrees of freedom: a true ratio of (1 + mde) or 1 / (1 + mde) comes out faster/slower
  in about 90% of runs with this spread and launches (one-sided 90% power at 95% confidence).
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
_Z90 = 1.2815515655446004
_T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356,
        1.350, 1.345, 1.341, 1.337, 1.333, 1.330, 1.328, 1.325, 1.323, 1.321, 1.319, 1.318,
        1.316, 1.315, 1.314, 1.313, 1.311, 1.310)
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
    halfwidth: float | None = None  # exp(t * se) - 1: the interval's relative half-width
    mde: float | None = None        # exp((t + t90) * se) - 1: minimum detectable effect


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


def pooled(arm: Arm) -> np.ndarray:
    """All trial medians of an arm (launches may hold different trial counts), as one array."""
    values = np.asarray([float(x) for launch in arm for x in launch], dtype=np.float64)
    if values.size == 0:
        raise ValueError("arm: no trial medians")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("arm: trial medians must be finite and > 0")
    return values


def arm_median(arm: Arm) -> float:
    """The arm median: the median of all its trial medians, pooled over its launches."""
    return float(np.median(pooled(arm)))


def arm_quantile(arm: Arm, q: float) -> float:
    """Linear-interpolated quantile q of all the arm's trial medians (numpy's and pandas'
    default method)."""
    return float(np.quantile(pooled(arm), q))


def cv(arm: Arm) -> float | None:
    """Sample stdev (ddof 1) / mean of all the arm's trial medians; None with fewer than two."""
    values = pooled(arm)
    if values.size < 2:
        return None
    return float(np.std(values, ddof=1) / np.mean(values))


def ratio_of_medians(backend: Arm, baseline: Arm) -> float:
    """arm_median(backend) / arm_median(baseline): the ratio of the medians timing.tsv shows."""
    return arm_median(backend) / arm_median(baseline)


def _draw(m: np.ndarray, launch_idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per resample, the median of the drawn trials of the drawn launches (vectorised)."""
    n, launches = launch_idx.shape
    trials = m.shape[1]
    trial_idx = rng.integers(0, trials, size=(n, launches, trials))
    picked = m[launch_idx[:, :, None], trial_idx]          # n x launches x trials
    return np.median(picked.reshape(n, launches * trials), axis=1)


def _t(table: tuple[float, ...], z: float, df: int) -> float:
    """A Student-t quantile from its table (df 1..30), then the Cornish-Fisher expansion."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(table):
        return table[df - 1]
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


def t975(df: int) -> float:
    """97.5% quantile of Student's t on df degrees of freedom (table to 30, then expansion)."""
    return _t(_T975, _Z975, df)


def t90(df: int) -> float:
    """90% quantile of Student's t on df degrees of freedom (table to 30, then expansion)."""
    return _t(_T90, _Z90, df)


def halfwidth(se: float, launches: int) -> float:
    """The 95% interval's relative half-width exp(t975 * se) - 1 at `launches` launches."""
    return float(np.expm1(t975(launches - 1) * se))


def mde(se: float, launches: int) -> float:
    """Minimum detectable effect exp((t975 + t90) * se) - 1: the relative difference a run
    with this spread and these launches calls faster/slower with about 90% power."""
    return float(np.expm1((t975(launches - 1) + t90(launches - 1)) * se))


def log_se(backend: Arm, baseline: Arm, resamples: int = RESAMPLES, seed: int = SEED) -> float:
    """se of log(ratio of medians) by the paired two-stage bootstrap (module docstring).

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
    return float(np.std(log_ratios, ddof=1))


def interval(ratio: float, se: float, launches: int) -> tuple[float, float]:
    """The 95% CI ratio * exp(-/+ t975(launches - 1) * se)."""
    half = t975(launches - 1) * se
    return float(ratio * np.exp(-half)), float(ratio * np.exp(half))


def bootstrap_ci(backend: Arm, baseline: Arm, resamples: int = RESAMPLES,
                 seed: int = SEED) -> tuple[float, float]:
    """Paired two-stage bootstrap 95% CI of the ratio of the two arms' medians."""
    se = log_se(backend, baseline, resamples, seed)
    return interval(ratio_of_medians(backend, baseline), se, len(baseline))


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


def compare(backend: Arm, baseline: Arm, max_cv: float = MAX_CV, resamples: int | None = None,
            seed: int = SEED, whole: tuple[Arm, Arm] | None = None) -> Comparison:
    """Ratio, paired bootstrap CI, both CVs, resolution and the verdict of one phase.

    `backend`/`baseline` are the paired launches (round i of both); `whole` the arms' every
    usable launch (default: the paired ones), whose medians and CVs timing.tsv shows: the
    ratio and the CVs are theirs, the se (so the interval's width) the paired launches'.
    With fewer than MIN_LAUNCHES paired launches the CI is unknown (None), the verdict
    too_noisy.
    """
    b, a = _matrix(backend, "backend"), _matrix(baseline, "baseline")
    if b.shape[0] != a.shape[0]:
        raise ValueError(f"paired arms need the same number of launches, got backend "
                         f"{b.shape[0]} and baseline {a.shape[0]}")
    launches = a.shape[0]
    all_b, all_a = whole if whole is not None else (backend, baseline)
    ratio = ratio_of_medians(all_b, all_a)
    lo = hi = half = detectable = None
    if launches >= MIN_LAUNCHES:
        se = log_se(backend, baseline, resamples or RESAMPLES, seed)
        lo, hi = interval(ratio, se, launches)
        half, detectable = halfwidth(se, launches), mde(se, launches)
    cv_b, cv_a = cv(all_b), cv(all_a)
    v, why = verdict(lo, hi, cv_b, cv_a, launches, max_cv)
    return Comparison(launches, ratio, lo, hi, cv_b, cv_a, v, why, half, detectable)
