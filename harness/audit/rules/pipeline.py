"""The audit replays the pipeline (docs/architecture.md#the-audit-is-the-pipeline-replayed).

The campaign's own steps (harness.pipeline.decisions.model_pipeline, driven by
harness.pipeline.replay.replay) run again with the upload's cells as their source instead of
a launcher: each request is answered by the next standing cell of its (model, backend,
purpose) in attempt order -- abandoned and invalidated cells left out, bug-class runs re-run,
retried failures (infra, unclassified) skipped by the driver's own rule (next_standing) --
and its outcome is derived by the campaign's own analysis (rules.rederive.derive ->
harness.pipeline.analysis.analyse). The selection, timing and comparison rows the steps
build are then compared with the upload's tables, row by row and column by column.

Nothing here decides what a campaign should have done; a stage added to harness/pipeline/
is audited without a line in harness/audit/, a gate that ends pairs too: each step states
the pairs it ends (harness.pipeline.decisions.Stop: stage, why, the selection columns it
leaves empty), and a written row of such a pair is compared with the row the replay built
for it, its Stop named in the message. What a replay finds is reported under the
code of the table it concerns:

- `selection-not-rederived`: capacity_selection.tsv's selection columns; a measure cell
  that answers a request at another capacity than the pipeline asks;
- `held-out-not-rederived`: its validate-step and drop-risk columns; a validate cell at
  another capacity than the step-up asks, or one the pipeline never asks for;
- `timing-not-rederived`: timing.tsv, comparison.tsv, timing_trials.tsv and frontier.tsv
  (the frontier step's rows, keyed by model, backend and capacity); a time cell at another
  capacity than its model's timing capacity, or a time or frontier cell the pipeline never
  asks for;
- `timing-incomplete`: a timing, comparison or frontier row, or a time launch, the pipeline
  makes that the upload lacks.

A request no cell answers is missing evidence: the model's pipeline stops there, its rows
are not compared (they cannot be derived), and the missing cell is named -- INVALID when
the upload says its campaign ended (`campaign_done` last in events.jsonl, or the pair's rows
are written as though it had run), else UNKNOWN.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    decimal_of,
    int_of,
    norm,
    verdict_of,
    where,
)
from harness.audit.rules import heldout, rederive, timing
from harness.audit.rules.apply import blanked, combine
from harness.audit.rules.rederive import (
    abandoned_cells,
    as_run,
    campaign_finished,
    derive,
    invalidated,
    upload_events,
)
from harness.audit.vocab import (
    HELD_OUT_NOT_REDERIVED,
    SELECTION_NOT_REDERIVED,
    TIMING_INCOMPLETE,
    TIMING_NOT_REDERIVED,
)
from harness.grid import capacity as cap
from harness.pipeline.decisions import (
    VALIDATE_COLUMNS,
    Context,
    Outcome,
    Request,
    later_pair_stages,
)
from harness.pipeline.decisions import Stop as Ended
from harness.pipeline.replay import next_standing, replay
from harness.pipeline.stages import STAGE_OF_PURPOSE
from harness.results.events import reruns_on_resume
from harness.results.layout import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    EVENTS_JSONL,
    FRONTIER_TSV,
    SELECTION_TSV,
    TIMING_TRIALS_TSV,
    TIMING_TSV,
    parse_cell_name,
)
from harness.results.rows import Row as ResultRow
from harness.results.tables import cell_text
from harness.vocab import STAGE_ORDER, Event, Purpose

# capacity_selection.tsv columns the validate step and the risk fit write (the pipeline's
# own list, decisions.VALIDATE_COLUMNS), judged under held-out-not-rederived
HELD_OUT_COLUMNS = ("validated", "validate_attempts", *VALIDATE_COLUMNS)

MISSING, CONTRADICTED, UNDECIDED = "missing", "contradicted", "undecided"


@dataclass
class Stop:
    """Why a model's pipeline stopped before its end: the request, and what its cell was."""

    request: Request
    kind: str                        # MISSING | CONTRADICTED | UNDECIDED
    why: str
    launch: int = 0                  # a time request: which launch of its arm (1-based)


@dataclass
class UploadReplay:
    """The pipeline replayed on an upload: the rows it built (keyed by normalised names),
    per model where it stopped, the cells it used and those no request asked for."""

    selection: dict[tuple[str, str], ResultRow] = field(default_factory=dict)
    timing: dict[tuple[str, str], ResultRow] = field(default_factory=dict)
    comparison: dict[tuple[str, str, str], ResultRow] = field(default_factory=dict)
    trials: dict[tuple[str, ...], ResultRow] = field(default_factory=dict)
    frontier: dict[tuple[str, ...], ResultRow] = field(default_factory=dict)
    stops: dict[str, Stop] = field(default_factory=dict)          # by normalised model
    pairs_ended: set[tuple[str, str]] = field(default_factory=set)  # the pipeline's own
    ended: dict[tuple[str, str], Ended] = field(default_factory=dict)  # pairs a step ended
    answered: list[tuple[Request, Outcome]] = field(default_factory=list)
    unused: list[tuple[str, Cell]] = field(default_factory=list)  # (normalised model, cell)
    problem: str | None = None                                     # no replay at all

    def stopped(self, model: str) -> Stop | None:
        return self.stops.get(norm(model))


class CellSource:
    """Answers the pipeline's requests from the upload's cells, as the driver's resume
    answers them from events.jsonl (Campaign.replayed, replay_with_retries)."""

    def __init__(self, upload: Upload) -> None:
        self.upload = upload
        gone, dropped = invalidated(upload), abandoned_cells(upload)
        found: dict[tuple[str, str, str], list[tuple[int, Cell]]] = {}
        for cell in upload.cells.values():
            named = parse_cell_name(cell.name, upload.runbook.campaign)
            if named is None or cell.where is None or cell.problem or cell.name in gone \
                    or cell.path in dropped or named.purpose == Purpose.CANARY:
                continue
            key = (norm(named.model), norm(named.backend), named.purpose)
            found.setdefault(key, []).append((named.attempt, cell))
        self.queues = {k: [c for _, c in sorted(v, key=lambda x: x[0])]
                       for k, v in found.items()}
        self.cursor: dict[tuple[str, str, str], int] = {}
        self.rungs_used: dict[tuple[str, str, str], set[int]] = {}
        self.stop: Stop | None = None
        self.launches: dict[tuple[str, str], int] = {}

    def following(self, key: tuple[str, str, str], capacity: str | None = None
                  ) -> Outcome | None:
        """The key's next cell whose result stands (a bug-class run re-ran on resume); a
        frontier request (`capacity`) takes the next unused cell at its capacity, as the
        driver replays rungs (Campaign.replayed_rung)."""
        cells = self.queues.get(key, [])
        if capacity is not None:
            return self.following_rung(key, cells, capacity)
        while self.cursor.get(key, 0) < len(cells):
            cell = cells[self.cursor.get(key, 0)]
            self.cursor[key] = self.cursor.get(key, 0) + 1
            outcome = self.standing(key, cell)
            if outcome is not None:
                return outcome
        return None

    def standing(self, key: tuple[str, str, str], cell: Cell) -> Outcome | None:
        """The cell's derived outcome when its result stands, None when it re-ran on resume
        (a bug-class run); Undecided when it cannot be derived."""
        got = derive(self.upload, cell)
        if got.problem or got.outcome is None:
            raise Undecided(got.problem or f"{cell.path}: no outcome")
        return None if reruns_on_resume(got.outcome.status, key[2]) else got.outcome

    def following_rung(self, key: tuple[str, str, str], cells: list[Cell], capacity: str
                       ) -> Outcome | None:
        used = self.rungs_used.setdefault(key, set())
        want = cap.format_capacity(capacity)
        for i, cell in enumerate(cells):
            named = parse_cell_name(cell.name, self.upload.runbook.campaign)
            if i in used or named is None or cap.format_capacity(named.capacity) != want:
                continue
            used.add(i)
            outcome = self.standing(key, cell)
            if outcome is not None:
                return outcome
        return None

    def answer(self, req: Request) -> Outcome | None:
        """The outcome the request saw, or None (and `stop` says why)."""
        key = (norm(req.model), norm(req.backend), req.purpose)
        launch = 0
        if req.purpose == Purpose.TIME:
            launch = self.launches[key[:2]] = self.launches.get(key[:2], 0) + 1
        rung = req.capacity if req.purpose == Purpose.FRONTIER else None
        try:
            out, _ = next_standing(lambda: self.following(key, rung),
                                   self.upload.runbook.limits)
        except Undecided as exc:
            self.stop = Stop(req, UNDECIDED, str(exc), launch)
            return None
        if out is None:
            self.stop = Stop(req, MISSING, missing_text(req, launch,
                                                        self.upload.runbook.timing.launches),
                             launch)
            return None
        if cap.format_capacity(out.cell.capacity) != cap.format_capacity(req.capacity):
            self.stop = Stop(req, CONTRADICTED, (
                f"cells/{out.cell.name}: ran at {out.cell.capacity}, but the pipeline asks "
                f"{req.model}/{req.backend} for a {req.purpose} run at {req.capacity} here"
                + (" (its timing capacity)" if req.purpose == Purpose.TIME else "")), launch)
            return None
        return out

    def unused(self) -> list[tuple[str, Cell]]:
        """Cells no request consumed (after the cursor of their key)."""
        return [(key[0], cell) for key, cells in sorted(self.queues.items())
                for i, cell in enumerate(cells)
                if (i not in self.rungs_used.get(key, set()) if key[2] == Purpose.FRONTIER
                    else i >= self.cursor.get(key, 0))]


class Undecided(Exception):
    """A cell the campaign's analysis cannot derive (its rules are then UNKNOWN)."""


def missing_text(req: Request, launch: int, launches: int) -> str:
    what = (f"{req.model}/{req.backend}: launch {launch} of {launches}"
            if req.purpose == Purpose.TIME else f"{req.model}/{req.backend}")
    return (f"{what}: the pipeline asks for a {req.purpose} run at {req.capacity} and the "
            f"upload has no cell for it (the runbook as run asks for it)")


def replay_upload(upload: Upload) -> UploadReplay:
    """The pipeline replayed on the upload's cells, once per upload (cached)."""
    if upload.replay is None:
        upload.replay = _replay(upload)
    return upload.replay


def _replay(upload: Upload) -> UploadReplay:
    rb = upload.runbook
    out = UploadReplay()
    source = CellSource(upload)
    stages, until = campaign_stages(upload)
    ctx = Context(rb, stages, until)
    try:
        for model in rb.models:
            source.stop = None
            done = replay(ctx, source.answer, [model.name])
            out.answered += done.answered
            if done.unanswered and source.stop is not None:
                out.stops[norm(model.name)] = source.stop
    except Exception as exc:  # noqa: BLE001 -- any failure of the steps on this evidence
        out.problem = (f"the pipeline cannot be replayed on this upload's cells "
                       f"({type(exc).__name__}: {str(exc)[:200]})")
        return out
    out.selection = {built_key(PAIR_KEY, row): row for row in ctx.selection.values()}
    out.timing = {built_key(PAIR_KEY, row): row for row in ctx.timing.values()}
    out.comparison = {built_key(PHASE_KEY, r): r for rows in ctx.comparison.values() for r in rows}
    out.trials = {built_key(TRIAL_KEY, r): r for rows in ctx.trials.values() for r in rows}
    out.frontier = {built_key(RUNG_KEY, r): r for rows in ctx.frontier.values() for r in rows}
    out.unused = source.unused()
    out.pairs_ended = {(norm(m), norm(b)) for m, b in ctx.pairs_ended}
    out.ended = {(norm(m), norm(b)): stop for (m, b), stop in ctx.stops.items()}
    return out


def campaign_stages(upload: Upload) -> tuple[tuple[str, ...], str | None]:
    """The --stage/--until of the campaign's last run (events.jsonl run_start), as the
    driver that wrote the tables gave them to the pipeline; none without an event log."""
    events = upload_events(upload)[0] or []
    last = next((e for e in reversed(events) if e.get("ev") == Event.RUN_START), {})
    stages = last.get("stages") if isinstance(last.get("stages"), list) else []
    until = last.get("until") if isinstance(last.get("until"), str) else None
    known = set(STAGE_ORDER)
    return (tuple(s for s in stages if s in known), until if until in known else None)


# ---------------------------------------------------------------- comparing tables

def differs(column: str, written: str, derived: object) -> bool:
    """A written TSV cell against the value the pipeline built, as harness.results.tables
    writes it: names as docs/spec.md#audit-rules compares them, booleans as true/false,
    numbers as numbers (1.1250 is 1.125), any other text exactly."""
    if derived is None:
        return written != ""
    if column in timing.NAMES:
        return norm(written) != norm(str(derived))
    text = cell_text(derived)
    if isinstance(derived, bool):
        return norm(written) != text
    a, b = decimal_of(written), decimal_of(text)
    if a is not None and b is not None:
        return a != b
    return written != text


def column_problems(table: Table, row: Row, built: ResultRow, columns: list[str]) -> list[str]:
    """The columns of one written row that differ from the row the pipeline built."""
    bad = []
    values = built.as_dict()
    for column in columns:
        if column not in table.columns or column not in values or blanked(table, row, column):
            continue
        if differs(column, row.get(column), values[column]):
            bad.append(f"{where(table, row)}: {column} {row.get(column)!r} but the pipeline "
                       f"replayed on the cells gives {cell_text(values[column])!r}")
    return bad


def stop_problems(upload: Upload, rep: UploadReplay, purposes: tuple[str, ...],
                  claimed: set[str]) -> tuple[list[str], list[str]]:
    """The stops of the given purposes: contradicted is bad, undecided unknown, missing bad
    when the campaign says it ended or the upload claims rows of that model (`claimed`)."""
    bad, unknown = [], []
    finished = campaign_finished(upload)
    for model, stop in sorted(rep.stops.items()):
        if stop.request.purpose not in purposes:
            continue
        if stop.kind == CONTRADICTED:
            bad.append(stop.why)
        elif stop.kind == UNDECIDED:
            unknown.append(stop.why)
        elif model in claimed and finished is not False:
            bad.append(stop.why)
        elif model in claimed:
            unknown.append(f"{stop.why}; {EVENTS_JSONL}: the campaign's last run ended "
                           f"without campaign_done (stopped before its stage ended?)")
    return bad, unknown


def unused_problems(rep: UploadReplay, purposes: tuple[str, ...]) -> list[str]:
    """Standing cells of a model whose pipeline ran to its end that no request asked for."""
    bad = []
    for model, cell in rep.unused:
        named = parse_cell_name(cell.name)
        if named is None or named.purpose not in purposes or model in rep.stops:
            continue
        ended = rep.ended.get((model, norm(named.backend)))
        if ended and STAGE_OF_PURPOSE.get(named.purpose) not in later_pair_stages(ended.stage):
            ended = None                     # a run of a stage the Stop did not skip
        bad.append(f"{cell.path}: a {named.purpose} run the pipeline never asks for ("
                   + (ended_text(ended) if ended else f"its {named.purpose} step had ended")
                   + ")")
    return bad


# capacity_selection.tsv columns a model-scope step fills after its pairs ended (the time
# step's timing_capacity, harness.pipeline.decisions.time_step): not derived for a model
# whose pipeline stopped before its time step
LATER_COLUMNS = frozenset({"timing_capacity"})


def later_columns(rep: UploadReplay, key: tuple, table: str) -> frozenset[str]:
    """Columns of a written row the replay did not reach: those the model's later steps fill,
    when its pipeline stopped at a pair's request (measure, validate)."""
    stop = rep.stopped(key[0])
    if table == SELECTION_TSV and stop is not None and stop.request.purpose != Purpose.TIME:
        return LATER_COLUMNS
    return frozenset()


def compared(rep: UploadReplay, key: tuple, table: str) -> bool:
    """Whether the written row with this key can be compared: its model's pipeline ran to
    its end, or (a selection row) the pipeline ended its pair before it stopped."""
    if rep.stopped(key[0]) is None:
        return True
    return table == SELECTION_TSV and key[:2] in rep.pairs_ended


def compare_rows(table: Table | None, built: dict[tuple, ResultRow], key_of, rep: UploadReplay,
                 columns: list[str]) -> tuple[list[str], list[tuple]]:
    """Written rows against built rows with the same key (rows whose model's pipeline
    stopped before they were final are not compared); returns (problems, built keys with no
    written row)."""
    bad, seen = [], set()
    name = table.name if table is not None else ""
    for row in table.rows if table is not None and not table.unreadable else []:
        key = key_of(row)
        if not compared(rep, key, name):
            continue
        if any(blanked(table, row, c) for c in ("model", "backend", "phase")):
            seen |= {k for k in built if k[:2] == key[:2]}
            continue
        if key not in built:
            bad.append(f"{where(table, row)}: a {table.name} row the pipeline does not make "
                       f"({' '.join(key)})")
            continue
        if key in seen:
            bad.append(f"{where(table, row)}: {' '.join(key)} written twice")
            continue
        seen.add(key)
        later = later_columns(rep, key, name)
        problems = column_problems(table, row, built[key], [c for c in columns if c not in later])
        ended = rep.ended.get(key[:2]) if name == SELECTION_TSV else None
        bad += [f"{p} ({ended_text(ended)})" for p in problems] if ended else problems
    return bad, [k for k in built if k not in seen and compared(rep, k, name)]


def ended_text(stop: Ended) -> str:
    """The Stop a pair's step stated, for a message about that pair's row."""
    empty = f"; it leaves {', '.join(stop.empty)} empty" if stop.empty else ""
    return f"the pipeline's {stop.stage} step ended {'/'.join(stop.pair)}: {stop.why}{empty}"


# The key columns of each table the replay builds: one definition for the rows the pipeline
# builds (result rows) and the rows the upload wrote (text), so both sides key alike.
PAIR_KEY = ("model", "backend")
PHASE_KEY = ("model", "backend", "phase")
TRIAL_KEY = ("model", "backend", "launch", "phase", "trial")
RUNG_KEY = ("model", "backend", "capacity")
NUMBER_KEYS = ("launch", "trial")


def key_of(columns: tuple[str, ...], value_of) -> tuple[str, ...]:
    """A row's key: names normalised (norm), numbers as their integer's digits (`01` = `1`;
    a value that is no whole number keys as "None", matching no built row)."""
    out = []
    for column in columns:
        value = value_of(column)
        out.append(str(int_of(str(value))) if column in NUMBER_KEYS
                   else norm(None if value is None else str(value)))
    return tuple(out)


def built_key(columns: tuple[str, ...], row: ResultRow) -> tuple[str, ...]:
    """The key of a row the replayed pipeline built."""
    return key_of(columns, lambda c: getattr(row, c))


def pair_key(row: Row) -> tuple[str, ...]:
    return key_of(PAIR_KEY, row.get)


def phase_key(row: Row) -> tuple[str, ...]:
    return key_of(PHASE_KEY, row.get)


def trial_key(row: Row) -> tuple[str, ...]:
    return key_of(TRIAL_KEY, row.get)


def rung_key(row: Row) -> tuple[str, ...]:
    return key_of(RUNG_KEY, row.get)


def claimed_models(upload: Upload, *tables: str) -> set[str]:
    """Models the upload's tables write rows for."""
    out = set()
    for name in tables:
        table = upload.tables.get(name)
        out |= {r.name("model") for r in (table.rows if table and not table.unreadable else [])}
    return out


def replayed(upload: Upload, code: str) -> UploadReplay | Check:
    """The replay, or the check to return when there is none (no runbook as run: n/a)."""
    if not as_run(upload):
        return Check(code, NOT_APPLICABLE, ["no runbook as run"])
    rep = replay_upload(upload)
    if rep.problem:
        return Check(code, UNKNOWN, [rep.problem])
    return rep


# ---------------------------------------------------------------- the rules

def selection_columns(held_out: bool) -> list[str]:
    from harness.results.rows import SELECTION_COLUMNS
    return [c for c in SELECTION_COLUMNS if c != "campaign"
            and (c in HELD_OUT_COLUMNS) == held_out]


def check_selection_replayed(table: Table, upload: Upload) -> Check:
    """capacity_selection.tsv's selection columns equal the rows the replayed pipeline
    builds from the cells; every pair it selects has its row."""
    whole = rederive.check_selection(table, upload)      # the earlier layout's (n/a here)
    rep = replayed(upload, SELECTION_NOT_REDERIVED)
    if isinstance(rep, Check):
        return combine(SELECTION_NOT_REDERIVED, [whole, rep])
    bad, missing = compare_rows(table, rep.selection, pair_key, rep, selection_columns(False))
    bad += [f"{SELECTION_TSV}: no row for {m}/{b}, which the pipeline selects from its cells"
            for m, b in missing]
    b, unknown = stop_problems(upload, rep, (Purpose.MEASURE,),
                               claimed_models(upload, SELECTION_TSV))
    return combine(SELECTION_NOT_REDERIVED, [
        whole,
        verdict_of(bad + b + unused_problems(rep, (Purpose.MEASURE,)), [],
                   SELECTION_NOT_REDERIVED, unknown)])


def check_held_out_replayed(table: Table, upload: Upload) -> Check:
    """capacity_selection.tsv's validate-step and drop-risk columns equal the replayed
    pipeline's; no validate cell outside the step it walks."""
    rep = replayed(upload, HELD_OUT_NOT_REDERIVED)
    if isinstance(rep, Check):
        return rep
    bad, _ = compare_rows(table, rep.selection, pair_key, rep, selection_columns(True))
    b, unknown = stop_problems(upload, rep, (Purpose.VALIDATE,),
                               claimed_models(upload, SELECTION_TSV))
    return combine(HELD_OUT_NOT_REDERIVED, [
        heldout.check_validate_seeds(table, upload),
        verdict_of(bad + b + unused_problems(rep, (Purpose.VALIDATE,)), [],
                   HELD_OUT_NOT_REDERIVED, unknown)])


def timing_tables_unreadable(upload: Upload) -> list[str]:
    out = []
    for name in TIMED_TABLES:
        t = upload.tables.get(name)
        if t is not None and (t.unreadable or t.malformed):
            out.append(f"{name}: {t.unreadable or t.malformed[0]}")
        if t is not None and t.blanked:                  # rules.apply.blank_unreadable
            out += list(t.blanked.values())
    return out


TIMED_TABLES = (TIMING_TSV, COMPARISON_TSV, TIMING_TRIALS_TSV, FRONTIER_TSV)


def check_timing_replayed(table: Table, upload: Upload) -> Check:
    """timing.tsv, comparison.tsv and timing_trials.tsv equal the rows the replayed time
    step builds from the time cells, and frontier.tsv those the replayed frontier step
    builds from the frontier cells; every time cell answers a request at its model's timing
    capacity, every frontier cell one at a rung the step asks for."""
    rep = replayed(upload, TIMING_NOT_REDERIVED)
    if isinstance(rep, Check):
        return rep
    unknown = timing_tables_unreadable(upload)
    bad: list[str] = []
    from harness.results.rows import (
        COMPARISON_COLUMNS,
        FRONTIER_COLUMNS,
        TIMING_COLUMNS,
        TIMING_TRIAL_COLUMNS,
    )
    for name, built, key_of, columns in (
            (TIMING_TSV, rep.timing, pair_key, TIMING_COLUMNS),
            (COMPARISON_TSV, rep.comparison, phase_key, COMPARISON_COLUMNS),
            (TIMING_TRIALS_TSV, rep.trials, trial_key, TIMING_TRIAL_COLUMNS),
            (FRONTIER_TSV, rep.frontier, rung_key, FRONTIER_COLUMNS)):
        b, _ = compare_rows(upload.tables.get(name), built, key_of, rep,
                            [c for c in columns if c != "campaign"])
        bad += b
    timed = (Purpose.TIME, Purpose.FRONTIER)    # a frontier stop also hides the time step
    contradicted = [s.why for s in rep.stops.values()
                    if s.kind == CONTRADICTED and s.request.purpose in timed]
    undecided = [s.why for s in rep.stops.values()
                 if s.kind == UNDECIDED and s.request.purpose in timed]
    return combine(TIMING_NOT_REDERIVED, [
        timing.check_timing_launches(table, upload),
        verdict_of(bad + contradicted + unused_problems(rep, (Purpose.TIME, Purpose.FRONTIER)),
                   [],
                   TIMING_NOT_REDERIVED, unknown + undecided)])


def check_timing_complete(table: Table, upload: Upload) -> Check:
    """Every timing and comparison row, and every time launch, the replayed pipeline makes
    for a model whose time stage started is in the upload."""
    rep = replayed(upload, TIMING_INCOMPLETE)
    if isinstance(rep, Check):
        return rep
    missing: list[str] = []
    for name, built, row_key in ((TIMING_TSV, rep.timing, pair_key),
                                 (COMPARISON_TSV, rep.comparison, phase_key),
                                 (TIMING_TRIALS_TSV, rep.trials, trial_key),
                                 (FRONTIER_TSV, rep.frontier, rung_key)):
        t = upload.tables.get(name)
        if t is not None and t.unreadable:
            continue
        if name == TIMING_TRIALS_TSV and t is None:
            continue                                 # older harnesses did not write it
        if built and t is None:
            missing.append(f"{name} absent, but the pipeline makes {len(built)} rows")
            continue
        _, absent = compare_rows(t, built, row_key, rep, [])
        missing += [f"{name}: no row for {' '.join(k)}" for k in absent]
    started = {norm(c.name.split("__")[0]) for _, c in rep.unused if "__time__" in c.name}
    started |= {norm(req.model) for req, _ in rep.answered if req.purpose == Purpose.TIME}
    started |= claimed_models(upload, TIMING_TSV, COMPARISON_TSV)
    selection = upload.tables.get(SELECTION_TSV)
    for row in selection.rows if selection and "timing_capacity" in selection.columns else []:
        if row.get("timing_capacity"):
            started.add(row.name("model"))
    stops = {m: s for m, s in rep.stops.items()
             if s.kind == MISSING and s.request.purpose == Purpose.TIME and m in started}
    missing += [s.why for _, s in sorted(stops.items())]
    if missing and campaign_finished(upload) is False:
        return Check(TIMING_INCOMPLETE, UNKNOWN, [
            f"{missing[0]}; and {len(missing) - 1} more" if len(missing) > 1 else missing[0],
            f"{EVENTS_JSONL}: the campaign's last run ended without campaign_done (stopped "
            f"before its time stage ended?)"])
    return verdict_of(missing, [], TIMING_INCOMPLETE, [])


RULES: tuple[Rule, ...] = (
    Rule(SELECTION_NOT_REDERIVED, "a selection row differs from the pipeline replayed on "
         "the upload's cells", (Source(SELECTION_TSV, ("model", "backend",
                                                       "selected_capacity")),), False,
         check_selection_replayed, "the selection not the lowest zero-drop rung (the fifth bug)",
         version_bound=True),
    Rule(HELD_OUT_NOT_REDERIVED, "the validate step (attempts, step-ups, seed, held-out "
         "claim, drop risk) differs from the pipeline replayed on the upload's cells",
         (Source(SELECTION_TSV, ("model", "backend")),), False, check_held_out_replayed,
         "a validate that dropped hidden behind a later pass; a held-out claim on the "
         "measured routing", version_bound=True),
    Rule(TIMING_INCOMPLETE, "a timed arm, launch or row the pipeline makes is missing",
         (Source(ATTEMPTS_TSV, ("purpose",)),), False, check_timing_complete,
         "a timed backend removed for one model; the A/A control arm deleted",
         version_bound=True),
    Rule(TIMING_NOT_REDERIVED, "timing.tsv, comparison.tsv or timing_trials.tsv differs "
         "from the pipeline replayed on the upload's time cells", (Source(ATTEMPTS_TSV, ("purpose",)),), False,
         check_timing_replayed,
         "timing medians, launch counts and verdicts re-stated; timing cells at another "
         "capacity", version_bound=True),
)
