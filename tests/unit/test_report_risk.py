"""The report's drop-risk sentences (harness.report.sections.risk): held out, re-run, no fit, none."""

from __future__ import annotations

from harness.report.sections.risk import PairSteps, risk_sentence
from harness.telemetry.steps import StepPeaks

ROW = {"selected_capacity": "1.03125", "validated": "true", "validate_steps": "65",
       "drop_risk_95": "0.0450423", "predicted_drop_risk": "0.0002",
       "predicted_drop_risk_hi": "0.003", "held_out": "true"}


def steps(peaks) -> StepPeaks:
    return StepPeaks(tuple(range(len(peaks))), tuple(peaks), (False,) * len(peaks))


def test_the_issue_sentence():
    assert risk_sentence(ROW, None) == (
        "at 1.03125, no drop in 65 held-out steps: per-step drop probability below 4.5% at "
        "95%; the tail fit predicts 0.02% (≤ 0.3%)")


def test_rerun_of_the_measured_routing_is_said_and_states_no_bound():
    text = risk_sentence({**ROW, "held_out": "false", "drop_risk_95": ""}, None)
    assert "re-ran the measured routing" in text and "below" not in text


def test_no_fit_gives_the_reason_from_the_steps():
    row = {**ROW, "predicted_drop_risk": "", "predicted_drop_risk_hi": ""}
    balanced = PairSteps("moonep", 2048, "1.00", steps([2048] * 7), steps([2048] * 7))
    assert "no tail fit (every step peaked at exactly 2048 slots" in risk_sentence(row, balanced)
    few = PairSteps("echo", 2432, "1.1875", steps([2400, 2401]), steps([2402]))
    assert "no tail fit (3 steps: a tail fit needs at least 10" in risk_sentence(row, few)


def test_unvalidated_selection_has_no_risk_figures():
    assert "not validated" in risk_sentence({**ROW, "validated": "false"}, None)


def test_no_fit_reason_of_a_rerun_counts_the_measure_steps_once():
    row = {**ROW, "predicted_drop_risk": "", "predicted_drop_risk_hi": "", "held_out": "false"}
    rerun = PairSteps("echo", 2560, "1.25", steps(range(2400, 2407)), steps(range(2400, 2407)))
    assert "no tail fit (7 steps: a tail fit needs at least 10" in risk_sentence(row, rerun)
