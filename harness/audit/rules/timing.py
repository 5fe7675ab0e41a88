"""timing_launches.tsv against the time cells: one row per usable launch and phase, its
figures the launch's own [EPCAP_TIMING] object (derived by the campaign's analysis,
rules.rederive.derive), numbered in the arm's attempt order. timing.tsv and comparison.tsv
are the pipeline's time step, replayed on the cells by rules.pipeline; `differs`,
`compare_table` and TIMING_FIGURES are shared with the earlier layout's rule (rules.legacy).
"""

from __future__ import annotations

from decimal import Decimal

from harness.audit.model import (
    NOT_APPLICABLE,
    UNKNOWN,
    Cell,
    Check,
    Row,
    Table,
    Upload,
    cell_key,
    decimal_of,
    int_of,
    norm,
    verdict_of,
    where,
)
from harness.audit.rules.apply import blanked
from harness.audit.rules.rederive import abandoned_cells, as_run, derive, invalidated
from harness.audit.vocab import TIMING_NOT_REDERIVED
from harness.errors import EpcapError
from harness.results.layout import (
    TIMING_LAUNCHES_TSV,
    parse_cell_name,
)
from harness.results.rows import TIMING_COLUMNS
from harness.results.tables import cell_text
from harness.timing import verdicts
from harness.vocab import Purpose

NAMES = ("campaign", "model", "backend", "baseline", "phase", "status", "verdict", "timer",
         "backend_impl")                      # compared as docs/spec.md#audit-rules compares names


def time_cells(upload: Upload, model: str) -> dict[str, list[Cell]]:
    """The upload's `time` cells of a model per arm, in attempt order (abandoned and
    invalidated cells left out)."""
    found: dict[str, list[tuple[int, Cell]]] = {}
    gone = invalidated(upload)
    dropped = abandoned_cells(upload)
    for cell in upload.cells.values():
        named = parse_cell_name(cell.name, upload.runbook.campaign)
        if named is None or named.purpose != Purpose.TIME or cell.name in gone \
                or cell.path in dropped \
                or norm(named.model) != norm(model):
            continue
        found.setdefault(named.backend, []).append((named.attempt, cell))
    return {arm: [c for _, c in sorted(cells, key=lambda x: x[0])]
            for arm, cells in found.items()}


# timing.tsv columns that state a figure of the launches (the rest name the row)
TIMING_FIGURES = tuple(c for c in TIMING_COLUMNS if c not in (
    "campaign", "model", "backend", "timing_capacity", "budget_tokens", "status", "cell_dir"))


def model_launches(upload: Upload, model: str, unknown: list[str]) -> dict[tuple, dict]:
    """timing_launches.tsv's rows of one model, keyed (model, arm, launch, phase)."""
    launches = {}
    for arm, cells in time_cells(upload, model).items():
        for number, cell in enumerate(cells, 1):
            got = derive(upload, cell)
            if got.problem:
                unknown.append(got.problem)
                continue
            obj = verdicts.usable(got.columns.get("status"), got.timing)
            if not obj or obj.get(f"{verdicts.PHASES[0]}_ms_median") is None:
                continue
            for phase in verdicts.PHASES:
                launches[(norm(model), norm(arm), number, phase)] = {
                    **verdicts.launch_stats(obj, phase),
                    "trials": obj.get("trials"), "cell_dir": cell.path,
                    "backend_impl": obj.get("backend_impl")
                    or got.columns.get("backend_impl")}
    return launches


def differs(column: str, written: str, derived: object) -> bool:
    """A written TSV cell against the derived value, as harness.results.tables writes it
    (floats at six decimals compare as numbers; names as docs/spec.md#audit-rules compares them)."""
    if derived is None:
        return written != ""
    if column == "cell_dir":
        return cell_key(Row(0, {"cell_dir": written})) != str(derived)
    if isinstance(derived, bool):
        return norm(written) != cell_text(derived)
    if isinstance(derived, int):
        return int_of(written) != derived
    if isinstance(derived, float) or column in ("timing_capacity",):
        value = decimal_of(written)
        return value is None or value != Decimal(cell_text(derived) if isinstance(
            derived, float) else str(derived))
    if column in NAMES:
        return norm(written) != norm(str(derived))
    return written != str(derived)


def compare_table(table: Table | None, derived: dict[tuple, dict], key_of, what: str,
                  bad: list[str], missing: list[str], skip: tuple[str, ...] = (),
                  undecided: frozenset[str] = frozenset()) -> None:
    """Rows of a written table against the derived rows with the same key, column by column;
    a derived row with no written row is missing, a written row with no derived one is bad."""
    seen, excused = set(), set()
    for row in table.rows if table is not None else []:
        if row.name("model") in undecided:
            continue                                  # its cells are UNKNOWN: not compared
        if any(blanked(table, row, c) for c in ("model", "backend", "launch", "phase")):
            excused |= {k for k in derived if k[:2] == key_of(row)[:2]}
            continue                                  # unreadable key: the rule is UNKNOWN
        key = key_of(row)
        if key not in derived:
            bad.append(f"{where(table, row)}: a {what} row the harness does not derive "
                       f"({' '.join(map(str, key))})")
            continue
        if key in seen:
            bad.append(f"{where(table, row)}: {' '.join(map(str, key))} written twice")
        seen.add(key)
        for column, value in derived[key].items():
            if column in skip or column not in table.columns or blanked(table, row, column):
                continue
            if differs(column, row.get(column), value):
                shown = cell_text(value)
                bad.append(f"{where(table, row)}: {column} {row.get(column)!r} but the "
                           f"harness derives {shown!r}")
    if table is not None and table.unreadable:
        return                                        # nothing written can be read: UNKNOWN
    missing += [f"{table.name if table else what}: no row for {' '.join(map(str, k))}"
                for k in derived if k not in seen and k not in excused and k[0] not in undecided]


def launch_key(row: Row) -> tuple[str, str, int | None, str]:
    return row.name("model"), row.name("backend"), int_of(row.get("launch")), row.name("phase")


def check_timing_launches(table: Table, upload: Upload) -> Check:
    """timing_launches.tsv equals what the time cells' own timing objects give."""
    if not as_run(upload):
        return Check(TIMING_NOT_REDERIVED, NOT_APPLICABLE, ["no runbook as run"])
    written = upload.tables.get(TIMING_LAUNCHES_TSV)
    if written is None:                                  # older harnesses did not write it
        return Check(TIMING_NOT_REDERIVED, NOT_APPLICABLE, ["no timing_launches.tsv"])
    bad, unknown, missing = [], [], []
    if written.unreadable or written.malformed:
        unknown.append(f"{written.name}: {written.unreadable or written.malformed[0]}")
    if written.blanked:                                  # rules.apply.blank_unreadable
        unknown += list(written.blanked.values())
    launches, undecided = {}, set()
    try:
        for m in upload.runbook.models:
            problems: list[str] = []
            launches.update(model_launches(upload, m.name, problems))
            if problems:                 # a launch the analysis cannot derive: not compared
                undecided.add(norm(m.name))
                unknown += problems
    except EpcapError as exc:
        return Check(TIMING_NOT_REDERIVED, UNKNOWN, [f"timing not derivable ({exc})"])
    compare_table(written, launches, launch_key, TIMING_LAUNCHES_TSV, bad, missing,
                  skip=("campaign",), undecided=frozenset(undecided))
    return verdict_of(bad + missing, [], TIMING_NOT_REDERIVED, unknown)


