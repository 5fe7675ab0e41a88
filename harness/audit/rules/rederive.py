"""Rules that re-derive rows with the harness's OWN code (issue 23), for an upload that holds
the runbook as run: the telemetry summary (harness.telemetry.summary.summarize with the
backend's expected ranks x layers x iterations), the taxonomy (harness.taxonomy.judge
.judge_run), the validation verdict and the selection (harness.grid.selection), the drop
risk (harness.grid.risk). The upload's runbook is evidence, not configuration: its sha256
must be the one provenance and events recorded before anything is derived from it.

An upload without runbook.yaml (the earlier campaign's layout) has nothing to derive from:
these rules are n/a there, and a note says so; one whose provenance records a runbook sha256
but holds no runbook fails `runbook-altered`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from harness.api.backend import RunRequest
from harness.api.launcher import JobResult
from harness.api.registry import load_backend
from harness.audit import workers
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
    agrees,
    decimal_of,
    int_of,
    norm,
    verdict_of,
    where,
)
from harness.audit.readers import followed, plain_file, safe_real, withheld
from harness.audit.rules.apply import blanked
from harness.audit.rules.present import claims_a_run, has_logs
from harness.audit.vocab import (
    CELL_IDENTITY,
    INCOMPLETE,
    NOT_REDERIVED,
    PROVENANCE_INCOMPLETE,
    RUNBOOK_ALTERED,
    SELECTION_NOT_REDERIVED,
    TIMING_CELL,
)
from harness.errors import EpcapError
from harness.pipeline.analysis import analyse
from harness.pipeline.decisions import Outcome
from harness.results.events import EVENTS_MAX_BYTES, read_events
from harness.results.layout import (
    ATTEMPTS_TSV,
    CAMPAIGN_JSON,
    EVENTS_JSONL,
    HARNESS_TXT,
    PROVENANCE_TXT,
    SELECTION_TSV,
    TIMING_TSV,
    parse_cell_name,
)
from harness.results.provenance import parse_provenance
from harness.results.tables import cell_text
from harness.taxonomy.judge import LOG_SUFFIXES
from harness.taxonomy.signatures import load_table
from harness.telemetry.summary import LogSummary
from harness.timing.verdicts import backend_of, is_control
from harness.vocab import FAILURE_CLASSES, Event, Purpose, Status

STEP_PURPOSES = (Purpose.MEASURE, Purpose.VALIDATE)
LOG_GLOB = "rank*.log"


@dataclass(frozen=True)
class Derived:
    """What the harness's own code says of one cell: its attempt columns and its summary."""

    columns: dict[str, object]
    summary: LogSummary | None
    problem: str | None = None                     # why it could not be derived (UNKNOWN)
    timing: dict | None = None                     # a time run's [EPCAP_TIMING] object
    outcome: Outcome | None = None                 # what the pipeline receives for it


def as_run(upload: Upload) -> bool:
    """True when the upload holds a loaded runbook as run (the re-derivation applies)."""
    return upload.runbook is not None


def expected_shape(upload: Upload, cell: Cell) -> dict[str, int] | None:
    """The ranks x layers x iterations the runbook as run demands of a cell whose logs are
    all rank logs (what harness.pipeline.analysis summarizes), else None."""
    if upload.runbook is None:
        return None
    named = parse_cell_name(cell.name, upload.runbook.campaign)
    logs = sorted(p.name for p in cell.where.glob("*.log")) if cell.where else []
    if named is None or not logs or any(not n.startswith("rank") for n in logs):
        return None
    try:
        req = RunRequest.for_cell(upload.runbook, named, cell.where)
        backend = load_backend(upload.runbook.backend(named.backend))
        return dict(backend.expected_log_shape(req))
    except (EpcapError, KeyError, ValueError, LookupError):
        return None


PARALLEL_BYTES = 64 << 20          # logs this large are re-judged on several cores


def _derive_key(key: str) -> tuple[str, Derived]:
    upload = workers.forked()
    return key, _derive(upload, upload.cells[key])


def start_deriving(upload: Upload) -> None:
    """Start deriving every cell on the audit's forked workers (audit.workers), when the logs
    are large (the taxonomy's line scan is the audit's main cost): the derivations run while
    the rules before not-rederived do; derive_all collects them."""
    if upload.deriving is not None:
        return
    todo = [k for k, c in sorted(upload.cells.items()) if c.where is not None
            and not c.problem and k not in upload.derived and parse_cell_name(c.name)]
    size = sum(p.stat().st_size for k in todo for p in upload.cells[k].where.glob(LOG_GLOB)
               if plain_file(upload.folder, p))
    if size < PARALLEL_BYTES or not workers.start(upload, len(todo)):
        return
    load_table()                 # the signature table, read once here, inherited by workers
    upload.deriving = [workers.submit(upload, _derive_key, k) for k in todo]


def derive_all(upload: Upload) -> None:
    """Every cell derived up front: the workers' results (start_deriving), or nothing here
    when the logs are small (each cell is then derived where a rule asks)."""
    start_deriving(upload)
    for future in upload.deriving or ():
        key, got = future.result()
        upload.derived[key] = got
    upload.deriving = []


ABANDONED = "abandoned"           # cell.json status of a run whose driver stopped (campaign.store)


def abandoned_cells(upload: Upload) -> set[str]:
    """Cells a resumed campaign abandoned (the driver stopped mid-run; the request ran again
    as a new attempt): a `cell_abandoned` event names it, no `cell_finish` does, and its
    cell.json says `abandoned` without a launcher state. Also the cells the harness failed
    (class `harness`, docs/taxonomy.md#harness-failures): a `cell_finish` of status `harness`
    names it, its cell.json says `harness` and its harness.txt holds what broke. Such a cell
    is no run: no row, no derivation."""
    if upload.abandoned is None:
        upload.abandoned = read_abandoned(upload)
    return upload.abandoned


def upload_events(upload: Upload) -> tuple[list[dict] | None, str | None]:
    """The upload's events.jsonl through the harness's own reader (results.events.read_events:
    bounded, a repeated cell_finish dropped), read once: (None, None) without one; (None, why)
    when it cannot be read (a rule that needs it is then UNKNOWN, never judged on a part)."""
    if upload.events is None:
        folder = upload.folder
        if folder is None or not (folder / EVENTS_JSONL).exists():
            upload.events = (None, None)
        else:
            real, problem = safe_real(folder, folder / EVENTS_JSONL, EVENTS_MAX_BYTES)
            try:
                upload.events = ((None, f"{EVENTS_JSONL}: {problem}") if real is None
                                 else (read_events(real), None))
            except EpcapError as exc:
                upload.events = (None, f"{EVENTS_JSONL}: {str(exc)[:200]}")
    return upload.events


def invalidated(upload: Upload) -> set[str]:
    """Cells a `cells_invalidated` event took out of the results (they no longer count)."""
    events = upload_events(upload)[0] or []
    return {str(c) for e in events if e.get("ev") == Event.CELLS_INVALIDATED
            for c in e.get("cells") or []}


def campaign_finished(upload: Upload) -> bool | None:
    """Whether the campaign's last run ended with `campaign_done` (events.jsonl), None when
    the upload holds no event log (or it cannot be read)."""
    events, _ = upload_events(upload)
    if events is None:
        return None
    marks = (Event.RUN_START, Event.CAMPAIGN_DONE, Event.CAMPAIGN_STOPPED)
    last = next((e["ev"] for e in reversed(events) if e.get("ev") in marks), None)
    return last == Event.CAMPAIGN_DONE


def read_abandoned(upload: Upload) -> set[str]:
    """abandoned_cells, read once per upload."""
    events = upload_events(upload)[0] or []
    gone = {str(e.get("cell")) for e in events if e.get("ev") == Event.CELL_ABANDONED}
    finished = {str(e.get("cell")) for e in events if e.get("ev") == Event.CELL_FINISH}
    harness = {str(e.get("cell")) for e in events if e.get("ev") == Event.CELL_FINISH
               and e.get("status") == Status.HARNESS}
    out = set()
    for cell in upload.cells.values():
        data = cell.cell_json or {}
        launcher = data.get("launcher")
        if cell.name in gone - finished and data.get("status") == ABANDONED and not (
                isinstance(launcher, dict) and launcher.get("state")):
            out.add(cell.path)
        elif cell.name in harness and data.get("status") == Status.HARNESS \
                and cell.where is not None and (cell.where / HARNESS_TXT).is_file():
            out.add(cell.path)
    return out


def derive(upload: Upload, cell: Cell) -> Derived:
    """The attempt columns of one cell, recomputed as harness.pipeline.analysis does."""
    if cell.path not in upload.derived:
        upload.derived[cell.path] = _derive(upload, cell)
    return upload.derived[cell.path]


def _derive(upload: Upload, cell: Cell) -> Derived:
    """The cell's outcome by the campaign's own code (harness.pipeline.analysis.analyse, the
    function `epcap run` calls when the run ends), from its logs and cell.json's launcher
    record; `problem` says why it cannot be derived (the rules are then UNKNOWN)."""
    rb = upload.runbook
    named = parse_cell_name(cell.name, getattr(rb, "campaign", ""))
    if named is None or cell.where is None:
        return Derived({}, None, f"{cell.path}: not a cell name the harness writes")
    try:
        req = RunRequest.for_cell(rb, named, cell.where)
        backend = load_backend(rb.backend(named.backend))
    except (EpcapError, KeyError, ValueError, LookupError) as exc:
        return Derived({}, None, f"{cell.path}: the runbook as run has no such cell "
                                 f"({str(exc)[:120]})")
    if not has_logs(cell.where) and claims_a_run(upload, cell.path):
        return Derived({}, None, f"{cell.path}: no log, yet its cell.json or row states what "
                                 f"only a log gives (missing evidence)")
    if cell.logs_problem:              # an LFS pointer, over the cap, a link out of the upload
        return Derived({}, None, f"{cell.path}: {cell.logs_problem}")
    linked = sorted(p.name for p in cell.where.iterdir() if p.suffix in LOG_SUFFIXES
                    and p.is_symlink() and followed(upload.folder, p) is None)
    if linked:
        return Derived({}, None, f"{cell.path}: log {linked[0]} is a link (not followed)")
    logs = sorted(p for p in cell.where.glob(LOG_GLOB) if p.is_file())
    launcher = (cell.cell_json or {}).get("launcher")
    if not isinstance(launcher, dict) or "state" not in launcher:
        return Derived({}, None, f"{cell.path}/cell.json: field launcher.state missing")
    exit_code = launcher.get("exit_code")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        return Derived({}, None, f"{cell.path}/cell.json: field launcher.exit_code not an int")
    try:
        ready = cell.logs.summary if cell.logs is not None else None
        out = analyse(req, backend, JobResult(str(launcher["state"]), exit_code, logs),
                      cell.where, "", summary=ready)
    except (EpcapError, OSError, UnicodeDecodeError) as exc:
        return Derived({}, None, f"{cell.path}: logs unreadable ({str(exc)[:120]})")
    summary, measured = out.summary, out.row.peak_actual_valid_recv is not None
    cols: dict[str, object] = {
        **{c: getattr(out.row, c) for c in DERIVED_COLUMNS},
        "required_capacity": (Fraction(summary.peak_actual_valid_recv, summary.expected_recv)
                              if measured and summary.expected_recv else None),
        "exit_code": exit_code}
    cols["status"] = str(out.status)
    return Derived(cols, summary, timing=out.timing, outcome=out)


# the attempts columns analyse() fills from the evidence (the rest: times, cell_dir, failure)
DERIVED_COLUMNS = ("campaign", "model", "backend", "purpose", "attempt", "capacity",
                   "capacity_tag", "uniform_tokens", "budget_tokens", "status", "rows",
                   "malformed_rows", "saturated_rows", "peak_actual_valid_recv",
                   "backend_impl")


def differs(column: str, written: str, derived: object) -> bool:
    """A written TSV cell against the value the harness's code derives."""
    if derived is None:
        return written != ""
    if isinstance(derived, Fraction):
        return not agrees(written, derived)
    if isinstance(derived, bool):
        return norm(written) != str(derived).lower()
    if isinstance(derived, int):
        return int_of(written) != derived
    if column == "capacity":
        a, b = decimal_of(written), decimal_of(str(derived))
        return a is None or a != b
    return written != str(derived)


# ---------------------------------------------------------------- runbook-altered

def events_sha(upload: Upload) -> tuple[list[str] | None, str | None]:
    """The runbook hashes events.jsonl recorded, in order: campaign_start's, then each
    runbook_revised's (value, problem); None when there is no event log."""
    events, problem = upload_events(upload)
    if events is None:
        return None, problem
    return [e["runbook_sha256"] for e in events
            if e.get("ev") in (Event.CAMPAIGN_START, Event.RUNBOOK_REVISED)
            and isinstance(e.get("runbook_sha256"), str)], None


def provenance_chain(upload: Upload) -> list[str]:
    """runbook.sha256 of the campaign's provenance, then each re-run's resume.<n>.runbook_sha256
    in order (a revised runbook is recorded there as well as in events)."""
    prov = upload.provenance or {}
    chain = [prov["runbook.sha256"]] if prov.get("runbook.sha256") else []
    n = 1
    while f"resume.{n}.command_line" in prov:
        if prov.get(f"resume.{n}.runbook_sha256"):
            chain.append(prov[f"resume.{n}.runbook_sha256"])
        n += 1
    return chain


def harness_written(upload: Upload) -> bool:
    """The upload says the harness wrote it: its runbook loads, or events/campaign.json exist."""
    folder = upload.folder or Path(".")
    return as_run(upload) or any(
        (folder / name).is_file() for name in (EVENTS_JSONL, CAMPAIGN_JSON))


def check_runbook(upload: Upload) -> Check:
    """The runbook as run hashes to the last runbook provenance and events recorded (the
    campaign's, or a re-run's after an edit), the two records agree, and every cell ran under
    one of the recorded runbooks."""
    chain = provenance_chain(upload)
    recorded = chain[-1] if chain else None
    if upload.runbook_sha256 is None and withheld(upload.runbook_problem):
        return Check(RUNBOOK_ALTERED, UNKNOWN, [upload.runbook_problem])
    if upload.runbook_sha256 is None:
        if recorded or harness_written(upload):
            return Check(RUNBOOK_ALTERED, "fail", [
                f"provenance.txt: runbook.sha256 {(recorded or '')[:12]!r} but "
                f"{upload.runbook_problem or 'no runbook.yaml'}"])
        return Check(RUNBOOK_ALTERED, NOT_APPLICABLE, ["no runbook as run (earlier layout)"])
    if not recorded and not harness_written(upload):
        return Check(RUNBOOK_ALTERED, NOT_APPLICABLE, ["no runbook as run (earlier layout)"])
    bad, unknown = [], []
    hidden = upload.provenance is None and withheld(upload.provenance_problem)
    if hidden:                 # provenance.txt withheld: what it records is not known
        unknown.append(f"provenance.txt: {upload.provenance_problem}")
    elif not recorded:
        bad.append("provenance.txt: field runbook.sha256 missing")
    elif recorded != upload.runbook_sha256:
        bad.append(f"runbook.yaml sha256 {upload.runbook_sha256[:12]} but provenance.txt "
                   f"records {recorded[:12]} last")
    events, problem = events_sha(upload)
    if problem:
        unknown.append(problem)
    elif events:
        if events[-1] != upload.runbook_sha256:
            bad.append(f"runbook.yaml sha256 {upload.runbook_sha256[:12]} but {EVENTS_JSONL} "
                       f"records {events[-1][:12]} last")
        if not hidden and list(dict.fromkeys(events)) != list(dict.fromkeys(chain)):
            bad.append(f"{EVENTS_JSONL} and provenance.txt record different runbooks "
                       f"({len(events)} vs {len(chain)})")
    known = set(chain) | set(events or [])
    for _key, cell in sorted(upload.cells.items()):
        own = (cell.provenance or {}).get("runbook.sha256")
        if own and own not in known and not (hidden and not events):
            bad.append(f"{cell.provenance_at}: runbook.sha256 {own[:12]} is another runbook's "
                       f"(a cell spliced from another run)")
    if upload.runbook_problem:
        unknown.append(upload.runbook_problem)
    if upload.facts_problem:         # what the harness recorded of the run cannot be read
        unknown.append(upload.facts_problem)
    return verdict_of(bad, [], RUNBOOK_ALTERED, unknown)


# docs/spec.md#provenance: the keys every harness-written provenance.txt carries
REQUIRED_PROVENANCE = ("harness.version", "harness.commit", "command_line", "utc_start",
                       "hostnames", "gpu.model", "gpu.count", "gpu.driver", "torch", "cuda",
                       "nccl", "nvshmem", "python", "runbook.sha256")


def provenance_pairs(upload: Upload) -> tuple[list[tuple[str, str]] | None, str | None]:
    """The upload's own provenance.txt as (key, value) pairs in file order."""
    from harness.audit.readers import SMALL_CAP_BYTES, safe_read
    folder = upload.folder or Path(".")
    data, problem = safe_read(folder, folder / PROVENANCE_TXT, SMALL_CAP_BYTES)
    if data is None:
        return None, problem
    try:
        return parse_provenance(data.decode("utf-8-sig")), None
    except UnicodeDecodeError:
        return None, "provenance.txt is not UTF-8"


def check_provenance_keys(upload: Upload) -> Check:
    """The docs/spec.md#provenance keys, and one `repo.<name>` line, spelt exactly, per repository the
    runbook as run names."""
    if not as_run(upload):
        return Check(PROVENANCE_INCOMPLETE, NOT_APPLICABLE, ["no runbook as run"])
    pairs, problem = provenance_pairs(upload)
    if pairs is None:
        return Check(PROVENANCE_INCOMPLETE, "unknown", [f"provenance.txt: {problem}"])
    keys = [k for k, _ in pairs]
    bad = [f"provenance.txt: field {k} missing (docs/spec.md#provenance)"
           for k in REQUIRED_PROVENANCE if k not in keys]
    bad += [f"provenance.txt: field {k} written {keys.count(k)} times"
            for k in sorted(set(keys)) if keys.count(k) > 1]
    for name in sorted(upload.runbook.repositories):
        if f"repo.{name}" not in keys:
            bad.append(f"provenance.txt: field repo.{name} missing (the runbook names "
                       f"repository {name!r})")
    return verdict_of(bad, [], PROVENANCE_INCOMPLETE, [])


# ---------------------------------------------------------------- cell-identity

def argv_value(argv: list, flag: str) -> str | None:
    """The value after `flag` in a recorded argv, else None."""
    for i, item in enumerate(argv[:-1]):
        if item == flag:
            return str(argv[i + 1])
    return None


def identity_problems(table: Table, row: Row, cell: Cell, campaign: str,
                      strict: bool = False) -> list[str]:
    """A row's cell is the cell its name, cell.json, directory and argv all say. A key the
    cell.json does not state is no claim, except where the harness always writes it
    (`strict`: an upload with its runbook as run)."""
    at = where(table, row)
    named = parse_cell_name(cell.name, campaign)
    if named is None:
        return [f"{at}: cell_dir {cell.name!r} is not a name the harness writes"]
    bad = []
    if strict and row.get("campaign") != campaign:
        bad.append(f"{at}: campaign {row.get('campaign')!r} but the runbook as run is "
                   f"{campaign!r}")
    for col, value in (("model", named.model), ("backend", named.backend),
                       ("purpose", named.purpose), ("attempt", str(named.attempt))):
        if norm(row.get(col)) != norm(value) and not blanked(table, row, col):
            bad.append(f"{at}: {col} {row.get(col)!r} but its cell is {cell.name}")
    if decimal_of(row.get("capacity")) != decimal_of(named.capacity):
        bad.append(f"{at}: capacity {row.get('capacity')!r} but its cell is {cell.name}")
    if cell.cell_json is None:
        return bad                   # the caller says UNKNOWN, naming the file
    data = cell.cell_json
    stated = data.get("cell") if isinstance(data.get("cell"), dict) else {}
    if ("name" in data or strict) and data.get("name") != cell.name:
        bad.append(f"{cell.path}/cell.json: name {data.get('name')!r} is not its directory")
    for col in ("campaign", "model", "backend", "purpose", "attempt"):
        if col not in stated and not strict:
            continue
        if str(stated.get(col)) != str(getattr(named, col) if col != "campaign" else campaign):
            bad.append(f"{cell.path}/cell.json: cell.{col} {stated.get(col)!r} is not "
                       f"{cell.name}'s")
    if ("capacity" in stated or strict) and \
            decimal_of(str(stated.get("capacity"))) != decimal_of(named.capacity):
        bad.append(f"{cell.path}/cell.json: cell.capacity {stated.get('capacity')!r}")
    argv = data.get("argv") if isinstance(data.get("argv"), list) else []
    for flag, value in (("--model", named.model), ("--capacity", named.capacity)):
        got = argv_value(argv, flag)
        if got is not None and (got != value if flag == "--model"
                                else decimal_of(got) != decimal_of(value)):
            bad.append(f"{cell.path}/cell.json: argv {flag} {got!r} is not {cell.name}'s")
    return bad


def names_problems(upload: Upload) -> list[str]:
    """Every model and backend a row names is the runbook's (after NFKC and case folding,
    docs/spec.md#audit-rules: an invisible character still splits a name)."""
    rb = upload.runbook
    models = {norm(m.name) for m in rb.models}
    backends = {norm(b.name) for b in rb.backends}
    bad = []
    for table in upload.tables.values():
        for row in table.rows:
            if "model" in row.values and norm(row.values["model"]) not in models:
                bad.append(f"{where(table, row)}: model {row.values['model']!r} is in no "
                           f"runbook entry")
            arm = row.values.get("backend")
            if arm is not None and (norm(backend_of(arm)) not in backends
                                    or (is_control(arm) and not rb.timing.control)):
                bad.append(f"{where(table, row)}: backend {row.values['backend']!r} is in no "
                           f"runbook entry")
    return bad


def check_identity(table: Table, upload: Upload) -> Check:
    """Identity and completeness: a row's cell is the one its name, cell.json and argv say;
    one cell backs one row (any layout); with the runbook as run, every name is the
    runbook's and every finished cell has its row."""
    rb = upload.runbook
    bad, unknown = (names_problems(upload) if as_run(upload) else []), []
    seen: dict[str, int] = {}
    for row in table.rows:
        cell = upload.cell_for(row)
        if cell is None:
            continue
        if cell.path in seen:
            bad.append(f"{where(table, row)}: cell {cell.path} already backs line "
                       f"{seen[cell.path]}")
        seen.setdefault(cell.path, row.line)
        if cell.cell_json is None:
            unknown.append(f"{cell.path}/cell.json: {cell.cell_json_problem or 'missing'}")
        bad += identity_problems(table, row, cell, rb.campaign if rb else row.get("campaign"),
                                 as_run(upload))
    for key, cell in sorted(upload.cells.items()) if as_run(upload) else []:
        named = parse_cell_name(cell.name)
        if key not in seen and named is not None and cell.cell_json is not None:
            probe = Row(0, {"model": named.model, "backend": named.backend,
                            "purpose": named.purpose, "attempt": str(named.attempt),
                            "capacity": named.capacity, "campaign": rb.campaign})
            bad += [w.replace(f"{table.name}:0: ", "") for w in
                    identity_problems(table, probe, cell, rb.campaign, True)]
        if key in seen or cell.problem or not key.startswith("cells/") or (
                named is not None and named.purpose == Purpose.CANARY):
            continue                 # the driver writes no attempts row for a canary
        launcher = (cell.cell_json or {}).get("launcher")
        if cell.cell_json is None:
            unknown.append(f"{key}/cell.json: {cell.cell_json_problem or 'missing'}")
        elif isinstance(launcher, dict) and launcher.get("state"):
            bad.append(f"{key}: a finished attempt ({launcher.get('state')}) with no "
                       f"{ATTEMPTS_TSV} row")
    return verdict_of(bad, [], CELL_IDENTITY, unknown)


def check_timing_cells(table: Table, upload: Upload) -> Check:
    """A timing row's cell is a `time` cell of its model and backend at its timing capacity;
    one row per timed arm (any layout). Without the runbook as run, a timed arm with time
    attempts has its row; with it, which rows the time step writes is the replay's
    (timing-incomplete, timing-not-rederived)."""
    bad, seen = [], {}
    for row in table.rows:
        pair = (norm(row.get("model")), norm(row.get("backend")))
        if pair in seen:
            bad.append(f"{where(table, row)}: {'/'.join(pair)} already timed at line "
                       f"{seen[pair]}")
        seen.setdefault(pair, row.line)
        if not as_run(upload):
            continue
        cell = upload.cell_for(row)
        if cell is None:
            continue
        named = parse_cell_name(cell.name)
        if named is None or named.purpose != Purpose.TIME \
                or norm(named.model) != norm(row.get("model")) \
                or norm(named.backend) != norm(row.get("backend")) \
                or decimal_of(named.capacity) != decimal_of(row.get("timing_capacity")):
            bad.append(f"{where(table, row)}: cell_dir {cell.name} is not a time cell of "
                       f"{row.get('model')}/{row.get('backend')} at "
                       f"{row.get('timing_capacity')}")
    attempts = upload.tables.get(ATTEMPTS_TSV)
    timed = {(norm(r.get("model")), norm(r.get("backend")))
             for r in (attempts.rows if attempts and not as_run(upload) else [])
             if r.get("purpose") == Purpose.TIME}
    bad += [f"{table.name}: no row for the timed arm {m}/{b} ({ATTEMPTS_TSV} has its time "
            f"attempts)" for m, b in sorted(timed - set(seen))]
    return verdict_of(bad, [], TIMING_CELL, [])


# ---------------------------------------------------------------- not-rederived, incomplete

def check_rederived(table: Table, upload: Upload) -> Check:
    """Every evidence column of an attempts row equals what the harness derives from its cell."""
    if not as_run(upload):
        return Check(NOT_REDERIVED, NOT_APPLICABLE, ["no runbook as run"])
    from harness.audit.evidence import rederived_columns
    columns = rederived_columns(ATTEMPTS_TSV)
    derive_all(upload)
    bad, unknown = [], []            # unreadable values: rules.apply.blank_unreadable
    for row in table.rows:
        cell = upload.cell_for(row)
        if cell is None or cell.where is None:
            continue
        got = derive(upload, cell)
        if got.problem:
            unknown.append(got.problem)
            continue
        for column in columns:
            if column not in table.columns or column not in got.columns:
                continue
            written = row.get(column)
            if blanked(table, row, column):
                continue                              # unreadable: the rule is UNKNOWN
            if differs(column, written, got.columns[column]):
                shown = got.columns[column]
                shown = (format(float(shown), ".6g") if isinstance(shown, Fraction)
                         else cell_text(shown))
                bad.append(f"{where(table, row)}: {column} {written!r} but the harness "
                           f"derives {shown!r} from {cell.path}")
    gone = abandoned_cells(upload)
    for _key, cell in sorted(upload.cells.items()):
        if cell.where is None or cell.problem or parse_cell_name(cell.name) is None \
                or cell.path in gone:
            continue
        got = derive(upload, cell)
        if got.problem:
            unknown.append(got.problem)
            continue
        bad += cell_json_problems(cell, got)
    return verdict_of(bad, [], NOT_REDERIVED, unknown)


SUMMARY_KEYS = ("rows", "malformed_rows", "saturated_rows", "peak_actual_valid_recv",
                "expected_recv", "budget", "iterations", "layers", "ranks", "missing_rows",
                "duplicate_rows", "complete")


def cell_json_problems(cell: Cell, got: Derived) -> list[str]:
    """cell.json's status and summary (every cell, canaries too) against the derivation."""
    data = cell.cell_json or {}
    bad = []
    stated = data.get("status")
    if str(stated) != got.columns.get("status"):
        bad.append(f"{cell.path}/cell.json: status {stated!r} but the harness derives "
                   f"{got.columns.get('status')!r}")
    summary = data.get("summary")
    if got.summary is None:
        if summary not in (None, {}):
            bad.append(f"{cell.path}/cell.json: a summary, but the cell has no logs")
        return bad
    if not isinstance(summary, dict):
        return bad + [f"{cell.path}/cell.json: field summary missing"]
    for key in SUMMARY_KEYS:
        if summary.get(key) != getattr(got.summary, key):
            bad.append(f"{cell.path}/cell.json: summary.{key} {summary.get(key)!r} but the "
                       f"harness derives {getattr(got.summary, key)!r}")
    return bad


def check_incomplete(table: Table, upload: Upload) -> Check:
    """A measure or validate counted as data has every rank x layer x iteration row."""
    if not as_run(upload):
        return Check(INCOMPLETE, NOT_APPLICABLE, ["no runbook as run"])
    bad, unknown = [], []
    for row in table.rows:
        if row.get("purpose") not in STEP_PURPOSES or row.get("status") in FAILURE_CLASSES:
            continue
        cell = upload.cell_for(row)
        if cell is None or cell.where is None:
            continue
        got = derive(upload, cell)
        if got.problem:
            unknown.append(got.problem)
        elif got.summary is None or not got.summary.complete or got.summary.malformed_rows:
            s = got.summary
            bad.append(f"{where(table, row)}: {cell.path} telemetry incomplete "
                       f"({s.missing_rows if s else 'all'} rows missing, "
                       f"{s.malformed_rows if s else 0} malformed, of ranks x layers x "
                       f"iterations {s.expected_ranks if s else '?'} x "
                       f"{s.expected_layers if s else '?'} x "
                       f"{s.expected_iterations if s else '?'})")
    return verdict_of(bad, [], INCOMPLETE, unknown)


# ---------------------------------------------------------------- selection-not-rederived

def pair_rows(upload: Upload, model: str, backend: str, purpose: str) -> list[Row]:
    """Attempt rows of one (model, backend, purpose), in file order."""
    table = upload.tables.get(ATTEMPTS_TSV)
    return [r for r in (table.rows if table else [])
            if r.get("model") == model and r.get("backend") == backend
            and r.get("purpose") == purpose]


def timed(upload: Upload, row: Row) -> bool:
    """The model has time attempts: its time step started (and set timing_capacity); a
    campaign stopped before it (--until validate) leaves the column empty."""
    table = upload.tables.get(ATTEMPTS_TSV)
    return any(r.name("model") == row.name("model") and r.get("purpose") == Purpose.TIME
               for r in (table.rows if table else []))


def not_selected(upload: Upload, row: Row) -> bool:
    """The pair's last measure did not end ok (out of memory, a failure, still a lower
    bound): the harness writes an empty selection row (SelectionRow.unselected)."""
    measures = pair_rows(upload, row.get("model"), row.get("backend"), Purpose.MEASURE)
    measures.sort(key=lambda r: int_of(r.get("attempt")) or 0)
    return bool(measures) and measures[-1].get("status") != Status.OK


# empty when the harness's risk fit has too few peaks (grid.heldout.risk_columns); whether
# they should be is re-derived by rules.heldout
MAY_BE_EMPTY = ("predicted_drop_risk", "predicted_drop_risk_hi")


def check_selection(table: Table, upload: Upload) -> Check:
    """Without the runbook as run (the earlier layout): one selection row per pair, no
    evidence column empty or unreadable. With it, n/a: the replayed pipeline (rules.pipeline)
    builds every pair's row, a pair a step ended with the columns its Stop leaves empty, and
    each written row is compared with it column by column (a row twice, a row it does not
    make, a column empty that it fills); no rule here says which columns must be filled."""
    if as_run(upload):
        return Check(SELECTION_NOT_REDERIVED, NOT_APPLICABLE, [
            "judged by the replayed pipeline (the runbook as run is in the upload)"])
    from harness.audit.evidence import evidence_columns
    needed = [c for c in evidence_columns(SELECTION_TSV) if c in table.columns
              and c not in MAY_BE_EMPTY]
    bad, unknown = [], []
    seen: dict[tuple[str, str], int] = {}
    for row in table.rows:
        pair = (norm(row.get("model")), norm(row.get("backend")))
        if pair in seen:
            bad.append(f"{where(table, row)}: {'/'.join(pair)} already selected at line "
                       f"{seen[pair]}")
        seen.setdefault(pair, row.line)
        bad += [f"{where(table, row)}: field {c} empty" for c in needed
                if not row.get(c) and not blanked(table, row, c)
                and not not_selected(upload, row)
                and not (c == "timing_capacity" and not timed(upload, row))]
    return verdict_of(bad, [], SELECTION_NOT_REDERIVED, unknown)


RULES: tuple[Rule, ...] = (
    Rule(CELL_IDENTITY, "a row's cell is another's, or a finished cell has no row",
         (Source(ATTEMPTS_TSV, ("model", "backend", "purpose", "attempt", "capacity",
                                "cell_dir")),), False, check_identity,
         "rows naming another model's cell; a phantom model; a crash with no row"),
    Rule(TIMING_CELL, "a timing row's cell is not its time cell at its timing capacity",
         (Source(TIMING_TSV, ("model", "backend", "timing_capacity", "cell_dir")),), False,
         check_timing_cells, "timing rows whose cells ran at another capacity"),
    Rule(NOT_REDERIVED, "an attempts column differs from the harness's own derivation",
         (Source(ATTEMPTS_TSV, ("cell_dir", "status")),), False, check_rederived,
         "numbers re-stated from edited logs; an OOM-less does_not_fit", version_bound=True),
    Rule(INCOMPLETE, "a measure or validate lacks ranks, layers or iterations",
         (Source(ATTEMPTS_TSV, ("purpose", "status", "cell_dir")),), False, check_incomplete,
         "a validate whose telemetry lacks iterations or a rank", version_bound=True),
)


def timing_objects(upload: Upload) -> Iterator[tuple[str, Cell, dict]]:
    """(key, cell, its [EPCAP_TIMING] object) of every time cell that has one, in key order:
    the objects the timing rules aggregate (a cell without one is the timing rules' to judge)."""
    for key, cell in sorted(upload.cells.items()):
        named = parse_cell_name(cell.name, upload.runbook.campaign)
        if cell.problem or named is None or named.purpose != Purpose.TIME:
            continue
        obj = derive(upload, cell).timing
        if isinstance(obj, dict):
            yield key, cell, obj
