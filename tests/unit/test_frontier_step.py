"""harness.pipeline.decisions.frontier_step / frontier_row and the frontier in a model's
pipeline, against docs/frontier.md: rung 0 is the selection as written, the rungs are the
grid's step_down / step_up neighbours, and each row states its budget, slack over the
measured peak, the launch's status, dropped slots, times and memory as timing.tsv figures
one launch, and a held-out drop risk that never rises with the capacity. Outcomes are
generated; expected figures are recomputed here (budgets by int(float(c) * N), the
Clopper-Pearson bound by scipy's beta, the times by numpy), not by the code under test.
No process, no campaign (in the mutation's test selection)."""

from __future__ import annotations

import dataclasses
import statistics
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import beta

from harness.grid import capacity as cap
from harness.grid.heldout import rung_risk
from harness.pipeline.decisions import (
    Context,
    Outcome,
    Request,
    frontier_row,
    frontier_step,
    model_pipeline,
)
from harness.results.layout import Cell
from harness.results.rows import AttemptRow, SelectionRow
from harness.runbook.load import load_runbook
from harness.telemetry.steps import StepPeaks
from harness.telemetry.summary import LogSummary
from harness.vocab import Purpose, Stage, Status

RUNBOOK = Path(__file__).resolve().parents[2] / "runbooks" / "local-cpu.yaml"
RB = load_runbook(RUNBOOK)
MODEL = "QWEN3_30B"
N = RB.shape.uniform_tokens(RB.model(MODEL).topk)
PAD = RB.capacity.pad_multiple
FAST = settings(max_examples=30, deadline=None, derandomize=True)
TIME_KEYS = ("dispatch_ms_median", "dispatch_ms_p10", "dispatch_ms_p90", "combine_ms_median",
             "combine_ms_p10", "combine_ms_p90")


def runbook(k: int, **capacity) -> object:
    """The default runbook with `frontier: {rungs: k}` and some capacity settings replaced."""
    return dataclasses.replace(RB, frontier_rungs=k,
                               capacity=dataclasses.replace(RB.capacity, **capacity))


def budget(text: str) -> int:
    """What a kernel allocates: int(float(c) * N)."""
    return int(float(text) * N)


def shortest(b: int) -> str:
    """Brute force: the shortest decimal (smallest at that length) with budget b at N."""
    for digits in range(0, 12):
        scale = 10 ** digits
        for units in range(max(b * scale // N - 2, 1), (b + 1) * scale // N + 3):
            if budget(str(Decimal(units).scaleb(-digits))) == b:
                return cap.format_capacity(Decimal(units).scaleb(-digits))
    raise AssertionError("no decimal found")


def timing_of(b: int, trials: int = 3) -> dict:
    """A launch's [EPCAP_TIMING] object whose every figure depends on its budget."""
    per = [{"dispatch_ms_median": b / 1000 + 0.37 * j * j,
            "combine_ms_median": b / 500 + 0.11 * j} for j in range(trials)]
    return {"per_trial": per, "trials": trials, "iters": 3, "step_cv": 0.01,
            "noise_floor_pct": 1.5 + b % 7, "timer": f"perf_counter@{b}",
            "peak_mem_bytes": 1000 * b + 3, "peak_mem_source": "modelled",
            "backend_impl": f"impl-{b}"}


def summary(dropped: int, rows: int = 12) -> LogSummary:
    return LogSummary(rows=rows, expected_recv=N, peak_actual_valid_recv=N,
                      dropped_slots=dropped, complete=True)


def outcome(req: Request, status: str, summ, timing: dict | None, attempt: int = 1,
            impl: str | None = "row-impl") -> Outcome:
    cell = Cell(RB.campaign, req.model, req.backend, req.purpose, req.capacity, attempt)
    row = AttemptRow(campaign=RB.campaign, model=req.model, backend=req.backend,
                     purpose=req.purpose, capacity=req.capacity, status=status,
                     cell_dir=f"cells/{cell.name}", backend_impl=impl)
    return Outcome(cell, status, summ, timing, row, {})


def steps(peaks: list[int], saturated: list[bool] | None = None) -> StepPeaks:
    return StepPeaks(tuple(range(len(peaks))), tuple(peaks),
                     tuple(saturated or [False] * len(peaks)))


def run_step(gen, answers):
    """Drive a step generator; (requests, its return value)."""
    asked, out = [], None
    try:
        while True:
            req = gen.send(out) if asked else next(gen)
            asked.append(req)
            out = answers(len(asked) - 1, req)
    except StopIteration as stop:
        return asked, stop.value


def setup(k: int, selected: str, peak: int | None, measure: list[int], held: list[int],
          accepted: bool = True, validated: bool = True, rb=None) -> tuple[Context, dict]:
    """A context and pair state as validate leaves them: the validated selection in
    ctx.selection (and a stale pre-validate row in the state, which the frontier must not
    read), the measure outcome's steps, the validate outcome's steps."""
    ctx = Context(rb or runbook(k), (), None)
    ctx.selection[(MODEL, "echo")] = SelectionRow(
        campaign=RB.campaign, model=MODEL, backend="echo", uniform_tokens=N,
        selected_capacity=selected, peak_actual_valid_recv=peak)
    m_req = Request(MODEL, "echo", Purpose.MEASURE, "2.00")
    state = {"row": SelectionRow(campaign=RB.campaign, model=MODEL, backend="echo",
                                 selected_capacity="7.00", peak_actual_valid_recv=1),
             "outcome": dataclasses.replace(outcome(m_req, Status.OK, summary(0), None),
                                            steps=steps(measure)),
             "capacity": "2.00"}
    if validated:
        v_req = Request(MODEL, "echo", Purpose.VALIDATE, selected)
        state["validate_outcome"] = dataclasses.replace(
            outcome(v_req, Status.OK, summary(0), None), steps=steps(held))
        state["accepted"] = accepted
    return ctx, state


def clopper_pearson_95(j: int, n: int) -> float:
    """The exact one-sided 95% upper bound after j events in n trials."""
    return 1.0 if j >= n else float(beta.ppf(0.95, j + 1, n - j))


STATUSES = st.sampled_from([Status.OK, Status.DROPS, Status.CRASH, Status.DOES_NOT_FIT])


@FAST
@given(k=st.integers(1, 4), m=st.integers(2, 24), spelt=st.booleans(),
       peak_delta=st.integers(-200, 200),
       measure=st.lists(st.integers(N // 2, 3 * N), min_size=8, max_size=20),
       held=st.lists(st.integers(N // 2, 3 * N), min_size=4, max_size=20),
       statuses=st.lists(STATUSES, min_size=9, max_size=9),
       dropped=st.lists(st.integers(0, 500), min_size=9, max_size=9))
def test_frontier_rows_follow_the_contract(k, m, spelt, peak_delta, measure, held, statuses,
                                           dropped):
    """One timed frontier launch per rung, from k below to k above the validated selection,
    and one frontier.tsv row each with: rung text, capacity, budget, selected (rung 0 only),
    over_provision = budget / measured peak, the launch's status and dropped slots, the
    launch's times (median and linear p10/p90 of its trial medians), trials, resolution,
    timer, memory, backend_impl, cell_dir, and the held-out risk at that budget
    (non-increasing with the capacity; rung 0's bound is 1 - 0.05^(1/n)).
    Seen red: rungs taken around state["row"] instead of ctx.selection; `offset=offset` ->
    `offset=0`; `budget_tokens(capacity, n)` -> `budget_tokens(capacity, 1)` in the risk; the
    peak of the row passed as None; `selected=offset == 0` -> `!= 0`; the risk's
    `held_out_routing(backend)` replaced by False."""
    selected = shortest(m * PAD) + ("0" if spelt else "")
    peak = m * PAD + peak_delta
    ctx, state = setup(k, selected, peak, measure, held)
    outs: list[Outcome] = []

    def answer(i, req):
        b = budget(req.capacity)
        ok = statuses[i] in (Status.OK, Status.DROPS)
        outs.append(outcome(req, statuses[i], summary(dropped[i]), timing_of(b) if ok else None,
                            attempt=i + 1))
        return outs[-1]
    asked, went_on = run_step(frontier_step(ctx, MODEL, "echo", state), answer)
    assert went_on is True and ctx.dirty is True
    b0 = m * PAD
    offsets = [i for i in range(-k, k + 1) if b0 + i * PAD > 0]
    want_caps = [selected if i == 0 else shortest(b0 + i * PAD) for i in offsets]
    assert [(r.model, r.backend, r.purpose) for r in asked] == \
        [(MODEL, "echo", Purpose.FRONTIER)] * len(offsets)
    assert [r.capacity for r in asked] == want_caps
    rows = ctx.frontier[(MODEL, "echo")]
    assert len(rows) == len(offsets)
    n_held = len(held)
    for i, (offset, row, out) in enumerate(zip(offsets, rows, outs, strict=True)):
        b = b0 + offset * PAD
        assert (row.campaign, row.model, row.backend) == (RB.campaign, MODEL, "echo")
        assert row.rung == ("0" if offset == 0 else f"{offset:+d}")
        assert (row.capacity, row.budget_tokens) == (want_caps[i], b)
        assert row.selected is (offset == 0)
        assert row.over_provision == b / peak
        assert row.status == statuses[i] and row.dropped_slots == dropped[i]
        assert row.cell_dir == out.row.cell_dir
        if statuses[i] in (Status.OK, Status.DROPS):
            t = timing_of(b)
            for phase in ("dispatch", "combine"):
                values = [p[f"{phase}_ms_median"] for p in t["per_trial"]]
                assert getattr(row, f"{phase}_ms_median") == pytest.approx(
                    statistics.median(values))
                assert getattr(row, f"{phase}_ms_p10") == pytest.approx(
                    float(np.quantile(values, 0.1)))
                assert getattr(row, f"{phase}_ms_p90") == pytest.approx(
                    float(np.quantile(values, 0.9)))
            assert (row.trials, row.noise_floor_pct, row.timer) == (
                3, t["noise_floor_pct"], t["timer"])
            assert (row.peak_mem_bytes, row.peak_mem_source) == (1000 * b + 3, "modelled")
            assert row.backend_impl == f"impl-{b}"
        else:                        # no timing line: no figures, the attempt's impl
            assert {getattr(row, key) for key in TIME_KEYS} == {None}
            assert (row.trials, row.timer, row.peak_mem_bytes) == (None, None, None)
            assert row.backend_impl == "row-impl"
        j = sum(p > b for p in held)
        assert (row.heldout_steps, row.heldout_dropped_steps) == (n_held, j)
        assert float(row.drop_risk_95) == pytest.approx(clopper_pearson_95(j, n_held),
                                                        rel=1e-5)
        fit = rung_risk(b, True, steps(measure), steps(held), True)
        assert (row.predicted_drop_risk, row.predicted_drop_risk_hi) == (
            fit["predicted_drop_risk"], fit["predicted_drop_risk_hi"])
    zero = rows[offsets.index(0)]
    if max(held) <= b0:
        assert float(zero.drop_risk_95) == pytest.approx(1 - 0.05 ** (1 / n_held), rel=1e-5)
    for low, high in zip(rows, rows[1:], strict=False):
        assert high.heldout_dropped_steps <= low.heldout_dropped_steps
        assert float(high.drop_risk_95) <= float(low.drop_risk_95)
        if low.predicted_drop_risk is not None:
            assert float(high.predicted_drop_risk) <= float(low.predicted_drop_risk)
            assert float(high.predicted_drop_risk_hi) <= float(low.predicted_drop_risk_hi)


def test_each_rung_is_written_as_it_finishes():
    """ctx.frontier holds the rows of the rungs run so far after each launch (a campaign
    killed mid-frontier has them), and the context is marked for writing. Seen red:
    `ctx.frontier[...] = list(rows)` moved after the loop; `ctx.dirty = True` -> False."""
    ctx, state = setup(2, "1.00", N, [N] * 8, [N] * 8)
    gen = frontier_step(ctx, MODEL, "echo", state)
    req = next(gen)
    seen = []
    try:
        while True:
            out = outcome(req, Status.OK, summary(0), timing_of(budget(req.capacity)))
            ctx.dirty = False
            req = gen.send(out)
            seen.append((len(ctx.frontier[(MODEL, "echo")]), ctx.dirty))
    except StopIteration:
        seen.append((len(ctx.frontier[(MODEL, "echo")]), ctx.dirty))
    assert seen == [(i, True) for i in range(1, 6)]


@pytest.mark.parametrize("case", ["no-frontier", "no-row", "not-timed"])
def test_no_frontier_asks_for_nothing_and_skips_the_pair(case):
    """No runbook frontier, no selection row (select ended the pair), or a backend that is
    not timed: no launch, the pair's frontier run recorded as skipped, and the pair goes
    on. Seen red: `or` -> `and` in the guard; `return True` -> `return False`; the skip
    not recorded."""
    rb = runbook(0 if case == "no-frontier" else 2)
    if case == "not-timed":
        rb = dataclasses.replace(rb, backends=tuple(
            dataclasses.replace(b, time=False) if b.name == "echo" else b for b in rb.backends))
    ctx, state = setup(2, "1.00", N, [N] * 8, [N] * 8, rb=rb)
    if case == "no-row":
        del state["row"]
    asked, went_on = run_step(frontier_step(ctx, MODEL, "echo", state), lambda i, r: None)
    assert asked == [] and went_on is True
    assert ctx.skipped == {(MODEL, "echo", Purpose.FRONTIER)}
    assert (MODEL, "echo") not in ctx.frontier and ctx.dirty is False


@pytest.mark.parametrize("case", ["not-accepted", "not-validated", "validate-dropped",
                                  "same-routing"])
def test_no_held_out_risk_without_an_accepted_held_out_validation(case):
    """The drop-risk columns are empty unless the validation was accepted on held-out
    routing (docs/frontier.md): not accepted, no validate run (a --stage run), or a validate
    run whose steps dropped; on the measured routing (validate.held_out false) no held-out
    bound, but the fit of the measure steps is still read at each budget. Seen red:
    `bool(state.get("accepted"))` -> True."""
    rb = runbook(1)
    if case == "same-routing":
        rb = dataclasses.replace(rb, validate_config=dataclasses.replace(rb.validate,
                                                                         held_out=False))
    held = [N + 5 * i for i in range(10)]
    ctx, state = setup(1, "1.00", N, [N + 3 * i for i in range(12)], held,
                       accepted=case != "not-accepted", validated=case != "not-validated",
                       rb=rb)
    if case == "validate-dropped":
        state["validate_outcome"] = dataclasses.replace(
            state["validate_outcome"], steps=steps(held, [False] * 9 + [True]))
    run_step(frontier_step(ctx, MODEL, "echo", state),
             lambda i, r: outcome(r, Status.OK, summary(0), timing_of(budget(r.capacity))))
    rows = ctx.frontier[(MODEL, "echo")]
    assert len(rows) == 3
    for row in rows:
        assert (row.heldout_steps, row.heldout_dropped_steps, row.drop_risk_95) == \
            (None, None, None)
        if case == "same-routing":
            assert row.predicted_drop_risk is not None
        else:
            assert (row.predicted_drop_risk, row.predicted_drop_risk_hi) == (None, None)


def test_frontier_row_without_a_peak_or_telemetry_states_no_slack_and_no_drops():
    """A selection without a measured peak has no over_provision (never a division by zero);
    a launch without telemetry rows (no summary, or an empty one) has no dropped_slots,
    not 0. Seen red: `if peak` -> `if not peak`; `getattr(summary, "rows", 0)` dropped."""
    ctx = Context(runbook(1), (), None)
    req = Request(MODEL, "echo", Purpose.FRONTIER, "1.25")
    risk = {"heldout_steps": 4, "heldout_dropped_steps": 1, "drop_risk_95": "0.5",
            "predicted_drop_risk": "0.1", "predicted_drop_risk_hi": "0.2"}
    for summ in (None, summary(17, rows=0)):
        row = frontier_row(ctx, outcome(req, Status.CRASH, summ, None), offset=-3, peak=None,
                           risk=risk)
        assert row.over_provision is None and row.dropped_slots is None
        assert (row.rung, row.capacity, row.budget_tokens, row.selected) == (
            "-3", "1.25", budget("1.25"), False)
        assert {k: getattr(row, k) for k in risk} == risk
    row = frontier_row(ctx, outcome(req, Status.DROPS, summary(17), timing_of(9)), offset=2,
                       peak=0, risk=risk)
    assert row.over_provision is None and row.dropped_slots == 17 and row.rung == "+2"
    assert row.backend_impl == "impl-9"


def test_the_pipeline_runs_the_frontier_after_validate_and_before_time():
    """With `frontier: {rungs: 1}`: per select backend measure, validate, then 3 frontier
    launches around its validated capacity, with the validate run's held-out risk; then
    the model's timed launches. Seen red: validate_step's `state.update(validate_outcome=out,
    accepted=accepted)` with either dropped or None (the frontier then states no risk)."""
    ctx = Context(runbook(1), (), None)

    def answer(i, req):
        if req.purpose in (Purpose.TIME, Purpose.FRONTIER):
            return outcome(req, Status.OK, summary(0), timing_of(budget(req.capacity)),
                           attempt=i + 1)
        return dataclasses.replace(
            outcome(req, Status.OK, LogSummary(rows=12, expected_recv=N,
                                               peak_actual_valid_recv=N + 100,
                                               required_capacity=(N + 100) / N,
                                               complete=True), None),
            steps=steps([N + 100] * 6))
    asked, _ = run_step(model_pipeline(ctx, MODEL), answer)
    select = [b.name for b in RB.backends if b.select]
    pair = [(r.backend, r.purpose) for r in asked if r.purpose != Purpose.TIME]
    assert pair == [(b, p) for b in select for p in (Purpose.MEASURE, Purpose.VALIDATE,
                                                     Purpose.FRONTIER, Purpose.FRONTIER,
                                                     Purpose.FRONTIER)]
    first_time = next(i for i, r in enumerate(asked) if r.purpose == Purpose.TIME)
    assert all(r.purpose == Purpose.TIME for r in asked[first_time:])
    for b in select:
        sel = ctx.selection[(MODEL, b)].selected_capacity
        caps = [r.capacity for r in asked if r.backend == b and r.purpose == Purpose.FRONTIER]
        assert caps[1] == sel and [budget(c) for c in caps] == [budget(sel) + d * PAD
                                                                for d in (-1, 0, 1)]
        rows = ctx.frontier[(MODEL, b)]
        assert [r.rung for r in rows] == ["-1", "0", "+1"]
        # the accepted held-out validation (6 steps at N + 100) reaches the frontier's risk:
        # rung -1 (budget N) is below every step's peak, rungs 0 and +1 above
        assert [(r.heldout_steps, r.heldout_dropped_steps) for r in rows] == \
            [(6, 6), (6, 0), (6, 0)]
        assert [r.drop_risk_95 for r in rows] == ["1"] + [f"{1 - 0.05 ** (1 / 6):.6g}"] * 2
    assert ctx.pairs_ended == {(MODEL, b) for b in select}


def test_until_validate_runs_no_frontier():
    """--until validate stops before the frontier stage. Seen red: the stage gate
    `== StageMode.STOP` -> `!= StageMode.STOP`."""
    ctx = Context(runbook(2), (), Stage.VALIDATE)

    def answer(i, req):
        return outcome(req, Status.OK, LogSummary(rows=12, expected_recv=N,
                                                  peak_actual_valid_recv=N,
                                                  required_capacity=1.0, complete=True), None)
    asked, _ = run_step(model_pipeline(ctx, MODEL), answer)
    select = [b.name for b in RB.backends if b.select]
    assert [(r.backend, r.purpose) for r in asked] == [
        (b, p) for b in select for p in (Purpose.MEASURE, Purpose.VALIDATE)]
    assert not ctx.frontier


def test_frontier_rungs_on_the_runbooks_legacy_grid():
    """On `decimals: 2` at N = 2048, P = 128 the executable 2-decimal capacities are 0.25
    apart (budget 512), so the rungs around 1.00 are 0.75 and 1.25, where the exact grid's
    are 0.9375 and 1.0625. Seen red: `rungs_around(..., rb.capacity.decimals)` -> None."""
    assert N == 2048 and PAD == 128
    ctx, state = setup(1, "1.00", N, [N] * 8, [N] * 8, rb=runbook(1, decimals=2))
    asked, _ = run_step(frontier_step(ctx, MODEL, "echo", state),
                        lambda i, r: outcome(r, Status.OK, summary(0), None))
    assert [r.capacity for r in asked] == ["0.75", "1.00", "1.25"]
    assert [r.budget_tokens for r in ctx.frontier[(MODEL, "echo")]] == [1536, 2048, 2560]
