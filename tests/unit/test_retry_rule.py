"""The one retry rule (harness/results/retries.py): which of a request's finished runs the
pipeline sees when infra and unclassified failures are retried as new attempts, as the
driver and the audit step it (pipeline.replay.next_standing) and as `epcap status` counts
it (results.events.superseded_infra, standing_finishes)."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.pipeline.replay import next_standing
from harness.results.events import campaign_stats, superseded_infra
from harness.runbook.model import Limits, UnclassifiedPolicy

KEY = {"model": "m", "backend": "b", "purpose": "measure"}


@dataclasses.dataclass
class Out:
    """An Outcome as next_standing reads it (its status)."""

    status: str


def seen_by_driver(statuses: list[str], infra: int, unclassified: int) -> list[int]:
    """The runs a driver hands its pipeline, one request at a time, written out plainly:
    a failure of a retried class is skipped while its own retries last and a later run
    exists (each request starts with the full retries of each class)."""
    seen, i = [], 0
    while i < len(statuses):
        left = {"infra": infra, "unclassified": unclassified}
        out = i
        i += 1
        while statuses[out] in left and left[statuses[out]] > 0 and i < len(statuses):
            left[statuses[out]] -= 1
            out, i = i, i + 1
        seen.append(out)
    return seen


@settings(max_examples=400, deadline=None)
@given(statuses=st.lists(st.sampled_from(["ok", "infra", "unclassified", "crash"]),
                         max_size=12),
       infra=st.integers(0, 3), unclassified=st.integers(0, 3))
def test_status_counts_and_the_driver_replay_agree(statuses, infra, unclassified):
    flags = superseded_infra(statuses, infra, unclassified)
    assert [n for n in range(len(statuses)) if not flags[n]] == seen_by_driver(
        statuses, infra, unclassified)
    limits = Limits(infra_retries=infra, unclassified=UnclassifiedPolicy(retries=unclassified))
    runs = iter(Out(s) for s in statuses)
    got = []
    while True:                      # next_standing consumes the runs in attempt order
        out, _ = next_standing(lambda: next(runs, None), limits)
        if out is None:
            break
        got.append(out)
    pending = [n for n in range(len(statuses)) if not flags[n]]
    assert [o.status for o in got] == [statuses[n] for n in pending][:len(got)]
    assert len(got) >= len(pending) - 1     # the last, when retried, asks for a new run


def limits(retries: int) -> Limits:
    return Limits(infra_retries=2, unclassified=UnclassifiedPolicy(retries=retries))


def test_an_unclassified_run_followed_by_another_is_retried():
    runs = iter([Out("unclassified"), Out("ok")])
    out, left = next_standing(lambda: next(runs, None), limits(1))
    assert out.status == "ok" and left.unclassified == 0 and left.infra == 2


def test_past_its_retries_the_unclassified_run_stands():
    runs = iter([Out("unclassified"), Out("unclassified"), Out("ok")])
    out, _ = next_standing(lambda: next(runs, None), limits(1))
    assert out.status == "unclassified"
    runs = iter([Out("unclassified"), Out("ok")])
    out, _ = next_standing(lambda: next(runs, None), limits(0))
    assert out.status == "unclassified"


def test_a_last_unclassified_run_with_retries_left_asks_for_a_new_run():
    runs = iter([Out("unclassified")])
    out, left = next_standing(lambda: next(runs, None), limits(1))
    assert out is None and left.unclassified == 0


def test_the_budgets_are_per_class():
    runs = iter([Out("infra"), Out("unclassified"), Out("infra"), Out("ok")])
    out, left = next_standing(lambda: next(runs, None), limits(1))
    assert out.status == "ok" and (left.infra, left.unclassified) == (0, 0)


def fin(t: float, cell: str, status: str) -> dict:
    return {"ev": "cell_finish", "t": t, "cell": cell, "status": status, "wall_s": 1.0,
            "runs_left": 0, "stage": "measure", "attempt": int(t), **KEY}


def runs_done(tmp_path, start: dict, statuses: list[str]) -> int:
    events = [{"ev": "run_start", "t": 0.0, **start}] + [
        fin(n + 1, f"c{n}", s) for n, s in enumerate(statuses)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return campaign_stats(tmp_path)["runs_done"]


def test_status_counts_a_retried_unclassified_run_once(tmp_path):
    start = {"infra_retries": 1, "unclassified_retries": 1}
    assert runs_done(tmp_path, start, ["unclassified", "ok"]) == 1
    assert runs_done(tmp_path, start, ["unclassified", "unclassified"]) == 1
    assert runs_done(tmp_path, {**start, "unclassified_retries": 0},
                     ["unclassified", "ok"]) == 2
    # a log from before the policy retried no unclassified run
    assert runs_done(tmp_path, {"infra_retries": 1}, ["unclassified", "ok"]) == 2
