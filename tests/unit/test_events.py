"""Typed events: every kind round-trips through JSON, and older or newer records still read."""

from __future__ import annotations

import dataclasses
import json
import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.results import events as et
from harness.results.events import EventLog, read_events
from harness.results.layout import Cell
from harness.vocab import Event

CELL = Cell("c", "QWEN3_30B", "echo", "measure", "2.00", 2)


@pytest.mark.parametrize("kind", list(et.KINDS.values()), ids=lambda k: k.EV)
def test_every_kind_round_trips(kind, tmp_path):
    event = kind()
    log = EventLog(tmp_path / "events.jsonl")
    log.write(event)
    (record,) = read_events(tmp_path)
    assert record["ev"] == kind.EV and isinstance(record["t"], float)
    assert et.parse_event(record) == event


def test_cell_finish_keeps_the_cell_and_ignores_unknown_keys():
    fin = et.CellFinish(**et.CellRef.fields_of(CELL), status="ok", row={"attempt": 2})
    data = json.loads(json.dumps(fin.to_json()))
    assert data["ev"] == Event.CELL_FINISH and data["cell"] == CELL.name
    back = et.parse_event({**data, "from_a_newer_version": 1})
    assert back == fin and back.to_cell() == CELL


def test_an_older_record_without_new_fields_still_reads():
    old = {"ev": "cell_finish", "t": 1.0, "cell": CELL.name, "campaign": "c",
           "model": CELL.model, "backend": "echo", "purpose": "measure", "capacity": "2.00",
           "attempt": 2, "status": "drops"}
    fin = et.parse_event(old)
    assert fin.status == "drops" and fin.summary is None and fin.failure == {}
    assert et.parse_event({"ev": "something_new"}) is None


# -- a repeated cell_finish line is dropped on replay -------------------------------------------

def _finish(cell: Cell, status: str = "ok") -> et.CellFinish:
    return et.CellFinish(**et.CellRef.fields_of(cell), status=status,
                         row={"campaign": "c", "model": cell.model, "backend": cell.backend,
                              "purpose": cell.purpose, "attempt": cell.attempt,
                              "capacity": cell.capacity, "status": status})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=12))
def test_duplicated_cell_finish_lines_count_once(tmp_path_factory, attempts):
    """Any sequence of finishes, some repeated (a doubled append): each cell counts once in
    the events, the attempts table and the statistics."""
    from harness.campaign import store
    root = tmp_path_factory.mktemp("dup")
    log = EventLog(root / "events.jsonl")
    for a in attempts:
        log.write(_finish(dataclasses.replace(CELL, attempt=a)))
    fins = [e for e in read_events(root) if e["ev"] == Event.CELL_FINISH]
    assert sorted(e["attempt"] for e in fins) == sorted(set(attempts))
    store.write_attempts(root)
    rows = (root / "capacity_attempts.tsv").read_text().splitlines()[1:]
    assert len(rows) == len(set(attempts))
    assert et.campaign_stats(root)["runs_done"] == len(set(attempts))


# -- epcap status: the four states ---------------------------------------------------------------

def _state(root, *events):
    from harness.campaign.state import campaign_state
    log = EventLog(root / "events.jsonl")
    log.write(et.CampaignStart(campaign="c"))
    for ev in events:
        log.write(ev)
    return campaign_state(root)


def test_status_done_interrupted_stopped_after(tmp_path):
    run = et.RunStart(pid=4321, host="node7")
    for sub, events, want in (
            ("done", [run, _finish(CELL), et.CampaignDone(stage="done")], "done"),
            ("int", [run, _finish(CELL), et.Checkpoint(reason="SIGINT")], "interrupted"),
            ("until", [run, _finish(CELL), et.StageDone(stage="measure")], "stopped_after"),
            ("bug", [run, et.Stopped(cell=CELL.name, status="assert", stage="measure")],
             "stopped_after"),
            ("killed", [run, _finish(CELL)], "interrupted")):
        (tmp_path / sub).mkdir()
        doc = _state(tmp_path / sub, *events)
        assert doc["state"] == want, (sub, doc)
        assert doc["pid"] == 4321 and doc["host"] == "node7" and doc["since"]
    doc = _state(_mk(tmp_path / "i3"), run, et.Checkpoint(reason="SIGINT"))
    assert doc["signal"] == "SIGINT" and doc["when"]
    doc = _state(_mk(tmp_path / "u3"), run, et.StageDone(stage="validate"))
    assert doc["stage"] == "validate"
    # a done campaign resumed later and interrupted is interrupted, not done
    doc = _state(_mk(tmp_path / "again"), run, et.CampaignDone(stage="done"), run,
                 et.Checkpoint(reason="SIGTERM"))
    assert doc["state"] == "interrupted" and doc["signal"] == "SIGTERM"


def _mk(path):
    path.mkdir()
    return path


def test_status_running_reads_the_lock_holder(tmp_path):
    from harness.campaign.state import campaign_state
    from harness.io.lock import CampaignLock
    EventLog(tmp_path / "events.jsonl").write(et.RunStart())
    with CampaignLock(tmp_path):
        doc = campaign_state(tmp_path)
        assert doc["state"] == "running" and doc["pid"] == os.getpid()
        assert doc["host"] == socket.gethostname() and doc["since"]
    assert campaign_state(tmp_path)["state"] == "interrupted"      # lock gone, no end event


# -- timing_launches.tsv from the events -------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["echo", "ultraep", "echo~control"]),
                          st.booleans(), st.booleans()), min_size=0, max_size=10))
def test_timing_launches_one_row_per_launch_and_phase(tmp_path_factory, launches):
    """Any sequence of time runs (some without timing, some invalidated later): one row per
    measured launch and phase, launches numbered per arm in run order, figures as recorded."""
    from harness.campaign import store
    from harness.results.tables import read_rows
    root = tmp_path_factory.mktemp("tl")
    log = EventLog(root / "events.jsonl")
    seen: dict[str, int] = {}
    want, gone = [], []
    for i, (arm, timed, invalid) in enumerate(launches):
        seen[arm] = seen.get(arm, 0) + 1
        cell = Cell("c", "M", arm, "time", "1.125", seen[arm])
        timing = {"trials": 2, "dispatch_ms_median": 1.0 + i, "dispatch_ms_p10": 0.5 + i,
                  "dispatch_ms_p90": 2.0 + i, "combine_ms_median": 3.0 + i,
                  "combine_ms_p10": 2.5 + i, "combine_ms_p90": 4.0 + i} if timed else None
        log.write(dataclasses.replace(_finish(cell), timing=timing,
                                      row={"cell_dir": f"cells/{cell.name}"}))
        if invalid:
            gone.append(cell.name)
        elif timed:
            want += [(arm, seen[arm], "dispatch", 1.0 + i), (arm, seen[arm], "combine", 3.0 + i)]
    log.write(et.CellsInvalidated(cells=gone, reason="test"))
    # invalidated launches do not count: renumber the arms' remaining launches
    store.write_timing_launches(root)
    rows = read_rows(root / "timing_launches.tsv")
    got = [(r["backend"], int(r["launch"]), r["phase"], float(r["median_ms"])) for r in rows]
    assert [(a, p, m) for a, _, p, m in got] == [(a, p, m) for a, _, p, m in want]
    for arm in {a for a, *_ in got}:
        nums = [n for a, n, p, _ in got if a == arm and p == "dispatch"]
        assert nums == sorted(nums) and len(set(nums)) == len(nums)


def test_status_of_a_results_root_lists_its_campaigns(tmp_path, capsys):
    from harness.campaign.cli import cli_status
    from harness.errors import BadInput
    for name, end in (("a", et.CampaignDone(stage="done")), ("b-2", et.Checkpoint(reason="SIGINT"))):
        (tmp_path / name).mkdir()
        _state(tmp_path / name, et.RunStart(), end)
    assert cli_status(str(tmp_path), as_json=True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(d["campaign"], d["state"]) for d in doc["campaigns"]] == [
        ("c", "done"), ("c", "interrupted")]
    assert cli_status(str(tmp_path)) == 0
    text = capsys.readouterr().out
    assert "a: done" in text and "b-2: interrupted (SIGINT at " in text
    with pytest.raises(BadInput, match="no campaign directory under it"):
        cli_status(str(tmp_path / "a" / "nothing"))


def test_wall_span_counts_running_time_only():
    """A re-run days later adds its own running time, not the idle days in between."""
    events = [{"ev": "campaign_start", "t": 100.0}, {"ev": "run_start", "t": 100.0},
              {"ev": "cell_finish", "t": 130.0}, {"ev": "campaign_done", "t": 140.0},
              {"ev": "run_start", "t": 90_000.0}, {"ev": "cell_finish", "t": 90_010.0},
              {"ev": "campaign_done", "t": 90_020.0}]
    assert et.running_span(events) == 60.0
