"""An invariant of the raw evidence that no honest run can break, whatever its tables say: a
forger who edits the rank logs and re-states every table consistently still breaks it.

Clocks (`clock-impossible`): an attempt that finished before it started
(capacity_attempts.tsv `started_utc` > `finished_utc`), a negative `wall_s` (the row's or
cell.json's `launcher.wall_s`), a `wall_s` longer than its row's start-to-finish span
(timestamps are whole seconds), events.jsonl `t` going backwards within one run (from a
`campaign_start`/`run_start` to the next) by more than CLOCK_SLACK_S.
"""

from __future__ import annotations

import math
from datetime import datetime

from harness.audit.model import Check, Row, Rule, Source, Table, Upload, verdict_of, where
from harness.audit.rules.rederive import upload_events
from harness.audit.vocab import CLOCK_IMPOSSIBLE
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON, EVENTS_JSONL
from harness.vocab import Event

CLOCK_SLACK_S = 60.0          # events.jsonl `t` may step back this much (an NTP correction)
SPAN_SLACK_S = 2.0            # started_utc/finished_utc are whole seconds


def utc(value: str) -> datetime | None:
    """An ISO 8601 UTC time as the harness writes it (`2026-11-29T10:00:00Z`), else None."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def number(value: object) -> float | None:
    """A finite float of a TSV or JSON value, else None."""
    if isinstance(value, bool):
        return None
    try:
        out = float(value)                             # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def row_clocks(table: Table, row: Row) -> tuple[list[str], list[str]]:
    """One attempts row: started <= finished, 0 <= wall_s <= the span (+ rounding)."""
    bad, unknown = [], []
    stated = {c: row.get(c) for c in ("started_utc", "finished_utc", "wall_s")}
    times = {c: utc(stated[c]) for c in ("started_utc", "finished_utc") if stated[c]}
    for column, moment in times.items():
        if moment is None:
            unknown.append(f"{where(table, row)}: {column} {stated[column]!r} is not an "
                           f"ISO 8601 UTC time")
    wall = number(stated["wall_s"]) if stated["wall_s"] else None
    if stated["wall_s"] and wall is None:
        unknown.append(f"{where(table, row)}: wall_s {stated['wall_s']!r} is not a number")
    start, end = times.get("started_utc"), times.get("finished_utc")
    if start and end and start > end:
        bad.append(f"{where(table, row)}: finished {stated['finished_utc']} before it "
                   f"started {stated['started_utc']}")
    if wall is not None and wall < 0:
        bad.append(f"{where(table, row)}: wall_s {stated['wall_s']} is negative")
    elif wall is not None and start and end and start <= end \
            and wall > (end - start).total_seconds() + SPAN_SLACK_S:
        bad.append(f"{where(table, row)}: wall_s {stated['wall_s']} is longer than its "
                   f"{stated['started_utc']} .. {stated['finished_utc']} span")
    return bad, unknown


def event_clocks(upload: Upload) -> tuple[list[str], list[str]]:
    """Within one run (one driver process) events never go back in time: by their monotonic
    readings (`mono`) where both events carry one -- the wall-clock `t` is then only a label,
    which an NTP or manual step may move back -- else by `t`, with CLOCK_SLACK_S of slack."""
    events, problem = upload_events(upload)
    if events is None:
        return [], [problem] if problem else []
    bad, unknown, last, last_mono = [], [], None, None
    for number_, event in enumerate(events, start=1):
        t, mono = number(event.get("t")), number(event.get("mono"))
        if t is None:
            unknown.append(f"{EVENTS_JSONL}: event {number_} ({event.get('ev')}): t is not "
                           f"a number")
            continue
        if event.get("ev") in (Event.CAMPAIGN_START, Event.RUN_START):
            last, last_mono = t, mono
            continue
        said = f"{EVENTS_JSONL}: event {number_} ({event.get('ev')} {event.get('cell') or ''})"
        if mono is not None and last_mono is not None:
            if mono < last_mono:
                bad.append(f"{said} at mono={mono} is {last_mono - mono:.3f} s before an "
                           f"earlier event of the same run (monotonic clock)")
        elif last is not None and t < last - CLOCK_SLACK_S:
            bad.append(f"{said} at t={t} is {last - t:.0f} s before an earlier event of the "
                       f"same run")
        last = t if last is None else max(last, t)
        last_mono = mono if last_mono is None or mono is None else max(last_mono, mono)
    return bad, unknown


def check_clocks(table: Table, upload: Upload) -> Check:
    """Attempts rows, cell.json wall times and events.jsonl against time's arrow."""
    bad, unknown = [], []
    for row in table.rows:
        b, u = row_clocks(table, row)
        bad, unknown = bad + b, unknown + u
    for key, cell in sorted(upload.cells.items()):
        launcher = (cell.cell_json or {}).get("launcher")
        wall = launcher.get("wall_s") if isinstance(launcher, dict) else None
        if wall is not None and number(wall) is not None and number(wall) < 0:
            bad.append(f"{key}/{CELL_JSON}: launcher.wall_s {wall} is negative")
    b, u = event_clocks(upload)
    return verdict_of(bad + b, [f"{len(table.rows)} attempts' clocks in order"],
                      CLOCK_IMPOSSIBLE, unknown + u)


__all__ = ["check_clocks", "number", "utc"]

# This family's rules, as data (docs/audit.md#rules): code, what it catches, the tables and
# columns it reads, whether it must be decided, its check, and the earlier failure it stands for.
RULES: tuple[Rule, ...] = (
    Rule(CLOCK_IMPOSSIBLE, "an attempt finished before it started, a negative or too long "
         "wall_s, events.jsonl time running backwards within a run",
         (Source(ATTEMPTS_TSV, ()),), False, check_clocks,
         "rows and events written by hand, out of time order"),
)
