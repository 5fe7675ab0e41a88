"""Selection (docs/spec.md: pipeline): summaries in, requirement and capacities out.

Pure functions, no I/O. A summary is a `telemetry.LogSummary` or a mapping with the same
keys (e.g. a `parse --json` entry).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import BadInput
from harness.grid.capacity import (
    budget_tokens,
    format_capacity,
    over_provision,
    round_up_to_grid,
    to_decimal,
)
from harness.vocab import DEFAULT_PAD_MULTIPLE, Status

REMEASURE_FACTOR = 2   # a lower bound is re-measured at (at least) twice the saturated budget


@dataclass(frozen=True)
class Requirement:
    """Peak demand of a measurement; lower_bound when some used row was saturated."""

    peak: int
    uniform_tokens: int
    required_capacity: float
    lower_bound: bool


@dataclass(frozen=True)
class Selection:
    """The selected grid capacity, its budget and budget / peak."""

    capacity: str
    budget: int
    over_provision: float


def _get(summary: Any, key: str) -> Any:
    """A summary field from a LogSummary or a mapping."""
    return summary[key] if isinstance(summary, Mapping) else getattr(summary, key)


def requirement(summary: Any) -> Requirement:
    """Requirement of a measure run: peak / expected_recv from its dispatch rows."""
    peak = _get(summary, "peak_actual_valid_recv")
    if not _get(summary, "rows") or peak is None:
        raise BadInput("the measurement has no used dispatch rows: no requirement",
                       field="rows")
    expected = _get(summary, "expected_recv")
    return Requirement(peak=peak, uniform_tokens=expected, required_capacity=peak / expected,
                       lower_bound=bool(_get(summary, "lower_bound")))


def remeasure_capacity(current: str, uniform_tokens: int, pad_multiple: int, peak: int) -> str:
    """Capacity for re-measuring after a lower bound at `current`.

    A saturated peak equals the budget, so the true demand is unknown: the new budget is
    twice the larger of the current budget and the peak, rounded up to the exact grid.
    """
    base = max(budget_tokens(current, uniform_tokens), peak)
    return round_up_to_grid(REMEASURE_FACTOR * base, uniform_tokens, pad_multiple)


def select(req: Requirement, pad_multiple: int = DEFAULT_PAD_MULTIPLE,
           decimals: int | None = None) -> Selection:
    """Round a (non lower-bound) requirement up to the smallest executable capacity."""
    if req.lower_bound:
        raise BadInput("the requirement is only a lower bound (saturated rows): re-measure "
                       "at a larger capacity before selecting", field="lower_bound")
    capacity = round_up_to_grid(req.peak, req.uniform_tokens, pad_multiple, decimals)
    budget = budget_tokens(capacity, req.uniform_tokens)
    return Selection(capacity, budget, over_provision(budget, req.peak))


def validation_verdict(summary: Any) -> str:
    """"accept" when a validate run has rows and none saturated; "step_up" when any did.

    A run with no rows, or with malformed or missing rows and no saturated one, cannot
    show zero drops either way: that is bad input, not a verdict.
    """
    if not _get(summary, "rows"):
        raise BadInput("the validation run has no dispatch rows: zero drops not shown",
                       field="rows")
    if _get(summary, "saturated_rows"):
        return "step_up"
    if _get(summary, "malformed_rows"):
        raise BadInput(f"{_get(summary, 'malformed_rows')} malformed rows: zero drops not "
                       "shown", field="malformed_rows")
    if not _get(summary, "complete"):
        raise BadInput(f"rows missing ({_get(summary, 'missing_rows')} of the ranks x layers x "
                       "iterations grid): zero drops not shown", field="complete")
    return "accept"


def validation_ok(summary: Any) -> bool:
    """Zero drops shown: rows present, none saturated, none malformed, none missing (the
    validate step's acceptance, and the audit's)."""
    try:
        return validation_verdict(summary) == "accept"
    except BadInput:
        return False


def steps_up(status: str, accepted: bool, step: int, max_steps: int) -> bool:
    """Whether a validate run one rung up follows the `step`-th (0-based): this one dropped
    tokens (status drops), was not accepted, and steps are left (capacity.max_validate_steps)."""
    return not accepted and status == Status.DROPS and step < max_steps


def timing_capacity(selected: Mapping[str, str]) -> str:
    """Per model, the one timing capacity: the largest selected capacity (by value)."""
    if not selected:
        raise BadInput("no selected capacities to time at", field="timing_capacity")
    return format_capacity(max(selected.values(), key=to_decimal))
