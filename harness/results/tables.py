"""The results-directory model (docs/spec.md: results layout): TSV schemas, the one TSV
reader (strict for our own results, lenient and bounded for untrusted uploads) and the one
atomic writer (fsynced appends and temp-file replaces)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from harness.errors import BadInput
from harness.io.redact import redact_text
from harness.io.safeio import TABLE_MAX_BYTES, read_bytes

ATTEMPT_COLUMNS = (
    "campaign", "model", "backend", "purpose", "attempt", "capacity", "capacity_tag",
    "uniform_tokens", "budget_tokens", "status", "rows", "malformed_rows", "saturated_rows",
    "peak_actual_valid_recv", "required_capacity", "cell_dir", "started_utc", "finished_utc",
    "wall_s",
    # appended (not in docs/spec.md: results layout list; SPEC allows more columns at the end)
    "backend_impl", "exit_code", "failure_line",
)
SELECTION_COLUMNS = (
    "campaign", "model", "backend", "required_capacity", "peak_actual_valid_recv",
    "uniform_tokens", "measured_at_capacity", "selected_capacity", "selected_budget_tokens",
    "over_provision", "validated", "validate_attempts", "timing_capacity",
    # held-out validation and drop risk (docs/drop-risk.md)
    "validate_seed", "validate_steps", "validate_peak", "headroom", "drop_risk_95",
    "predicted_drop_risk", "predicted_drop_risk_hi", "held_out",
)
TIMING_COLUMNS = (
    "campaign", "model", "backend", "timing_capacity", "budget_tokens", "status", "trials",
    "iters", "dispatch_ms_median", "dispatch_ms_p90", "combine_ms_median", "combine_ms_p90",
    "step_cv", "noise_floor_pct", "algbw_gbps", "peak_mem_bytes", "cell_dir", "launches",
    # appended
    "dispatch_ms_p10", "combine_ms_p10", "timer", "backend_impl",
)
COMPARISON_COLUMNS = (
    "campaign", "model", "backend", "baseline", "phase", "launches", "ratio_median", "ci_low",
    "ci_high", "cv_backend", "cv_baseline", "verdict",
    # appended
    "reason",
)

ATTEMPTS_TSV = "capacity_attempts.tsv"
SELECTION_TSV = "capacity_selection.tsv"
TIMING_TSV = "timing.tsv"
COMPARISON_TSV = "comparison.tsv"
CAMPAIGN_JSON = "campaign.json"      # the grid, shapes and backends of a campaign, as data
PROVENANCE_TXT = "provenance.txt"


def cell_text(value) -> str:
    """One TSV cell: '' for None, true/false for booleans, no tabs or newlines."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 6))
    text = redact_text(str(value))
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def format_row(columns: Iterable[str], row: dict) -> str:
    """A row as one tab-separated line (with the trailing newline)."""
    return "\t".join(cell_text(row.get(c)) for c in columns) + "\n"


def append_row(path: Path, columns: Iterable[str], row: dict) -> None:
    """Append one row with a single fsynced write; writes the header when creating the file."""
    columns = tuple(columns)
    path = Path(path)
    line = format_row(columns, row)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    fd = os.open(path, flags, 0o644)
    try:
        if os.fstat(fd).st_size == 0:
            line = "\t".join(columns) + "\n" + line
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Table:
    """One TSV as strings: `rows` are dicts, `lines[i]` the 1-based line of rows[i];
    `malformed` the lines set aside (lenient reads); `unreadable` why nothing was read."""

    name: str
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    unreadable: str | None = None

    def has(self, column: str) -> bool:
        """Whether the file carries this (possibly appended, optional) column."""
        return column in self.columns


def parse_table(name: str, data: bytes, strict: bool = False) -> Table:
    """Parse TSV bytes. Lenient (untrusted uploads): problems are recorded in the Table.
    Strict (our own results): the first problem is BadInput naming name:line: field."""
    def bad(problem: str, line: int | None = None, col: str | None = None) -> Table:
        if strict:
            raise BadInput(problem, path=name, line=line, field=col)
        return Table(name, unreadable=problem)

    if b"\x00" in data:
        return bad("binary data (NUL byte), not a TSV")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return bad(f"not UTF-8 (byte {exc.start})")
    lines = [line.rstrip("\r") for line in text.lstrip("\ufeff").split("\n")]
    if not lines or not lines[0].strip():
        return bad("empty file: no header row" if strict else "no header row", 1)
    header = [c.strip() for c in lines[0].split("\t")]
    if any(not c for c in header) or len(set(header)) != len(header):
        return bad("header has empty or repeated column names", 1)
    table = Table(name, columns=header)
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        values = line.split("\t")
        if len(values) != len(header):
            if strict:
                raise BadInput(f"{len(values)} fields where the header has {len(header)}",
                               path=name, line=number, field="row")
            table.malformed.append(f"{name}:{number}: {len(values)} fields, header has "
                                   f"{len(header)}")
            continue
        table.rows.append(dict(zip(header, values, strict=True)))
        table.lines.append(number)
    return table


def read_table(path: Path, required: Iterable[str] = ()) -> Table | None:
    """One of our own TSVs, strictly (BadInput names path:line: field); None when absent."""
    path = Path(path)
    if not path.is_file():
        return None
    table = parse_table(str(path), read_bytes(path, max_bytes=TABLE_MAX_BYTES), strict=True)
    missing = [c for c in required if c not in table.columns]
    if missing:     # the header is not quoted: a linked file may be anything
        raise BadInput(f"missing column ({len(table.columns)} columns in the header; is it a "
                       "results TSV?)", path=str(path), line=1, field=missing[0])
    return table


def read_rows(path: Path) -> list[dict]:
    """All rows of one of our TSVs as dicts of strings ([] when the file does not exist)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return []
    return read_table(path).rows


@contextmanager
def open_atomic(path: Path, mode: str = "wb") -> Iterator[IO]:
    """A file that appears at `path` only complete: a unique temp file in the same folder,
    fsynced and renamed over `path` when the block ends; removed if the block fails."""
    path = Path(path)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    text = "b" not in mode
    try:
        with os.fdopen(handle, "w" if text else "wb", **(
                {"encoding": "utf-8", "newline": "\n"} if text else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` atomically (open_atomic)."""
    with open_atomic(path, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically (newlines kept as written)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_table_atomic(path: Path, columns: Iterable[str], rows: Iterable[dict]) -> None:
    """Replace a whole TSV atomically (header + rows)."""
    columns = tuple(columns)
    text = "\t".join(columns) + "\n" + "".join(format_row(columns, r) for r in rows)
    write_text_atomic(path, text)


def read_campaign_facts(results_dir: Path) -> dict:
    """campaign.json (pad multiple, grid, shapes, backends, baseline) as written by the
    campaign; {} when absent or not a JSON object (results from before it existed)."""
    path = Path(results_dir) / CAMPAIGN_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
