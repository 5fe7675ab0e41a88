"""What the audit rules see of one upload (pure data, no I/O), and the shared helpers.

Names (model, backend, purpose, status) compare after Unicode NFKC normalisation and case
folding (docs/spec.md#audit-rules: ECHO = echo = ＥＣＨＯ), so a name spelled another way can neither
split a model nor hide a backend from a rule.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import Any

from harness.vocab import DEFAULT_PAD_MULTIPLE

PASS, FAIL, UNKNOWN, NOT_APPLICABLE = "pass", "fail", "unknown", "n/a"


def norm(text: str | None) -> str:
    """A name as the rules compare it: NFKC, case-folded, stripped."""
    return unicodedata.normalize("NFKC", text or "").casefold().strip()


@dataclass
class Row:
    """One TSV data row with its 1-based line number."""

    line: int
    values: dict[str, str]

    def get(self, column: str) -> str:
        """Stripped value, '' when absent."""
        return (self.values.get(column) or "").strip()

    def name(self, column: str) -> str:
        """A name column normalised for comparison (model, backend, purpose, status)."""
        return norm(self.values.get(column))


@dataclass
class Table:
    """A TSV of an upload: columns, good rows, malformed lines, or why it is unreadable."""

    name: str
    columns: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)   # "file:line: why"
    unreadable: str | None = None
    blanked: dict[tuple[int, str], str] | None = None   # (line, column) -> why unreadable


@dataclass
class LogFacts:
    """What a cell's own logs say (docs/spec.md#telemetry rows), read through the bounded reader."""

    files: list[str]
    rows: int
    saturated_rows: int
    peak: int | None                                     # max actual_valid_recv, warmup 0
    peak_after_warmup: int | None                        # at the warmup cell.json states
    budgets: list[int]
    expected_recv: list[int]
    malformed_rows: int
    summary: object = None                               # the harness's LogSummary, as run
    plain: object = None                                 # its LogSummary with no shape given


@dataclass
class Cell:
    """A cell directory: where it is, the provenance covering it, cell.json, its logs."""

    name: str                                            # directory name
    path: str = ""                                       # relative to the upload
    provenance: dict[str, str] | None = None             # nearest provenance.txt's fields
    provenance_at: str | None = None                     # which file that was
    provenance_problem: str | None = None                # none found: why (own unreadable,
                                                         # or one on the way up withheld)
    cell_json: dict | None = None
    cell_json_problem: str | None = None
    logs: LogFacts | None = None
    logs_problem: str | None = None
    problem: str | None = None                           # e.g. a link not followed
    where: Path | None = None                            # the directory on disk


@dataclass
class Upload:
    """What the rules see of one upload (already filtered of ignored cells)."""

    path: str
    tables: dict[str, Table] = field(default_factory=dict)
    provenance: dict[str, str] | None = None
    provenance_problem: str | None = None
    cells: dict[str, Cell] = field(default_factory=dict)  # keyed by path in the upload
    ignored_cells: list[str] = field(default_factory=list)
    pad_multiple: int = DEFAULT_PAD_MULTIPLE              # the audit's own, never the upload's
    runbook_pad_multiple: object = None                   # what the upload's runbook says
    notes: list[str] = field(default_factory=list)
    folder: Path | None = None                           # the upload directory on disk
    runbook_sha256: str | None = None                    # of runbook.yaml's bytes, if read
    runbook: object = None                               # harness Runbook of runbook.yaml
    runbook_problem: str | None = None                   # why it could not be loaded
    facts_problem: str | None = None                     # why campaign.json was refused
    derived: dict = field(default_factory=dict)          # cell path -> what the harness derives
    pending_logs: dict = field(default_factory=dict)     # cell path -> its logs, to be read
    pool: object = None                                  # audit.workers' forked pool, if any
    deriving: list | None = None                         # rules.rederive's submitted derivations
    abandoned: set[str] | None = None                    # cells a resumed campaign abandoned
    events: tuple[list[dict] | None, str | None] | None = None  # events.jsonl (upload_events)
    replay: object = None                                # rules.pipeline.UploadReplay, once
    sample_seed: int | None = None                       # the audit's sample seed (routing)
    sampled: dict[str, str] = field(default_factory=dict)  # cell path -> what was sampled
    history: object = None                               # audit.history.History (hf:// only)

    def cell_for(self, row: Row) -> Cell | None:
        """The cell a row names, by its path in the upload only: a row whose cell_dir is not
        a cell's path (another folder before the right name, control characters included)
        names no cell, so the rules that need it say so."""
        key = cell_key(row)
        return self.cells.get(key) if key else None


@dataclass
class Check:
    """Outcome of one rule on one upload."""

    code: str
    state: str                                           # pass | fail | unknown | n/a
    why: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Source:
    """A table a rule can read, and the columns it needs there; for an `UploadRule`, a file
    of the upload (provenance.txt, events.jsonl, runbook.yaml, a cell's logs) and the keys
    or fields it reads there."""

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
    catches: str = ""                                    # the earlier failure it stands for
    all_sources: bool = False                            # every present source must be read
    version_bound: bool = False                          # its verdict rests on the code's own
    #   definitions (the pipeline replayed, a command rebuilt, routing regenerated): an
    #   upload made by another analysis version is judged by that version (audit/versions.py)


@dataclass(frozen=True)
class AuditContext:
    """What an `UploadRule` may read besides the upload: the errata registry
    (harness.audit.errata.Errata), the --git-repo clones (errata.GitClones) and the
    --trusted-key file (a Path, or None)."""

    errata: Any = None
    clones: Any = None
    trusted_key: Any = None


@dataclass(frozen=True)
class UploadRule:
    """A rule over the whole upload rather than one table's columns: it reads files
    (provenance, events, the runbook, cell directories) or the errata registry. `sources`
    name the files it reads; `per_fix` rows expand into one row per errata fix at audit
    time (`code` becomes the fix's `predates-fix:<id>`, `check` gets the fix)."""

    code: str
    summary: str
    sources: tuple[Source, ...]
    check: Callable[[Upload, AuditContext], Check]
    catches: str = ""                                    # the earlier failure it stands for
    per_fix: bool = False                                # one row per errata fix
    version_bound: bool = False                          # as Rule.version_bound


# ---------------------------------------------------------------- helpers

def cell_key(row: Row) -> str:
    """The cell_dir of a row as a relative posix path ('' when the row names none)."""
    text = row.get("cell_dir").replace("\\", "/").rstrip("/")
    while text.startswith("./"):
        text = text[2:]
    return text


def cell_name(row: Row) -> str:
    """The cell directory name of a row ('' when the row names none)."""
    return cell_key(row).rsplit("/", 1)[-1]


MAX_DIGITS = 40                 # untrusted numbers beyond this many digits are not numbers


def decimal_of(text: str) -> Decimal | None:
    """A finite decimal of sane size, or None for empty, non-numeric or absurd text."""
    try:
        value = Decimal(text)
    except (InvalidOperation, ValueError, TypeError):
        return None
    if not value.is_finite() or (value and abs(value.adjusted()) > MAX_DIGITS):
        return None
    return value


def int_of(text: str) -> int | None:
    """A non-negative integer written as digits (no sign, no decimals), else None."""
    text = (text or "").strip()
    ok = text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS
    return int(text) if ok else None


def ratio_text(peak: int, n: int) -> str:
    """peak / n to 6 significant digits, for messages (exact decimal arithmetic)."""
    return format(Decimal(peak) / Decimal(n), ".6g")


def budget_of(capacity: str, n: int) -> int | None:
    """int(float(capacity) x N) as the kernels compute it; None when not a sane capacity."""
    value = decimal_of(capacity)
    if value is None or value <= 0 or n <= 0:
        return None
    try:
        return int(float(value) * n)
    except (OverflowError, ValueError):
        return None


def unreadable(table: Table, row: Row, column: str, kind: str) -> str:
    """The one message for a value the audit cannot read: file, line and field (UNKNOWN)."""
    return f"{where(table, row)}: field {column} {row.get(column)!r} unreadable (not {kind})"


def readable(value: str, kind: str) -> bool:
    """A written value of a row field's type (its annotation): an int as digits, a number,
    true/false; any text for a text field; an empty cell is not stated, not unreadable."""
    return (not value or ("bool" in kind and norm(value) in ("true", "false"))
            or ("int" in kind and int_of(value) is not None)
            or ("float" in kind and decimal_of(value) is not None)
            or not any(k in kind for k in ("bool", "int", "float")))


def where(table: Table, row: Row) -> str:
    """`file:line` of a row, for messages."""
    return f"{table.name}:{row.line}"


def first(items: list[str], limit: int = 3) -> str:
    """At most `limit` items joined, with a count of the rest."""
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def verdict_of(failed: list[str], why: list[str], code: str, unknown: list[str]) -> Check:
    """Fail beats unknown beats pass, within one rule."""
    if failed:
        return Check(code, FAIL, [first(failed)])
    if unknown:
        return Check(code, UNKNOWN, [first(unknown)])
    return Check(code, PASS, why)


def agrees(written: str, exact: Fraction) -> bool:
    """A written decimal equals `exact` rounded to its own number of decimals (1.0293 agrees
    with 67457 / 65536 = 1.029312...); a whole number only when exact."""
    value = decimal_of(written)
    if value is None:
        return False
    exponent = value.as_tuple().exponent
    decimals = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    if decimals == 0:
        return Fraction(value) == exact
    half = Fraction(1, 2 * 10 ** decimals)
    return abs(Fraction(value) - exact) <= half
