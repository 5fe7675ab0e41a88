"""Invariants of the raw evidence that no honest run can break, whatever its tables say: a
forger who edits the rank logs and re-states every table consistently still breaks them.

- **conservation** (`conservation-broken`): the slots a dispatch moves are the slots its
  ranks sent. Per (iteration, layer) of a cell's dispatch rows (the one pass of the
  harness's own `telemetry.summary.summarize`, read once per cell by the audit's loader):
  sum(actual_valid_recv) <= sum(expected_recv) (N = tokens x top-k sent by each rank), with
  equality when no row of that (iteration, layer) is saturated; no row receives more than
  its budget; every (iteration, layer) holds one row per rank of the cell (a run that died,
  exit code not 0, may leave its last groups partial). Why it holds for every reference
  personality (backends/reference/dispatch.py): a receiver's actual = min(demand, budget),
  and the demands of all ranks are a partition of all slots sent (home placement, or the
  planner's quotas, which split each expert's global count: redundant experts move slots,
  never copy them), so sum(demand) = sum(N); clipping only lowers it.
- **clocks** (`clock-impossible`): an attempt that finished before it started
  (capacity_attempts.tsv `started_utc` > `finished_utc`), a negative `wall_s` (the row's or
  cell.json's `launcher.wall_s`), a `wall_s` longer than its row's start-to-finish span
  (timestamps are whole seconds), events.jsonl `t` going backwards within one run (from a
  `campaign_start`/`run_start` to the next) by more than CLOCK_SLACK_S.
- **timing objects** (`timing-implausible`; an upload with its runbook as run: each time
  cell's `[EPCAP_TIMING]` object as the backend's own `parse_timing` reads it, the one the
  timing rules derive): every figure finite and >= 0; `p10 <= median <= p90` per phase;
  `trials` = the number of `per_trial` entries; where the object states equal trials
  (`samples_per_trial`), each phase's median lies between the smallest and the largest
  per-trial median (the median of equal-sized groups always does); `algbw_gbps` = the
  bytes its own `algbw_formula` states / `dispatch_ms_median` (backends/reference/timing.py);
  no two launches carry the same object (no two timed processes measure identical floats).
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime

from harness.audit.model import (
    NOT_APPLICABLE,
    Check,
    Row,
    Rule,
    Source,
    Table,
    Upload,
    verdict_of,
    where,
)
from harness.audit.rules.rederive import as_run, timing_objects, upload_events
from harness.audit.vocab import CLOCK_IMPOSSIBLE, CONSERVATION, TIMING_IMPLAUSIBLE
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON, EVENTS_JSONL
from harness.vocab import Event

CLOCK_SLACK_S = 60.0          # events.jsonl `t` may step back this much (an NTP correction)
SPAN_SLACK_S = 2.0            # started_utc/finished_utc are whole seconds


def exit_code(cell_json: dict | None) -> int | None:
    """cell.json launcher.exit_code as an int, else None."""
    launcher = (cell_json or {}).get("launcher")
    value = launcher.get("exit_code") if isinstance(launcher, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_conservation(table: Table, upload: Upload) -> Check:
    """Every cell's dispatch rows against the conservation laws (module docstring)."""
    bad, unknown, seen = [], [], 0
    for key, cell in sorted(upload.cells.items()):
        if cell.problem:
            continue                                   # missing-provenance says so
        if cell.logs_problem:
            unknown.append(f"{key}: {cell.logs_problem}")
            continue
        facts = cell.logs
        s = facts and (facts.summary or facts.plain)
        if s is None or not s.rows:
            continue
        seen += 1
        first_issue = s.invariant_issues[0] if s.invariant_issues else ""
        if s.over_budget_rows:
            bad.append(f"{key}: {s.over_budget_rows} dispatch row(s) with actual_valid_recv "
                       f"> budget")
        if s.unconserved_groups:
            bad.append(f"{key}: {s.unconserved_groups} of {s.dispatch_groups} (iteration, "
                       f"layer) groups break conservation, first {first_issue}")
        if s.partial_groups:
            code = exit_code(cell.cell_json)
            if code is None:
                unknown.append(f"{key}: {s.partial_groups} (iteration, layer) groups lack or "
                               f"repeat a rank ({first_issue}) and {CELL_JSON} states no "
                               f"launcher.exit_code (a run that died may leave them)")
            elif code == 0:
                bad.append(f"{key}: {s.partial_groups} (iteration, layer) groups lack or "
                           f"repeat a rank in a run that exited 0, first {first_issue}")
    return verdict_of(bad, [f"{seen} cells' dispatch rows conserve slots"] if seen else [],
                      CONSERVATION, unknown)


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


PHASES = ("dispatch", "combine")
FIGURES = ("step_cv", "noise_floor_pct", "algbw_gbps", "peak_mem_bytes",
           *(f"{ph}_ms_{q}" for ph in PHASES for q in ("median", "p10", "p90")))
REL = 1e-9                    # float slack of a recomputed figure
BYTES = re.compile(r"=\s*([0-9*\s]+?)\s*bytes")


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1e-300)


def object_problems(obj: dict) -> list[str]:
    """What one [EPCAP_TIMING] object says that no measurement can (module docstring)."""
    out = []
    for name in FIGURES:
        if name in obj and obj[name] is not None:
            value = number(obj[name])
            if value is None or value < 0:
                out.append(f"{name} {obj[name]!r} is not a finite number >= 0")
    trials = obj.get("per_trial")
    trials = trials if isinstance(trials, list) else None
    if trials is not None and isinstance(obj.get("trials"), int) \
            and obj["trials"] != len(trials):
        out.append(f"trials {obj['trials']} but {len(trials)} per_trial entries")
    for ph in PHASES:
        med, p10, p90 = (number(obj.get(f"{ph}_ms_{q}")) for q in ("median", "p10", "p90"))
        if None not in (med, p10, p90) and not (p10 <= med <= p90):
            out.append(f"{ph}: p10 {p10} <= median {med} <= p90 {p90} does not hold")
        meds = [number(t.get(f"{ph}_ms_median")) for t in trials or []
                if isinstance(t, dict)]
        if med is not None and meds and None not in meds and "samples_per_trial" in obj \
                and not (min(meds) * (1 - REL) <= med <= max(meds) * (1 + REL)):
            out.append(f"{ph}: median {med} outside its trials' medians "
                       f"[{min(meds)}, {max(meds)}]")
    formula = obj.get("algbw_formula")
    stated, med = number(obj.get("algbw_gbps")), number(obj.get("dispatch_ms_median"))
    found = BYTES.search(formula) if isinstance(formula, str) else None
    if found and stated is not None and med:
        product = 1
        for factor in found.group(1).split("*"):
            product *= int(factor) if factor.strip().isdigit() else 0
        if product and not close(stated, product / (med * 1e-3) / 1e9):
            out.append(f"algbw_gbps {stated} is not its formula's {product} bytes / "
                       f"dispatch_ms_median {med}")
    return out


def check_timing_objects(table: Table, upload: Upload) -> Check:
    """Every time cell's [EPCAP_TIMING] object on its own, and no object twice."""
    if not as_run(upload):
        return Check(TIMING_IMPLAUSIBLE, NOT_APPLICABLE, ["no runbook as run (the earlier layout)"])
    bad, seen, count = [], {}, 0
    for key, _cell, obj in timing_objects(upload):
        count += 1
        bad += [f"{key}: [EPCAP_TIMING] {p}" for p in object_problems(obj)]
        text = json.dumps(obj, sort_keys=True)
        if text in seen:
            bad.append(f"{key}: its [EPCAP_TIMING] object is a copy of {seen[text]}'s")
        seen.setdefault(text, key)
    return verdict_of(bad, [f"{count} timing objects plausible"] if count else [],
                      TIMING_IMPLAUSIBLE, [])


__all__ = ["check_clocks", "check_conservation", "check_timing_objects"]

# This family's rules, as data (docs/audit.md#rules): code, what it catches, the tables and
# columns it reads, whether it must be decided, its check, and the earlier failure it stands for.
RULES: tuple[Rule, ...] = (
    Rule(CONSERVATION, "a cell's dispatch rows break slot conservation: per (iteration, "
         "layer) more slots received than sent, fewer with no row saturated, a row over its "
         "budget, or a rank missing or repeated",
         (Source(ATTEMPTS_TSV, ()),), False, check_conservation,
         "rank logs edited (one rank's actual_valid_recv raised) and every table re-stated "
         "to match"),
    Rule(CLOCK_IMPOSSIBLE, "an attempt finished before it started, a negative or too long "
         "wall_s, events.jsonl time running backwards within a run",
         (Source(ATTEMPTS_TSV, ()),), False, check_clocks,
         "rows and events written by hand, out of time order"),
    Rule(TIMING_IMPLAUSIBLE, "a time cell's [EPCAP_TIMING] object states what no measurement "
         "can: a negative figure, p10 > median or median > p90, a median outside its trials' "
         "medians, algbw_gbps not its own formula, trials != per_trial entries, or another "
         "launch's object copied",
         (Source(ATTEMPTS_TSV, ()),), False, check_timing_objects,
         "timing figures edited in the logs (or one launch's log copied over another's) and "
         "the timing tables re-derived from them"),
)
