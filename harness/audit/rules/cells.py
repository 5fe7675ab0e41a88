"""Rules that re-derive a row from its cell (docs/spec.md#audit-rules): `missing-cell` and
`inconsistent-requirement`. `missing-cell` has a second row over the whole upload: every
cell `events.jsonl` records as finished (`cell_finish`, read by the harness's own
`results.events.read_events`; canaries too, which have no attempts row) is in the upload. The audit believes no summary it can recompute: a row's
requirement must be its own peak / N at the precision written, its budget int(capacity x N),
and its capacity, N, budget, peak and saturation must agree with the cell's `cell.json`
and telemetry."""

from __future__ import annotations

from fractions import Fraction

from harness.audit.model import (
    NOT_APPLICABLE,
    UNKNOWN,
    AuditContext,
    Cell,
    Check,
    Row,
    Rule,
    Source,
    Table,
    Upload,
    UploadRule,
    agrees,
    budget_of,
    cell_key,
    decimal_of,
    int_of,
    ratio_text,
    verdict_of,
    where,
)
from harness.audit.rules.basic import find_uniform_tokens
from harness.audit.rules.rederive import upload_events
from harness.audit.rules.selection import drop_risk_consistency, selection_consistency
from harness.audit.vocab import CELL_TAG, IGNORED_TAG, INCONSISTENT, MISSING_CELL
from harness.results.layout import (
    ATTEMPTS_TSV,
    EVENTS_JSONL,
    SELECTION_TSV,
    TIMING_TSV,
    parse_cell_name,
)
from harness.vocab import Event


def requirement_problem(row: Row, peak_col: str = "peak_actual_valid_recv",
                        n_col: str = "uniform_tokens") -> str | None:
    """required_capacity vs peak / N of the same row (None when consistent or not stated)."""
    required, peak, n = row.get("required_capacity"), int_of(row.get(peak_col)), \
        int_of(row.get(n_col))
    if not required or peak is None or not n:
        return None
    if decimal_of(required) is None:
        return f"required_capacity {required!r} is not a number"
    if not agrees(required, Fraction(peak, n)):
        return (f"required_capacity {required} but {peak_col} / {n_col} = {peak}/{n} = "
                f"{ratio_text(peak, n)}")
    return None


def budget_problem(row: Row, cap_col: str, budget_col: str) -> str | None:
    """A written budget vs int(float(capacity) x N) (None when consistent or not stated)."""
    capacity, budget, n = row.get(cap_col), int_of(row.get(budget_col)), \
        int_of(row.get("uniform_tokens"))
    if not capacity or budget is None or not n:
        return None
    expected = budget_of(capacity, n)
    if expected is None:
        return f"{cap_col} {capacity!r} is not a capacity"
    if expected != budget:
        return f"{budget_col} {budget} but int({cap_col} {capacity} x N {n}) = {expected}"
    return None


def cell_facts(cell: Cell) -> dict[str, dict[str, object]]:
    """What a cell states about its run, per source: cell.json, its directory name, logs."""
    facts: dict[str, dict[str, object]] = {}
    data = cell.cell_json or {}
    stated: dict[str, object] = {}
    if isinstance(data.get("cell"), dict) and data["cell"].get("capacity") is not None:
        stated["capacity"] = str(data["cell"]["capacity"])
    n = find_uniform_tokens(data) if data else None
    if n:
        stated["uniform_tokens"] = n
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    for column, key in (("budget_tokens", "budget"), ("rows", "rows"),
                        ("peak_actual_valid_recv", "peak_actual_valid_recv"),
                        ("saturated_rows", "saturated_rows")):
        value = summary.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            stated[column] = value
    facts["cell.json"] = stated
    named = parse_cell_name(cell.name)               # the harness's names, exactly
    match = CELL_TAG.search(cell.name)               # older names (no attempt suffix)
    if named is not None or match:
        facts["directory name"] = {"capacity": named.capacity if named else
                                   f"{match.group(1)}.{match.group(2)}"}
    if cell.logs is not None:
        logs = cell.logs
        derived: dict[str, object] = {"rows": logs.rows, "saturated_rows": logs.saturated_rows}
        if len(logs.budgets) == 1:
            derived["budget_tokens"] = logs.budgets[0]
        elif len(logs.budgets) > 1:
            derived["budget_tokens"] = tuple(logs.budgets)
        if len(logs.expected_recv) == 1:
            derived["uniform_tokens"] = logs.expected_recv[0]
        if logs.peak is not None:
            derived["peak_actual_valid_recv"] = (logs.peak, logs.peak_after_warmup)
        facts["logs"] = derived
    return facts


def same(column: str, written: str, stated: object) -> bool:
    """Does a row's written value agree with what the cell states?"""
    if column == "capacity":
        a, b = decimal_of(written), decimal_of(str(stated))
        return a is not None and b is not None and a == b
    value = int_of(written)
    if isinstance(stated, tuple):                      # a peak at either warmup, or budgets
        return value is not None and value in stated and (column != "budget_tokens"
                                                           or len(set(stated)) == 1)
    return value is not None and value == stated


def clipped(cell: Cell, written: str) -> bool:
    """A saturated run's logs show the budget, not the demand: a written peak at or above
    the logs' (an overflow report's stated demand, docs/spec.md#telemetry) is not a disagreement."""
    logs, value = cell.logs, int_of(written)
    return (logs is not None and logs.saturated_rows > 0 and logs.peak is not None
            and value is not None and value >= logs.peak)


def row_vs_cell(table: Table, row: Row, cell: Cell) -> tuple[list[str], list[str]]:
    """(disagreements, undecidable) between an attempts row and its cell."""
    bad, unknown = [], []
    label = f"{where(table, row)} vs {cell.path}"
    if cell.cell_json_problem:
        unknown.append(f"{cell.path}: {cell.cell_json_problem}")
    if cell.logs_problem:
        unknown.append(f"{cell.path}: {cell.logs_problem}")
    for source, stated in cell_facts(cell).items():
        for column, value in stated.items():
            if column in ("rows",) and source == "cell.json":
                continue                              # rows counted by the logs below
            written = row.get(column)
            if not written and column == "peak_actual_valid_recv":
                continue                              # a failed run states no peak
            if not written or column not in table.columns:
                continue
            if column == "peak_actual_valid_recv" and source == "logs" and clipped(cell, written):
                continue                              # a stated pre-drop demand (docs/spec.md#telemetry)
            if not same(column, written, value):
                shown = value[0] if isinstance(value, tuple) and column != "budget_tokens" \
                    else value
                bad.append(f"{label}: {column} {written} but {source} says {shown}")
    return bad, unknown


def check_missing_cell(table: Table, upload: Upload) -> Check:
    """Every attempts row names a cell directory that is in the upload (a timing row, when
    it names one)."""
    bad = []
    for row in table.rows:
        key = cell_key(row)
        if not key and table.name == TIMING_TSV:
            continue
        if not key:
            bad.append(f"{where(table, row)}: names no cell directory")
        elif upload.cell_for(row) is None:
            bad.append(f"{where(table, row)}: {key} is not in the upload")
    return verdict_of(bad, [], MISSING_CELL, [])


def finished_cells(upload: Upload) -> tuple[list[str] | None, str | None]:
    """The cell name of every cell_finish, in order; None and why when the log cannot be
    read; (None, None) when the upload has no events.jsonl."""
    events, problem = upload_events(upload)
    if events is None:
        return None, problem
    return [str(e.get("cell")) for e in events if e.get("ev") == Event.CELL_FINISH], None


def check_finished_cells(upload: Upload, ctx: AuditContext | None = None) -> Check:
    """Every cell events.jsonl records as finished is a cell directory of the upload."""
    finished, problem = finished_cells(upload)
    if problem:
        return Check(MISSING_CELL, UNKNOWN, [problem])
    if finished is None:
        return Check(MISSING_CELL, NOT_APPLICABLE, [f"no {EVENTS_JSONL}"])
    present = {c.name for c in upload.cells.values()} | set(upload.ignored_cells)
    bad = [f"{EVENTS_JSONL}: a cell_finish event's field cell {name!r} names a cell that is "
           f"not in the upload" for name in finished
           if name not in present and not IGNORED_TAG.search(name)]
    return verdict_of(bad, [], MISSING_CELL, [])


def check_inconsistent(table: Table, upload: Upload) -> Check:
    """Each row's requirement and budget from its own peak, capacity and N; attempts rows
    against their cells; selection rows against the measure attempts they came from."""
    bad, unknown = [], []
    for row in table.rows:
        for problem in (requirement_problem(row),
                        budget_problem(row, "capacity", "budget_tokens")
                        if table.name == ATTEMPTS_TSV else
                        budget_problem(row, "selected_capacity", "selected_budget_tokens")):
            if problem:
                bad.append(f"{where(table, row)}: {problem}")
        if table.name == ATTEMPTS_TSV:
            cell = upload.cell_for(row)
            if cell is not None and cell.problem is None:
                b, u = row_vs_cell(table, row, cell)
                bad, unknown = bad + b, unknown + u
    if table.name == SELECTION_TSV and upload.runbook is None:
        # the earlier layout: the select and validate steps' figures restated (with the
        # runbook as run the replay builds the row and compares every column)
        b, u = selection_consistency(table, upload)
        bad, unknown = bad + b, unknown + u
        bad += drop_risk_consistency(table)
    return verdict_of(bad, [], INCONSISTENT, unknown)


__all__ = ["agrees", "check_finished_cells", "check_inconsistent", "check_missing_cell"]


ATTEMPT_FACTS = ("model", "backend", "capacity", "uniform_tokens", "budget_tokens",
                 "peak_actual_valid_recv", "required_capacity", "cell_dir")
SELECTION_FACTS = ("model", "backend", "required_capacity", "peak_actual_valid_recv",
                   "uniform_tokens", "selected_capacity", "selected_budget_tokens")

# This family's rules, as data (docs/audit.md#rules): code, what it catches, the tables and
# columns it reads, whether it must be decided, its check, and the earlier failure it stands for.
RULES: tuple[Rule | UploadRule, ...] = (
    Rule(MISSING_CELL, "a row names a cell directory that is not in the upload",
         (Source(ATTEMPTS_TSV, ("cell_dir",)), Source(TIMING_TSV, ("cell_dir",))), True,
         check_missing_cell,
         "summaries uploaded without the runs they summarise (cells/ deleted)"),
    UploadRule(MISSING_CELL, "a cell events.jsonl records as finished is not in the upload",
               (Source(EVENTS_JSONL, ("ev", "cell")),), check_finished_cells,
               "a canary or attempt cell deleted with its row"),
    Rule(INCONSISTENT, "required_capacity != peak / N, or a row disagrees with its cell",
         (Source(ATTEMPTS_TSV, ATTEMPT_FACTS), Source(SELECTION_TSV, SELECTION_FACTS)), True,
         check_inconsistent,
         "a requirement or budget written by hand (1.05 where the peak says 1.205), or a "
         "false N that makes 1.02 look executable", all_sources=True),
)
