"""The timing layer re-derived with the harness's own code (issue 23): from the runbook as
run and the upload's `time` cells, the arms and their rotated launch schedule
(harness.timing.verdicts.arms/schedule), each launch's status and [EPCAP_TIMING] object
(rules.rederive.derive: judge_run, Backend.parse_timing), the model's timing capacity
(harness.grid.selection.timing_capacity of its select backends' selections), then
`timing.tsv` (verdicts.aggregate), `comparison.tsv` (verdicts.comparison_rows: the paired
bootstrap with the harness's fixed seed over the launches' per-trial medians) and
`timing_launches.tsv`, compared value by value with what the upload wrote.

`timing-incomplete`: a timed arm or launch the runbook as run asked for has no cell or no
row (a timed backend removed for one model, the A/A control arm deleted), or a table the
harness writes with them is absent. `timing-not-rederived`: a written value differs from the
derivation, or a time cell ran at another capacity than its model's timing capacity.
An upload without the runbook as run (the earlier layout) has nothing to derive from: n/a.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from harness.audit.model import (
    NOT_APPLICABLE,
    UNKNOWN,
    Cell,
    Check,
    Row,
    Rule,
    Source,
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
from harness.audit.rules.rederive import (
    Derived,
    abandoned_cells,
    as_run,
    derive,
    upload_events,
)
from harness.audit.vocab import TIMING_INCOMPLETE, TIMING_NOT_REDERIVED
from harness.errors import EpcapError
from harness.grid import capacity as cap
from harness.grid.selection import timing_capacity
from harness.results.events import superseded_infra
from harness.results.layout import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    EVENTS_JSONL,
    SELECTION_TSV,
    TIMING_LAUNCHES_TSV,
    TIMING_TSV,
    parse_cell_name,
)
from harness.results.rows import TIMING_COLUMNS
from harness.results.tables import cell_text
from harness.timing import verdicts
from harness.vocab import BUG_CLASSES, Event, Purpose, Status

NAMES = ("campaign", "model", "backend", "baseline", "phase", "status", "verdict", "timer",
         "backend_impl")                      # compared as docs/spec.md#audit-rules compares names


@dataclass(frozen=True)
class Launch:
    """One time cell as the pipeline saw it: the cell, and what the harness derives of it."""

    cell: Cell
    derived: Derived

    @property
    def status(self) -> str:
        return str(self.derived.columns.get("status"))

    @property
    def timing(self) -> dict | None:
        return self.derived.timing


@dataclass(frozen=True)
class ModelTiming:
    """The derived timing layer of one model: rows keyed as the tables are, and problems."""

    timing: dict[tuple[str, str], dict]
    comparison: dict[tuple[str, str, str], dict]
    launches: dict[tuple[str, str, int, str], dict]
    missing: list[str]
    bad: list[str]
    unknown: list[str]


def invalidated(upload: Upload) -> set[str]:
    """Cells a `cells_invalidated` event took out of the results (they no longer count)."""
    events = upload_events(upload)[0] or []
    return {str(c) for e in events if e.get("ev") == Event.CELLS_INVALIDATED
            for c in e.get("cells") or []}


def campaign_finished(upload: Upload) -> bool | None:
    """Whether the campaign's last run ended with `campaign_done` (events.jsonl), None when
    the upload holds no event log (or it cannot be read): a campaign stopped mid-stage has
    missing runs, not lies."""
    events, _ = upload_events(upload)
    if events is None:
        return None
    marks = (Event.RUN_START, Event.CAMPAIGN_DONE, Event.CAMPAIGN_STOPPED)
    last = next((e["ev"] for e in reversed(events) if e.get("ev") in marks), None)
    return last == Event.CAMPAIGN_DONE


def time_cells(upload: Upload, model: str) -> dict[str, list[Cell]]:
    """The upload's `time` cells of a model per arm, in attempt order."""
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


def requests(cells: list[Cell], upload: Upload, infra_retries: int,
             unknown: list[str]) -> Iterator[Launch | None]:
    """The outcome each successive request of an arm saw, as the driver replays them: a
    bug-class run is re-run on resume and does not count, an infra failure a later run
    retried (up to limits.infra_retries per request) is skipped (results.events
    superseded_infra, the rule runs_done counts by); None once the cells run out."""
    queue = []
    for cell in cells:
        got = derive(upload, cell)
        if got.problem:
            unknown.append(got.problem)
            continue
        if got.columns.get("status") not in BUG_CLASSES:
            queue.append(Launch(cell, got))
    gone = superseded_infra([out.status for out in queue], infra_retries)
    yield from (out for out, skip in zip(queue, gone, strict=True) if not skip)
    while True:
        yield None


def first_launch_row(n: int, outs: list[Launch]) -> dict:
    """An arm's timing.tsv row over its launches, by the time step's own rules
    (verdicts.row_status, verdicts.launch_figures)."""
    named = parse_cell_name(outs[0].cell.name)
    row = {"model": named.model, "backend": named.backend,
           "timing_capacity": named.capacity,
           "budget_tokens": cap.budget_tokens(named.capacity, n),
           "status": verdicts.row_status([o.status for o in outs]),
           "cell_dir": outs[0].cell.path,
           **verdicts.launch_figures([(o.status, o.timing) for o in outs])}
    for column in TIMING_FIGURES:     # no launch measured it: the harness writes it empty
        row.setdefault(column, None)
    return row


# timing.tsv columns that state a figure of the launches (the rest name the row)
TIMING_FIGURES = tuple(c for c in TIMING_COLUMNS if c not in (
    "campaign", "model", "backend", "timing_capacity", "budget_tokens", "status", "cell_dir"))


def selected(upload: Upload, model: str) -> dict[str, str]:
    """The selected capacities of the model's select backends, as the selection writes them."""
    table = upload.tables.get(SELECTION_TSV)
    select = {norm(b.name) for b in upload.runbook.backends if b.select}
    return {r.name("backend"): r.get("selected_capacity")
            for r in (table.rows if table and not table.unreadable else [])
            if r.name("model") == norm(model) and r.name("backend") in select
            and r.get("selected_capacity")}


def derive_model(upload: Upload, model: str) -> ModelTiming | None:
    """The model's timing layer as the harness's time step builds it; None when the time
    stage never started for it (no time cell, no timing row)."""
    rb = upload.runbook
    cells = time_cells(upload, model)
    timing_table = upload.tables.get(TIMING_TSV)
    written = [r for r in (timing_table.rows if timing_table else [])
               if r.name("model") == norm(model)]
    timed = [b.name for b in rb.backends if b.time]
    if not timed or (not cells and not written):
        return None
    missing: list[str] = []
    bad: list[str] = []
    unknown: list[str] = []
    try:
        baseline, arms = verdicts.arms(timed, rb.baseline, rb.timing.control)
    except ValueError as exc:
        return ModelTiming({}, {}, {}, [], [], [f"runbook.yaml timing: {exc}"])
    chosen = selected(upload, model)
    tcap = timing_capacity(chosen) if chosen else None
    n = None
    outs: dict[str, list[Launch]] = {arm: [] for arm in arms}
    usable: dict[str, list[dict | None]] = {arm: [None] * rb.timing.launches for arm in arms}
    queues = {arm: requests(cells.get(arm, []), upload, rb.limits.infra_retries, unknown)
              for arm in arms}
    for i, arm in verdicts.schedule(arms, rb.timing.launches):
        if outs[arm] and verdicts.stops_launches(outs[arm][-1].status):
            continue                     # out of memory is not a fluke: no more launches
        out = next(queues[arm])
        if out is None:
            missing.append(f"{model}/{arm}: launch {i + 1} of {rb.timing.launches} the "
                           f"runbook as run asks for has no time cell")
            continue
        outs[arm].append(out)
        n = out.derived.columns.get("uniform_tokens")
        usable[arm][i] = verdicts.usable(out.status, out.timing)
        named = parse_cell_name(out.cell.name)
        if tcap is not None and decimal_of(named.capacity) != decimal_of(tcap):
            bad.append(f"{out.cell.path}: timed at {named.capacity}, but {model}'s timing "
                       f"capacity is {tcap} (max of its select backends' selections "
                       f"{', '.join(f'{b} {c}' for b, c in sorted(chosen.items()))})")
    if unknown:                      # a time cell the harness's code cannot derive: UNKNOWN
        return ModelTiming({}, {}, {}, [], bad, unknown)
    extra = {arm: cells for arm, cells in cells.items() if arm not in arms}
    for arm in arms:
        used = {o.cell.path for o in outs[arm]}
        extra[arm] = [c for c in cells.get(arm, []) if c.path not in used
                      and derive(upload, c).columns.get("status") not in
                      (*BUG_CLASSES, Status.INFRA)]
    bad += [f"{c.path}: a time cell the runbook as run does not ask for"
            for cells in extra.values() for c in cells]
    timing = {(norm(model), norm(arm)): first_launch_row(n or 0, o)
              for arm, o in outs.items() if o}
    why = {arm: f"no usable launch (timing status {timing[(norm(model), norm(arm))]['status']})"
           for arm in arms if outs[arm] and not any(usable[arm])}
    comparison = {}
    try:
        for row in verdicts.comparison_rows(rb.campaign, model, usable, baseline,
                                            rb.timing.max_cv, why):
            comparison[(norm(model), norm(row["backend"]), norm(row["phase"]))] = row
    except (ValueError, KeyError, TypeError) as exc:
        unknown.append(f"{model}: the launches' timing objects give no comparison ({exc})")
    launches = {}
    for arm in arms:
        for number, cell in enumerate(cells.get(arm, []), 1):
            got = derive(upload, cell)
            obj = verdicts.usable(got.columns.get("status"), got.timing)
            if not obj or obj.get(f"{verdicts.PHASES[0]}_ms_median") is None:
                continue
            for phase in verdicts.PHASES:
                launches[(norm(model), norm(arm), number, phase)] = {
                    "median_ms": obj.get(f"{phase}_ms_median"),
                    "p10_ms": obj.get(f"{phase}_ms_p10"), "p90_ms": obj.get(f"{phase}_ms_p90"),
                    "trials": obj.get("trials"), "cell_dir": cell.path}
    return ModelTiming(timing, comparison, launches, missing, bad, unknown)


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
    missing += [f"{table.name if table else what}: no row for {' '.join(map(str, k))}"
                for k in derived if k not in seen and k not in excused]


def timing_key(row: Row) -> tuple[str, str]:
    return row.name("model"), row.name("backend")


def comparison_key(row: Row) -> tuple[str, str, str]:
    return row.name("model"), row.name("backend"), row.name("phase")


def launch_key(row: Row) -> tuple[str, str, int | None, str]:
    return row.name("model"), row.name("backend"), int_of(row.get("launch")), row.name("phase")


def derive_upload(upload: Upload) -> list[tuple[str, ModelTiming]]:
    """The derived timing layer of every runbook model whose time stage started."""
    out = []
    for model in upload.runbook.models:
        got = derive_model(upload, model.name)
        if got is not None:
            out.append((model.name, got))
    return out


def timing_tables(upload: Upload) -> dict[str, Table | None]:
    return {name: upload.tables.get(name)
            for name in (TIMING_TSV, COMPARISON_TSV, TIMING_LAUNCHES_TSV)}


def check_timing(table: Table, upload: Upload) -> Check:
    """timing.tsv, comparison.tsv and timing_launches.tsv equal what the harness derives
    from the time cells; every launch at the model's timing capacity."""
    if not as_run(upload):
        return Check(TIMING_NOT_REDERIVED, NOT_APPLICABLE, ["no runbook as run"])
    bad, unknown, missing = [], [], []      # missing rows: timing-incomplete says so
    try:
        models = derive_upload(upload)
    except EpcapError as exc:
        return Check(TIMING_NOT_REDERIVED, "unknown", [f"timing not derivable ({exc})"])
    tables = timing_tables(upload)
    for name, t in tables.items():
        if t is not None and (t.unreadable or t.malformed):
            unknown.append(f"{name}: {t.unreadable or t.malformed[0]}")
        if t is not None and t.blanked:                  # rules.apply.blank_unreadable
            unknown += list(t.blanked.values())
    timing = {k: v for _, m in models for k, v in m.timing.items()}
    comparison = {k: v for _, m in models for k, v in m.comparison.items()}
    launches = {k: v for _, m in models for k, v in m.launches.items()}
    for _, m in models:
        bad += m.bad
        unknown += m.unknown
    undecided = frozenset(norm(name) for name, m in models if m.unknown)
    if timing or tables[TIMING_TSV] is not None:
        compare_table(tables[TIMING_TSV], timing, timing_key, TIMING_TSV, bad, missing,
                      skip=("campaign",), undecided=undecided)
    if comparison or tables[COMPARISON_TSV] is not None:
        compare_table(tables[COMPARISON_TSV], comparison, comparison_key, COMPARISON_TSV,
                      bad, missing, undecided=undecided)
    if tables[TIMING_LAUNCHES_TSV] is not None:          # older harnesses did not write it
        compare_table(tables[TIMING_LAUNCHES_TSV], launches, launch_key, TIMING_LAUNCHES_TSV,
                      bad, missing, skip=("campaign",), undecided=undecided)
    return verdict_of(bad, [], TIMING_NOT_REDERIVED, unknown)


def check_timing_complete(table: Table, upload: Upload) -> Check:
    """Every timed arm (the A/A control included) and launch the runbook as run asks for,
    for every model whose time stage started, has its time cell and its rows."""
    if not as_run(upload):
        return Check(TIMING_INCOMPLETE, NOT_APPLICABLE, ["no runbook as run"])
    try:
        models = derive_upload(upload)
    except EpcapError as exc:
        return Check(TIMING_INCOMPLETE, "unknown", [f"timing not derivable ({exc})"])
    tables = timing_tables(upload)
    missing: list[str] = []
    unknown: list[str] = []
    for _, m in models:
        missing += m.missing
        unknown += m.unknown
    timing = {k: v for _, m in models for k, v in m.timing.items()}
    comparison = {k: v for _, m in models for k, v in m.comparison.items()}
    for name, derived, key_of in ((TIMING_TSV, timing, timing_key),
                                  (COMPARISON_TSV, comparison, comparison_key)):
        t = tables[name]
        if derived and t is None:
            missing.append(f"{name} absent, but the harness derives {len(derived)} rows")
        elif derived and not t.unreadable:
            have = {key_of(r) for r in t.rows}
            missing += [f"{name}: no row for {' '.join(k)}" for k in derived if k not in have]
    timed = {norm(b.name) for b in upload.runbook.backends if b.time}
    selection = upload.tables.get(SELECTION_TSV)
    started = {m for m, _ in models}
    for row in selection.rows if selection and "timing_capacity" in selection.columns else []:
        if row.get("timing_capacity") and timed and row.get("model") not in started and \
                row.name("model") not in {norm(m) for m in started}:
            missing.append(f"{where(selection, row)}: {row.get('model')} has timing_capacity "
                           f"{row.get('timing_capacity')} but no time cell or timing row")
    if missing and campaign_finished(upload) is False:
        return Check(TIMING_INCOMPLETE, UNKNOWN, [
            f"{missing[0]}; and {len(missing) - 1} more" if len(missing) > 1 else missing[0],
            f"{EVENTS_JSONL}: the campaign's last run ended without campaign_done (stopped "
            f"before its time stage ended?)"])
    return verdict_of(missing, [], TIMING_INCOMPLETE, unknown)


RULES: tuple[Rule, ...] = (
    Rule(TIMING_INCOMPLETE, "a timed arm or launch the runbook as run asked for is missing",
         (Source(ATTEMPTS_TSV, ("purpose",)),), False, check_timing_complete,
         "a timed backend removed for one model; the A/A control arm deleted"),
    Rule(TIMING_NOT_REDERIVED, "timing.tsv, comparison.tsv or timing_launches.tsv differs "
         "from the harness's own derivation from the time cells",
         (Source(ATTEMPTS_TSV, ("purpose",)),), False, check_timing,
         "timing medians, launch counts and verdicts re-stated; comparison.tsv never read; "
         "timing cells at another capacity"),
)
