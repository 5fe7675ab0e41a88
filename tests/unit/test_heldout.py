"""Held-out validation decisions (harness.grid.heldout): validate config, target, risk columns."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import genextreme

from harness.errors import BadInput
from harness.grid.capacity import budget_tokens, is_executable, round_up_to_grid
from harness.grid.heldout import (
    ValidateConfig,
    parse_target,
    probability_text,
    resolve_validate,
    risk_columns,
    select_budget,
)
from harness.grid.risk import fit_risk
from harness.telemetry.steps import StepPeaks

N, PAD = 2048, 128


def steps(peaks, saturated=None) -> StepPeaks:
    peaks = [int(p) for p in peaks]
    return StepPeaks(tuple(range(len(peaks))), tuple(peaks),
                     tuple(saturated or [False] * len(peaks)))


def gev(n, seed):
    return np.round(genextreme.rvs(0.2, loc=2400, scale=30, size=n, random_state=seed))


def test_validate_defaults_are_held_out():
    assert resolve_validate(None, 1234, 7) == ValidateConfig(1235, 7, held_out=True)
    assert resolve_validate({"iters": 65}, 1234, 7) == ValidateConfig(1235, 65, True)
    assert resolve_validate({"seed": 99}, 1234, 7) == ValidateConfig(99, 7, True)
    # the measured routing again: only when written, and then recorded as not held out
    assert resolve_validate({"seed": 1234}, 1234, 7) == ValidateConfig(1234, 7, False)


@pytest.mark.parametrize("raw,field", [({"seed": "x"}, "validate.seed"),
                                       ({"iters": 0}, "validate.iters"),
                                       ({"iters": True}, "validate.iters"),
                                       ({"sede": 1}, "validate.sede")])
def test_validate_bad_values_name_the_field(raw, field):
    with pytest.raises(BadInput) as info:
        resolve_validate(raw, 1234, 7)
    assert info.value.field == field


def test_target_parsing():
    assert parse_target(None) == "peak" and parse_target("peak") == "peak"
    assert parse_target({"drop_risk": 1e-3}) == 1e-3
    assert parse_target({"drop_risk": "1e-3"}) == 1e-3
    for bad in ("max", {"drop_risk": 0}, {"drop_risk": 1}, {"drop_risk": True},
                {"drop_risk": "x"}, {"risk": 0.1}, 3):
        with pytest.raises(BadInput):
            parse_target(bad)


def test_peak_target_is_todays_rule():
    choice = select_budget("peak", 2409, N, PAD, None, steps([2400, 2409]))
    assert choice.capacity == round_up_to_grid(2409, N, PAD) and choice.budget == 2432
    assert choice.over_provision == 2432 / 2409 and "peak rule" in choice.note


def test_risk_target_moves_with_the_target_and_meets_it():
    measured = steps(gev(65, 11))
    loose = select_budget(0.2, int(max(measured.peaks)), N, PAD, None, measured)
    tight = select_budget(1e-4, int(max(measured.peaks)), N, PAD, None, measured)
    assert is_executable(tight.capacity, N, PAD) and tight.budget > loose.budget
    model = fit_risk(measured.exact_peaks())
    assert model.at(tight.budget).high <= 1e-4
    assert model.at(tight.budget - PAD).high > 1e-4
    assert "drop_risk 0.0001" in tight.note


def test_risk_target_without_a_fit_falls_back_to_the_peak_rule_and_says_why():
    choice = select_budget(1e-3, 2048, N, PAD, None, steps([2048] * 20))     # balanced
    assert choice.budget == 2048 and "every step peaked at exactly 2048" in choice.note


def test_risk_columns_of_an_accepted_held_out_validation():
    measured, validated = steps(gev(7, 1)), steps(gev(7, 2))
    budget = 2560
    cols = risk_columns(budget, 1235, True, measured, validated, accepted=True)
    assert cols["validate_seed"] == 1235 and cols["held_out"] is True
    assert cols["validate_steps"] == 7 and cols["validate_peak"] == max(validated.peaks)
    assert cols["headroom"] == budget / max(validated.peaks)
    assert cols["drop_risk_95"] == f"{1 - 0.05 ** (1 / 7):.6g}" == "0.348164"
    pooled = fit_risk(measured.exact_peaks() + validated.exact_peaks()).at(budget)
    assert cols["predicted_drop_risk"] == f"{pooled.value:.6g}"
    assert cols["predicted_drop_risk_hi"] == f"{pooled.high:.6g}"
    assert probability_text(2.1e-07) == "2.1e-07" and probability_text(0.0) == "0"


def test_risk_columns_not_held_out_pool_only_the_measure_steps_and_state_no_bound():
    measured = steps(gev(12, 4))
    budget = int(np.median(measured.peaks))        # a budget where the fit says something
    cols = risk_columns(budget, 1234, False, measured, measured, accepted=True)
    assert cols["drop_risk_95"] is None and cols["held_out"] is False
    alone = fit_risk(measured.exact_peaks()).at(budget)
    twice = fit_risk(measured.exact_peaks() * 2).at(budget)
    assert alone.high != twice.high                             # counting twice is visible
    assert (cols["predicted_drop_risk"], cols["predicted_drop_risk_hi"]) == (
        f"{alone.value:.6g}", f"{alone.high:.6g}")


def test_risk_columns_without_acceptance_or_with_drops_state_no_risk():
    measured, validated = steps(gev(7, 1)), steps(gev(7, 2))
    for cols in (risk_columns(2560, 1235, True, measured, validated, accepted=False),
                 risk_columns(2560, 1235, True, measured,
                              steps(validated.peaks, [True] + [False] * 6), accepted=True)):
        assert cols["drop_risk_95"] is None and cols["predicted_drop_risk"] is None
        assert cols["validate_steps"] == 7
    few = risk_columns(2560, 1235, True, steps([2400, 2401]), steps([2402, 2403]), True)
    assert float(few["drop_risk_95"]) == pytest.approx(1 - 0.05 ** 0.5)
    assert few["predicted_drop_risk"] is None                        # 4 steps: no fit
    assert risk_columns(2560, 1235, True, None, None, True)["validate_steps"] is None
    assert budget_tokens("1.25", N) == 2560


def test_select_stage_uses_the_runbook_target():
    """capacity.target {drop_risk: R} reaches the campaign's select stage; peak is today's."""
    import dataclasses
    from pathlib import Path

    from harness.pipeline.decisions import Context, Outcome, select_step
    from harness.results.layout import Cell
    from harness.results.rows import AttemptRow, SelectionRow
    from harness.runbook.load import load_runbook
    from harness.telemetry.summary import LogSummary

    base = load_runbook(Path(__file__).resolve().parents[2] / "runbooks" / "local-cpu.yaml")
    measured = steps(gev(40, 21))
    peak = max(measured.peaks)
    summary = LogSummary(rows=40, expected_recv=N, peak_actual_valid_recv=peak,
                         required_capacity=peak / N, lower_bound=False)

    def selected(target) -> SelectionRow:
        rb = dataclasses.replace(base, capacity=dataclasses.replace(base.capacity,
                                                                    target=target))
        ctx = Context(rb, (), None)
        cell = Cell(rb.campaign, "QWEN3_30B", "echo", "measure", "2.00")
        row = AttemptRow(campaign=rb.campaign, model=cell.model, backend=cell.backend)
        state = {"outcome": Outcome(cell, "ok", summary, None, row, {}, measured),
                 "capacity": "2.00"}
        select_step(ctx, "QWEN3_30B", "echo", state)
        return state["row"]

    assert selected("peak").selected_budget_tokens == -(-peak // PAD) * PAD
    tight = selected(1e-6).selected_budget_tokens
    assert tight > -(-peak // PAD) * PAD
    assert tight == select_budget(1e-6, peak, N, PAD, None, measured).budget


def test_held_out_routing_needs_another_seed_and_no_trace_replay():
    import dataclasses
    from pathlib import Path

    from harness.grid.heldout import resolve_validate
    from harness.runbook.load import load_runbook

    rb = load_runbook(Path(__file__).resolve().parents[2] / "runbooks" / "local-cpu.yaml")
    assert rb.held_out_routing("echo")
    same = dataclasses.replace(rb, validate_config=resolve_validate({"seed": rb.seed}, rb.seed,
                                                                    rb.measure.iters))
    assert not same.held_out_routing("echo")
    echo = rb.backend("echo")
    traced = dataclasses.replace(echo, options=dataclasses.replace(echo.options,
                                                                   trace="routing.jsonl"))
    replay = dataclasses.replace(rb, backends=tuple(traced if b.name == "echo" else b
                                                    for b in rb.backends))
    assert not replay.held_out_routing("echo") and replay.held_out_routing("ultraep")
