"""runs_done counts only runs whose results stand: not an invalidated cell (a runbook edit,
--retry), not an infra failure that a later run retried, not a run that stopped the campaign
and reruns on resume; the same count in `epcap status`, the closing line and the driver."""

from __future__ import annotations

import json

from hypothesis import given, settings
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
