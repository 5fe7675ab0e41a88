"""Typed events: every kind round-trips through JSON, and older or newer records still read."""

from __future__ import annotations

import json

import pytest

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
