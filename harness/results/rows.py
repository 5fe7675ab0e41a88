"""The rows of the campaign's TSVs as frozen, keyword-only dataclasses (docs/spec.md: results
layout).

A table's columns are its row's fields, in order: to add a column, add a field (after the
ones the spec lists; more columns may only be appended) and set it where the row is built.
A row is built with its fields by name and changed with `dataclasses.replace`, so a
misspelt column is a TypeError at once instead of an empty cell. An unset field is the
empty cell (None); how a value prints is `harness.results.tables.cell_text`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.results.layout import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    FRONTIER_TSV,
    SELECTION_TSV,
    TIMING_LAUNCHES_TSV,
    TIMING_TRIALS_TSV,
    TIMING_TSV,
)

R = TypeVar("R", bound="Row")


@dataclass(frozen=True, kw_only=True)
class Row:
    """Base of the rows: the columns, the row as a dict, and the row read back from a record."""

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The TSV header: the field names, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def as_dict(self) -> dict[str, Any]:
        """{column: value} in column order (what events.jsonl records of an attempts row)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_record(cls: type[R], data: Mapping[str, Any]) -> R:
        """A row as recorded earlier (events.jsonl): its known columns, the others empty, so
        a record from an older or newer version still reads."""
        return cls(**{c: data.get(c) for c in cls.columns()})


@dataclass(frozen=True, kw_only=True)
class AttemptRow(Row):
    """capacity_attempts.tsv: one row per run (harness.pipeline.analysis.attempt_row)."""

    campaign: str
    model: str
    backend: str
    purpose: str | None = None
    attempt: int | None = None
    capacity: str | None = None
    capacity_tag: str | None = None
    uniform_tokens: int | None = None
    budget_tokens: int | None = None
    status: str | None = None
    rows: int | None = None
    malformed_rows: int | None = None
    saturated_rows: int | None = None
    peak_actual_valid_recv: int | None = None
    required_capacity: str | None = None
    cell_dir: str | None = None
    started_utc: str | None = None
    finished_utc: str | None = None
    wall_s: float | None = None
    # appended (not in docs/spec.md: results layout list; SPEC allows more columns at the end)
    backend_impl: str | None = None
    exit_code: int | None = None
    failure_line: str | None = None


@dataclass(frozen=True, kw_only=True)
class SelectionRow(Row):
    """capacity_selection.tsv: one row per (model, backend) selected."""

    campaign: str
    model: str
    backend: str
    required_capacity: str | None = None
    peak_actual_valid_recv: int | None = None
    uniform_tokens: int | None = None
    measured_at_capacity: str | None = None
    selected_capacity: str | None = None
    selected_budget_tokens: int | None = None
    over_provision: float | None = None
    validated: bool | None = None
    validate_attempts: int | None = None
    timing_capacity: str | None = None
    # held-out validation and drop risk (docs/drop-risk.md; harness.grid.heldout.risk_columns)
    validate_seed: int | None = None
    validate_steps: int | None = None
    validate_peak: int | None = None
    headroom: float | None = None            # selected budget / validate_peak
    drop_risk_95: str | None = None
    predicted_drop_risk: str | None = None
    predicted_drop_risk_hi: str | None = None
    held_out: bool | None = None
    backend_impl: str | None = None          # the measure run's (reference, megatron-core, ...)

    @classmethod
    def unselected(cls, *, campaign: str, model: str, backend: str,
                   uniform_tokens: int | None, measured_at_capacity: str,
                   backend_impl: str | None = None) -> SelectionRow:
        """The row of a pair whose last measure run did not end ok (does_not_fit, a failure,
        still a lower bound): where it measured, not validated, 0 validate attempts, every
        other column empty (the select step writes it; the audit expects it)."""
        return cls(campaign=campaign, model=model, backend=backend,
                   uniform_tokens=uniform_tokens, measured_at_capacity=measured_at_capacity,
                   validated=False, validate_attempts=0, backend_impl=backend_impl)


@dataclass(frozen=True, kw_only=True)
class TimingRow(Row):
    """timing.tsv: one row per (model, timed arm), over its launches."""

    campaign: str
    model: str
    backend: str
    timing_capacity: str | None = None
    budget_tokens: int | None = None
    status: str | None = None
    trials: int | None = None
    iters: int | None = None
    dispatch_ms_median: float | None = None
    dispatch_ms_p90: float | None = None
    combine_ms_median: float | None = None
    combine_ms_p90: float | None = None
    step_cv: float | None = None
    noise_floor_pct: float | None = None
    algbw_gbps: float | None = None
    peak_mem_bytes: int | None = None
    cell_dir: str | None = None
    launches: int | None = None
    # appended
    dispatch_ms_p10: float | None = None
    combine_ms_p10: float | None = None
    timer: str | None = None
    backend_impl: str | None = None
    # the physical limit (docs/timing-verdicts.md#the-physical-limit)
    peak_mem_source: str | None = None          # measured | modelled
    copies: str | None = None                   # per-expert | per-rank rows per dispatch
    dispatch_bytes_per_rank: float | None = None
    dispatch_local_bytes_per_rank: float | None = None
    combine_bytes_per_rank: float | None = None
    dispatch_gbps: float | None = None
    combine_gbps: float | None = None
    gpu: str | None = None
    link_gbps: float | None = None
    link_nccl_gbps: float | None = None
    dispatch_link_fraction: float | None = None
    combine_link_fraction: float | None = None
    link_note: str | None = None
    # equal work (docs/timing-verdicts.md#equal-work): slots the launches' buffers dropped
    dropped_slots: int | None = None


@dataclass(frozen=True, kw_only=True)
class ComparisonRow(Row):
    """comparison.tsv: one row per (model, arm other than the baseline, phase)."""

    campaign: str
    model: str
    backend: str
    baseline: str | None = None
    phase: str | None = None                 # dispatch | combine
    launches: int | None = None
    ratio_median: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    cv_backend: float | None = None
    cv_baseline: float | None = None
    verdict: str | None = None
    # appended
    reason: str | None = None
    halfwidth: float | None = None           # the CI's relative half-width, exp(t * se) - 1
    mde: float | None = None                 # minimum detectable effect at these launches
    resolution: float | None = None          # timing.resolution asked (empty: none)
    resolved: bool | None = None             # halfwidth <= resolution
    stopped_by: str | None = None            # launches | resolution | max_launches
    # equal work (docs/timing-verdicts.md#equal-work): each arm's timing.tsv status and
    # dropped slots, and the arm's bytes per rank over the baseline's in this phase
    status: str | None = None
    dropped_slots: int | None = None
    baseline_status: str | None = None
    baseline_dropped_slots: int | None = None
    bytes_ratio: float | None = None
    backend_impl: str | None = None


@dataclass(frozen=True, kw_only=True)
class TimingLaunchRow(Row):
    """timing_launches.tsv: one row per timed launch and phase (the per-launch figures that
    timing.tsv aggregates), in milliseconds."""

    campaign: str
    model: str
    backend: str
    launch: int                     # 1, 2, ...: the arm's launches in the order they ran
    phase: str                      # dispatch | combine
    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    trials: int | None = None
    cell_dir: str | None = None
    backend_impl: str | None = None


@dataclass(frozen=True, kw_only=True)
class TimingTrialRow(Row):
    """timing_trials.tsv: one row per trial median of a usable timed launch and phase, the
    values every timing.tsv and comparison.tsv figure is computed from (ms)."""

    campaign: str
    model: str
    backend: str
    launch: int                     # the rotation round + 1: launch i of two arms is a pair
    phase: str                      # dispatch | combine
    trial: int                      # 1, 2, ...: the trial within its launch
    ms: float                       # that trial's median step time
    cell_dir: str | None = None
    backend_impl: str | None = None


@dataclass(frozen=True, kw_only=True)
class FrontierRow(Row):
    """frontier.tsv: one row per (model, selected backend, rung) of the capacity frontier
    (docs/frontier.md): the rung's budget and slack, its timed launch (status, dropped
    slots, times, the timer's resolution, peak memory) and its held-out drop risk."""

    campaign: str
    model: str
    backend: str
    rung: str                                # 0: the validated selection; -k .. +k around it
                                             # (signed text: "-1", "0", "+1"; grid.capacity.rung_text)
    capacity: str
    budget_tokens: int | None = None
    selected: bool | None = None             # rung 0: capacity_selection's selected_capacity
    over_provision: float | None = None      # budget / the measured peak (1.10: wastes 10%)
    status: str | None = None                # the rung's timed launch: ok | drops | ...
    dropped_slots: int | None = None
    dispatch_ms_median: float | None = None
    dispatch_ms_p10: float | None = None
    dispatch_ms_p90: float | None = None
    combine_ms_median: float | None = None
    combine_ms_p10: float | None = None
    combine_ms_p90: float | None = None
    trials: int | None = None
    noise_floor_pct: float | None = None     # the launch's trial-to-trial spread (resolution)
    timer: str | None = None
    peak_mem_bytes: int | None = None
    peak_mem_source: str | None = None       # modelled (harness/loadmodel/memory.py) | measured
    heldout_steps: int | None = None
    heldout_dropped_steps: int | None = None  # held-out steps whose peak exceeds the budget
    drop_risk_95: str | None = None
    predicted_drop_risk: str | None = None
    predicted_drop_risk_hi: str | None = None
    cell_dir: str | None = None
    backend_impl: str | None = None


@dataclass(frozen=True, kw_only=True)
class LadderRow(Row):
    """ladder.tsv: one row per (ladder step, model, timed arm) of the imbalance ladder
    (docs/ladder.md), gathered from that step's own campaign: its imbalance, the arm's
    required capacity, timing.tsv figures and comparison.tsv dispatch verdict."""

    campaign: str                            # the runbook that asked for the ladder
    step: int                                # 1, 2, ...: the ladder's order
    routing_sigma: float
    step_campaign: str                       # the step's campaign (its own results directory)
    model: str
    backend: str
    raw_imbalance: float | None = None       # max:mean of the raw (pre-balance) demand
    required_capacity: str | None = None     # max over the arm's clean time launches
    selected_capacity: str | None = None     # the step's capacity_selection.tsv (select arms)
    drop_risk_95: str | None = None          # the same row's held-out bound
    timing_capacity: str | None = None
    status: str | None = None
    dropped_slots: int | None = None
    dispatch_ms_median: float | None = None
    dispatch_ms_p10: float | None = None
    dispatch_ms_p90: float | None = None
    baseline: str | None = None
    ratio_median: float | None = None        # dispatch, against the baseline
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None
    backend_impl: str | None = None


ATTEMPT_COLUMNS = AttemptRow.columns()
SELECTION_COLUMNS = SelectionRow.columns()
TIMING_COLUMNS = TimingRow.columns()
COMPARISON_COLUMNS = ComparisonRow.columns()
TIMING_LAUNCH_COLUMNS = TimingLaunchRow.columns()
TIMING_TRIAL_COLUMNS = TimingTrialRow.columns()
FRONTIER_COLUMNS = FrontierRow.columns()
LADDER_COLUMNS = LadderRow.columns()

# each results table's file name (harness/results/layout.py) and the row type it holds
ROW_TYPES: dict[str, type[Row]] = {
    ATTEMPTS_TSV: AttemptRow, SELECTION_TSV: SelectionRow, TIMING_TSV: TimingRow,
    COMPARISON_TSV: ComparisonRow, TIMING_LAUNCHES_TSV: TimingLaunchRow,
    TIMING_TRIALS_TSV: TimingTrialRow, FRONTIER_TSV: FrontierRow}
