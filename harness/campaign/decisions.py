"""Per-model decisions: measure, select, validate, time (docs/spec.md: pipeline).

Pure: a model's pipeline is a generator that yields the runs (`Request`) it needs and
receives their `Outcome`s; the driver runs them or replays them from the events, so the
decisions of a resumed campaign are the same as an uninterrupted one's. The order of the
steps is the stage table's (`stages.pipeline_groups`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any

from harness import capacity as cap
from harness import selection
from harness.campaign.stages import PAIR, backends_of, pipeline_groups, stage_mode
from harness.errors import BadInput
from harness.plan import Cell
from harness.results import SELECTION_COLUMNS, TIMING_COLUMNS
from harness.runbook import Runbook
from harness.vocab import TIMED_OK, Purpose, Stage, StageMode, Status

TIMING_KEYS = ("dispatch_ms_median", "dispatch_ms_p90", "combine_ms_median", "combine_ms_p90",
               "step_cv", "noise_floor_pct", "algbw_gbps", "peak_mem_bytes",
               "dispatch_ms_p10", "combine_ms_p10", "timer", "backend_impl")


@dataclasses.dataclass
class Request:
    """A run a pipeline asks for."""

    model: str
    backend: str
    purpose: str
    capacity: str


@dataclasses.dataclass
class Outcome:
    """A finished run as the pipelines see it (from a live run or replayed from events)."""

    cell: Cell
    status: str
    summary: Any                     # telemetry.LogSummary, or None (no logs)
    timing: dict | None
    row: dict
    failure: dict


class Context:
    """What pipelines read: runbook, stage gates and the shared selection/timing state."""

    def __init__(self, runbook: Runbook, stages: tuple[str, ...], until: str | None):
        self.runbook = runbook
        self.stages = stages
        self.until = until
        self.selection: dict[tuple[str, str], dict] = {}
        self.timing: dict[tuple[str, str], dict] = {}
        self.skipped: set[tuple[str, str, str]] = set()
        self.dirty = False

    def stage_mode(self, stage: str) -> StageMode:
        """RUN, REPLAY (must come from earlier results) or STOP for a stage."""
        return stage_mode(stage, self.stages, self.until)

    def n_of(self, model: str) -> int:
        return self.runbook.shape.uniform_tokens(self.runbook.model(model).topk)

    def set_selection(self, model: str, backend: str, row: dict) -> None:
        self.selection[(model, backend)] = row
        self.dirty = True


def selection_row(ctx: Context, model: str, backend: str, **values) -> dict:
    base = {c: None for c in SELECTION_COLUMNS}
    base.update(campaign=ctx.runbook.campaign, model=model, backend=backend,
                uniform_tokens=ctx.n_of(model))
    base.update(values)
    return base


def validation_ok(summary: Any) -> bool:
    """Zero drops shown: rows present, none saturated, none malformed, none missing."""
    try:
        return selection.validation_verdict(summary) == "accept"
    except BadInput:
        return False


Pipe = Generator[Request, Outcome, None]
# A pair step: (ctx, model, backend, state) -> generator; False from it ends the pair.
PairStep = Callable[[Context, str, str, dict], Generator[Request, Outcome, bool]]


def measure_step(ctx: Context, model: str, backend: str, state: dict
                 ) -> Generator[Request, Outcome, bool]:
    """Measure (re-measuring lower bounds, bounded); keeps the outcome used in `state`."""
    rb = ctx.runbook
    n, pad = ctx.n_of(model), rb.capacity.pad_multiple
    capacity = rb.capacity.measure
    for tries in range(rb.capacity.max_remeasure + 1):
        out = yield Request(model, backend, Purpose.MEASURE, capacity)
        if out.status != Status.LOWER_BOUND or tries == rb.capacity.max_remeasure:
            break
        capacity = selection.remeasure_capacity(capacity, n, pad, lower_bound_peak(out))
    state.update(outcome=out, capacity=capacity)
    return True


def lower_bound_peak(out: Outcome) -> int:
    """What a lower-bound measure saw: its telemetry peak, or the receive demand an overflow
    report stated when larger (docs/taxonomy.md); 0 when neither exists."""
    stated = (out.failure or {}).get("stated_demand") or 0
    try:
        peak = selection.requirement(out.summary).peak if out.summary is not None else 0
    except BadInput:                 # no telemetry rows: the overflow report is all there is
        peak = 0
    return max(peak, stated)


def select_step(ctx: Context, model: str, backend: str, state: dict
                ) -> Generator[Request, Outcome, bool]:
    """Round the requirement onto the grid; an empty row (and no validate) when none."""
    out: Outcome = state["outcome"]
    if out.status != Status.OK:          # does_not_fit, a failure, or still a lower bound
        ctx.set_selection(model, backend, selection_row(
            ctx, model, backend, measured_at_capacity=state["capacity"], validated=False,
            validate_attempts=0))
        ctx.skipped.add((model, backend, Purpose.VALIDATE))
        return False
    rb = ctx.runbook
    req = selection.requirement(out.summary)
    sel = selection.select(req, rb.capacity.pad_multiple, rb.capacity.decimals)
    row = selection_row(ctx, model, backend, required_capacity=req.required_capacity,
                        peak_actual_valid_recv=req.peak, measured_at_capacity=state["capacity"],
                        selected_capacity=sel.capacity, selected_budget_tokens=sel.budget,
                        over_provision=sel.over_provision, validated=False,
                        validate_attempts=0)
    ctx.set_selection(model, backend, row)
    state["row"] = row
    return True
    yield  # pragma: no cover - a generator that makes no runs


def validate_step(ctx: Context, model: str, backend: str, state: dict
                  ) -> Generator[Request, Outcome, bool]:
    """Validate at the selection; on drops step up one rung (bounded), recording each try."""
    rb = ctx.runbook
    n, pad = ctx.n_of(model), rb.capacity.pad_multiple
    row = state["row"]
    capacity = row["selected_capacity"]
    for step in range(rb.capacity.max_validate_steps + 1):
        out = yield Request(model, backend, Purpose.VALIDATE, capacity)
        accepted = out.status == Status.OK and validation_ok(out.summary)
        budget = cap.budget_tokens(capacity, n)
        row = {**row, "selected_capacity": capacity, "selected_budget_tokens": budget,
               "over_provision": (cap.over_provision(budget, row["peak_actual_valid_recv"])
                                  if row["peak_actual_valid_recv"] else None),
               "validated": accepted, "validate_attempts": step + 1}
        ctx.set_selection(model, backend, row)
        if accepted or out.status != Status.DROPS or step == rb.capacity.max_validate_steps:
            break
        capacity = cap.step_up(capacity, n, pad, rb.capacity.decimals)
    return True


def time_step(ctx: Context, model: str) -> Pipe:
    """Every timed backend at max(selected capacity) over the select backends."""
    rb = ctx.runbook
    chosen = {b.name: ctx.selection[(model, b.name)]["selected_capacity"]
              for b in rb.backends
              if b.select and ctx.selection.get((model, b.name), {}).get("selected_capacity")}
    timed = [b for b in rb.backends if b.time]
    if not chosen:
        ctx.skipped.update((model, b.name, Purpose.TIME) for b in timed)
        return
    tcap = selection.timing_capacity(chosen)
    for b in rb.backends:
        if b.select and (model, b.name) in ctx.selection:
            ctx.set_selection(model, b.name, {**ctx.selection[(model, b.name)],
                                              "timing_capacity": tcap})
    for b in timed:
        out = yield Request(model, b.name, Purpose.TIME, tcap)
        ctx.timing[(model, b.name)] = timing_row(ctx.n_of(model), out)
        ctx.dirty = True


def timing_row(n: int, out: Outcome) -> dict:
    """A timing.tsv row; figures only from the run's [EPCAP_TIMING] line, else empty."""
    cell = out.cell
    row = {c: None for c in TIMING_COLUMNS}
    row.update(campaign=cell.campaign, model=cell.model, backend=cell.backend,
               timing_capacity=cell.capacity, budget_tokens=cap.budget_tokens(cell.capacity, n),
               status=out.status, cell_dir=out.row.get("cell_dir"))
    if out.timing and out.status in TIMED_OK:
        row.update(trials=out.timing.get("trials"), iters=out.timing.get("iters"))
        row.update({k: out.timing.get(k) for k in TIMING_KEYS})
    return row


PAIR_STEPS: dict[str, PairStep] = {Stage.MEASURE: measure_step, Stage.SELECT: select_step,
                                   Stage.VALIDATE: validate_step}
MODEL_STEPS: dict[str, Callable[[Context, str], Pipe]] = {Stage.TIME: time_step}


def model_pipeline(ctx: Context, model: str) -> Pipe:
    """One model's runs in stage-table order: per select backend measure -> select ->
    validate, then the model-scope stages (time); a stage outside --stage/--until stops."""
    for scope, specs in pipeline_groups():
        if scope == PAIR:
            for b in backends_of(ctx.runbook, specs[0]):
                state: dict = {}
                for spec in specs:
                    if ctx.stage_mode(spec.stage) == StageMode.STOP:
                        break
                    if not (yield from PAIR_STEPS[spec.stage](ctx, model, b.name, state)):
                        break
            continue
        for spec in specs:
            if ctx.stage_mode(spec.stage) == StageMode.STOP:
                return
            yield from MODEL_STEPS[spec.stage](ctx, model)
