"""Plan (cells, order) and the pipeline's decisions, driven by scripted run outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.grid.capacity import budget_tokens, is_executable
from harness.pipeline.decisions import (
    PAIR_STEPS,
    SELECT_COLUMNS,
    VALIDATE_COLUMNS,
    Context,
    Outcome,
    model_pipeline,
)
from harness.pipeline.stages import plan_cells
from harness.results.layout import Cell, canary_model, cell_dir
from harness.results.rows import AttemptRow
from harness.runbook.load import load_runbook

ROOT = Path(__file__).resolve().parents[2]
RB = load_runbook(ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml")
M = "QWEN3_30B"                   # N = 128 x 8 = 1024
N = 1024


def test_cell_name_and_dir(tmp_path):
    cell = Cell("c", "QWEN3_30B", "echo", "validate", "1.03125", 3)
    assert cell.name == "QWEN3_30B__echo__validate__cap1p03125__a3"
    assert cell_dir(tmp_path, cell) == tmp_path / "cells" / cell.name


def test_plan_order_and_counts():
    cells = plan_cells(RB)
    assert [c.purpose for c in cells[:3]] == ["canary"] * 3
    assert canary_model(RB) == "DEEPSEEK_V2_LITE"                   # fewest MoE weights
    assert sum(c.purpose == "measure" for c in cells) == 4           # 2 models x 2 select
    assert sum(c.purpose == "validate" for c in cells) == 4
    assert sum(c.purpose == "time" for c in cells) == 12      # 2 models x 3 timed x 2 launches
    assert all(c.capacity is None for c in cells if c.purpose in ("validate", "time"))
    assert all(c.capacity == "2.00" for c in cells if c.purpose in ("canary", "measure"))


def summary(peak, budget, saturated=0, rows=8):
    return {"rows": rows, "saturated_rows": saturated, "malformed_rows": 0, "complete": True,
            "peak_actual_valid_recv": peak, "expected_recv": N, "budget": budget,
            "required_capacity": peak / N, "lower_bound": saturated > 0, "missing_rows": 0}


def outcome(req, status, summ=None):
    cell = Cell(RB.campaign, req.model, req.backend, req.purpose, req.capacity, 1)
    return Outcome(cell, status, summ, {"trials": 1} if req.purpose == "time" else None,
                   AttemptRow(campaign=RB.campaign, model=req.model, backend=req.backend,
                              cell_dir="x"), {})


def drive(ctx, script):
    """Run one model's pipeline; `script(req)` answers each run. Returns the requests."""
    pipe = model_pipeline(ctx, M)
    reqs, out, first = [], None, True
    while True:
        try:
            req = next(pipe) if first else pipe.send(out)
        except StopIteration:
            return reqs
        first = False
        reqs.append(req)
        out = script(req)


def simple(peaks, validate=None, measure_status=None):
    """Measure -> the backend's peak; validate -> `validate(req)` or clean."""
    def script(req):
        budget = budget_tokens(req.capacity, N)
        if req.purpose == "measure":
            status = (measure_status or {}).get(req.backend, "ok")
            if status == "does_not_fit":
                return outcome(req, status)
            peak = min(peaks[req.backend], budget)
            sat = 4 if peak >= budget else 0
            return outcome(req, "lower_bound" if sat else "ok", summary(peak, budget, sat))
        if req.purpose == "validate":
            status = validate(req) if validate else "ok"
            peak = peaks[req.backend]
            return outcome(req, status, summary(min(peak, budget), budget,
                                                2 if status == "drops" else 0))
        return outcome(req, "ok", summary(1000, budget))
    return script


def caps(reqs, purpose, backend=None):
    return [r.capacity for r in reqs if r.purpose == purpose
            and (backend is None or r.backend == backend)]


def test_select_validate_time_at_the_max_of_echo_and_ultraep():
    ctx = Context(RB, (), None)
    reqs = drive(ctx, simple({"echo": 1173, "ultraep": 1300}))
    assert caps(reqs, "measure") == ["2.00", "2.00"]
    assert caps(reqs, "validate") == ["1.25", "1.375"]     # budgets 1280 >= 1173, 1408 >= 1300
    assert caps(reqs, "time") == ["1.375"] * 6               # every timed backend at the max
    assert [r.backend for r in reqs if r.purpose == "time"] == [
        "echo", "ultraep", "moonep", "ultraep", "moonep", "echo"]      # 2 rotated rounds
    echo = ctx.selection[(M, "echo")]
    assert echo.selected_capacity == "1.25" and echo.selected_budget_tokens == 1280
    assert echo.validated is True and echo.validate_attempts == 1
    assert echo.timing_capacity == "1.375" and echo.measured_at_capacity == "2.00"
    assert echo.over_provision == pytest.approx(1280 / 1173)
    assert ctx.timing[(M, "moonep")].timing_capacity == "1.375"


def test_drops_step_up_one_rung_each_time():
    ctx = Context(RB, (), None)
    tries = {"n": 0}

    def validate(req):
        if req.backend != "echo":
            return "ok"
        tries["n"] += 1
        return "drops" if tries["n"] <= 2 else "ok"
    reqs = drive(ctx, simple({"echo": 1173, "ultraep": 1173}, validate))
    steps = caps(reqs, "validate", "echo")
    assert [budget_tokens(c, N) for c in steps] == [1280, 1408, 1536]     # +P each time
    assert all(is_executable(c, N) for c in steps)
    row = ctx.selection[(M, "echo")]
    assert row.validated is True and row.validate_attempts == 3
    assert row.selected_capacity == steps[-1]
    assert caps(reqs, "time") == [steps[-1]] * 6


def test_step_ups_are_bounded_and_leave_validated_false():
    ctx = Context(RB, (), None)
    reqs = drive(ctx, simple({"echo": 1173, "ultraep": 1173},
                             lambda req: "drops" if req.backend == "echo" else "ok"))
    assert len(caps(reqs, "validate", "echo")) == RB.capacity.max_validate_steps + 1
    row = ctx.selection[(M, "echo")]
    assert row.validated is False
    assert row.validate_attempts == RB.capacity.max_validate_steps + 1


def test_lower_bound_is_remeasured_at_a_larger_capacity():
    ctx = Context(RB, (), None)
    reqs = drive(ctx, simple({"echo": 2500, "ultraep": 1173}))     # 2500 > budget 2048 at 2.00
    measured = caps(reqs, "measure", "echo")
    assert measured[0] == "2.00" and len(measured) == 2
    assert budget_tokens(measured[1], N) > 2500 and is_executable(measured[1], N)
    row = ctx.selection[(M, "echo")]
    assert row.measured_at_capacity == measured[1]
    assert row.peak_actual_valid_recv == 2500
    assert budget_tokens(row.selected_capacity, N) == 2560        # ceil(2500/128) x 128


def test_persistent_lower_bound_gives_no_selection():
    ctx = Context(RB, (), None)
    reqs = drive(ctx, simple({"echo": 10**9, "ultraep": 1173}))
    assert len(caps(reqs, "measure", "echo")) == RB.capacity.max_remeasure + 1
    assert caps(reqs, "validate", "echo") == []
    assert ctx.selection[(M, "echo")].selected_capacity is None
    assert caps(reqs, "time") == ["1.25"] * 6                        # ultraep's selection


def test_does_not_fit_at_measure_is_recorded_and_timing_uses_the_rest():
    ctx = Context(RB, (), None)
    reqs = drive(ctx, simple({"echo": 1173, "ultraep": 1300},
                             measure_status={"ultraep": "does_not_fit"}))
    assert caps(reqs, "validate", "ultraep") == []
    row = ctx.selection[(M, "ultraep")]
    assert row.selected_capacity is None and row.validated is False
    assert row.validate_attempts == 0 and row.measured_at_capacity == "2.00"
    assert caps(reqs, "time") == ["1.25"] * 6


def test_a_pair_select_ends_states_its_stop_and_the_columns_it_leaves_empty():
    ctx = Context(RB, (), None)
    drive(ctx, simple({"echo": 1173, "ultraep": 1300},
                      measure_status={"ultraep": "does_not_fit"}))
    stop = ctx.stops[(M, "ultraep")]
    assert (stop.pair, stop.stage) == ((M, "ultraep"), "select")
    assert "does_not_fit" in stop.why
    assert set(stop.empty) == set(SELECT_COLUMNS) | set(VALIDATE_COLUMNS)
    row = ctx.selection[(M, "ultraep")]
    assert all(getattr(row, c) is None for c in stop.empty)
    assert (M, "ultraep", "validate") in ctx.skipped
    assert (M, "echo") not in ctx.stops                 # a pair that went on has no Stop


def test_a_step_that_ends_a_pair_without_a_stop_gets_one_naming_its_stage(monkeypatch):
    """A decide-only step returning False (a gate) ends the pair before validate: the
    pipeline records a generic Stop naming the step's stage, or the one the step stated."""
    def gate(ctx, model, backend, state):
        if backend == "echo":
            ctx.stop(model, backend, "select", "stated by the gate")
        return False
    monkeypatch.setitem(PAIR_STEPS, "select", gate)
    ctx = Context(RB, (), None)
    reqs = drive(ctx, simple({"echo": 1173, "ultraep": 1300}))
    assert caps(reqs, "validate") == []
    assert ctx.stops[(M, "echo")].why == "stated by the gate"
    assert ctx.stops[(M, "ultraep")].why == "its select step ended the pair"
    assert ctx.stops[(M, "ultraep")].empty == VALIDATE_COLUMNS
    assert {(M, b, "validate") for b in ("echo", "ultraep")} <= ctx.skipped


def test_until_measure_runs_measure_only():
    ctx = Context(RB, (), "measure")
    reqs = drive(ctx, simple({"echo": 1173, "ultraep": 1300}))
    assert {r.purpose for r in reqs} == {"measure"}


def test_stage_modes():
    assert Context(RB, (), None).stage_mode("time") == "run"
    ctx = Context(RB, ("validate",), None)
    assert [ctx.stage_mode(s) for s in ("preflight", "measure", "validate", "time")] == [
        "replay", "replay", "run", "stop"]
    ctx = Context(RB, (), "select")
    assert ctx.stage_mode("select") == "run" and ctx.stage_mode("validate") == "stop"


def campaign_with(tmp_path, events, rb=RB):
    from harness.campaign.driver import Campaign
    from harness.campaign.progress import ProgressView
    from harness.launch.local import LocalLauncher
    from harness.results.events import EventLog
    log = EventLog(tmp_path / "events.jsonl")
    for ev, fields in events:
        log.append(ev, **fields)
    return Campaign(rb, tmp_path, LocalLauncher(), Context(rb, (), None),
                    ProgressView(enabled=False), ["epcap"])


def fin(attempt, status, capacity="2.00", purpose="measure"):
    cell = Cell(RB.campaign, M, "echo", purpose, capacity, attempt)
    return ("cell_finish", {"cell": cell.name, "campaign": RB.campaign, "model": M,
                            "backend": "echo", "purpose": purpose, "capacity": capacity,
                            "attempt": attempt, "status": status,
                            "row": {"attempt": attempt}, "summary": None})


def test_replay_skips_retried_infra_and_numbers_new_attempts(tmp_path):
    from harness.pipeline.decisions import Request
    started = Cell(RB.campaign, M, "echo", "measure", "2.00", 3)
    camp = campaign_with(tmp_path, [fin(1, "infra"), fin(2, "ok"),
                                    ("cell_submit", {"cell": started.name, "model": M,
                                                     "backend": "echo", "purpose": "measure",
                                                     "attempt": 3})])
    req = Request(M, "echo", "measure", "2.00")
    out, _ = camp.replay_with_retries(req)
    assert out.status == "ok" and out.cell.attempt == 2           # the retry, not the infra
    assert camp.next_cell(req).attempt == 4                        # a3 was started: never reused
    assert [e.cell for e in camp.unfinished_starts()] == [started.name]


def test_replay_without_retries_left_returns_the_infra(tmp_path):
    import dataclasses

    from harness.pipeline.decisions import Request
    rb = dataclasses.replace(RB, limits=dataclasses.replace(RB.limits, infra_retries=0))
    camp = campaign_with(tmp_path, [fin(1, "infra"), fin(2, "ok")], rb)
    out, left = camp.replay_with_retries(Request(M, "echo", "measure", "2.00"))
    assert out.status == "infra" and left.infra == 0


def test_replay_refuses_results_that_disagree_with_the_plan(tmp_path):
    from harness.errors import BadInput
    from harness.pipeline.decisions import Request
    camp = campaign_with(tmp_path, [fin(1, "ok", capacity="3.00")])
    with pytest.raises(BadInput, match="use --fresh"):
        camp.replayed(Request(M, "echo", "measure", "2.00"))


def test_bug_class_runs_are_rerun_after_a_fix(tmp_path):
    from harness.pipeline.decisions import Request
    camp = campaign_with(tmp_path, [fin(1, "assert")])
    assert camp.replayed(Request(M, "echo", "measure", "2.00")) is None
    assert camp.next_cell(Request(M, "echo", "measure", "2.00")).attempt == 2


def test_time_cells_are_launch_rounds_in_rotated_order():
    from harness.pipeline.stages import plan_cells
    from harness.runbook.load import load_runbook
    rb = load_runbook(Path(__file__).resolve().parents[2] / "runbooks" / "local-cpu.yaml")
    time_cells = [p for p in plan_cells(rb) if p.purpose == "time"]
    arms = ["echo", "ultraep", "moonep", "mcore-alltoall", "mcore-deepep", "mcore-hybridep",
            "echo~control"]
    assert len(time_cells) == 4 * len(arms) * 3  # models x (6 backends + control) x launches
    first = [p.backend for p in time_cells if p.model == "QWEN3_30B"]
    assert first == arms + arms[1:] + arms[:1] + arms[2:] + arms[:2]


def test_frontier_cells_are_planned_per_timed_select_pair_only_when_asked():
    """`frontier: {rungs: k}`: 2k + 1 frontier runs per select-and-timed pair, after its
    validate run and before the model's time runs; none without the key."""
    from harness.pipeline.stages import plan_cells
    from harness.runbook.load import load_runbook
    root = Path(__file__).resolve().parents[2] / "runbooks"
    assert not [p for p in plan_cells(load_runbook(root / "local-cpu.yaml"))
                if p.purpose == "frontier"]
    rb = load_runbook(root / "local-cpu-curves.yaml")
    plan = plan_cells(rb)
    cells = [p for p in plan if p.purpose == "frontier"]
    assert rb.frontier_rungs == 1
    assert len(cells) == 4 * 2 * 3                   # models x (echo, ultraep) x rungs
    one = [(p.backend, p.purpose) for p in plan if p.model == "QWEN3_30B"]
    assert one.index(("ultraep", "frontier")) > one.index(("ultraep", "validate"))
    assert one.index(("echo", "time")) > max(i for i, c in enumerate(one) if c[1] == "frontier")
