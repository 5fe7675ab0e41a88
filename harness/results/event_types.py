"""The events of events.jsonl as dataclasses, with to/from JSON (docs/campaign.md: events).

`to_json()` gives the record the log writes (`ev` first; EventLog adds `t`); `from_json()`
reads one back, ignoring keys it does not know and defaulting the ones an older log lacks,
so a campaign started by an earlier version still resumes. `parse_event` picks the class by
`ev`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.results.layout import Cell
from harness.vocab import Event


@dataclass(frozen=True)
class EventRecord:
    """Base of every event: the name it is written under and the JSON round trip."""

    EV: ClassVar[Event]

    def to_json(self) -> dict[str, Any]:
        return {"ev": self.EV, **{f.name: getattr(self, f.name)
                                 for f in dataclasses.fields(self)}}

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class CellRef(EventRecord):
    """The identity of a cell as event fields (cell name and its parts)."""

    cell: str = ""
    campaign: str = ""
    model: str = ""
    backend: str = ""
    purpose: str = ""
    capacity: str = ""
    attempt: int = 0

    @staticmethod
    def fields_of(cell: Cell) -> dict[str, Any]:
        return {"cell": cell.name, "campaign": cell.campaign, "model": cell.model,
                "backend": cell.backend, "purpose": cell.purpose, "capacity": cell.capacity,
                "attempt": cell.attempt}

    def to_cell(self) -> Cell:
        return Cell(self.campaign, self.model, self.backend, self.purpose, self.capacity,
                    int(self.attempt))


@dataclass(frozen=True)
class CampaignStart(EventRecord):
    EV: ClassVar[Event] = Event.CAMPAIGN_START
    campaign: str = ""
    runbook: str = ""
    runbook_sha256: str = ""
    models_sha256: str | None = None
    command_line: list[str] = field(default_factory=list)
    launcher: str = ""
    stage: str = ""


@dataclass(frozen=True)
class RunStart(EventRecord):
    EV: ClassVar[Event] = Event.RUN_START
    resume: bool = False
    command_line: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    until: str | None = None


@dataclass(frozen=True)
class Health(EventRecord):
    EV: ClassVar[Event] = Event.HEALTH
    ok: bool = True
    status: str = ""
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CellSubmit(CellRef):
    EV: ClassVar[Event] = Event.CELL_SUBMIT
    cell_dir: str = ""
    launcher: str = ""


@dataclass(frozen=True)
class CellStart(CellSubmit):
    EV: ClassVar[Event] = Event.CELL_START
    job_id: str | None = None
    job_extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CellFinish(CellRef):
    """A finished run: its status, attempts row, summary, timing and failure, as recorded."""

    EV: ClassVar[Event] = Event.CELL_FINISH
    status: str = ""
    row: dict = field(default_factory=dict)
    summary: dict | None = None
    timing: dict | None = None
    failure: dict = field(default_factory=dict)
    wall_s: float | None = None
    steps: dict | None = None        # per-step peaks of a measure/validate run (harness.telemetry.steps)
    span_s: float | None = None
    runs_left: int | None = None
    eta_s: float | None = None
    stage: str = ""


@dataclass(frozen=True)
class CellAbandoned(EventRecord):
    EV: ClassVar[Event] = Event.CELL_ABANDONED
    cell: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Checkpoint(EventRecord):
    EV: ClassVar[Event] = Event.CHECKPOINT
    reason: str = ""
    runs_done: int = 0


@dataclass(frozen=True)
class StageDone(EventRecord):
    EV: ClassVar[Event] = Event.STAGE_DONE
    runs_done: int = 0
    runs_left: int = 0
    stage: str = ""
    runs_complete: bool = False      # every run is done; the report (then campaign_done) follows


@dataclass(frozen=True)
class CampaignDone(StageDone):
    EV: ClassVar[Event] = Event.CAMPAIGN_DONE


@dataclass(frozen=True)
class Stopped(EventRecord):
    """The campaign stopped: a bug-class failure or a failed canary, with its log line."""

    EV: ClassVar[Event] = Event.CAMPAIGN_STOPPED
    cell: str = ""
    status: str = ""
    log: str | None = None
    line_no: int | None = None
    line: str | None = None
    stage: str = ""


@dataclass(frozen=True)
class ReportBuilt(EventRecord):
    EV: ClassVar[Event] = Event.REPORT
    path: str = ""


KINDS: dict[str, type[EventRecord]] = {
    k.EV: k for k in (CampaignStart, RunStart, Health, CellSubmit, CellStart, CellFinish,
                      CellAbandoned, Checkpoint, StageDone, CampaignDone, Stopped,
                      ReportBuilt)}


def parse_event(data: dict[str, Any]) -> EventRecord | None:
    """The typed event of one record, or None for a name this version does not know."""
    kind = KINDS.get(data.get("ev"))
    return kind.from_json(data) if kind is not None else None
