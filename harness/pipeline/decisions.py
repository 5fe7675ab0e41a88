"""Per-model decisions: measure, select, validate, frontier, time (docs/spec.md: pipeline).

Pure: a model's pipeline is a generator that yields the runs (`Request`) it needs and
receives their `Outcome`s; the driver runs them or replays them from the events, so the
decisions of a resumed campaign are the same as an uninterrupted one's. The order of the
steps is the stage table's (`stages.pipeline_groups`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any

from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.grid import selection
from harness.grid.heldout import TARGET_PEAK, risk_columns, rung_risk, select_budget
from harness.pipeline.stages import (
    PAIR,
    SPEC_OF,
    backends_of,
    pipeline_groups,
    stage_mode,
    timed_arms,
)
from harness.results.layout import Cell
from harness.results.rows import (
    AttemptRow,
    ComparisonRow,
    FrontierRow,
    SelectionRow,
    TimingRow,
    TimingTrialRow,
)
from harness.runbook.model import Runbook
from harness.telemetry.steps import StepPeaks
from harness.timing import verdicts
from harness.vocab import CONTROL_SUFFIX, Purpose, Stage, StageMode, Status


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
    row: AttemptRow                  # its capacity_attempts.tsv row
    failure: dict
    steps: StepPeaks | None = None   # per-step peaks of a measure/validate run (harness.telemetry.steps)


# The capacity_selection.tsv columns each pair stage writes (its own columns: a stage not
# listed writes none). A pair a step ends leaves those of every later pair stage empty.
SELECT_COLUMNS = ("required_capacity", "peak_actual_valid_recv", "selected_capacity",
                  "selected_budget_tokens", "over_provision")
VALIDATE_COLUMNS = ("validate_seed", "validate_steps", "validate_peak", "headroom",
                    "drop_risk_95", "predicted_drop_risk", "predicted_drop_risk_hi", "held_out")
SELECTION_COLUMNS_OF: dict[str, tuple[str, ...]] = {Stage.SELECT: SELECT_COLUMNS,
                                                    Stage.VALIDATE: VALIDATE_COLUMNS}


@dataclasses.dataclass(frozen=True)
class Stop:
    """A pair a step ended: which (model, backend), the stage whose step ended it, why, and
    the capacity_selection.tsv columns it leaves empty (`empty`: the step's own unwritten
    ones, then those of every later pair stage). The pipeline states it; the audit, which
    replays the pipeline, reads it instead of restating when a pair may end."""

    pair: tuple[str, str]
    stage: str
    why: str
    empty: tuple[str, ...] = ()


def later_pair_stages(stage: str) -> list[str]:
    """The pair stages after `stage` in the stage table (none when it is not a pair stage)."""
    for scope, specs in pipeline_groups():
        names = [s.stage for s in specs]
        if scope == PAIR and stage in names:
            return names[names.index(stage) + 1:]
    return []


class Context:
    """What pipelines read: runbook, stage gates and the shared selection/timing state."""

    def __init__(self, runbook: Runbook, stages: tuple[str, ...], until: str | None,
                 models: tuple[str, ...] = (), backends: tuple[str, ...] = ()):
        self.runbook = runbook
        self.stages = stages
        self.until = until
        self.models = frozenset(models)        # --model: empty = every model
        self.backends = frozenset(backends)    # --backend: empty = every backend
        self.deferred: set[tuple[str, str]] = set()   # pairs left for lack of selection
        self.selection: dict[tuple[str, str], SelectionRow] = {}
        self.timing: dict[tuple[str, str], TimingRow] = {}
        self.comparison: dict[str, list[ComparisonRow]] = {}      # by model
        self.trials: dict[str, list[TimingTrialRow]] = {}         # by model
        self.frontier: dict[tuple[str, str], list[FrontierRow]] = {}   # by pair, rungs ascending
        self.skipped: set[tuple[str, str, str]] = set()
        self.pairs_ended: set[tuple[str, str]] = set()   # pairs whose pair stages all ran
        self.stops: dict[tuple[str, str], Stop] = {}     # pairs a step ended, and why
        self.dirty = False

    def selected(self, model: str | None, backend: str) -> bool:
        """Whether --model/--backend let this pair run new cells (a control arm counts as
        its baseline; a canary, model None, only asks for its backend)."""
        base = backend.removesuffix(CONTROL_SUFFIX)
        return ((model is None or not self.models or model in self.models)
                and (not self.backends or base in self.backends))

    def stage_mode(self, stage: str) -> StageMode:
        """RUN, REPLAY (must come from earlier results) or STOP for a stage."""
        return stage_mode(stage, self.stages, self.until)

    def n_of(self, model: str) -> int:
        return self.runbook.shape.uniform_tokens(self.runbook.model(model).topk)

    def set_selection(self, model: str, backend: str, row: SelectionRow) -> None:
        self.selection[(model, backend)] = row
        self.dirty = True

    def stop(self, model: str, backend: str, stage: str, why: str,
             empty: tuple[str, ...] = ()) -> Stop:
        """Record that the `stage` step ends this pair (it then returns False): the later
        pair stages make no runs (`skipped`) and their selection columns stay empty."""
        later = later_pair_stages(stage)
        stop = Stop((model, backend), stage, why, tuple(dict.fromkeys(
            [*empty, *(c for s in later for c in SELECTION_COLUMNS_OF.get(s, ()))])))
        self.stops[(model, backend)] = stop
        self.skipped.update((model, backend, SPEC_OF[s].purpose) for s in later
                            if SPEC_OF[s].purpose is not None)
        return stop


def selection_row(ctx: Context, model: str, backend: str, **values) -> SelectionRow:
    """A capacity_selection.tsv row of this campaign's (model, backend) with `values`."""
    return SelectionRow(campaign=ctx.runbook.campaign, model=model, backend=backend,
                        uniform_tokens=ctx.n_of(model), **values)


Pipe = Generator[Request, Outcome, None]
# A pair step: (ctx, model, backend, state) -> True to go on, False to end the pair; a step
# that makes runs is a generator of Requests returning that answer.
PairStep = Callable[[Context, str, str, dict], "Generator[Request, Outcome, bool] | bool"]


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


def select_step(ctx: Context, model: str, backend: str, state: dict) -> bool:
    """Round the requirement onto the grid; an empty row (and no validate) when none."""
    out: Outcome = state["outcome"]
    if out.status != Status.OK:          # does_not_fit, a failure, or still a lower bound
        ctx.set_selection(model, backend, SelectionRow.unselected(
            campaign=ctx.runbook.campaign, model=model, backend=backend,
            uniform_tokens=ctx.n_of(model), measured_at_capacity=state["capacity"],
            backend_impl=out.row.backend_impl))
        ctx.stop(model, backend, Stage.SELECT, f"its last measure ended {out.status}, not "
                 f"{Status.OK}: nothing to select", empty=SELECT_COLUMNS)
        return False
    rb = ctx.runbook
    req = selection.requirement(out.summary)
    sel = selection.select(req, rb.capacity.pad_multiple, rb.capacity.decimals)
    if rb.capacity.target != TARGET_PEAK:
        sel = select_budget(rb.capacity.target, req.peak, req.uniform_tokens,
                            rb.capacity.pad_multiple, rb.capacity.decimals, out.steps)
    row = selection_row(ctx, model, backend, required_capacity=req.required_capacity,
                        peak_actual_valid_recv=req.peak, measured_at_capacity=state["capacity"],
                        selected_capacity=sel.capacity, selected_budget_tokens=sel.budget,
                        over_provision=sel.over_provision, validated=False,
                        validate_attempts=0, backend_impl=out.row.backend_impl)
    ctx.set_selection(model, backend, row)
    state["row"] = row
    return True


def validate_step(ctx: Context, model: str, backend: str, state: dict
                  ) -> Generator[Request, Outcome, bool]:
    """Validate at the selection; on drops step up one rung (bounded), recording each try."""
    rb = ctx.runbook
    n, pad = ctx.n_of(model), rb.capacity.pad_multiple
    row: SelectionRow = state["row"]
    capacity = row.selected_capacity
    held_out = rb.held_out_routing(backend)
    for step in range(rb.capacity.max_validate_steps + 1):
        out = yield Request(model, backend, Purpose.VALIDATE, capacity)
        accepted = out.status == Status.OK and selection.validation_ok(out.summary)
        budget = cap.budget_tokens(capacity, n)
        row = dataclasses.replace(
            row, selected_capacity=capacity, selected_budget_tokens=budget,
            over_provision=(cap.over_provision(budget, row.peak_actual_valid_recv)
                            if row.peak_actual_valid_recv else None),
            validated=accepted, validate_attempts=step + 1,
            **risk_columns(budget, rb.validate.seed, held_out, state["outcome"].steps,
                           out.steps, accepted))
        ctx.set_selection(model, backend, row)
        state.update(validate_outcome=out, accepted=accepted)
        if not selection.steps_up(out.status, accepted, step, rb.capacity.max_validate_steps):
            break
        capacity = cap.step_up(capacity, n, pad, rb.capacity.decimals)
    return True


def frontier_step(ctx: Context, model: str, backend: str, state: dict
                  ) -> Generator[Request, Outcome, bool]:
    """The capacity frontier of a selected, timed pair (runbook `frontier: {rungs: k}`,
    docs/frontier.md): one timed launch at the validated rung and at k executable rungs
    below and above it, each row with its budget, slack over the measured peak, the launch's
    status, dropped slots, times and memory, and the held-out drop risk at that budget
    (heldout.rung_risk). Nothing when the runbook asks for no frontier or the pair is not
    timed; it never ends the pair."""
    rb = ctx.runbook
    row: SelectionRow | None = state.get("row")
    if not rb.frontier_rungs or row is None or not rb.backend(backend).time:
        ctx.skipped.add((model, backend, Purpose.FRONTIER))
        return True
    n, pad = ctx.n_of(model), rb.capacity.pad_multiple
    selected = ctx.selection[(model, backend)]
    measure_steps = state["outcome"].steps
    validated = state.get("validate_outcome")
    rows = []
    for offset, capacity in cap.rungs_around(selected.selected_capacity, rb.frontier_rungs, n,
                                             pad, rb.capacity.decimals):
        out = yield Request(model, backend, Purpose.FRONTIER, capacity)
        rows.append(frontier_row(ctx, out, offset=offset, peak=selected.peak_actual_valid_recv,
                                 risk=rung_risk(
                                     cap.budget_tokens(capacity, n), rb.held_out_routing(backend),
                                     measure_steps, validated.steps if validated else None,
                                     bool(state.get("accepted")))))
        ctx.frontier[(model, backend)] = list(rows)
        ctx.dirty = True
    return True


def frontier_row(ctx: Context, out: Outcome, *, offset: int, peak: int | None,
                 risk: dict) -> FrontierRow:
    """One frontier.tsv row: a rung's timed launch (figures as timing.tsv's, verdicts.
    launch_figures of that one launch) beside its drop risk (`risk`: heldout.rung_risk)."""
    cell, n = out.cell, ctx.n_of(out.cell.model)
    budget = cap.budget_tokens(cell.capacity, n)
    figures = verdicts.launch_figures([(out.status, out.timing)])
    summary = out.summary
    return FrontierRow(
        campaign=cell.campaign, model=cell.model, backend=cell.backend,
        rung=cap.rung_text(offset),
        capacity=cell.capacity, budget_tokens=budget, selected=offset == 0,
        over_provision=cap.over_provision(budget, peak) if peak else None,
        status=out.status,
        dropped_slots=summary.dropped_slots if getattr(summary, "rows", 0) else None,
        **{k: figures.get(k) for k in (
            "dispatch_ms_median", "dispatch_ms_p10", "dispatch_ms_p90", "combine_ms_median",
            "combine_ms_p10", "combine_ms_p90", "trials", "noise_floor_pct", "timer",
            "peak_mem_bytes", "peak_mem_source")},
        **risk, cell_dir=out.row.cell_dir,
        backend_impl=figures.get("backend_impl") or out.row.backend_impl)


def time_step(ctx: Context, model: str) -> Pipe:
    """Every timed arm (the timed backends, plus `<baseline>~control` when timing.control)
    at max(selected capacity) over the select backends, in rounds of rotated order: the
    first timing.launches rounds always, then, with a timing.resolution, further rounds
    until every comparison's interval is that narrow or timing.max_launches rounds ran;
    then the model's comparison and trial rows (docs/timing-verdicts.md)."""
    rb = ctx.runbook
    picked = {b.name: ctx.selection.get((model, b.name)) for b in rb.backends if b.select}
    chosen = {name: row.selected_capacity for name, row in picked.items()
              if row is not None and row.selected_capacity}
    baseline, arms = timed_arms(rb)
    if not chosen or baseline is None:
        ctx.skipped.update((model, arm, Purpose.TIME) for arm in arms)
        return
    tcap = selection.timing_capacity(chosen)
    for b in rb.backends:
        if b.select and (model, b.name) in ctx.selection:
            ctx.set_selection(model, b.name, dataclasses.replace(
                ctx.selection[(model, b.name)], timing_capacity=tcap))
    usable: dict[str, list[dict | None]] = {arm: [] for arm in arms}
    dirs: dict[str, list[str | None]] = {arm: [] for arm in arms}
    outs: dict[str, list[Outcome]] = {arm: [] for arm in arms}
    t = rb.timing
    rounds, stop, rows = 0, None, []
    while stop is None:
        for arm in verdicts.rotation(arms, rounds):
            usable[arm].append(None)
            dirs[arm].append(None)
            if outs[arm] and verdicts.stops_launches(outs[arm][-1].status):
                ctx.skipped.add((model, arm, Purpose.TIME))     # out of memory is not a fluke
                continue
            out = yield Request(model, arm, Purpose.TIME, tcap)
            outs[arm].append(out)
            usable[arm][rounds] = verdicts.usable(out.status, out.timing)
            dirs[arm][rounds] = out.row.cell_dir
            ctx.timing[(model, arm)] = timing_row(ctx.n_of(model), outs[arm])
            ctx.dirty = True
        rounds += 1
        if rounds < t.launches:
            continue                 # the first timing.launches rounds always run
        why = {arm: f"no usable launch (timing status {ctx.timing[(model, arm)].status})"
               for arm in arms if (model, arm) in ctx.timing and not any(usable[arm])}
        work = {arm: {"status": row.status, "dropped_slots": row.dropped_slots,
                      "backend_impl": row.backend_impl}
                for arm in arms if (row := ctx.timing.get((model, arm))) is not None}
        rows = verdicts.comparison_rows(rb.campaign, model, usable, baseline, t.max_cv, why,
                                        t.resolution, work)
        stop = verdicts.launches_done(rows, rounds, t.launches, t.resolution, t.launch_cap)
    ctx.comparison[model] = [ComparisonRow(**{**r, "stopped_by": stop}) for r in rows]
    impl = {arm: row.backend_impl for arm in arms
            if (row := ctx.timing.get((model, arm))) is not None}
    ctx.trials[model] = [TimingTrialRow(campaign=rb.campaign, model=model,
                                        backend_impl=impl.get(r["backend"]), **r)
                         for r in verdicts.trial_records(usable, dirs)]
    ctx.dirty = True


def timing_row(n: int, outs: list[Outcome]) -> TimingRow:
    """An arm's timing.tsv row over its launches; figures only from the runs' [EPCAP_TIMING]
    lines (verdicts.launch_figures), else empty; status verdicts.row_status; dropped_slots
    the sum over its launches' dispatch rows (the runs that made any); backend_impl the
    timing line's, else the first run's (a does_not_fit arm has no timing line)."""
    cell = outs[0].cell
    figures = verdicts.launch_figures([(o.status, o.timing) for o in outs])
    if not figures.get("backend_impl"):
        figures["backend_impl"] = outs[0].row.backend_impl
    summaries = [o.summary for o in outs if getattr(o.summary, "rows", 0)]
    return TimingRow(campaign=cell.campaign, model=cell.model, backend=cell.backend,
                     timing_capacity=cell.capacity,
                     budget_tokens=cap.budget_tokens(cell.capacity, n),
                     status=verdicts.row_status([o.status for o in outs]),
                     cell_dir=outs[0].row.cell_dir,
                     dropped_slots=(sum(s.dropped_slots for s in summaries) if summaries
                                    else None),
                     **figures)


PAIR_STEPS: dict[str, PairStep] = {Stage.MEASURE: measure_step, Stage.SELECT: select_step,
                                   Stage.VALIDATE: validate_step,
                                   Stage.FRONTIER: frontier_step}
MODEL_STEPS: dict[str, Callable[[Context, str], Pipe]] = {Stage.TIME: time_step}


def model_pipeline(ctx: Context, model: str) -> Pipe:
    """One model's runs in stage-table order: per select backend measure -> select ->
    validate, then the model-scope stages (time); a stage outside --stage/--until stops.
    A pair step that returns False ends its pair: its Stop is in `ctx.stops` (the step's
    own, or one naming the stage when the step stated none)."""
    for scope, specs in pipeline_groups():
        if scope == PAIR:
            for b in backends_of(ctx.runbook, specs[0]):
                state: dict = {}
                for spec in specs:
                    if ctx.stage_mode(spec.stage) == StageMode.STOP:
                        break
                    stated = ctx.stops.get((model, b.name))
                    step = PAIR_STEPS[spec.stage](ctx, model, b.name, state)
                    if not ((yield from step) if isinstance(step, Generator) else step):
                        if ctx.stops.get((model, b.name)) is stated:   # it stated no Stop
                            ctx.stop(model, b.name, spec.stage,
                                     f"its {spec.stage} step ended the pair")
                        break
                ctx.pairs_ended.add((model, b.name))     # its selection row is final
            continue
        for spec in specs:
            if ctx.stage_mode(spec.stage) == StageMode.STOP:
                return
            yield from MODEL_STEPS[spec.stage](ctx, model)
