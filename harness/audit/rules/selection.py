"""Selection-consistency rules (docs/spec.md#audit-rules): `validated-but-saturated`,
`selection-below-peak`, `timing-not-max`, `unvalidated-selection` (every select backend,
not only ECHO), and `nothing-to-judge`; plus the selection-row cross-checks that
`inconsistent-requirement` uses and the held-out note (issue 12)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from harness.audit.model import (
    NOT_APPLICABLE,
    PASS,
    UNKNOWN,
    Check,
    Row,
    Rule,
    Source,
    Table,
    Upload,
    agrees,
    budget_of,
    decimal_of,
    int_of,
    verdict_of,
    where,
)
from harness.audit.vocab import (
    BELOW_PEAK,
    FALSE,
    NOTHING_TO_JUDGE,
    P_CANARY,
    P_MEASURE,
    P_TIME,
    P_VALIDATE,
    S_DROPS,
    S_LOWER_BOUND,
    S_OK,
    TIMING_NOT_MAX,
    TRUE,
    UNVALIDATED,
    VALIDATED_SATURATED,
)
from harness.errors import EpcapError
from harness.grid.risk import drop_risk_95
from harness.grid.selection import timing_capacity
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV

PAIR_COLUMNS = ("model", "backend", "purpose", "capacity")


def pair(row: Row) -> tuple[str, str]:
    """(model, backend), normalised."""
    return row.name("model"), row.name("backend")


def label(row: Row) -> str:
    """`MODEL backend` as written, for messages."""
    return f"{row.get('model')} {row.get('backend')}"


def usable(upload: Upload, name: str, columns: tuple[str, ...]) -> Table | None:
    """A table of the upload that is readable and has the columns, else None."""
    table = upload.tables.get(name)
    if table is None or table.unreadable or any(c not in table.columns for c in columns):
        return None
    return table


def same_capacity(a: str, b: str) -> bool:
    """Capacities compare as numbers (1.25 = 1.250)."""
    x, y = decimal_of(a), decimal_of(b)
    return x is not None and y is not None and x == y


def attempts_of(upload: Upload, row: Row, purpose: str) -> list[Row]:
    """Attempts rows of the selection row's pair with that purpose."""
    attempts = usable(upload, ATTEMPTS_TSV, PAIR_COLUMNS)
    if attempts is None:
        return []
    return [a for a in attempts.rows if pair(a) == pair(row) and a.name("purpose") == purpose]


def accepted_validate(upload: Upload, row: Row) -> Row | None:
    """The last validate attempt of the pair at its selected capacity."""
    found = [a for a in attempts_of(upload, row, P_VALIDATE)
             if same_capacity(a.get("capacity"), row.get("selected_capacity"))]
    return max(found, key=lambda a: (int_of(a.get("attempt")) or 0, a.line), default=None)


def need_attempts(code: str, upload: Upload) -> Check | None:
    """UNKNOWN when the attempts table a selection rule needs is absent or lacks columns."""
    table = upload.tables.get(ATTEMPTS_TSV)
    if table is None:
        return Check(code, UNKNOWN, [f"no {ATTEMPTS_TSV} in the upload"])
    if table.unreadable:
        return Check(code, UNKNOWN, [f"{ATTEMPTS_TSV}: {table.unreadable}"])
    absent = [c for c in PAIR_COLUMNS if c not in table.columns]
    if absent:
        return Check(code, UNKNOWN, [f"{ATTEMPTS_TSV} lacks column {', '.join(absent)}"])
    return None


def check_validated_saturated(table: Table, upload: Upload) -> Check:
    """validated=true, yet the accepted validate attempt dropped: its status, its
    saturated_rows, its cell's summary or its logs say so (or validate_peak >= the budget)."""
    missing = need_attempts(VALIDATED_SATURATED, upload)
    if missing:
        return missing
    bad, unknown = [], []
    for row in table.rows:
        if row.name("validated") != TRUE:
            continue
        budget = int_of(row.get("selected_budget_tokens"))
        peak = int_of(row.get("validate_peak"))
        if budget is not None and peak is not None and peak >= budget:
            bad.append(f"{where(table, row)}: {label(row)} validated, but validate_peak "
                       f"{peak} >= selected budget {budget} (saturated)")
        found = accepted_validate(upload, row)
        if found is None:
            continue
        at = f"{ATTEMPTS_TSV}:{found.line}"
        if found.name("status") in (S_DROPS, S_LOWER_BOUND):
            bad.append(f"{at}: {label(row)} validated, but its validate attempt's status is "
                       f"{found.get('status')}")
        if (int_of(found.get("saturated_rows")) or 0) > 0:
            bad.append(f"{at}: {label(row)} validated, but {found.get('saturated_rows')} "
                       f"saturated rows")
        cell = upload.cell_for(found)
        if cell is None:
            continue
        if cell.logs is not None and cell.logs.saturated_rows > 0:
            bad.append(f"{cell.path}: {label(row)} validated, but its logs have "
                       f"{cell.logs.saturated_rows} saturated rows")
        summary = (cell.cell_json or {}).get("summary")
        stated = summary.get("saturated_rows") if isinstance(summary, dict) else None
        if isinstance(stated, int) and stated > 0:
            bad.append(f"{cell.path}/cell.json: {label(row)} validated, but {stated} "
                       f"saturated rows")
        if cell.logs_problem:
            unknown.append(f"{cell.path}: {cell.logs_problem}")
    return verdict_of(bad, [], VALIDATED_SATURATED, unknown)


def check_below_peak(table: Table, upload: Upload) -> Check:
    """The selected budget (written, and int(capacity x N)) covers the measured peak."""
    bad = []
    for row in table.rows:
        peak = int_of(row.get("peak_actual_valid_recv"))
        budgets = [b for b in (int_of(row.get("selected_budget_tokens")),) if b is not None]
        n = int_of(row.get("uniform_tokens"))
        computed = budget_of(row.get("selected_capacity"), n) if n else None
        if computed is not None:
            budgets.append(computed)
        if peak is not None and budgets and min(budgets) < peak:
            bad.append(f"{where(table, row)}: {label(row)} selected budget {min(budgets)} is "
                       f"below its measured peak {peak}")
    return verdict_of(bad, [], BELOW_PEAK, [])


def replayed_instead(code: str, upload: Upload) -> Check | None:
    """n/a where the runbook as run is in the upload: the replayed pipeline decides there
    (timing-not-rederived, selection-not-rederived, held-out-not-rederived), so a stage that
    decides differently (a gate that ends pairs: its Stop names the columns it leaves
    empty) is judged by its own code, not by a restatement in harness/audit/."""
    from harness.audit.rules.rederive import as_run
    if as_run(upload):
        return Check(code, NOT_APPLICABLE, ["judged by the replayed pipeline (the runbook as "
                                            "run is in the upload)"])
    return None


def check_timing_not_max(table: Table, upload: Upload) -> Check:
    """Without the runbook as run (the earlier layout): each model is timed at max(selected
    capacity of its select backends): the selection's timing_capacity, timing.tsv and the
    purpose=time attempts."""
    replay = replayed_instead(TIMING_NOT_MAX, upload)
    if replay:
        return replay
    chosen: dict[str, dict[str, str]] = {}
    for row in table.rows:
        if decimal_of(row.get("selected_capacity")) is not None:
            chosen.setdefault(row.name("model"), {})[row.name("backend")] = \
                row.get("selected_capacity")
    best: dict[str, tuple[Decimal, str]] = {}
    for model, capacities in chosen.items():
        try:                     # the pipeline's own rule (grid.selection.timing_capacity)
            shown = timing_capacity(capacities)
        except EpcapError:
            continue
        best[model] = (decimal_of(shown), shown)
    timed: list[tuple[str, Row, str]] = []
    timed += [(SELECTION_TSV, r, r.get("timing_capacity")) for r in table.rows
              if "timing_capacity" in table.columns]
    timing = usable(upload, TIMING_TSV, ("model", "timing_capacity"))
    timed += [(TIMING_TSV, r, r.get("timing_capacity")) for r in (timing.rows if timing else [])]
    attempts = usable(upload, ATTEMPTS_TSV, ("model", "purpose", "capacity"))
    timed += [(ATTEMPTS_TSV, r, r.get("capacity")) for r in (attempts.rows if attempts else [])
              if r.name("purpose") == P_TIME]
    bad, seen = [], 0
    for name, row, written in timed:
        if not written or row.name("model") not in best:
            continue
        seen += 1
        value, shown = best[row.name("model")]
        if decimal_of(written) != value:
            bad.append(f"{name}:{row.line}: {row.get('model')} timed at {written}, not the "
                       f"largest selected capacity {shown}")
    if not seen and not bad:
        return Check(TIMING_NOT_MAX, NOT_APPLICABLE, ["no timing capacity recorded"])
    return verdict_of(bad, [], TIMING_NOT_MAX, [])


def check_unvalidated(table: Table, upload: Upload) -> Check:
    """Without the runbook as run (the earlier layout): every select backend's selection has
    a validate attempt at its selected capacity, and every backend measured successfully has
    a selection row."""
    replay = replayed_instead(UNVALIDATED, upload)
    if replay:
        return replay
    missing = need_attempts(UNVALIDATED, upload)
    if missing:
        return missing
    bad = []
    selected = {pair(r) for r in table.rows}
    for row in table.rows:
        if row.get("selected_capacity") and accepted_validate(upload, row) is None:
            bad.append(f"{where(table, row)}: {label(row)} selected "
                       f"{row.get('selected_capacity')} without a validate attempt at it")
    attempts = usable(upload, ATTEMPTS_TSV, PAIR_COLUMNS)
    for row in attempts.rows if attempts else []:
        if (row.name("purpose") == P_MEASURE and row.name("status") == S_OK
                and pair(row) not in selected):
            selected.add(pair(row))
            bad.append(f"{ATTEMPTS_TSV}:{row.line}: {label(row)} was measured but has no "
                       f"selection row")
    return verdict_of(bad, [], UNVALIDATED, [])


def check_nothing_to_judge(upload: Upload) -> Check:
    """UNKNOWN for an upload with no attempt rows (canary aside), or one stopped before any
    selection (only measure rows, and no selection rows)."""
    attempts = upload.tables.get(ATTEMPTS_TSV)
    selection = upload.tables.get(SELECTION_TSV)
    rows = [r for r in attempts.rows if r.name("purpose") != P_CANARY] if attempts else []
    if attempts is not None and attempts.unreadable:
        return Check(NOTHING_TO_JUDGE, PASS, [])          # the table rules say why
    selected = bool(selection and selection.rows)
    if not rows and not selected:
        return Check(NOTHING_TO_JUDGE, UNKNOWN, ["no attempt rows and no selection rows: "
                                                 "nothing to judge (stopped after preflight?)"])
    purposes = {r.name("purpose") for r in rows}
    if rows and not selected and purposes <= {P_MEASURE}:
        return Check(NOTHING_TO_JUDGE, UNKNOWN, ["only measure attempts and no selection: "
                                                 "stopped before any selection, nothing to "
                                                 "judge"])
    return Check(NOTHING_TO_JUDGE, PASS, [])


def held_out_notes(upload: Upload) -> list[str]:
    """A stated note per selection that validated on the measured routing (held_out=false)."""
    table = usable(upload, SELECTION_TSV, ("model", "backend", "held_out"))
    return [f"{where(table, r)}: {label(r)} validation re-ran the measured routing "
            f"(held_out=false): its zero drops are not a held-out check"
            for r in (table.rows if table else []) if r.name("held_out") == FALSE]


def selection_consistency(table: Table, upload: Upload) -> tuple[list[str], list[str]]:
    """Selection rows against their measure and validate attempts (peak, N, headroom)."""
    bad: list[str] = []
    for row in table.rows:
        measures = [a for a in attempts_of(upload, row, P_MEASURE)
                    if int_of(a.get("peak_actual_valid_recv")) is not None]
        peak = row.get("peak_actual_valid_recv")
        if peak and measures and int_of(peak) not in {
                int_of(a.get("peak_actual_valid_recv")) for a in measures}:
            bad.append(f"{where(table, row)}: {label(row)} peak_actual_valid_recv {peak} is no "
                       f"measure attempt's peak")
        n, ns = row.get("uniform_tokens"), {int_of(a.get("uniform_tokens")) for a in measures}
        ns.discard(None)
        if n and ns and int_of(n) not in ns:
            bad.append(f"{where(table, row)}: {label(row)} uniform_tokens {n} is no measure "
                       f"attempt's")
        vpeak, budget = int_of(row.get("validate_peak")), int_of(row.get("selected_budget_tokens"))
        if row.get("headroom") and vpeak and budget is not None and not agrees(
                row.get("headroom"), Fraction(budget, vpeak)):
            bad.append(f"{where(table, row)}: {label(row)} headroom {row.get('headroom')} but "
                       f"selected budget / validate_peak = {budget}/{vpeak}")
        found = accepted_validate(upload, row) if vpeak is not None else None
        seen = validate_peaks(upload, found) if found is not None else set()
        if seen and vpeak not in seen:
            bad.append(f"{where(table, row)}: {label(row)} validate_peak {vpeak} but its "
                       f"validate run's peak is {' or '.join(map(str, sorted(seen)))}")
    return bad, []


def validate_peaks(upload: Upload, found: Row) -> set[int]:
    """The peaks a validate run may state: its attempts row's, its logs' (warmup 0 or the
    warmup its cell states)."""
    seen = {int_of(found.get("peak_actual_valid_recv"))}
    cell = upload.cell_for(found)
    if cell is not None and cell.logs is not None:
        seen |= {cell.logs.peak, cell.logs.peak_after_warmup}
    seen.discard(None)
    return seen


def drop_risk_consistency(table: Table) -> list[str]:
    """drop_risk_95 = 1 - 0.05^(1/n) for the n validate_steps written (at its precision)."""
    bad = []
    for row in table.rows:
        written, n = row.get("drop_risk_95"), int_of(row.get("validate_steps"))
        if not (written and n):
            continue
        risk = drop_risk_95(n)                        # the pipeline's own (grid.risk)
        if risk is None:
            bad.append(f"{where(table, row)}: {label(row)} drop_risk_95 {written} but "
                       f"validate_steps {n} gives no bound")
        elif not agrees(written, Fraction(risk)):
            bad.append(f"{where(table, row)}: {label(row)} drop_risk_95 {written} but "
                       f"1 - 0.05^(1/{n}) = {risk:.6g}")
    return bad


# This family's rules, as data (docs/audit.md#rules): code, what it catches, the tables and
# columns it reads, whether it must be decided, its check, and the earlier failure it stands for.
RULES: tuple[Rule, ...] = (
    Rule(VALIDATED_SATURATED, "validated=true, yet the accepted validate attempt dropped",
         (Source(SELECTION_TSV, ("model", "backend", "selected_capacity", "validated")),),
         True, check_validated_saturated,
         "max(0, observed_loss) read zero drops from a clipping buffer"),
    Rule(BELOW_PEAK, "a selected budget below the measured peak it was selected for",
         (Source(SELECTION_TSV, ("peak_actual_valid_recv", "selected_budget_tokens")),),
         True, check_below_peak,
         "capacities rounded down, or chosen from setup_metadata's uniform N"),
    Rule(TIMING_NOT_MAX, "timing capacity is not max(selected capacity of the select backends)",
         (Source(SELECTION_TSV, ("model", "selected_capacity")),), True, check_timing_not_max,
         "timing at ECHO's capacity where UltraEP needed more (or at the lowest rung)"),
    Rule(UNVALIDATED, "a select backend without a validate attempt at its selected capacity",
         (Source(SELECTION_TSV, ("model", "backend", "selected_capacity")),), True,
         check_unvalidated,
         "only ECHO was validated; UltraEP's selection was taken on trust"),
)
