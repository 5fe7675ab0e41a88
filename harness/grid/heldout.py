"""Held-out validation decisions (docs/spec.md#pipeline, step 4), pure: no I/O, no campaign state.

- `resolve_validate`: the runbook's `validate: {seed, iters}` with its defaults (campaign
  seed + 1, the measure iterations) and whether the routing is held out.
- `select_budget`: capacity.target `peak` (the measured peak rounded up onto the grid) or
  `{drop_risk: R}` (the smallest grid budget whose upper-bound predicted risk is <= R).
- `risk_columns`: the selection's risk columns for the accepted validate run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import BadInput
from harness.grid.capacity import budget_tokens, over_provision, round_up_to_grid
from harness.telemetry.steps import StepPeaks

TARGET_PEAK = "peak"


@dataclass(frozen=True)
class ValidateConfig:
    """Routing seed and iterations of the validate runs; `held_out` when seed != campaign."""

    seed: int
    iters: int
    held_out: bool


def resolve_validate(raw: Mapping[str, Any] | None, campaign_seed: int,
                     measure_iters: int) -> ValidateConfig:
    """`validate:` of a runbook (None = absent) resolved against the campaign seed."""
    raw = dict(raw or {})
    unknown = sorted(set(raw) - {"seed", "iters"})
    if unknown:
        raise BadInput(f"unknown key {unknown[0]!r}; allowed: seed, iters",
                       field=f"validate.{unknown[0]}")
    seed = raw.get("seed", campaign_seed + 1)
    iters = raw.get("iters", measure_iters)
    for key, value, low in (("seed", seed, None), ("iters", iters, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or (
                low is not None and value < low):
            want = "an integer" if low is None else f"an integer >= {low}"
            raise BadInput(f"must be {want}, got {value!r}", field=f"validate.{key}")
    return ValidateConfig(seed, iters, held_out=seed != campaign_seed)


def parse_target(raw: Any) -> str | float:
    """capacity.target: 'peak' (default) or {drop_risk: R} with 0 < R < 1 -> 'peak' or R."""
    if raw is None or raw == TARGET_PEAK:
        return TARGET_PEAK
    if isinstance(raw, Mapping) and set(raw) == {"drop_risk"}:
        risk = raw["drop_risk"]
        if isinstance(risk, str):
            try:
                risk = float(risk)
            except ValueError:
                risk = None
        if isinstance(risk, (int, float)) and not isinstance(risk, bool) and 0 < risk < 1:
            return float(risk)
        raise BadInput(f"must be a probability in (0, 1), got {raw['drop_risk']!r}",
                       field="capacity.target.drop_risk")
    raise BadInput(f"must be 'peak' or {{drop_risk: R}}, got {raw!r}", field="capacity.target")


@dataclass(frozen=True)
class BudgetChoice:
    """A selected capacity, its budget, budget / peak, and how it was chosen."""

    capacity: str
    budget: int
    over_provision: float
    note: str


def select_budget(target: str | float, peak: int, uniform_tokens: int, pad_multiple: int,
                  decimals: int | None, measure_steps: StepPeaks | None) -> BudgetChoice:
    """The pre-validation selection under capacity.target (see the module docstring).

    A risk target that cannot be met from the fit (no fit, or unreachable) falls back to
    the peak rule, and the note says why.
    """
    from harness.grid.risk import fit_risk, select_for_risk  # numpy/scipy: only when used

    peak_cap = round_up_to_grid(peak, uniform_tokens, pad_multiple, decimals)
    note = "peak rule: smallest executable budget covering the measured peak"
    capacity = peak_cap
    if target != TARGET_PEAK:
        pool = measure_steps.exact_peaks() if measure_steps is not None else []
        model = fit_risk(pool)
        chosen = model if isinstance(model, str) else select_for_risk(
            model, float(target), peak, uniform_tokens, pad_multiple, decimals)
        if isinstance(chosen, str):
            note = f"drop_risk {target:g} not usable ({chosen}): peak rule used"
        else:
            capacity = chosen.capacity
            note = (f"drop_risk {target:g}: smallest executable budget with upper-bound "
                    f"predicted risk {chosen.estimate.high:.3g} <= {target:g}")
    budget = budget_tokens(capacity, uniform_tokens)
    return BudgetChoice(capacity, budget, over_provision(budget, peak), note)


def risk_columns(budget: int, validate_seed: int, held_out: bool,
                 measure_steps: StepPeaks | None, validate_steps: StepPeaks | None,
                 accepted: bool) -> dict[str, Any]:
    """validate_seed .. held_out of capacity_selection.tsv (None = empty cell).

    The bound and the fit are stated only for an accepted budget (no held-out step
    dropped). The fit pools the exact peaks of the measure and validate steps; when the
    validation re-ran the measured routing, the validate steps are the measured ones again
    and only the measure steps are used (no step counts twice), and no held-out bound is
    stated.
    """
    from harness.grid.risk import drop_risk_95, fit_risk

    cols: dict[str, Any] = {"validate_seed": validate_seed, "validate_steps": None,
                            "validate_peak": None, "headroom": None, "drop_risk_95": None,
                            "predicted_drop_risk": None, "predicted_drop_risk_hi": None,
                            "held_out": held_out}
    if validate_steps is not None and validate_steps.steps:
        cols.update(validate_steps=validate_steps.steps, validate_peak=validate_steps.peak)
        if validate_steps.peak:
            cols["headroom"] = budget / validate_steps.peak
    if not accepted or validate_steps is None or validate_steps.drops:
        return cols
    if held_out:
        cols["drop_risk_95"] = probability_text(drop_risk_95(validate_steps.steps))
    pool = list(measure_steps.exact_peaks()) if measure_steps is not None else []
    if held_out:
        pool += validate_steps.exact_peaks()
    model = fit_risk(pool)
    if not isinstance(model, str):
        est = model.at(budget)
        cols.update(predicted_drop_risk=probability_text(est.value),
                    predicted_drop_risk_hi=probability_text(est.high))
    return cols


def probability_text(p: float) -> str:
    """A probability with 6 significant digits: small risks keep their value (2.1e-07)
    instead of rounding to 0 at the TSV's 6 decimals."""
    return f"{p:.6g}"


def rung_risk(budget: int, held_out: bool, measure_steps: StepPeaks | None,
              validate_steps: StepPeaks | None, accepted: bool) -> dict[str, Any]:
    """The drop-risk figures of one frontier rung (docs/frontier.md): how many of the accepted
    validate run's held-out steps had a peak above `budget` (their demand does not depend on
    the budget: an accepted run dropped nothing, so every peak is exact), the 95% upper
    bound on that drop probability (`drop_risk_upper`; at the validated budget it is the
    selection's drop_risk_95), and the fit of `risk_columns` read at `budget`. Empty (None)
    where `risk_columns` states nothing: no accepted held-out validation, no fit."""
    from harness.grid.risk import drop_risk_upper, fit_risk

    cols: dict[str, Any] = {"heldout_steps": None, "heldout_dropped_steps": None,
                            "drop_risk_95": None, "predicted_drop_risk": None,
                            "predicted_drop_risk_hi": None}
    if not accepted or validate_steps is None or validate_steps.drops or not validate_steps.steps:
        return cols
    if held_out:
        dropped = sum(1 for p in validate_steps.peaks if p > budget)
        cols.update(heldout_steps=validate_steps.steps, heldout_dropped_steps=dropped,
                    drop_risk_95=probability_text(drop_risk_upper(dropped, validate_steps.steps)))
    pool = list(measure_steps.exact_peaks()) if measure_steps is not None else []
    if held_out:
        pool += validate_steps.exact_peaks()
    model = fit_risk(pool)
    if not isinstance(model, str):
        est = model.at(budget)
        cols.update(predicted_drop_risk=probability_text(est.value),
                    predicted_drop_risk_hi=probability_text(est.high))
    return cols
