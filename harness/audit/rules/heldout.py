"""The validate step re-derived with the harness's own code (issue 23): from the runbook as
run and the pair's validate cells, walked as the driver replays them (rules.timing.requests:
infra retries, bug re-runs), each request's capacity is the previous one stepped up
(grid.capacity.step_up on the runbook's grid and the audit's pad multiple) after drops, the
walk stops at the first accepted run (grid.selection.validation_verdict) or at
capacity.max_validate_steps, and the selection row's `validate_attempts`, `validated`,
and the risk columns (`validate_seed` .. `held_out`: grid.heldout.risk_columns over the
per-step peaks of the last measure and the last validate, telemetry.steps.step_peaks) are
what that walk and the runbook say. A validate cell whose argv ran another seed than the one the runbook
gives it (the measure seed, under a held-out claim) is caught here too.
"""

from __future__ import annotations

from decimal import Decimal

from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.audit.model import (
    NOT_APPLICABLE,
    Cell,
    Check,
    Row,
    Rule,
    Source,
    Table,
    Upload,
    decimal_of,
    int_of,
    norm,
    verdict_of,
    where,
)
from harness.audit.rules.apply import blanked
from harness.audit.rules.rederive import abandoned_cells, as_run
from harness.audit.rules.timing import Launch, invalidated, requests
from harness.audit.vocab import HELD_OUT_NOT_REDERIVED
from harness.errors import EpcapError
from harness.grid import capacity as cap
from harness.grid.heldout import risk_columns
from harness.grid.selection import steps_up, validation_ok
from harness.results.layout import SELECTION_TSV, parse_cell_name
from harness.results.rows import SelectionRow
from harness.results.tables import cell_text
from harness.telemetry.steps import StepPeaks, step_peaks
from harness.vocab import FAILURE_CLASSES, Purpose, Status, run_seed


def validate_cells(upload: Upload, model: str, backend: str) -> list[Cell]:
    """The pair's validate cells in attempt order (the upload's cells, not its rows), less
    those a resume abandoned or a `cells_invalidated` event took out (a re-run's step starts
    afresh, as the driver's does)."""
    found = []
    dropped, gone = abandoned_cells(upload), invalidated(upload)
    for cell in upload.cells.values():
        named = parse_cell_name(cell.name, upload.runbook.campaign)
        if named is not None and named.purpose == Purpose.VALIDATE and cell.path not in dropped \
                and cell.name not in gone \
                and norm(named.model) == norm(model) and norm(named.backend) == norm(backend):
            found.append((named.attempt, cell))
    return [c for _, c in sorted(found, key=lambda x: x[0])]


def argv_seed(cell: Cell) -> str | None:
    """The value after `--seed` in the cell's recorded argv, else None."""
    argv = (cell.cell_json or {}).get("argv")
    if not isinstance(argv, list) or "--seed" not in argv:
        return None
    at = argv.index("--seed") + 1
    return str(argv[at]) if at < len(argv) else None


def seed_problem(upload: Upload, cell: Cell) -> str | None:
    """A cell that ran another seed than the one the harness passes its purpose: the value
    after `--seed` in the backend's own command for the cell against the recorded argv."""
    named = parse_cell_name(cell.name, upload.runbook.campaign)
    try:
        req = RunRequest.for_cell(upload.runbook, named, cell.where)
        spec = load_backend(upload.runbook.backend(named.backend)).command(req)
    except (EpcapError, KeyError, ValueError, LookupError, OSError):
        return None
    argv = [str(a) for a in getattr(spec, "argv", []) or []]
    if "--seed" not in argv:
        return None
    expected = argv[argv.index("--seed") + 1] if argv.index("--seed") + 1 < len(argv) else None
    ran = argv_seed(cell)
    if ran != expected:
        return (f"{cell.path}/cell.json: argv --seed {ran!r}, but the runbook as run gives a "
                f"{named.purpose} run seed {expected} (run_seed)")
    return None


def last_measure(upload: Upload, model: str, backend: str, unknown: list[str]) -> Launch | None:
    """The measure outcome the selection came from: the last request of the measure step."""
    dropped, gone = abandoned_cells(upload), invalidated(upload)
    cells = [c for c in upload.cells.values() if c.path not in dropped and c.name not in gone
             and (n := parse_cell_name(c.name, upload.runbook.campaign)) is not None
             and n.purpose == Purpose.MEASURE and norm(n.model) == norm(model)
             and norm(n.backend) == norm(backend)]
    cells.sort(key=lambda c: parse_cell_name(c.name).attempt)
    steps = requests(cells, upload, upload.runbook.limits.infra_retries, unknown)
    last = None
    while (out := next(steps)) is not None:
        last = out
    return last


def steps_of(out: Launch | None) -> StepPeaks | None:
    """harness.pipeline.analysis: a measure or validate run's per-step peaks (every
    iteration a step), only for a run counted as data."""
    if out is None or out.derived.summary is None or not out.derived.summary.rows \
            or out.status in FAILURE_CLASSES:
        return None
    logs = sorted(p for p in out.cell.where.glob("rank*.log")
                  if p.is_file() and not p.is_symlink())
    return step_peaks(logs)


def differs(written: object, derived: object) -> bool:
    """A written selection cell against a derived value, as harness.results.tables writes
    it (numbers compare as numbers, booleans as true/false)."""
    if isinstance(written, str) and not isinstance(derived, str):
        if derived is None:
            return written != ""
        if isinstance(derived, bool):
            return norm(written) != cell_text(derived)
        value = decimal_of(written)
        return value is None or value != Decimal(cell_text(derived))
    if isinstance(derived, str) and isinstance(written, str):
        a, b = decimal_of(written), decimal_of(derived)
        return written != derived if a is None or b is None else a != b
    return written != derived


def empty_row_problems(table: Table, row: Row, upload: Upload, measure: Launch,
                       cells: list[Cell]) -> list[str]:
    """The row the select step writes when the last measure did not end ok
    (SelectionRow.unselected: its capacity in measured_at_capacity, N, validated false, 0
    validate attempts, every other column empty; timing_capacity aside: the time step sets
    it), and no validate run."""
    from harness.audit.evidence import evidence_columns
    at = where(table, row)
    harness_row = SelectionRow.unselected(
        campaign=upload.runbook.campaign, model=row.get("model"), backend=row.get("backend"),
        uniform_tokens=measure.derived.columns.get("uniform_tokens"),
        measured_at_capacity=parse_cell_name(measure.cell.name).capacity)
    expected = {c: getattr(harness_row, c) for c in evidence_columns(SELECTION_TSV)
                if c not in ("model", "backend", "timing_capacity")}   # timing-not-max's
    bad = [f"{at}: {c.path} is a validate run, but the last measure {measure.cell.path} "
           f"ended {measure.status}: the harness validates nothing" for c in cells]
    for column, value in expected.items():
        if column not in table.columns or blanked(table, row, column):
            continue
        if differs(row.get(column), value):
            bad.append(f"{at}: {column} {row.get(column)!r}, but the last measure "
                       f"{measure.cell.path} ended {measure.status}: the harness writes "
                       f"{cell_text(value)!r}")
    return bad


def walk_problems(table: Table, row: Row, upload: Upload) -> tuple[list[str], list[str]]:
    """The pair's validate requests as validate_step makes them, against the row."""
    rb, at = upload.runbook, where(table, row)
    model, backend = row.get("model"), row.get("backend")
    cells = validate_cells(upload, model, backend)
    bad: list[str] = []
    unknown: list[str] = []
    bad += [p for c in cells if (p := seed_problem(upload, c))]
    measure = last_measure(upload, model, backend, unknown)
    if unknown:
        return bad, unknown          # a cell the harness's code cannot derive: UNKNOWN
    if measure is not None and measure.status != Status.OK:
        return bad + empty_row_problems(table, row, upload, measure, cells), unknown
    steps = requests(cells, upload, rb.limits.infra_retries, unknown)
    outs = []
    capacity = None
    ok = False
    for step in range(rb.capacity.max_validate_steps + 1):
        out = next(steps)
        if out is None:
            break
        named = parse_cell_name(out.cell.name)
        if capacity is not None and decimal_of(named.capacity) != decimal_of(capacity):
            bad.append(f"{at}: {out.cell.path} ran at {named.capacity}, but after "
                       f"{outs[-1].cell.path} dropped the harness steps up to {capacity}")
        outs.append(out)
        ok = out.status == Status.OK and validation_ok(out.derived.summary)
        if not steps_up(out.status, ok, step, rb.capacity.max_validate_steps):
            break
        n = out.derived.columns.get("uniform_tokens")
        capacity = cap.step_up(named.capacity, n, upload.pad_multiple, rb.capacity.decimals)
    if unknown:
        return bad, unknown
    left = next(steps)
    if left is not None:
        bad.append(f"{at}: {left.cell.path} is a validate run after the harness's validate "
                   f"step had ended ({'accepted' if ok else 'stopped'} at "
                   f"{outs[-1].cell.path if outs else 'none'})")
    if not outs:
        return bad, unknown
    last = parse_cell_name(outs[-1].cell.name)
    checks = {"validate_attempts": (int_of(row.get("validate_attempts")), len(outs)),
              "validated": (norm(row.get("validated")), "true" if ok else "false")}
    if "selected_capacity" in table.columns and not blanked(table, row, "selected_capacity") and \
            decimal_of(row.get("selected_capacity")) != decimal_of(last.capacity):
        bad.append(f"{at}: selected_capacity {row.get('selected_capacity')!r} but the last "
                   f"validate request {outs[-1].cell.path} ran at {last.capacity}")
    budget = cap.budget_tokens(last.capacity, outs[-1].derived.columns.get("uniform_tokens"))
    risk = risk_columns(budget, run_seed(rb, Purpose.VALIDATE), rb.held_out_routing(backend),
                        steps_of(last_measure(upload, model, backend, unknown)),
                        steps_of(outs[-1]), ok)
    for column, value in risk.items():
        checks[column] = (row.get(column), value)
    for column, (written, derived) in checks.items():
        if column in table.columns and not blanked(table, row, column) \
                and differs(written, derived):
            bad.append(f"{at}: {column} {row.get(column)!r} but the harness derives "
                       f"{cell_text(derived)!r} from {len(outs)} validate request(s) and the "
                       f"runbook as run")
    return bad, unknown


def check_held_out(table: Table, upload: Upload) -> Check:
    """Each selection row's validate walk, attempts, validated, seed and held-out claim."""
    if not as_run(upload):
        return Check(HELD_OUT_NOT_REDERIVED, NOT_APPLICABLE, ["no runbook as run"])
    bad, unknown = [], []
    for row in table.rows:
        try:
            b, u = walk_problems(table, row, upload)
        except (EpcapError, KeyError, LookupError) as exc:
            b, u = [], [f"{where(table, row)}: validate step not derivable ({exc})"]
        bad += b
        unknown += u
    return verdict_of(bad, [], HELD_OUT_NOT_REDERIVED, unknown)


RULES: tuple[Rule, ...] = (
    Rule(HELD_OUT_NOT_REDERIVED, "the validate step (attempts, step-ups, seed, held-out "
         "claim) differs from the harness's own", (Source(SELECTION_TSV, ("model", "backend")),),
         False, check_held_out,
         "a dropping validate hidden behind a later pass; a held-out claim whose validate "
         "cell ran the measure seed"),
)
