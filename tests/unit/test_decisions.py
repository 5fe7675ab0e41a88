"""harness.pipeline.decisions: measure, select, validate, time and their order, against
each step's contract, with generated outcomes (no process, no campaign)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.grid import capacity as cap
from harness.grid import selection
from harness.pipeline import decisions as dec
from harness.pipeline.decisions import (
    SELECT_COLUMNS,
    VALIDATE_COLUMNS,
    Context,
    Outcome,
    Request,
    later_pair_stages,
    lower_bound_peak,
    measure_step,
    model_pipeline,
    select_step,
    time_step,
    timing_row,
    validate_step,
)
from harness.results.layout import Cell
from harness.results.rows import AttemptRow, SelectionRow
from harness.runbook.load import load_runbook
from harness.telemetry.steps import StepPeaks
from harness.telemetry.summary import LogSummary
from harness.vocab import Purpose, Stage, StageMode, Status

RUNBOOK = Path(__file__).resolve().parents[2] / "runbooks" / "local-cpu.yaml"
RB = load_runbook(RUNBOOK)
MODEL = "QWEN3_30B"
N = RB.shape.uniform_tokens(RB.model(MODEL).topk)
PAD = RB.capacity.pad_multiple
FAST = settings(max_examples=40, deadline=None, derandomize=True)
NOT_OK = [s for s in Status if s != Status.OK]


def runbook(**capacity) -> object:
    """The default runbook with some capacity settings replaced."""
    return dataclasses.replace(RB, capacity=dataclasses.replace(RB.capacity, **capacity))


def summary(peak: int, saturated: int = 0, rows: int = 12, malformed: int = 0,
            complete: bool = True) -> LogSummary:
    """A measure/validate summary whose peak is `peak`."""
    return LogSummary(rows=rows, expected_recv=N, peak_actual_valid_recv=peak,
                      required_capacity=peak / N, lower_bound=saturated > 0,
                      saturated_rows=saturated, malformed_rows=malformed, complete=complete,
                      missing_rows=0 if complete else 1)


def outcome(req: Request, status: str, summ: LogSummary | None = None, attempt: int = 1,
            failure: dict | None = None, timing: dict | None = None) -> Outcome:
    """The Outcome of `req` as a run would give it."""
    cell = Cell(RB.campaign, req.model, req.backend, req.purpose, req.capacity, attempt)
    row = AttemptRow(campaign=RB.campaign, model=req.model, backend=req.backend,
                     purpose=req.purpose, capacity=req.capacity, status=status,
                     cell_dir=f"cells/{cell.name}")
    return Outcome(cell, status, summ, timing, row, failure or {})


def run_step(gen, answers):
    """Drive a step generator, answering its i-th request with answers(i, req); returns
    (requests, the step's return value)."""
    asked, out = [], None
    try:
        while True:
            req = gen.send(out) if asked else next(gen)
            asked.append(req)
            out = answers(len(asked) - 1, req)
    except StopIteration as stop:
        return asked, stop.value


# --- measure -------------------------------------------------------------------------------

@FAST
@given(max_remeasure=st.integers(0, 3), lower=st.integers(0, 5),
       peaks=st.lists(st.integers(N // 2, 6 * N), min_size=6, max_size=6),
       stated=st.lists(st.one_of(st.none(), st.integers(0, 8 * N)), min_size=6, max_size=6))
def test_measure_remeasures_each_lower_bound_at_twice_its_demand(max_remeasure, lower, peaks,
                                                                 stated):
    """The first `lower` measures are lower bounds: each is re-measured at
    remeasure_capacity(its capacity, its demand), at most max_remeasure times; the last
    outcome and its capacity are kept. Catches an unbounded or short re-measure loop, a
    re-measure at the old capacity, and the wrong outcome kept."""
    ctx = Context(runbook(max_remeasure=max_remeasure), (), None)
    outs = []

    def answer(i, req):
        status = Status.LOWER_BOUND if i < lower else Status.OK
        failure = {"stated_demand": stated[i]} if stated[i] is not None else {}
        outs.append(outcome(req, status, summary(peaks[i], saturated=int(i < lower)),
                            failure=failure))
        return outs[-1]

    state: dict = {}
    asked, went_on = run_step(measure_step(ctx, MODEL, "echo", state), answer)
    assert went_on is True
    assert len(asked) == min(lower, max_remeasure) + 1
    assert {r.purpose for r in asked} == {Purpose.MEASURE}
    want = RB.capacity.measure
    for i, req in enumerate(asked):
        assert (req.model, req.backend, req.capacity) == (MODEL, "echo", want)
        want = selection.remeasure_capacity(want, N, PAD, max(peaks[i], stated[i] or 0))
    assert state["outcome"] is outs[-1] and state["capacity"] == asked[-1].capacity


@FAST
@given(peak=st.one_of(st.none(), st.integers(1, 10 * N)), rows=st.integers(0, 3),
       stated=st.one_of(st.none(), st.integers(0, 10 * N)), no_failure=st.booleans())
def test_lower_bound_peak_is_the_larger_of_telemetry_and_stated_demand(peak, rows, stated,
                                                                        no_failure):
    """What a lower bound saw: max(telemetry peak, stated demand), each 0 when absent (no
    summary, no rows, no failure dict). Catches min for max, or a missing source dropped."""
    req = Request(MODEL, "echo", Purpose.MEASURE, "2.00")
    summ = None if peak is None else summary(peak, rows=rows)
    failure = None if no_failure else ({"stated_demand": stated} if stated is not None else {})
    out = outcome(req, Status.LOWER_BOUND, summ)
    out = dataclasses.replace(out, failure=failure)
    seen = peak if (peak is not None and rows) else 0
    assert lower_bound_peak(out) == max(seen, 0 if no_failure else (stated or 0))


# --- select --------------------------------------------------------------------------------

@FAST
@given(status=st.sampled_from(NOT_OK), measured=st.sampled_from(["2.00", "4.00", "8.00"]))
def test_select_after_a_measure_that_is_not_ok_writes_an_empty_row_and_ends_the_pair(
        status, measured):
    """A last measure that is not ok selects nothing: an unselected row (with the capacity
    measured at), a Stop at select naming the status that leaves the select and validate
    columns empty, and no validate run. Catches a selection from a lower bound or failure."""
    ctx = Context(RB, (), None)
    req = Request(MODEL, "echo", Purpose.MEASURE, measured)
    state = {"outcome": outcome(req, status, summary(N)), "capacity": measured}
    assert select_step(ctx, MODEL, "echo", state) is False
    row = ctx.selection[(MODEL, "echo")]
    assert row == SelectionRow.unselected(campaign=RB.campaign, model=MODEL, backend="echo",
                                          uniform_tokens=N, measured_at_capacity=measured)
    assert not row.selected_capacity and "row" not in state
    stop = ctx.stops[(MODEL, "echo")]
    assert (stop.pair, stop.stage) == ((MODEL, "echo"), Stage.SELECT)
    assert str(status) in stop.why
    assert stop.empty == SELECT_COLUMNS + VALIDATE_COLUMNS
    assert (MODEL, "echo", Purpose.VALIDATE) in ctx.skipped and ctx.dirty


@FAST
@given(peak=st.integers(N // 4, 6 * N), measured=st.sampled_from(["2.00", "8.00"]),
       decimals=st.sampled_from([None, 2]))
def test_select_rounds_the_peak_up_to_the_grid(peak, measured, decimals):
    """An ok measure selects the smallest executable capacity covering its peak; the row
    states the requirement and the selection, not yet validated. Catches a selection below
    the peak, a wrong budget or over_provision, capacity.decimals (the legacy grid)
    ignored, or the row not kept for validate."""
    ctx = Context(runbook(decimals=decimals), (), None)
    req = Request(MODEL, "echo", Purpose.MEASURE, measured)
    state = {"outcome": outcome(req, Status.OK, summary(peak)), "capacity": measured}
    assert select_step(ctx, MODEL, "echo", state) is True
    row = ctx.selection[(MODEL, "echo")]
    sel = selection.select(selection.requirement(summary(peak)), PAD, decimals)
    assert (row.selected_capacity, row.selected_budget_tokens) == (sel.capacity, sel.budget)
    assert row.selected_budget_tokens >= peak and cap.is_executable(row.selected_capacity, N,
                                                                     PAD)
    assert row.over_provision == sel.budget / peak and row.required_capacity == peak / N
    assert row.peak_actual_valid_recv == peak and row.measured_at_capacity == measured
    assert (row.validated, row.validate_attempts, row.uniform_tokens) == (False, 0, N)
    assert (row.campaign, row.model, row.backend) == (RB.campaign, MODEL, "echo")
    assert state["row"] is row and not ctx.stops and ctx.dirty


@pytest.mark.parametrize("target", ["peak", 0.05])
def test_a_risk_target_selects_through_select_budget(monkeypatch, target):
    """capacity.target other than the peak rule picks the budget with select_budget (given
    the measure's steps); the peak rule does not consult it. Catches the target ignored."""
    calls = []

    def fake(tgt, peak, n, pad, decimals, steps):
        calls.append((tgt, peak, n, pad, decimals, steps))
        return selection.Selection("3.00", cap.budget_tokens("3.00", n), 1.5)

    monkeypatch.setattr(dec, "select_budget", fake)
    ctx = Context(runbook(target=target, decimals=3), (), None)
    req = Request(MODEL, "echo", Purpose.MEASURE, "2.00")
    out = dataclasses.replace(outcome(req, Status.OK, summary(N + 5)), steps="STEPS")
    assert select_step(ctx, MODEL, "echo", {"outcome": out, "capacity": "2.00"})
    row = ctx.selection[(MODEL, "echo")]
    if target == "peak":
        assert calls == [] and row.selected_capacity != "3.00"
    else:
        assert calls == [(target, N + 5, N, PAD, 3, "STEPS")]
        assert (row.selected_capacity, row.over_provision) == ("3.00", 1.5)


# --- validate ------------------------------------------------------------------------------

KINDS = ["drops", "accept", "malformed", "incomplete", "crash"]


def validate_answer(kind: str, req: Request, peak: int) -> Outcome:
    """A validate outcome of one kind: drops, an accepted ok, an ok that cannot show zero
    drops (malformed or missing rows), or a failure."""
    if kind == "drops":
        return outcome(req, Status.DROPS, summary(peak, saturated=1))
    if kind == "crash":
        return outcome(req, Status.CRASH, None)
    return outcome(req, Status.OK, summary(peak, malformed=int(kind == "malformed"),
                                           complete=kind != "incomplete"))


@FAST
@given(max_steps=st.integers(0, 4), kinds=st.lists(st.sampled_from(KINDS), min_size=5,
                                                   max_size=5),
       peak=st.integers(N // 2, 3 * N), decimals=st.sampled_from([None, 2]))
def test_validate_steps_up_one_rung_per_drop_within_the_bound(max_steps, kinds, peak,
                                                              decimals):
    """Validate at the selection; each run that drops is followed by one at the next rung
    (capacity.step_up) while steps are left; the row ends with the last capacity tried, its
    budget, whether that run showed zero drops, and the number of runs. Catches a step-up
    after an ok or failed run, a skipped rung, and a run accepted without zero drops shown."""
    rb = runbook(max_validate_steps=max_steps, decimals=decimals)
    ctx = Context(rb, (), None)
    measured = outcome(Request(MODEL, "echo", Purpose.MEASURE, "2.00"), Status.OK,
                       summary(peak))
    state = {"outcome": measured, "capacity": "2.00"}
    assert select_step(ctx, MODEL, "echo", state)
    first = state["row"].selected_capacity
    asked, went_on = run_step(validate_step(ctx, MODEL, "echo", state),
                              lambda i, req: validate_answer(kinds[i], req, peak))
    assert went_on is True
    runs = next((i + 1 for i, k in enumerate(kinds[:max_steps]) if k != "drops"),
                max_steps + 1)
    assert len(asked) == runs
    want = first
    for req in asked:
        assert (req.purpose, req.capacity) == (Purpose.VALIDATE, want)
        want = cap.step_up(want, N, PAD, rb.capacity.decimals)
    last = asked[-1].capacity
    row = ctx.selection[(MODEL, "echo")]
    budget = cap.budget_tokens(last, N)
    assert (row.selected_capacity, row.selected_budget_tokens) == (last, budget)
    assert row.over_provision == budget / peak
    assert row.validated is (kinds[runs - 1] == "accept")
    assert row.validate_attempts == runs
    assert row.validate_seed == rb.validate.seed
    assert row.held_out == rb.held_out_routing("echo")
    assert row.peak_actual_valid_recv == peak     # the measured requirement is kept


def test_validate_without_a_measured_peak_states_no_over_provision():
    """A selection row with no measured peak gets no over_provision (never a division by
    zero or a made-up figure). Catches the guard dropped."""
    ctx = Context(RB, (), None)
    row = SelectionRow(campaign=RB.campaign, model=MODEL, backend="echo", uniform_tokens=N,
                       selected_capacity="2.00")
    req = Request(MODEL, "echo", Purpose.MEASURE, "2.00")
    state = {"row": row, "outcome": outcome(req, Status.OK, summary(N))}
    run_step(validate_step(ctx, MODEL, "echo", state),
             lambda i, r: validate_answer("accept", r, N))
    got = ctx.selection[(MODEL, "echo")]
    assert got.over_provision is None and got.validated is True


# --- the stage order, gates and stops ------------------------------------------------------

def test_later_pair_stages_follow_the_stage_table():
    """The pair stages after a stage: what a Stop leaves empty. Catches an off-by-one slice
    or a model-scope stage counted as a pair stage."""
    assert later_pair_stages(Stage.MEASURE) == [Stage.SELECT, Stage.VALIDATE, Stage.FRONTIER]
    assert later_pair_stages(Stage.SELECT) == [Stage.VALIDATE, Stage.FRONTIER]
    assert later_pair_stages(Stage.VALIDATE) == [Stage.FRONTIER]
    assert later_pair_stages(Stage.TIME) == [] == later_pair_stages(Stage.PREFLIGHT)


def test_a_stop_at_measure_skips_validate_and_empties_the_later_columns():
    """Context.stop: the later pair stages' runs are skipped and their columns listed after
    the step's own, without repeats. Catches later stages' runs still asked for."""
    ctx = Context(RB, (), None)
    stop = ctx.stop(MODEL, "echo", Stage.MEASURE, "why", empty=("x", "required_capacity"))
    assert stop.empty == ("x", *SELECT_COLUMNS, *VALIDATE_COLUMNS)
    assert ctx.skipped == {(MODEL, "echo", Purpose.VALIDATE),   # select makes no run
                           (MODEL, "echo", Purpose.FRONTIER)}
    assert ctx.stops[(MODEL, "echo")] is stop and stop.why == "why"


@FAST
@given(models=st.sets(st.sampled_from([m.name for m in RB.models])),
       backends=st.sets(st.sampled_from(["echo", "ultraep", "moonep"])),
       model=st.one_of(st.none(), st.sampled_from([m.name for m in RB.models])),
       backend=st.sampled_from(["echo", "ultraep", "moonep", "echo~control"]))
def test_selected_follows_model_and_backend_filters(models, backends, model, backend):
    """--model/--backend: empty means all; a control arm counts as its baseline; a canary
    (model None) asks only for its backend. Catches a filter ignored or inverted."""
    ctx = Context(RB, (), None, tuple(models), tuple(backends))
    base = backend.removesuffix("~control")
    want = (model is None or not models or model in models) and (not backends
                                                                  or base in backends)
    assert ctx.selected(model, backend) is want


def all_ok(ctx: Context, model: str = MODEL):
    """Drive one model's pipeline, every run ok at the peak N; the requests asked."""
    def answer(i, req):
        if req.purpose == Purpose.TIME:
            return outcome(req, Status.OK, timing=None)
        return outcome(req, Status.OK, summary(N + 100))
    return run_step(model_pipeline(ctx, model), answer)[0]


@pytest.mark.parametrize(("until", "purposes"), [
    (Stage.MEASURE, [Purpose.MEASURE]),
    (Stage.SELECT, [Purpose.MEASURE]),
    (Stage.VALIDATE, [Purpose.MEASURE, Purpose.VALIDATE]),
])
def test_until_stops_the_pipeline_after_its_stage(until, purposes):
    """--until: no run of a later stage is asked for; a selection row exists only once
    select ran. Catches a stage gate ignored."""
    ctx = Context(RB, (), until)
    asked = all_ok(ctx)
    select_backends = [b.name for b in RB.backends if b.select]
    assert [(r.backend, r.purpose) for r in asked] == [
        (b, p) for b in select_backends for p in purposes]
    assert bool(ctx.selection) is (until != Stage.MEASURE)
    assert ctx.pairs_ended == {(MODEL, b) for b in select_backends}


def test_the_whole_pipeline_measures_selects_validates_then_times_at_the_largest_selection():
    """Every select backend is measured and validated in turn, then every timed arm at the
    largest selected capacity, which each selection row records. Catches pairs interleaved,
    a timing capacity other than the maximum, or the rows not stamped."""
    ctx = Context(RB, (), None)
    asked = all_ok(ctx)
    select_backends = [b.name for b in RB.backends if b.select]
    pairs = [(r.backend, r.purpose) for r in asked if r.purpose != Purpose.TIME]
    assert pairs == [(b, p) for b in select_backends
                     for p in (Purpose.MEASURE, Purpose.VALIDATE)]
    timed = [r for r in asked if r.purpose == Purpose.TIME]
    tcap = selection.timing_capacity({b: ctx.selection[(MODEL, b)].selected_capacity
                                      for b in select_backends})
    assert timed and {r.capacity for r in timed} == {tcap}
    assert {ctx.selection[(MODEL, b)].timing_capacity for b in select_backends} == {tcap}
    assert ctx.pairs_ended == {(MODEL, b) for b in select_backends} and not ctx.stops


def test_a_pair_step_that_ends_without_a_stop_gets_one_naming_its_stage(monkeypatch):
    """A pair step returning False with no Stop of its own ends the pair with a Stop naming
    its stage; a step that stated one keeps its own. Catches the pair going on, or a stated
    Stop overwritten."""
    monkeypatch.setitem(dec.PAIR_STEPS, Stage.VALIDATE, lambda ctx, m, b, state: False)
    ctx = Context(RB, (), None)
    asked = all_ok(ctx)
    assert Purpose.VALIDATE not in {r.purpose for r in asked}
    for b in [b.name for b in RB.backends if b.select]:
        stop = ctx.stops[(MODEL, b)]
        assert (stop.stage, stop.why) == (Stage.VALIDATE, "its validate step ended the pair")
    ctx = Context(RB, (), None)
    run_step(model_pipeline(ctx, MODEL),
             lambda i, req: outcome(req, Status.DOES_NOT_FIT, None))
    assert {s.stage for s in ctx.stops.values()} == {Stage.SELECT}
    assert all("does_not_fit" in s.why for s in ctx.stops.values())


def test_time_with_nothing_selected_asks_for_no_run_and_skips_every_arm():
    """No selected capacity: no timed run, every arm's time run skipped. Catches a timing
    run at an invented capacity."""
    ctx = Context(RB, (), None)
    asked, _ = run_step(time_step(ctx, MODEL), lambda i, req: None)
    arms = dec.timed_arms(RB)[1]
    assert asked == [] and ctx.skipped == {(MODEL, a, Purpose.TIME) for a in arms}
    assert MODEL not in ctx.comparison


@FAST
@given(capacity=st.sampled_from(["1.03125", "2.00", "3.5"]),
       statuses=st.lists(st.sampled_from([Status.OK, Status.CRASH, Status.DOES_NOT_FIT]),
                         min_size=1, max_size=3))
def test_timing_row_states_the_first_launch_and_the_budget(capacity, statuses):
    """An arm's timing.tsv row: its cell's capacity and budget, the first launch's cell
    directory, and the status over all launches (verdicts.row_status). Catches the budget
    of another capacity or a later launch's directory."""
    from harness.timing import verdicts
    req = Request(MODEL, "echo", Purpose.TIME, capacity)
    outs = [outcome(req, s, attempt=i + 1) for i, s in enumerate(statuses)]
    row = timing_row(N, outs)
    assert (row.model, row.backend, row.timing_capacity) == (MODEL, "echo", capacity)
    assert row.budget_tokens == cap.budget_tokens(capacity, N)
    assert row.cell_dir == outs[0].row.cell_dir and row.campaign == RB.campaign
    assert row.status == verdicts.row_status(statuses)


def steps_of(peaks: list[int], budget: int) -> StepPeaks:
    """Per-step peaks as the telemetry gives them (a step at the budget saturated)."""
    return StepPeaks(tuple(range(len(peaks))), tuple(peaks), tuple(p >= budget for p in peaks))


@pytest.mark.parametrize("accepted", [True, False])
def test_validate_states_the_held_out_steps_and_risk_of_the_budget_it_ran(accepted):
    """The validate row's risk columns come from this run's steps at this run's budget:
    its step count, peak and headroom (budget / validate peak); the held-out bound only for
    an accepted run. Catches the columns taken from another budget, from no steps, or a
    bound stated for a run that dropped."""
    ctx = Context(RB, (), None)
    measure = Request(MODEL, "echo", Purpose.MEASURE, "2.00")
    m_out = dataclasses.replace(outcome(measure, Status.OK, summary(N + 50)),
                                steps=steps_of([N + 10 * i for i in range(6)], 10**9))
    state = {"outcome": m_out, "capacity": "2.00"}
    assert select_step(ctx, MODEL, "echo", state)

    def answer(i, req):
        budget = cap.budget_tokens(req.capacity, N)
        peaks = [N + 7 * i for i in range(6)] if accepted else [N, budget]
        kind = "accept" if accepted else "drops"
        return dataclasses.replace(validate_answer(kind, req, N + 40),
                                   steps=steps_of(peaks, budget))
    asked, _ = run_step(validate_step(ctx, MODEL, "echo", state), answer)
    row = ctx.selection[(MODEL, "echo")]
    budget = cap.budget_tokens(asked[-1].capacity, N)
    peak = N + 35 if accepted else budget
    assert (row.validate_steps, row.validate_peak) == (6 if accepted else 2, peak)
    assert row.headroom == budget / peak
    assert (row.drop_risk_95 is not None) is accepted and RB.held_out_routing("echo")
    assert (row.predicted_drop_risk is not None) is accepted


def test_a_fresh_context_is_clean_and_stage_gates_follow_stage():
    """A new Context has nothing to write and no deferred pair; --stage names the stages
    that run, the earlier ones are replayed. Catches a context that writes before any
    decision, or --stage ignored."""
    ctx = Context(RB, (Stage.VALIDATE,), None)
    assert ctx.dirty is False and ctx.deferred == set()
    assert ctx.stage_mode(Stage.MEASURE) == StageMode.REPLAY
    assert ctx.stage_mode(Stage.VALIDATE) == StageMode.RUN
    assert ctx.stage_mode(Stage.TIME) == StageMode.STOP


def test_a_pair_already_stopped_gets_the_new_stop_of_a_later_step(monkeypatch):
    """A pair with a Stop from earlier (a resumed context) that a step ends again without
    stating one gets a Stop naming that step, not the stale one. Catches the comparison
    with the Stop seen before the step dropped."""
    monkeypatch.setitem(dec.PAIR_STEPS, Stage.VALIDATE, lambda ctx, m, b, state: False)
    ctx = Context(RB, (), Stage.VALIDATE)
    old = ctx.stop(MODEL, "echo", Stage.MEASURE, "stale")
    all_ok(ctx)
    assert ctx.stops[(MODEL, "echo")] is not old
    assert ctx.stops[(MODEL, "echo")].stage == Stage.VALIDATE


def test_time_writes_its_rows_for_this_model_and_stamps_only_select_backends():
    """After the time step: the comparison and trial rows name this campaign and model,
    each trial row its launch's cell directory; the timing capacity is stamped on the
    select backends' rows only; the context is marked for writing. Catches rows without
    their keys, a trial without its directory, a timed-only backend's row rewritten."""
    ctx = Context(RB, (), None)
    for b in ("echo", "ultraep"):
        ctx.selection[(MODEL, b)] = SelectionRow(campaign=RB.campaign, model=MODEL, backend=b,
                                                 selected_capacity="1.5")
    ctx.selection[(MODEL, "moonep")] = SelectionRow(campaign=RB.campaign, model=MODEL,
                                                    backend="moonep", selected_capacity="9")
    timing = {"per_trial": [{"dispatch_ms_median": 1.0, "combine_ms_median": 2.0}] * 2,
              "dispatch_ms_median": 1.0, "combine_ms_median": 2.0, "trials": 2, "iters": 3,
              "step_cv": 0.01, "noise_floor_pct": 1.0, "timer": "perf_counter",
              "backend_impl": "reference"}
    outs = []

    def answer(i, req):
        outs.append(outcome(req, Status.OK, timing=timing, attempt=i + 1))
        return outs[-1]
    run_step(time_step(ctx, MODEL), answer)
    assert ctx.dirty is True
    assert ctx.selection[(MODEL, "moonep")].timing_capacity is None
    assert ctx.selection[(MODEL, "echo")].timing_capacity == "1.50"
    assert ctx.comparison[MODEL] and ctx.trials[MODEL]
    assert {(r.campaign, r.model) for r in ctx.comparison[MODEL]} == {(RB.campaign, MODEL)}
    assert {(r.campaign, r.model) for r in ctx.trials[MODEL]} == {(RB.campaign, MODEL)}
    dirs = {o.row.cell_dir for o in outs}
    assert {r.cell_dir for r in ctx.trials[MODEL]} <= dirs and None not in dirs


# --- what the rows carry from the runs: backend_impl, dropped slots, equal work -----------

@pytest.mark.parametrize("status", [Status.OK, Status.DOES_NOT_FIT])
def test_the_selection_row_names_the_measure_runs_backend_impl(status):
    """capacity_selection.tsv's backend_impl is the last measure run's (selected or not).
    Seen red: `backend_impl=out.row.backend_impl` -> None in either branch of select_step."""
    ctx = Context(RB, (), None)
    req = Request(MODEL, "echo", Purpose.MEASURE, "2.00")
    out = outcome(req, status, summary(N + 5) if status == Status.OK else None)
    out = dataclasses.replace(out, row=dataclasses.replace(out.row, backend_impl="impl-m"))
    select_step(ctx, MODEL, "echo", {"outcome": out, "capacity": "2.00"})
    assert ctx.selection[(MODEL, "echo")].backend_impl == "impl-m"


@FAST
@given(dropped=st.lists(st.one_of(st.none(), st.integers(0, 50)), min_size=1, max_size=4),
       impls=st.lists(st.sampled_from([None, "", "timed-impl"]), min_size=4, max_size=4))
def test_timing_row_sums_the_dropped_slots_of_runs_with_rows_and_names_the_impl(dropped,
                                                                                impls):
    """dropped_slots: the sum over the launches whose summary has dispatch rows (None
    stands for a launch without telemetry, 0 rows), None when no launch has any;
    backend_impl: the first usable timing line's, else the first run's attempt row's.
    Seen red: `getattr(o.summary, "rows", 0)` -> "ROWS" (no launch counted), the sum -> None,
    `if not figures.get("backend_impl")` -> `if figures.get(...)`."""
    req = Request(MODEL, "echo", Purpose.TIME, "2.00")
    timing = {"per_trial": [{"dispatch_ms_median": 1.0, "combine_ms_median": 2.0}] * 2,
              "trials": 2, "iters": 3, "noise_floor_pct": 1.0, "timer": "perf_counter"}
    outs = []
    for i, d in enumerate(dropped):
        summ = summary(N, rows=0) if d is None else dataclasses.replace(summary(N),
                                                                        dropped_slots=d)
        t = dict(timing, backend_impl=impls[i]) if impls[i] is not None else timing
        out = outcome(req, Status.OK, summ, attempt=i + 1, timing=t)
        outs.append(dataclasses.replace(out, row=dataclasses.replace(
            out.row, backend_impl=f"attempt-{i}")))
    row = timing_row(N, outs)
    counted = [d for d in dropped if d is not None]
    assert row.dropped_slots == (sum(counted) if counted else None)
    assert row.backend_impl == (impls[0] or "attempt-0")


def test_an_arm_that_dropped_slots_is_compared_as_unequal_work_with_its_figures():
    """time_step hands comparison_rows each arm's timing.tsv status, dropped slots and
    backend_impl: an arm whose launches dropped slots gets the verdict unequal_work and
    its row states them; its trial rows name the arm's backend_impl. Seen red: `work`
    -> None, its keys misspelt ("STATUS", "DROPPED_SLOTS", "BACKEND_IMPL"), the trial rows'
    `backend_impl=impl.get(r["backend"])` -> None."""
    from harness.vocab import Verdict
    ctx = Context(RB, (), None)
    for b in ("echo", "ultraep"):
        ctx.selection[(MODEL, b)] = SelectionRow(campaign=RB.campaign, model=MODEL, backend=b,
                                                 selected_capacity="1.5")

    def answer(i, req):
        timing = {"per_trial": [{"dispatch_ms_median": 1.0 + 0.01 * (i % 3),
                                 "combine_ms_median": 2.0}] * 2,
                  "trials": 2, "iters": 3, "noise_floor_pct": 1.0, "timer": "perf_counter",
                  "backend_impl": f"impl-{req.backend}"}
        drops = 4 if req.backend == "ultraep" else 0
        return outcome(req, Status.OK, dataclasses.replace(summary(N), dropped_slots=drops),
                       attempt=i + 1, timing=timing)
    run_step(time_step(ctx, MODEL), answer)
    rows = [r for r in ctx.comparison[MODEL] if r.backend == "ultraep"]
    launches = RB.timing.launches
    assert rows and {(r.status, r.dropped_slots, r.backend_impl, r.verdict) for r in rows} == {
        (Status.OK, 4 * launches, "impl-ultraep", Verdict.UNEQUAL_WORK)}
    others = [r for r in ctx.comparison[MODEL] if r.backend not in ("ultraep",)]
    assert others and all(r.verdict != Verdict.UNEQUAL_WORK for r in others)
    assert {r.baseline_dropped_slots for r in ctx.comparison[MODEL]} == {0}
    assert {(r.backend, r.backend_impl) for r in ctx.trials[MODEL]} == {
        (arm, f"impl-{arm}") for arm in dec.timed_arms(RB)[1]}


def test_a_baseline_without_usable_launches_gives_every_arm_its_reason():
    """An arm with usable launches against a baseline without any: no paired launch, and
    the row's reason is the baseline's ("no usable launch (timing status crash)"), not one
    invented for the arm that has launches. Seen red: `(model, arm) in ctx.timing and not
    any(usable[arm])` -> `or`."""
    ctx = Context(RB, (), None)
    ctx.selection[(MODEL, "echo")] = SelectionRow(campaign=RB.campaign, model=MODEL,
                                                  backend="echo", selected_capacity="1.5")
    baseline = dec.timed_arms(RB)[0]
    timing = {"per_trial": [{"dispatch_ms_median": 1.0, "combine_ms_median": 2.0}] * 2,
              "trials": 2, "iters": 3, "noise_floor_pct": 1.0, "timer": "perf_counter"}

    def answer(i, req):
        if req.backend == baseline:
            return outcome(req, Status.CRASH, None, attempt=i + 1)
        return outcome(req, Status.OK, summary(N), attempt=i + 1, timing=timing)
    run_step(time_step(ctx, MODEL), answer)
    rows = ctx.comparison[MODEL]
    assert rows and {r.reason for r in rows} == {"no usable launch (timing status crash)"}


def test_validate_steps_up_on_the_runbooks_legacy_grid():
    """On `decimals: 2` at N = 2048, P = 128 the executable 2-decimal capacities are 0.25
    apart (512 slots); a validate run at 1.00 that drops steps up to 1.25, not to the exact
    grid's 1.0625. Seen red: `cap.step_up(..., rb.capacity.decimals)` -> decimals None
    (the survivor docs/development.md listed as UNKNOWN)."""
    assert N == 2048 and PAD == 128
    rb = runbook(decimals=2)
    ctx = Context(rb, (), None)
    row = SelectionRow(campaign=RB.campaign, model=MODEL, backend="echo", uniform_tokens=N,
                       selected_capacity="1.00", peak_actual_valid_recv=N)
    m_out = outcome(Request(MODEL, "echo", Purpose.MEASURE, "2.00"), Status.OK, summary(N))
    kinds = ["drops", "drops", "accept"]
    asked, _ = run_step(validate_step(ctx, MODEL, "echo", {"row": row, "outcome": m_out}),
                        lambda i, req: validate_answer(kinds[i], req, N))
    assert [r.capacity for r in asked] == ["1.00", "1.25", "1.50"]
