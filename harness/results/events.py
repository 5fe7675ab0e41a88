"""events.jsonl: the campaign's append-only state log, its typed events, and the statistics
read from it (docs/campaign.md: events).

Each line is one JSON object with at least `ev` (the event name) and `t` (UTC epoch
seconds). Appends are single fsynced writes; a truncated last line (the runner was killed
mid-write) is ignored and cut off on the next open.

The events are dataclasses: `to_json()` gives the record the log writes (`ev` first;
EventLog adds `t`); `from_json()` reads one back, ignoring keys it does not know and
defaulting the ones an older log lacks, so a campaign started by an earlier version still
resumes. `parse_event` picks the class by `ev`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.errors import BadInput
from harness.io.boundary.events import decode_line, record_problem
from harness.io.outdir import open_own
from harness.io.redact import redact_obj
from harness.io.safeio import read_bytes
from harness.results.layout import EVENTS_JSONL, Cell
from harness.results.retries import RetryBudget, next_standing
from harness.vocab import BUG_CLASSES, CANARY_OK, FAILURE_CLASSES, Event, Purpose, Stage, Status


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
    result_fields: dict = field(default_factory=dict)   # part -> sha256 (store.result_fields)


@dataclass(frozen=True)
class RunStart(EventRecord):
    EV: ClassVar[Event] = Event.RUN_START
    resume: bool = False
    command_line: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    until: str | None = None
    models: list[str] = field(default_factory=list)     # --model (empty: every model)
    backends: list[str] = field(default_factory=list)   # --backend (empty: every backend)
    retry: list[str] = field(default_factory=list)      # --retry classes
    pid: int | None = None
    host: str = ""
    eta_s: float | None = None          # the estimate the banner printed for this invocation
    eta_report_s: float | None = None   # its share for the report (set: eta_s covers it)
    runs_left: int | None = None        # the runs it planned (at least)
    infra_retries: int | None = None    # limits.infra_retries: which infra runs were retried
    unclassified_retries: int | None = None     # limits.unclassified.retries: the same


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
    selection: bool = False          # stopped because --model/--backend left pairs out


@dataclass(frozen=True)
class CampaignDone(StageDone):
    EV: ClassVar[Event] = Event.CAMPAIGN_DONE


@dataclass(frozen=True)
class Stopped(EventRecord):
    """The campaign stopped: a bug-class failure, an unclassified one past its retries, a
    failed canary, with its log line (and, where a person must look, the command to run), or
    a job queued over `limits.max_pending_s` (status `pending`, its reason in `line`)."""

    EV: ClassVar[Event] = Event.CAMPAIGN_STOPPED
    cell: str = ""
    status: str = ""
    log: str | None = None
    line_no: int | None = None
    line: str | None = None
    stage: str = ""
    hint: str | None = None


@dataclass(frozen=True)
class CellQueued(EventRecord):
    """A job's wait in the scheduler's queue changed: `reason` is the scheduler's (Slurm's
    pending reason) while it waits, None once it left the queue (running or ended);
    `pending_s` is how long this driver has seen it queued."""

    EV: ClassVar[Event] = Event.CELL_QUEUED
    cell: str = ""
    job_id: str = ""
    reason: str | None = None
    pending_s: float = 0.0
    max_pending_s: float = 0.0      # the runbook's bound on the wait (0: none)


@dataclass(frozen=True)
class CellsInvalidated(EventRecord):
    """Finished cells whose results no longer count (a result-bearing runbook edit, or
    `--retry CLASS`): a resume replays them no more and runs their requests as new attempts.
    Their rows stay in capacity_attempts.tsv as history."""

    EV: ClassVar[Event] = Event.CELLS_INVALIDATED
    cells: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass(frozen=True)
class RunbookRevised(EventRecord):
    """The runbook file changed since the campaign started; `changed` names the
    result-bearing parts that differ (empty: comments, paths, limits, Slurm options)."""

    EV: ClassVar[Event] = Event.RUNBOOK_REVISED
    runbook_sha256: str = ""
    models_sha256: str | None = None
    result_fields: dict = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ReportBuilt(EventRecord):
    EV: ClassVar[Event] = Event.REPORT
    path: str = ""


KINDS: dict[str, type[EventRecord]] = {
    k.EV: k for k in (CampaignStart, RunStart, Health, CellSubmit, CellStart, CellFinish,
                      CellAbandoned, CellQueued, Checkpoint, StageDone, CampaignDone, Stopped,
                      CellsInvalidated, RunbookRevised, ReportBuilt)}


def parse_event(data: dict[str, Any]) -> EventRecord | None:
    """The typed event of one record, or None for a name this version does not know."""
    kind = KINDS.get(data.get("ev"))
    return kind.from_json(data) if kind is not None else None


# --------------------------------------------------------------------------- the log

EVENTS_MAX_BYTES = 1 << 28          # 256 MiB: some 100,000 cells' worth of events
_STARTED = ("cell", "model", "backend", "purpose", "attempt")     # what a resume reads
REQUIRED: dict[str, tuple[str, ...]] = {
    Event.CELL_SUBMIT: _STARTED, Event.CELL_START: _STARTED,
    Event.CELL_FINISH: (*_STARTED, "campaign", "capacity", "status"),
    Event.CELL_ABANDONED: ("cell",),
}
_RECOVER = ("the campaign's state cannot be trusted: restore events.jsonl from a backup, or "
            "move this directory aside and rerun with --fresh")


class EventLog:
    """Append-only JSON-lines log, fsynced per event."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        repair_tail(self.path)

    def write(self, event: EventRecord) -> dict:
        """Write one typed event; returns the record written."""
        data = event.to_json()
        return self.append(data.pop("ev"), **data)

    def append(self, ev: str, **fields) -> dict:
        """Write one event (single write + fsync) and return it."""
        record = redact_obj({"ev": ev, "t": round(time.time(), 3),
                             MONO: round(time.monotonic(), 3), **fields})
        data = (json.dumps(record, sort_keys=False, default=str) + "\n").encode("utf-8")
        fd = open_own(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)   # never a link
        try:
            os.write(fd, data)
            os.fsync(fd)
        except OSError as exc:          # ENOSPC: name the file it could not write
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        finally:
            os.close(fd)
        return record


_TAIL_CHUNK = 1 << 16


def repair_tail(path: Path) -> None:
    """Cut a partial last line (no trailing newline) left by a killed writer. The log is
    opened as epcap's own file (outdir.open_own: a link, a FIFO or a device is refused, so
    nothing outside the campaign is cut) and read back from its end a chunk at a time, at
    most EVENTS_MAX_BYTES: never read whole."""
    if not os.path.lexists(path):
        return
    fd = open_own(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size > EVENTS_MAX_BYTES:
            raise BadInput(f"file too large: {size} bytes, limit {EVENTS_MAX_BYTES}",
                           path=str(path))
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        cut, end = 0, size
        while end > 0:
            start = max(0, end - _TAIL_CHUNK)
            at = os.pread(fd, end - start, start).rfind(b"\n")
            if at >= 0:
                cut = start + at + 1
                break
            end = start
        os.ftruncate(fd, cut)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_events(path: Path, strict: bool = False) -> list[dict]:
    """All complete events, in order; a trailing partial line is skipped. A damaged line
    (not UTF-8, not JSON, no `ev`/`t`; strict: a cell event lacking its identity) is
    BadInput naming path:line: field, with how to recover."""
    path = Path(path)
    if path.is_dir() and path.name != EVENTS_JSONL:    # a campaign folder; a folder named
        path = path / EVENTS_JSONL                      # events.jsonl is refused below
    if not os.path.lexists(path):       # a dangling link is not "no log": read_bytes names it
        return []
    data = read_bytes(path, max_bytes=EVENTS_MAX_BYTES)
    lines = data.split(b"\n")
    if lines and lines[-1]:
        lines[-1] = b""                 # a partial last line (killed mid-write) is skipped
    out = []
    finished: set[str] = set()
    for number, raw in enumerate(lines[:-1], start=1):
        if raw.strip():
            record = _event(raw, path, number, strict)
            if record["ev"] == Event.CELL_FINISH:
                # A cell finishes once (each attempt has its own name): a repeated
                # cell_finish line (a replayed or doubled append) is dropped on replay, so
                # it can neither add an attempts row nor count twice.
                cell = record.get("cell")
                if isinstance(cell, str) and cell:
                    if cell in finished:
                        continue
                    finished.add(cell)
            out.append(record)
    return out


def _event(raw: bytes, path: Path, number: int, strict: bool) -> dict:
    """One line of events.jsonl, checked; BadInput path:line: field otherwise."""
    def bad(problem: str, field: str | None = None) -> BadInput:
        return BadInput(f"{problem}; {_RECOVER}", path=str(path), line=number, field=field)

    record, field, problem = decode_line(raw)
    if record is None:
        raise bad(problem or "not a JSON object", field)
    if not isinstance(record.get("ev"), str):
        raise bad("missing event name", "ev")
    if isinstance(record.get("t"), bool) or not isinstance(record.get("t"), (int, float)):
        raise bad("missing or non-numeric time", "t")
    broken = record_problem(record)        # every field read: type, unit, range
    if broken is not None:
        raise bad(broken[1], broken[0])
    for name in REQUIRED.get(record["ev"], ()) if strict else ():
        if record.get(name) is None:
            raise bad(f"{record['ev']} event lacks a field", name)
    if strict and "attempt" in REQUIRED.get(record["ev"], ()) and (
            isinstance(record["attempt"], bool) or not isinstance(record["attempt"], int)):
        raise bad("attempt must be an integer", "attempt")
    return record


def campaign_stats(results_dir: str | Path) -> dict:
    """Wall span, busy time, runs done/left, ETA error, failures by class and stage."""
    events = read_events(Path(results_dir) / EVENTS_JSONL)
    finished = [e for e in events if e["ev"] == Event.CELL_FINISH]
    standing = standing_finishes(events)
    starts = [e["t"] for e in events if e["ev"] in (Event.RUN_START, Event.CAMPAIGN_START)]
    ends = [e["t"] for e in events]
    busy = sum(float(e.get("wall_s") or 0.0) for e in finished)
    failures = standing_failures(events, standing)
    last_progress = next((e for e in reversed(events) if "runs_left" in e), {})
    done_ev = next((e for e in reversed(events) if e["ev"] == Event.CAMPAIGN_DONE
                    or e.get("runs_complete")), None)
    stage = next((e.get("stage") for e in reversed(events) if e.get("stage")), None)
    return {
        "wall_span_s": running_span(events) if starts and ends else 0.0,
        "busy_s": round(busy, 3),
        "runs_done": len(standing),
        "runs_left": 0 if done_ev else last_progress.get("runs_left"),
        "eta_s": 0.0 if done_ev else last_progress.get("eta_s"),
        "eta_error": eta_error(events),
        "eta_error_at": eta_error_at(events),
        "failures_by_class": failures,
        "stage": "done" if done_ev and done_ev["ev"] == Event.CAMPAIGN_DONE else
                 Stage.REPORT.value if done_ev else stage,
        "done": done_ev is not None,
        "stopped": next((e for e in reversed(events) if e["ev"] == Event.CAMPAIGN_STOPPED),
                        None),
    }


def standing_failures(events: list[dict], standing: list[dict] | None = None
                      ) -> dict[str, int]:
    """Failures by class that still stand (the closing line, `epcap status`; issue 41): the
    failing runs `standing_finishes` keeps, plus a run that reruns on resume (a bug, a failed
    canary) until a later attempt of the same request and capacity replaced it. A failure a
    later run retried (infra, unclassified, by the retry rule) or of a cell invalidated since
    is not counted: it no longer stands."""
    kept = {id(e) for e in (standing_finishes(events) if standing is None else standing)}
    invalid = {c for e in events if e["ev"] == Event.CELLS_INVALIDATED
               for c in e.get("cells") or ()}
    finishes = [e for e in events if e["ev"] == Event.CELL_FINISH]

    def same(e: dict) -> tuple:         # each attempt has its own cell name
        return tuple(e.get(k) for k in ("model", "backend", "purpose", "capacity"))
    out: dict[str, int] = {}
    for n, e in enumerate(finishes):
        status = e.get("status")
        if status not in FAILURE_CLASSES:
            continue
        stands = id(e) in kept or (
            reruns_on_resume(status, e.get("purpose")) and e.get("cell") not in invalid
            and (None in same(e) or not any(same(later) == same(e)
                                            for later in finishes[n + 1:])))
        if stands:
            out[status] = out.get(status, 0) + 1
    return out


def reruns_on_resume(status: str, purpose: str) -> bool:
    """A run that stopped the campaign (a bug class, a failed canary), or one the harness
    failed (`harness`: never the cell's result, docs/taxonomy.md#harness-failures): it runs
    again, so its result does not stand."""
    return status in BUG_CLASSES or status == Status.HARNESS or (
        purpose == Purpose.CANARY and status not in CANARY_OK)


def superseded_infra(statuses: list[str], infra_retries: int | None,
                     unclassified_retries: int | None = 0) -> list[bool]:
    """For one (model, backend, purpose)'s finished runs in order: True for a failure a later
    run retried (infra; unclassified per limits.unclassified), by the one retry rule
    (harness.results.retries.next_standing, which the driver's resume and the audit step
    by); None (a log older than the field): every such run followed by another counts as
    retried."""
    out, pos = [False] * len(statuses), [0]
    budget = RetryBudget(float("inf") if infra_retries is None else infra_retries,
                         float("inf") if unclassified_retries is None else unclassified_retries)

    def following() -> int | None:
        if pos[0] >= len(statuses):
            return None
        pos[0] += 1
        return pos[0] - 1

    while pos[0] < len(statuses):
        first = pos[0]
        seen, _ = next_standing(following, statuses.__getitem__, budget)
        for n in range(first, seen if seen is not None else pos[0] - 1):
            out[n] = True
    return out


def standing_finishes(events: list[dict]) -> list[dict]:
    """The cell_finish events whose results stand: not invalidated (a runbook edit, --retry),
    not a failure a later run retried (infra, unclassified), not a run that reruns on resume. What
    `runs_done` counts, so a rerun is never done twice."""
    invalid = {c for e in events if e["ev"] == Event.CELLS_INVALIDATED
               for c in e.get("cells") or ()}
    start = next((e for e in reversed(events)
                  if e["ev"] == Event.RUN_START and e.get("infra_retries") is not None), {})
    retries = start.get("infra_retries")
    unclassified = start.get("unclassified_retries", 0 if start else None)
    by_key: dict[tuple, list[dict]] = {}
    for n, e in enumerate(events):
        if e["ev"] != Event.CELL_FINISH or e.get("cell") in invalid or reruns_on_resume(
                e.get("status"), e.get("purpose")):
            continue
        key = tuple(e.get(k) for k in ("model", "backend", "purpose"))
        by_key.setdefault(key if None not in key else (n,), []).append((n, e))
    out = [ne for runs in by_key.values() for ne, gone in zip(
        runs, superseded_infra([e.get("status") for _, e in runs], retries, unclassified),
        strict=True)
        if not gone]
    return [e for _, e in sorted(out, key=lambda ne: ne[0])]


MONO = "mono"       # time.monotonic() of the writing process: durations; `t` is only a label


def elapsed(a: dict, b: dict) -> float:
    """Seconds from event `a` to event `b` of one invocation (one driver process): their
    monotonic readings when both carry one (a wall clock stepped by NTP or by hand moves
    neither), else their `t` labels, never negative."""
    if isinstance(a.get(MONO), (int, float)) and isinstance(b.get(MONO), (int, float)) \
            and b[MONO] >= a[MONO]:
        return float(b[MONO] - a[MONO])
    return max(0.0, float(b["t"]) - float(a["t"]))


def running_span(events: list[dict]) -> float:
    """Seconds the campaign spent running: the sum over its invocations of run_start to
    that invocation's last event, so the idle time between a finished campaign and a later
    re-run (--retry, --model) is not counted as campaign time."""
    total, begin, last = 0.0, None, None
    for e in events:
        if e["ev"] == Event.RUN_START and begin is not None and last is not None:
            total += elapsed(begin, last)
            begin = None
        if begin is None:
            begin = e
        last = e
    if begin is not None and last is not None:
        total += elapsed(begin, last)           # a clock stepped back: never negative
    return round(total, 3)


def _invocation(events: list[dict]) -> tuple[dict | None, list[dict], dict | None]:
    """The invocation that completed the runs: its run_start (None in an older log), its
    finished-cell events carrying an ETA, and the event at which the runs completed. Statistics of
    the ETA rate that invocation's own estimates, never an earlier one's."""
    end_i = next((i for i in range(len(events) - 1, -1, -1)
                  if events[i].get("runs_complete")), None)
    if end_i is None:
        end_i = next((i for i in range(len(events) - 1, -1, -1)
                      if events[i]["ev"] == Event.CAMPAIGN_DONE), None)
    if end_i is None:
        return None, [], None
    start_i = next((i for i in range(end_i, -1, -1) if events[i]["ev"] == Event.RUN_START), None)
    window = events[(start_i or 0):end_i + 1]
    points = [e for e in window if e["ev"] == Event.CELL_FINISH and e.get("eta_s") is not None]
    start = events[start_i] if start_i is not None else None
    if start is not None and start.get("eta_report_s") is not None:
        # its estimates covered the report: the actual remaining time ends when it is written
        report = next((e for e in events[end_i + 1:] if e["ev"] in (Event.REPORT, Event.RUN_START)),
                      None)
        if report is not None and report["ev"] == Event.REPORT:
            return start, points, report
    return start, points, events[end_i]


def report_seconds(events: list[dict]) -> list[float]:
    """Seconds each report took: from the event at which its invocation's runs completed to
    the report event that follows it in the same invocation (the ETA's report history)."""
    out: list[float] = []
    done = None
    for e in events:
        if e.get("runs_complete"):
            done = e
        elif e["ev"] == Event.REPORT and done is not None:
            out.append(elapsed(done, e))
            done = None
        elif e["ev"] == Event.RUN_START:
            done = None
    return out


def eta_error(events: list[dict]) -> float | None:
    """estimated / actual remaining wall time at this invocation's first estimate: the one
    its banner printed (run_start `eta_s`), else the one after its first run."""
    start, points, end = _invocation(events)
    first = start if start is not None and start.get("eta_s") is not None else (
        points[0] if points else None)
    if first is None or end is None:
        return None
    actual = elapsed(first, end)
    return round(first["eta_s"] / actual, 3) if actual > 0 else None


def eta_error_at(events: list[dict], fractions=(0.25, 0.5, 0.75)) -> dict[str, float | None]:
    """estimated / actual remaining wall time at 25/50/75% of this invocation's runs."""
    _, points, end = _invocation(events)
    out: dict[str, float | None] = {}
    for frac in fractions:
        key = f"{int(frac * 100)}%"
        if not points:
            out[key] = None
            continue
        idx = max(0, min(len(points) - 1, int(round(frac * len(points))) - 1))
        point = points[idx]
        actual = elapsed(point, end) if end is not None else 0.0
        out[key] = round(point["eta_s"] / actual, 3) if actual > 0 else None
    return out
