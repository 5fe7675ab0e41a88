"""Audit rules (SPEC section 6) as data over an in-memory upload: pure, no I/O.

Each `Rule` names the tables and columns it reads (its `sources`, tried in order) and a check
that turns one usable table into a `Check`. The engine (`harness.audit`) loads uploads from
untrusted files, applies every rule, and folds the checks into a verdict:
INVALID beats UNKNOWN beats VALID.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Protocol

from harness.capacity import is_executable
from harness.errors import EpcapError
from harness.provenance import parse_repo_line
from harness.results import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV

NATURAL = "natural-selection"
NO_MEASURE_VALIDATE = "no-measure-validate"
FABRICATED = "fabricated-requirement"
UNEXECUTABLE = "unexecutable-capacity"
MIXED_TIMING = "mixed-timing-capacity"
MISSING_PROVENANCE = "missing-provenance"
PREDATES = "predates-fix"            # emitted as predates-fix:<id>
REASON_CODES = (NATURAL, NO_MEASURE_VALIDATE, FABRICATED, UNEXECUTABLE, MIXED_TIMING,
                PREDATES + ":<id>", MISSING_PROVENANCE)

PASS, FAIL, UNKNOWN, NOT_APPLICABLE = "pass", "fail", "unknown", "n/a"
IGNORED_TAG = re.compile(r"__cap1p75(?:__|$)")   # abandoned descent capacity (SPEC section 6)
IGNORED_CAPACITY_TAG = "cap1p75"
CELL_TAG = re.compile(r"__cap(\d+)p(\d+)(?:__|$)")
DEFAULT_PAD_MULTIPLE = 128
ECHO = "echo"


@dataclass
class Row:
    """One TSV data row with its 1-based line number."""

    line: int
    values: dict[str, str]

    def get(self, column: str) -> str:
        """Stripped value, '' when absent."""
        return (self.values.get(column) or "").strip()

    def lower(self, column: str) -> str:
        """Value for case-insensitive comparison (backend, purpose, status)."""
        return self.get(column).lower()


@dataclass
class Table:
    """A TSV of an upload: columns, good rows, malformed lines, or why it is unreadable."""

    name: str
    columns: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)   # "file:line: why"
    unreadable: str | None = None


@dataclass
class Cell:
    """A directory under cells/: its provenance (None if absent) and cell.json facts."""

    name: str
    provenance: dict[str, str] | None = None
    cell_json: dict | None = None
    problem: str | None = None                           # e.g. a link not followed


@dataclass
class Upload:
    """What the rules see of one upload (already filtered of ignored cells)."""

    path: str
    tables: dict[str, Table] = field(default_factory=dict)
    provenance: dict[str, str] | None = None
    provenance_problem: str | None = None
    cells: dict[str, Cell] = field(default_factory=dict)
    ignored_cells: list[str] = field(default_factory=list)
    pad_multiple: int = DEFAULT_PAD_MULTIPLE


@dataclass
class Check:
    """Outcome of one rule on one upload."""

    code: str
    state: str                                           # pass | fail | unknown | n/a
    why: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Source:
    """A table a rule can read, and the columns it needs there."""

    table: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    """A data rule: sources tried in order; `required` = no usable table means UNKNOWN."""

    code: str
    summary: str
    sources: tuple[Source, ...]
    required: bool
    check: Callable[[Table, Upload], Check]


# ---------------------------------------------------------------- helpers

def is_echo(row: Row) -> bool:
    """Backend names compare case-insensitively (ECHO = echo)."""
    return row.lower("backend") == ECHO


def decimal_of(text: str) -> Decimal | None:
    """A finite decimal, or None for empty or non-numeric text."""
    try:
        value = Decimal(text)
    except (InvalidOperation, ValueError):
        return None
    return value if value.is_finite() else None


def where(table: Table, row: Row) -> str:
    """`file:line` of a row, for messages."""
    return f"{table.name}:{row.line}"


def first(items: list[str], limit: int = 3) -> str:
    """At most `limit` items joined, with a count of the rest."""
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def verdict_of(state_fail: list[str], why: list[str], code: str, unknown: list[str]) -> Check:
    """Fail beats unknown beats pass, within one rule."""
    if state_fail:
        return Check(code, FAIL, [first(state_fail)])
    if unknown:
        return Check(code, UNKNOWN, [first(unknown)])
    return Check(code, PASS, why)


# ---------------------------------------------------------------- data rules

def check_natural(table: Table, upload: Upload) -> Check:
    """ECHO attempts with purpose=natural are the old, invalid selection."""
    bad = [where(table, r) for r in table.rows if is_echo(r) and r.lower("purpose") == "natural"]
    return verdict_of([f"ECHO purpose=natural at {w}" for w in bad], [], NATURAL, [])


def check_measure_validate(table: Table, upload: Upload) -> Check:
    """Every model with ECHO attempts has measure rows and validate rows.

    A model whose ECHO measure runs all ended does_not_fit has no validate row by design.
    """
    purposes: dict[str, set[str]] = {}
    statuses: dict[str, set[str]] = {}
    for row in table.rows:
        if is_echo(row) and row.lower("purpose") != "canary":
            purposes.setdefault(row.get("model"), set()).add(row.lower("purpose"))
            if row.lower("purpose") == "measure":
                statuses.setdefault(row.get("model"), set()).add(row.lower("status"))
    bad = []
    for model, seen in sorted(purposes.items()):
        if "measure" not in seen:
            bad.append(f"{model or '(no model)'}: ECHO has no purpose=measure row")
        elif "validate" not in seen and statuses.get(model) != {"does_not_fit"}:
            bad.append(f"{model or '(no model)'}: ECHO has no purpose=validate row")
    return verdict_of(bad, [], NO_MEASURE_VALIDATE, [])


def check_fabricated(table: Table, upload: Upload) -> Check:
    """ECHO required_capacity exactly 1.0 for every model is an assumption, not a measurement."""
    values, unknown = [], []
    for row in table.rows:
        if not is_echo(row) or not row.get("required_capacity"):
            continue
        value = decimal_of(row.get("required_capacity"))
        if value is None:
            unknown.append(f"{where(table, row)}: required_capacity "
                           f"{row.get('required_capacity')!r} is not a number")
        else:
            values.append(value)
    if values and all(v == 1 for v in values) and not unknown:
        return Check(FABRICATED, FAIL, [f"{table.name}: every ECHO required_capacity is "
                                        f"exactly 1.0 ({len(values)} rows)"])
    return verdict_of([], [], FABRICATED, unknown)


def uniform_tokens_of(row: Row, upload: Upload) -> tuple[int | None, str]:
    """N for a row: uniform_tokens column, else the cell's cell.json; with where it came from."""
    text = row.get("uniform_tokens")
    if text.isdigit() and int(text) > 0:
        return int(text), "uniform_tokens"
    cell = upload.cells.get(cell_name(row))
    found = find_uniform_tokens(cell.cell_json) if cell and cell.cell_json else None
    return (found, "cell.json") if found else (None, "")


def find_uniform_tokens(data: dict) -> int | None:
    """uniform_tokens (or seq x micro_batch x topk) anywhere one level deep in cell.json."""
    for scope in [data, *[v for v in data.values() if isinstance(v, dict)]]:
        value = scope.get("uniform_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        parts = [scope.get(k) for k in ("seq", "micro_batch", "topk")]
        if all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in parts):
            return parts[0] * parts[1] * parts[2]
    return None


def executable_row(row: Row, upload: Upload) -> tuple[bool | None, str]:
    """Whether a row's capacity is executable for its shape; None with why if undecidable."""
    capacity = row.get("capacity")
    if decimal_of(capacity) is None or decimal_of(capacity) <= 0:
        return None, f"capacity {capacity!r} is not a positive number"
    n, source = uniform_tokens_of(row, upload)
    pad = upload.pad_multiple
    try:
        if n is not None:
            ok = is_executable(capacity, n, pad)
            return ok, f"capacity {capacity} at N={n} ({source})"
    except EpcapError as exc:
        return None, str(exc)
    budget = row.get("budget_tokens")
    if budget.isdigit():
        return int(budget) % pad == 0, f"budget_tokens {budget} (pad {pad})"
    return None, "no uniform_tokens, budget_tokens or cell.json shape (column uniform_tokens)"


def check_unexecutable(table: Table, upload: Upload) -> Check:
    """A capacity that is not executable for its shape can only have crashed (SPEC section 2).

    Rows are checked, and so are cell directories no row names (e.g. `__cap1p02` crash
    cells); a directory whose shape cannot be found is not a recorded result and is skipped.
    """
    bad, unknown = [], []
    for row in table.rows:
        ok, why = executable_row(row, upload)
        if ok is False:
            bad.append(f"{where(table, row)}: {why} is not executable")
        elif ok is None:
            unknown.append(f"{where(table, row)}: {why}")
    bad += unexecutable_cells(table, upload)
    return verdict_of(bad, [], UNEXECUTABLE, unknown)


def unexecutable_cells(table: Table, upload: Upload) -> list[str]:
    """Cell directories (not named by any row) tagged with a capacity their shape rejects."""
    named = {cell_name(r) for r in table.rows}
    per_model: dict[str, set[str]] = {}
    for row in table.rows:
        if row.get("uniform_tokens").isdigit():
            per_model.setdefault(row.get("model"), set()).add(row.get("uniform_tokens"))
    bad = []
    for name, cell in sorted(upload.cells.items()):
        match = CELL_TAG.search(name)
        if name in named or not match:
            continue
        n = find_uniform_tokens(cell.cell_json) if cell.cell_json else None
        shapes = per_model.get(name.split("__", 1)[0], set())
        n = n or (int(next(iter(shapes))) if len(shapes) == 1 else None)
        capacity = f"{match.group(1)}.{match.group(2)}"
        try:
            if n and not is_executable(capacity, n, upload.pad_multiple):
                bad.append(f"cells/{name}: capacity {capacity} at N={n} is not executable")
        except EpcapError:
            continue
    return bad


def check_mixed_timing(table: Table, upload: Upload) -> Check:
    """All of one model's timing rows use one capacity, whatever the backend."""
    column = "timing_capacity" if table.name == TIMING_TSV else "capacity"
    by_model: dict[str, dict[Decimal, str]] = {}
    unknown = []
    for row in table.rows:
        if table.name == ATTEMPTS_TSV and row.lower("purpose") != "time":
            continue
        if not row.get(column):
            continue
        value = decimal_of(row.get(column))
        if value is None:
            unknown.append(f"{where(table, row)}: {column} {row.get(column)!r} is not a number")
            continue
        by_model.setdefault(row.get("model"), {})[value.normalize()] = row.get(column)
    bad = [f"{table.name}: {model} timed at {', '.join(sorted(caps.values()))}"
           for model, caps in sorted(by_model.items()) if len(caps) > 1]
    if not by_model and not unknown:
        return Check(MIXED_TIMING, NOT_APPLICABLE, [f"{table.name}: no timing rows"])
    return verdict_of(bad, [], MIXED_TIMING, unknown)


RULES: tuple[Rule, ...] = (
    Rule(NATURAL, "ECHO attempts with purpose=natural (old selection)",
         (Source(ATTEMPTS_TSV, ("backend", "purpose")),), True, check_natural),
    Rule(NO_MEASURE_VALIDATE, "ECHO attempts lack purpose=measure or purpose=validate rows",
         (Source(ATTEMPTS_TSV, ("model", "backend", "purpose")),), True, check_measure_validate),
    Rule(FABRICATED, "ECHO required_capacity exactly 1.0 for every model",
         (Source(SELECTION_TSV, ("backend", "required_capacity")),
          Source(ATTEMPTS_TSV, ("backend", "required_capacity"))), True, check_fabricated),
    Rule(UNEXECUTABLE, "a cell whose capacity is not executable for its shape",
         (Source(ATTEMPTS_TSV, ("capacity",)),), True, check_unexecutable),
    Rule(MIXED_TIMING, "one model's timing rows use different capacities across backends",
         (Source(TIMING_TSV, ("model", "timing_capacity")),
          Source(ATTEMPTS_TSV, ("model", "purpose", "capacity"))), False, check_mixed_timing),
)


def apply_rule(rule: Rule, upload: Upload) -> Check:
    """Run a rule over every usable source.

    A present table that cannot be read, or has malformed rows, leaves the rule UNKNOWN
    unless some source fails it; a source lacking a column is skipped when another decides.
    """
    checks, missing, broken = [], [], []
    for source in rule.sources:
        table = upload.tables.get(source.table)
        if table is None:
            continue
        if table.unreadable:
            broken.append(f"{table.name}: {table.unreadable}")
            continue
        absent = [c for c in source.columns if c not in table.columns]
        if absent:
            missing.append(f"{table.name} lacks column {', '.join(absent)}")
            continue
        check = rule.check(table, upload)
        if table.malformed and check.state in (PASS, NOT_APPLICABLE):
            check = Check(rule.code, UNKNOWN, [f"malformed rows not read: "
                                               f"{first(table.malformed)}"])
        checks.append(check)
    return fold(rule, checks, missing, broken)


def fold(rule: Rule, checks: list[Check], missing: list[str], broken: list[str]) -> Check:
    """Combine one rule's checks over its sources: fail, else unreadable, else pass."""
    failed = [w for c in checks if c.state == FAIL for w in c.why]
    if failed:
        return Check(rule.code, FAIL, failed)
    unknown = [w for c in checks if c.state == UNKNOWN for w in c.why]
    if broken or unknown:
        return Check(rule.code, UNKNOWN, [first(broken + unknown)])
    passed = [w for c in checks if c.state == PASS for w in c.why]
    if passed:
        return Check(rule.code, PASS, passed)
    if missing:
        return Check(rule.code, UNKNOWN, [first(missing)])
    if checks:
        return checks[0]
    if rule.required:
        needed = " or ".join(s.table for s in rule.sources)
        return Check(rule.code, UNKNOWN, [f"no {needed} in the upload"])
    return Check(rule.code, NOT_APPLICABLE, ["no table to check"])


def cell_name(row: Row) -> str:
    """The cell directory name of an attempts/timing row ('' when the row names none)."""
    return row.get("cell_dir").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def is_ignored_row(row: Row) -> bool:
    """Rows of cells tagged with the abandoned descent capacity (__cap1p75) are not counted."""
    return (bool(IGNORED_TAG.search(cell_name(row)))
            or row.lower("capacity_tag") == IGNORED_CAPACITY_TAG)


def ignored_name(row: Row) -> str:
    """A name for an ignored row: its cell directory, else built from its columns."""
    name = cell_name(row)
    if name:
        return name
    parts = [row.get(c) for c in ("model", "backend", "purpose") if row.get(c)]
    return "__".join([*parts, IGNORED_CAPACITY_TAG, f"a{row.get('attempt') or '?'}"])


# ---------------------------------------------------------------- provenance rules

def check_missing_provenance(upload: Upload) -> Check:
    """Campaign provenance.txt, and one in every (not ignored) cell directory."""
    bad, unknown = [], []
    if upload.provenance is None:
        bad.append(upload.provenance_problem or "no provenance.txt")
    for name, cell in sorted(upload.cells.items()):
        if cell.problem:
            unknown.append(f"cells/{name}: {cell.problem}")
        elif cell.provenance is None:
            bad.append(f"cells/{name}: no provenance.txt")
    return verdict_of(bad, [], MISSING_PROVENANCE, unknown)


@dataclass(frozen=True)
class Fix:
    """One errata entry."""

    id: str
    repository: str
    commit: str | None
    date: str | None
    summary: str = ""
    invalidates: tuple[str, ...] = ()

    @property
    def code(self) -> str:
        return f"{PREDATES}:{self.id}"


class CommitOrder(Protocol):
    """Ancestry and commit dates from a clone (harness.audit.GitClones)."""

    def contains(self, repository: str, fix_commit: str, run_sha: str) -> bool | None: ...

    def commit_date(self, repository: str, commit: str) -> str | None: ...


def parse_date(text: str | None) -> datetime | None:
    """An ISO 8601 date with a timezone (naive dates read as UTC), or None."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def run_contains_fix(fix: Fix, run: dict[str, str], order: CommitOrder) -> tuple[str, str]:
    """(state, why) for one run commit against one fix: ancestry, else dates, else unknown."""
    sha, label = run["sha"], f"{fix.repository} {run['sha'][:12]}"
    if fix.commit and (sha.startswith(fix.commit.lower()) or fix.commit.lower().startswith(sha)):
        return PASS, f"{label} is the fix commit"
    if fix.commit:
        contained = order.contains(fix.repository, fix.commit, sha)
        if contained is not None:
            return ((PASS, f"{label} contains {fix.commit}") if contained else
                    (FAIL, f"{label} does not contain fix {fix.id} ({fix.commit}) [git ancestry]"))
    fix_date = parse_date(fix.date) or (parse_date(order.commit_date(fix.repository, fix.commit))
                                        if fix.commit else None)
    run_date = parse_date(run.get("date"))
    if fix_date and run_date:
        if run_date < fix_date:
            return FAIL, (f"{label} dated {run['date']} is older than fix {fix.id} "
                          f"({fix_date.isoformat()}) [commit dates]")
        return PASS, f"{label} is not older than fix {fix.id} [commit dates]"
    return UNKNOWN, (f"cannot order {label} against fix {fix.id}: pass --git-repo "
                     f"{fix.repository}=PATH or give the fix a date in the registry")


def repo_values(upload: Upload, repository: str) -> tuple[dict[str, str], list[str]]:
    """Distinct `repo.<repository>` values across campaign and cell provenance; and files
    whose provenance is not epcap's and does not name the repository."""
    key = f"repo.{repository}"
    values: dict[str, str] = {}
    silent: list[str] = []
    sources = [("provenance.txt", upload.provenance)]
    sources += [(f"cells/{n}/provenance.txt", c.provenance) for n, c in sorted(upload.cells.items())]
    for label, fields in sources:
        if fields is None:
            continue
        if key in fields:
            values.setdefault(fields[key], label)
        elif "harness.version" not in fields:
            silent.append(label)
    return values, silent


def check_predates(upload: Upload, fix: Fix, order: CommitOrder) -> Check:
    """predates-fix:<id>: a run-scripts commit named in provenance lacks a registry fix.

    Provenance written by epcap lists every repository a run used (SPEC section 5), so an
    epcap provenance without `repo.<repository>` did not use that repository: not applicable.
    Provenance not written by epcap that does not name the repository cannot be ordered:
    UNKNOWN.
    """
    if not fix.commit and not fix.date:
        return Check(fix.code, NOT_APPLICABLE, ["fix has no commit and no date"])
    values, silent = repo_values(upload, fix.repository)
    fails, unknown, passes = [], [], []
    for value, label in values.items():
        run = parse_repo_line(value)
        if run is None:
            unknown.append(f"{label}: repo.{fix.repository} is {value!r} (no commit)")
            continue
        state, why = run_contains_fix(fix, run, order)
        {FAIL: fails, UNKNOWN: unknown, PASS: passes}[state].append(f"{label}: {why}")
    unknown += [f"{label}: provenance not written by epcap names no repo.{fix.repository}"
                for label in silent]
    if not values and not silent and upload.provenance is None:
        unknown.append("no provenance to read the run-scripts commit from")
    if not fails and not unknown and not passes:
        return Check(fix.code, NOT_APPLICABLE,
                     [f"epcap provenance: the run used no {fix.repository}"])
    return verdict_of(fails, passes, fix.code, unknown)
