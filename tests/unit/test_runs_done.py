"""runs_done counts only runs whose results stand: not an invalidated cell (a runbook edit,
--retry), not an infra failure that a later run retried, not a run that stopped the campaign
and reruns on resume; the same count in `epcap status`, the closing line and the driver."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.results.events import campaign_stats, superseded_infra

KEY = {"model": "m", "backend": "b", "purpose": "measure"}


def fin(t: float, cell: str, status: str = "ok", **key) -> dict:
    return {"ev": "cell_finish", "t": t, "cell": cell, "status": status, "wall_s": 1.0,
            "runs_left": 0, "stage": "measure", "attempt": 1, **(key or KEY)}


def write(tmp_path, events):
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return campaign_stats(tmp_path)


def test_invalidated_and_rerun_runs_are_not_done_twice(tmp_path):
    """A run invalidated by a runbook edit and its rerun count once."""
    events = [{"ev": "run_start", "t": 0.0, "infra_retries": 2},
              fin(1, "c1"), fin(2, "c2", **{**KEY, "model": "n"}),
              {"ev": "run_start", "t": 10.0, "infra_retries": 2},
              {"ev": "cells_invalidated", "t": 10.5, "cells": ["c1"], "reason": "runbook edit"},
              fin(11, "c1b")]
    assert write(tmp_path, events)["runs_done"] == 2


def test_an_infra_retry_is_not_done_twice(tmp_path):
    events = [{"ev": "run_start", "t": 0.0, "infra_retries": 2},
              fin(1, "a1", "infra"), fin(2, "a2", "infra"), fin(3, "a3"),
              fin(4, "x1", "infra", **{**KEY, "model": "x"})]    # not retried (yet): stands
    assert write(tmp_path, events)["runs_done"] == 2


def test_a_bug_class_run_reruns_and_is_not_done(tmp_path):
    events = [{"ev": "run_start", "t": 0.0, "infra_retries": 0}, fin(1, "a1"),
              fin(2, "b1", "assert", **{**KEY, "model": "y"})]
    assert write(tmp_path, events)["runs_done"] == 1


@settings(max_examples=300, deadline=None)
@given(statuses=st.lists(st.sampled_from(["ok", "infra", "crash", "drops"]), max_size=12),
       retries=st.integers(0, 4))
def test_superseded_infra_matches_the_driver_replay(statuses, retries):
    """The rule equals what harness.campaign.driver.Campaign.replay_with_retries consumes:
    per request, an infra run is skipped while retries are left and a later run exists."""
    runs = list(range(len(statuses)))
    seen: list[int] = []                     # the runs the pipelines were handed
    i = 0
    while i < len(runs):                     # the driver's loop, one request at a time
        left, out = retries, i
        i += 1
        while statuses[out] == "infra" and left > 0 and i < len(runs):
            out, i, left = i, i + 1, left - 1
        seen.append(out)
    flags = superseded_infra(statuses, retries)
    assert [n for n in runs if not flags[n]] == seen


REDUCED = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
STEP = st.one_of(
    st.tuples(st.just("finish"), st.sampled_from(["QWEN3_30B", "DEEPSEEK_V2_LITE"]),
              st.sampled_from(["echo", "ultraep"]),
              st.sampled_from(["measure", "time", "canary"]),
              st.sampled_from(["ok", "infra", "infra", "crash", "drops", "assert",
                               "does_not_fit"])),
    st.tuples(st.just("invalidate"), st.integers(0, 30)),
    st.tuples(st.just("resume")))


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, max_size=25), retries=st.integers(0, 3))
@example(steps=[("finish", "QWEN3_30B", "echo", "measure", "infra"),
                ("finish", "QWEN3_30B", "echo", "measure", "ok")], retries=1)
def test_status_and_the_driver_count_the_same_runs(tmp_path_factory, steps, retries):
    """Over generated event logs (finishes of any status, invalidations, resumes): `epcap
    status`'s runs_done equals the resuming driver's own count, which is what the banner
    and the closing line print."""
    import dataclasses

    from harness.campaign.driver import Campaign
    from harness.campaign.progress import ProgressView
    from harness.launch.local import LocalLauncher
    from harness.pipeline.decisions import Context
    from harness.runbook.load import load_runbook
    rb = load_runbook(REDUCED)
    rb = dataclasses.replace(rb, limits=dataclasses.replace(rb.limits, infra_retries=retries))
    root = tmp_path_factory.mktemp("camp")
    events, attempts, t = [{"ev": "campaign_start", "t": 0.0, "campaign": rb.campaign},
                           {"ev": "run_start", "t": 0.0, "infra_retries": retries}], {}, 0.0
    cells: list[str] = []
    for step in steps:
        t += 1.0
        if step[0] == "finish":
            _, model, backend, purpose, status = step
            key = (model, backend, purpose)
            attempts[key] = attempts.get(key, 0) + 1
            cell = f"{model}__{backend}__{purpose}__cap2p00__a{attempts[key]}"
            cells.append(cell)
            events.append({"ev": "cell_finish", "t": t, "cell": cell, "campaign": rb.campaign,
                           "model": model, "backend": backend, "purpose": purpose,
                           "capacity": "2.00", "attempt": attempts[key], "status": status,
                           "wall_s": 1.0, "span_s": 1.0})
        elif step[0] == "invalidate" and cells:
            events.append({"ev": "cells_invalidated", "t": t, "reason": "--retry crash",
                           "cells": [cells[step[1] % len(cells)]]})
        elif step[0] == "resume":
            events.append({"ev": "run_start", "t": t, "infra_retries": retries})
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    camp = Campaign(rb, root, LocalLauncher(), Context(rb, (), None), ProgressView(), [])
    assert campaign_stats(root)["runs_done"] == camp.done_runs
