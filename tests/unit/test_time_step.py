"""campaign.decisions.time_step: rotated launch rounds, every launch in the verdict, DNF arms."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.pipeline.decisions import Context, Outcome, time_step
from harness.results.layout import Cell
from harness.results.rows import AttemptRow, SelectionRow
from harness.runbook.load import load_runbook

RUNBOOK = Path(__file__).resolve().parents[2] / "runbooks" / "local-cpu.yaml"


def timing(d: float, c: float) -> dict:
    trials = [{"dispatch_ms_median": d * f, "combine_ms_median": c * f} for f in (1.0, 1.01)]
    return {"per_trial": trials, "dispatch_ms_median": d, "combine_ms_median": c,
            "trials": 2, "iters": 3, "step_cv": 0.01, "noise_floor_pct": 1.0,
            "timer": "perf_counter", "backend_impl": "reference"}


def drive(times: dict, dnf: set = frozenset()) -> tuple[Context, list[str]]:
    """Run QWEN3_30B's time step; times[arm] = per-round (dispatch, combine) medians."""
    rb = load_runbook(RUNBOOK)
    rb = replace(rb, backends=tuple(b for b in rb.backends      # the forks' arms only
                                    if not b.name.startswith("mcore-")))
    ctx = Context(rb, (), None)
    for b in ("echo", "ultraep"):
        ctx.selection[("QWEN3_30B", b)] = SelectionRow(
            campaign=rb.campaign, model="QWEN3_30B", backend=b, selected_capacity="1.3125")
    pipe = time_step(ctx, "QWEN3_30B")
    asked, rounds = [], {}
    out = None
    try:
        while True:
            req = pipe.send(out) if asked else next(pipe)
            asked.append(req.backend)
            i = rounds.get(req.backend, 0)
            rounds[req.backend] = i + 1
            cell = Cell(rb.campaign, req.model, req.backend, req.purpose, req.capacity, i + 1)
            row = AttemptRow(campaign=rb.campaign, model=req.model, backend=req.backend,
                             cell_dir=f"cells/{cell.name}")
            if req.backend in dnf:
                out = Outcome(cell, "does_not_fit", None, None, row, {})
            else:
                out = Outcome(cell, "ok", None, timing(*times[req.backend][i]), row, {})
    except StopIteration:
        pass
    return ctx, asked


def test_rounds_are_rotated_and_every_launch_counts():
    same = [(1.0, 2.0), (1.0, 2.0), (1.0, 2.0)]
    # ultraep: launch 0 says 2x slower, the other two say equal; a verdict from one launch
    # (or a CI that ignored the launch-to-launch spread) would call it slower
    ctx, asked = drive({"echo": same, "ultraep": [(2.0, 2.0), (1.0, 2.0), (1.0, 2.0)],
                        "moonep": [(3.0, 2.0)] * 3, "echo~control": same})
    assert asked == ["echo", "ultraep", "moonep", "echo~control", "ultraep", "moonep",
                     "echo~control", "echo", "moonep", "echo~control", "echo", "ultraep"]
    rows = {(r.backend, r.phase): r for r in ctx.comparison["QWEN3_30B"]}
    assert rows[("ultraep", "dispatch")].launches == 3
    assert rows[("ultraep", "dispatch")].verdict != "slower", rows[("ultraep", "dispatch")]
    assert rows[("moonep", "dispatch")].verdict == "slower"
    assert rows[("echo~control", "dispatch")].verdict == "indistinguishable"
    assert ctx.timing[("QWEN3_30B", "moonep")].launches == 3


def test_a_does_not_fit_arm_is_launched_once_and_has_no_verdict():
    same = [(1.0, 2.0)] * 3
    ctx, asked = drive({"echo": same, "ultraep": same, "echo~control": same}, dnf={"moonep"})
    assert asked.count("moonep") == 1 and asked.count("echo") == 3
    assert ("QWEN3_30B", "moonep", "time") in ctx.skipped
    row = ctx.timing[("QWEN3_30B", "moonep")]
    assert row.status == "does_not_fit" and row.launches == 0
    moon = [r for r in ctx.comparison["QWEN3_30B"] if r.backend == "moonep"]
    assert [r.verdict for r in moon] == [None, None] and "does_not_fit" in moon[0].reason
