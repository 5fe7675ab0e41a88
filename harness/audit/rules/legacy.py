"""Re-derivation for an upload without the runbook as run (the earlier campaign's layout,
issue 23): what the harness's own code derives from the evidence such an upload does carry,
each cell's `cell.json` (its name, `shape`, `status`, a `launcher` record where there is one)
and its rank logs, and every row compared with it.

A written value that contradicts that evidence is INVALID; a value no evidence in the upload
supports (a cell.json with no shape, no status) leaves the rule UNKNOWN with file and field,
so it never helps such an upload to VALID. An upload written by the harness (runbook, events
or campaign.json present) is judged by `rederive.py` instead: this family is n/a there.

What cannot be derived without the runbook as run, and is therefore only *checked* here: the
grid the selection was made on (the earlier campaign chose 1.25 by hand: its selection is
judged by the older rules, not re-derived), the expected ranks x layers x iterations (the
logs' own grid must be whole, and one model's cells must agree on ranks and layers), the
backend's own failure signatures (the taxonomy's shared table is used).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from harness.api.backend import TIMING_TAG, first_timing_object
from harness.audit.evidence import rederived_columns
from harness.audit.model import (
    NOT_APPLICABLE,
    Cell,
    Check,
    Row,
    Rule,
    Source,
    Table,
    Upload,
    agrees,
    decimal_of,
    int_of,
    norm,
    verdict_of,
    where,
)
from harness.audit.readers import plain_file, tagged_lines
from harness.audit.rules.apply import blanked
from harness.audit.rules.basic import find_uniform_tokens
from harness.audit.rules.cells import clipped
from harness.audit.rules.present import has_logs
from harness.audit.rules.rederive import LOG_GLOB, differs, harness_written
from harness.audit.rules.timing import TIMING_FIGURES
from harness.audit.rules.timing import differs as timing_differs
from harness.audit.vocab import EARLIER_NOT_REDERIVED, MISSING_LOGS
from harness.errors import EpcapError
from harness.grid import capacity as cap
from harness.results.layout import (
    ATTEMPTS_TSV,
    RUNBOOK_YAML,
    SELECTION_TSV,
    TIMING_TSV,
    parse_cell_name,
)
from harness.taxonomy.judge import judge_run
from harness.telemetry.summary import LogSummary, summarize
from harness.timing import verdicts
from harness.vocab import FAILURE_CLASSES, TIMED_OK, LauncherState, Purpose, Status

DATA_STATUSES = (Status.OK, Status.DROPS, Status.LOWER_BOUND)   # runs that wrote telemetry

DATA_STATUSES = (Status.OK, Status.DROPS, Status.LOWER_BOUND)
LAUNCHER_CLAIMS = (Status.TIMEOUT, Status.INFRA)    # classes only a launcher's record decides
STEP_PURPOSES = (Purpose.MEASURE, Purpose.VALIDATE)
KEY = "earlier:"                       # upload.derived keys of this family


@dataclass(frozen=True)
class Earlier:
    """What the harness's code derives of one earlier-layout cell, or why it cannot."""

    columns: dict[str, object]
    summary: LogSummary | None
    peaks: frozenset[int] = frozenset()    # the logs' peak at warmup 0 and at the stated one
    problem: str | None = None


def applies(upload: Upload) -> bool:
    """This family judges the earlier campaign's layout: no runbook.yaml at all, and nothing
    the harness writes (events.jsonl, campaign.json). An upload holding a runbook.yaml that
    does not load (the synthetic corpus) is judged by the older rules only (docs/audit.md)."""
    folder = upload.folder
    present = folder is not None and os.path.lexists(folder / RUNBOOK_YAML)
    return not present and not harness_written(upload)


def implied_run(cell_json: dict, claim: str) -> tuple[int | None, str] | str:
    """(exit code, launcher state) the cell's own `launcher` record states; without one, the
    end its claimed status implies, for judge_run to bear out or contradict: a data status, a
    clean exit; any failure, a failed run (so a does_not_fit needs its out-of-memory
    signature in the logs, an assert is an assert). A timeout or infra claim only the
    launcher could state, a launcher record without its state, or a non-integer exit code, is
    a problem (UNKNOWN)."""
    launcher = cell_json.get("launcher")
    if launcher is not None:
        if not isinstance(launcher, dict) or "state" not in launcher:
            return "field launcher.state missing"
        code = launcher.get("exit_code")
        if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
            return "field launcher.exit_code not an int"
        return code, str(launcher["state"])
    if claim in DATA_STATUSES:
        return 0, LauncherState.COMPLETED
    if claim in LAUNCHER_CLAIMS:
        return f"status {claim!r} with no launcher record (field launcher missing)"
    return None, LauncherState.FAILED


def derive_earlier(upload: Upload, cell: Cell) -> Earlier:
    """One cell's attempt columns, as harness.pipeline.analysis derives them, from its
    cell.json (shape -> N, status) and logs (summarize, judge_run)."""
    key = KEY + cell.path
    if key not in upload.derived:
        upload.derived[key] = _derive(upload, cell)
    return upload.derived[key]


def _derive(upload: Upload, cell: Cell) -> Earlier:
    named = parse_cell_name(cell.name)
    if named is None or cell.where is None:
        return Earlier({}, None, problem=f"{cell.path}: not a cell name the harness writes")
    data = cell.cell_json
    if data is None:
        return Earlier({}, None, problem=f"{cell.path}/cell.json: "
                                         f"{cell.cell_json_problem or 'missing'}")
    n = find_uniform_tokens(data)
    if n is None:
        return Earlier({}, None, problem=f"{cell.path}/cell.json: field shape missing (seq, "
                                         f"micro_batch, topk): N cannot be derived")
    claim = data.get("status")
    if not isinstance(claim, str) or not claim:
        return Earlier({}, None, problem=f"{cell.path}/cell.json: field status missing")
    run = implied_run(data, norm(claim))
    if isinstance(run, str):
        return Earlier({}, None, problem=f"{cell.path}/cell.json: {run}")
    if cell.logs_problem:
        return Earlier({}, None, problem=f"{cell.path}: {cell.logs_problem}")
    if norm(claim) in DATA_STATUSES and not has_logs(Path(cell.where)):
        # a run its cell.json says measured, with no log: evidence missing, not contradicted
        return Earlier({}, None, problem=f"{cell.path}: cell.json says {claim!r} but the "
                                         f"cell holds no log ({MISSING_LOGS})")
    logs = sorted(p for p in Path(cell.where).glob(LOG_GLOB)
                  if plain_file(upload.folder, p))
    facts = cell.logs
    try:
        summary = (facts.plain if facts is not None and facts.plain is not None
                   else summarize(logs) if logs else None)
        verdict = judge_run(run[0], run[1], logs, None, purpose=named.purpose,
                            summary=summary)
    except (EpcapError, OSError, UnicodeDecodeError, ValueError) as exc:
        return Earlier({}, None, problem=f"{cell.path}: logs unreadable ({str(exc)[:120]})")
    status = str(verdict.status)
    measured = summary is not None and summary.rows > 0 and status not in FAILURE_CLASSES
    peaks = frozenset(p for p in ((facts.peak, facts.peak_after_warmup) if facts else ())
                      if p is not None) if measured else frozenset()
    columns: dict[str, object] = {
        "capacity_tag": cap.capacity_tag(named.capacity), "uniform_tokens": n,
        "budget_tokens": cap.budget_tokens(named.capacity, n), "status": status,
        "rows": summary.rows if summary else 0,
        "malformed_rows": summary.malformed_rows if summary else 0,
        "saturated_rows": summary.saturated_rows if summary else 0,
    }
    return Earlier(columns, summary, peaks)


def peak_problems(at: str, row: Row, got: Earlier, purpose: str, cell: Cell) -> list[str]:
    """A measured step's peak is one its logs give (warmup 0, or the warmup the cell states;
    a saturated run's may be a stated pre-drop demand above its clipped log peak) and its
    requirement is written; a failed run states none. The earlier campaign wrote no peak for
    a time run: there an empty value is no claim, a written one must agree."""
    written, required = row.get("peak_actual_valid_recv"), row.get("required_capacity")
    if not got.peaks:
        return [f"{at}: {c} {row.get(c)!r} but its cell measured nothing"
                for c in ("peak_actual_valid_recv", "required_capacity") if row.get(c)]
    bad = []
    if written or purpose in STEP_PURPOSES:
        if int_of(written) not in got.peaks and not clipped(cell, written):
            bad.append(f"{at}: peak_actual_valid_recv {written!r} but its logs give "
                       f"{' or '.join(map(str, sorted(got.peaks)))}")
        n = got.summary.expected_recv if got.summary else None
        if n and int_of(written) is not None and not agrees(required,
                                                            Fraction(int_of(written), n)):
            bad.append(f"{at}: required_capacity {required!r} but peak / expected_recv = "
                       f"{written}/{n}")
    elif required:
        bad.append(f"{at}: required_capacity {required!r} with no peak written")
    return bad


def completeness(at: str, cell: Cell, summary: LogSummary | None) -> list[str]:
    """A run counted as data (a measure or validate; a time run that logged telemetry): its
    logs' own grid whole (every rank x layer x iteration they name), each row once. Without
    the runbook as run the grid is the logs' own; one model's cells must agree on it."""
    s = summary
    if s is not None and s.complete and not s.malformed_rows and not s.duplicate_rows:
        return []
    return [f"{at}: {cell.path} telemetry not whole ({s.missing_rows if s else 'all'} rows "
            f"missing, {s.duplicate_rows if s else 0} repeated, "
            f"{s.malformed_rows if s else 0} malformed)"]


def shape_problems(seen: dict[str, dict[tuple[int, int], list[str]]]) -> list[str]:
    """One model's cells counted as data agree on ranks and layers (a model's EP width and
    MoE layers do not change within a campaign)."""
    return [f"{model}: cells disagree on ranks x layers "
            f"({'; '.join(f'{r}x{lay}: {cells[0]}' for (r, lay), cells in sorted(shapes.items()))})"
            for model, shapes in sorted(seen.items()) if len(shapes) > 1]


def cell_rows(upload: Upload, table: Table) -> dict[str, int]:
    """Cell path -> the line of the attempts row that names it."""
    out: dict[str, int] = {}
    for row in table.rows:
        cell = upload.cell_for(row)
        if cell is not None:
            out.setdefault(cell.path, row.line)
    return out


def check_earlier_attempts(table: Table, upload: Upload) -> Check:
    """Every attempts row of an earlier-layout upload equals what the harness derives from its
    cell; every cell.json's status is the derived one; every cell with a status has a row."""
    if not applies(upload):
        return Check(EARLIER_NOT_REDERIVED, NOT_APPLICABLE, ["the runbook as run decides"])
    columns = [c for c in rederived_columns(ATTEMPTS_TSV) if c in table.columns]
    bad, unknown = [], []            # unreadable values: rules.apply.blank_unreadable
    shapes: dict[str, dict[tuple[int, int], list[str]]] = defaultdict(lambda: defaultdict(list))
    for row in table.rows:
        cell = upload.cell_for(row)
        if cell is None or cell.where is None or cell.problem:
            continue
        at, got = where(table, row), derive_earlier(upload, cell)
        if got.problem:
            unknown.append(got.problem)
            continue
        for column in columns:
            if blanked(table, row, column):
                continue                              # unreadable: the rule is UNKNOWN
            if column in got.columns and differs(column, row.get(column), got.columns[column]):
                bad.append(f"{at}: {column} {row.get(column)!r} but the harness derives "
                           f"{got.columns[column]!r} from {cell.path}")
        purpose = norm(row.get("purpose"))
        bad += peak_problems(at, row, got, purpose, cell)
        if got.columns["status"] in DATA_STATUSES and (
                purpose in STEP_PURPOSES or (got.summary is not None and got.summary.rows)):
            bad += completeness(at, cell, got.summary)
            if got.summary is not None:
                shapes[norm(row.get("model"))][(got.summary.ranks, got.summary.layers)].append(
                    cell.path)
    bad += shape_problems(shapes)
    named_by_rows = cell_rows(upload, table)
    for key, cell in sorted(upload.cells.items()):
        if cell.where is None or cell.problem or parse_cell_name(cell.name) is None:
            continue
        got = derive_earlier(upload, cell)
        if got.problem:
            if key in named_by_rows:
                continue                 # said above, for its row
            unknown.append(got.problem)
            continue
        stated = (cell.cell_json or {}).get("status")
        if norm(str(stated)) != got.columns["status"]:
            bad.append(f"{key}/cell.json: status {stated!r} but the harness derives "
                       f"{got.columns['status']!r}")
        if key not in named_by_rows and parse_cell_name(cell.name).purpose != Purpose.CANARY:
            bad.append(f"{key}: a finished attempt (status {stated!r}) with no {ATTEMPTS_TSV} "
                       f"row")
    return verdict_of(bad, [], EARLIER_NOT_REDERIVED, unknown)


def last_measure(upload: Upload, row: Row) -> Row | None:
    """The last measure attempt of a selection row's pair that counted as data."""
    table = upload.tables.get(ATTEMPTS_TSV)
    found = [a for a in (table.rows if table else [])
             if norm(a.get("model")) == norm(row.get("model"))
             and norm(a.get("backend")) == norm(row.get("backend"))
             and norm(a.get("purpose")) == Purpose.MEASURE
             and norm(a.get("status")) in DATA_STATUSES]
    return found[-1] if found else None


def check_earlier_selection(table: Table, upload: Upload) -> Check:
    """A selection row's measurement is its pair's last measure attempt (capacity, peak, N),
    and its over-provision is its budget over that peak (grid.capacity's formula)."""
    if not applies(upload):
        return Check(EARLIER_NOT_REDERIVED, NOT_APPLICABLE, ["the runbook as run decides"])
    bad, unknown = [], []
    for row in table.rows:
        at, measure = where(table, row), last_measure(upload, row)
        if measure is None:
            continue                     # unvalidated/no-measure rules say so
        if "measured_at_capacity" in table.columns and \
                decimal_of(row.get("measured_at_capacity")) != decimal_of(measure.get("capacity")):
            bad.append(f"{at}: measured_at_capacity {row.get('measured_at_capacity')!r} but "
                       f"its last measure ran at {measure.get('capacity')}")
        peak = int_of(measure.get("peak_actual_valid_recv"))
        if int_of(row.get("peak_actual_valid_recv")) != peak:
            bad.append(f"{at}: peak_actual_valid_recv {row.get('peak_actual_valid_recv')!r} "
                       f"but its last measure's is {peak}")
        budget = int_of(row.get("selected_budget_tokens"))
        written = row.get("over_provision")
        if "over_provision" in table.columns and peak and budget is not None and \
                not agrees(written, Fraction(budget, peak)):
            bad.append(f"{at}: over_provision {written!r} but selected budget / peak = "
                       f"{budget}/{peak}")
    return verdict_of(bad, [], EARLIER_NOT_REDERIVED, unknown)


def check_earlier_timing(table: Table, upload: Upload) -> Check:
    """A timing row's capacity is one its time attempts ran at (the earlier campaign's timing
    rows name no cell: the time attempts of the same model and backend are its evidence)."""
    if not applies(upload):
        return Check(EARLIER_NOT_REDERIVED, NOT_APPLICABLE, ["the runbook as run decides"])
    attempts = upload.tables.get(ATTEMPTS_TSV)
    ran: dict[tuple[str, str], set] = defaultdict(set)
    for a in attempts.rows if attempts else []:
        if norm(a.get("purpose")) == Purpose.TIME and norm(a.get("status")) in DATA_STATUSES:
            ran[(norm(a.get("model")), norm(a.get("backend")))].add(decimal_of(a.get("capacity")))
    bad, unknown = [], []
    figures = [c for c in TIMING_FIGURES if c in table.columns]
    figures += [c for c in ("status", "budget_tokens") if c in table.columns]
    for row in table.rows:
        capacities = ran.get((norm(row.get("model")), norm(row.get("backend"))), set())
        if decimal_of(row.get("timing_capacity")) not in capacities:
            bad.append(f"{where(table, row)}: timing_capacity {row.get('timing_capacity')!r} "
                       f"but its time attempts ran at "
                       f"{' or '.join(sorted(map(str, capacities))) or 'no capacity'}")
        derived = earlier_figures(upload, row, unknown)
        if derived is None:
            continue
        for column in figures:
            if blanked(table, row, column):
                continue                              # unreadable: the rule is UNKNOWN
            if timing_differs(column, row.get(column), derived.get(column)):
                bad.append(f"{where(table, row)}: {column} {row.get(column)!r} but the "
                           f"pair's time cells give {derived.get(column)!r} "
                           f"(timing.verdicts.aggregate of their [EPCAP_TIMING] objects)")
    return verdict_of(bad, [], EARLIER_NOT_REDERIVED, unknown)


def earlier_figures(upload: Upload, row, unknown: list[str]) -> dict | None:
    """A timing row's figures as the harness aggregates them (timing.verdicts.aggregate) over
    the [EPCAP_TIMING] objects of its pair's time cells at its capacity that ran to the end;
    None (said in `unknown`) when a cell cannot be derived."""
    model, backend = norm(row.get("model")), norm(row.get("backend"))
    objects, statuses, n = [], [], None
    for _key, cell in sorted(upload.cells.items()):
        named = parse_cell_name(cell.name)
        if named is None or named.purpose != Purpose.TIME or cell.where is None \
                or norm(named.model) != model or norm(named.backend) != backend \
                or decimal_of(named.capacity) != decimal_of(row.get("timing_capacity")):
            continue
        got = derive_earlier(upload, cell)
        if got.problem:
            unknown.append(got.problem)
            return None
        statuses.append(str(got.columns.get("status")))
        n = got.columns.get("uniform_tokens")
        if got.columns.get("status") not in TIMED_OK:
            continue
        logs = sorted(p for p in Path(cell.where).glob(LOG_GLOB)
                      if plain_file(upload.folder, p))
        try:
            obj = first_timing_object(tagged_lines(logs, TIMING_TAG))
        except (OSError, UnicodeDecodeError) as exc:
            unknown.append(f"{cell.path}: logs unreadable ({str(exc)[:120]})")
            return None
        if obj is not None:
            objects.append(obj)
    try:
        figures = verdicts.aggregate(objects)
        # the row's own status and budget by the time step's rules: verdicts.row_status over
        # the launches, and the capacity's budget for N
        figures["status"] = verdicts.row_status(statuses) if statuses else None
        figures["budget_tokens"] = cap.budget_tokens(row.get("timing_capacity"), n) \
            if n is not None else None
        return figures
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
        unknown.append(f"{where(upload.tables[TIMING_TSV], row)}: the time cells' timing "
                       f"objects give no figures ({str(exc)[:120]})")
        return None


def check_earlier(table: Table, upload: Upload) -> Check:
    """The attempts table against its cells, the selection table against its measures, the
    timing table against its time attempts."""
    if table.name == ATTEMPTS_TSV:
        return check_earlier_attempts(table, upload)
    if table.name == TIMING_TSV:
        return check_earlier_timing(table, upload)
    return check_earlier_selection(table, upload)


RULES: tuple[Rule, ...] = (
    Rule(EARLIER_NOT_REDERIVED, "without the runbook as run, a row or cell.json differs from "
         "what the harness derives from the upload's own cells",
         (Source(ATTEMPTS_TSV, ("cell_dir", "status")),
          Source(SELECTION_TSV, ("model", "backend", "selected_budget_tokens")),
          Source(TIMING_TSV, ("model", "backend", "timing_capacity"))), False,
         check_earlier,
         "numbers and statuses re-stated by hand in the earlier campaign's layout"),
)
