"""The ETA covers the report (docs/campaign.md, ETA): the report's seconds learned from earlier
reports of the same work like a run's, else the cost model's prior; the ETA error then ends when
the report is written, for an invocation whose estimates said they covered it."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.results.events import eta_error, eta_error_at, report_seconds

_spec = importlib.util.spec_from_file_location(
    "eta_tests", Path(__file__).resolve().parent / "test_eta.py")
eta_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eta_tests)

SECONDS = st.floats(min_value=0.01, max_value=500, allow_nan=False)


def ev(kind: str, mono: float, **more) -> dict:
    return {"ev": kind, "t": 1.7e9 + mono, "mono": mono, **more}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), SECONDS, st.booleans(), st.booleans(), SECONDS),
                max_size=6))
def test_each_report_is_timed_from_its_invocations_runs_end(invocations):
    """Generated logs of invocations (runs, runs complete or not, a report or not): each
    report's seconds are counted from its own invocation's end of runs, never another's."""
    events, expected, mono = [], [], 0.0
    for runs, run_s, complete, reported, report_s in invocations:
        events.append(ev("run_start", mono))
        for _ in range(runs):
            mono += run_s
            events.append(ev("cell_finish", mono, span_s=run_s))
        mono += 0.5
        events.append(ev("stage_done", mono, runs_complete=complete))
        if reported:
            mono += report_s
            events.append(ev("report", mono))
            if complete:
                expected.append(report_s)
        mono += 1.0
    got = report_seconds(events)
    assert len(got) == len(expected)
    assert all(abs(a - b) < 1e-6 for a, b in zip(got, expected, strict=True))


@settings(max_examples=200, deadline=None)
@given(eta=SECONDS, runs=st.integers(1, 8), run_s=SECONDS, report_s=SECONDS,
       covers=st.booleans())
def test_the_eta_error_ends_at_the_report_when_the_estimate_covered_it(eta, runs, run_s,
                                                                       report_s, covers):
    start = ev("run_start", 0.0, eta_s=eta, eta_report_s=1.0 if covers else None)
    events = [start] + [ev("cell_finish", run_s * (i + 1), eta_s=eta, span_s=run_s)
                        for i in range(runs)]
    end = run_s * runs + 0.5
    events += [ev("stage_done", end, runs_complete=True), ev("report", end + report_s),
               ev("campaign_done", end + report_s)]
    actual = end + report_s if covers else end
    assert eta_error(events) == round(eta / actual, 3)
    last = events[runs]                       # the last run's estimate: only the rest is left
    if covers:
        assert eta_error_at(events, (1.0,))["100%"] == round(eta / (actual - last["mono"]), 3)


def test_the_report_is_estimated_from_the_history_else_the_prior(tmp_path):
    from harness.campaign import store
    from harness.campaign.driver import Campaign
    from harness.campaign.progress import ProgressView
    from harness.launch.local import LocalLauncher
    from harness.pipeline.decisions import Context
    from harness.results.events import EventLog, ReportBuilt, StageDone
    from harness.runbook.load import load_runbook
    rb = load_runbook(eta_tests.REDUCED)
    root = tmp_path / "res"
    camp_dir = root / "reduced"
    camp = Campaign(rb, camp_dir, LocalLauncher(), Context(rb, (), None), ProgressView(), [])
    assert camp.cost is not None and camp.cost.rate is not None
    prior = camp.report_eta(20)
    assert prior > 0 and camp.report_eta(40) > prior       # more runs: more to audit and draw
    no_report = Context(rb, ("preflight", "measure"), None)
    assert Campaign(rb, camp_dir, LocalLauncher(), no_report, ProgressView(),
                    []).report_eta(20) == 0.0              # this invocation writes no report
    spans = {("QWEN3_30B", "echo", "measure"): 4.0, ("QWEN3_30B", "echo", "time"): 6.0}
    eta_tests._neighbour(root, "reduced-2", rb, spans)
    log = EventLog(root / "reduced-2" / "events.jsonl")
    log.write(StageDone(runs_complete=True))
    time.sleep(0.05)                                        # the report took some time
    log.write(ReportBuilt(path="x"))
    (measured,) = report_seconds([e for e in _read(root / "reduced-2")])
    assert measured >= 0.04
    assert store.history(camp_dir, rb).report_s == measured
    taught = Campaign(rb, camp_dir, LocalLauncher(), Context(rb, (), None), ProgressView(), [])
    assert taught.report_eta(20) == measured * taught.estimator.drift()
    assert taught.report_eta(20) != prior
    # the ETA of the runs left is the runs' estimate plus the report's
    left = taught.runs_left()
    without = Campaign(rb, camp_dir, LocalLauncher(), Context(rb, ("preflight", "measure",
                       "validate", "time"), None), ProgressView(), [])
    assert without.report_eta(len(left)) == 0.0
    assert taught.eta(left) - without.eta(left) == taught.report_eta(len(left)) > 0


def _read(folder: Path) -> list[dict]:
    from harness.results.events import read_events
    return read_events(folder / "events.jsonl")
