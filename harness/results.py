"""TSV schemas (SPEC section 4) and atomic writes: fsynced appends and temp-file replaces."""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

ATTEMPT_COLUMNS = (
    "campaign", "model", "backend", "purpose", "attempt", "capacity", "capacity_tag",
    "uniform_tokens", "budget_tokens", "status", "rows", "malformed_rows", "saturated_rows",
    "peak_actual_valid_recv", "required_capacity", "cell_dir", "started_utc", "finished_utc",
    "wall_s",
    # appended (not in SPEC 4's list; SPEC allows more columns at the end)
    "backend_impl", "exit_code", "failure_line",
)
SELECTION_COLUMNS = (
    "campaign", "model", "backend", "required_capacity", "peak_actual_valid_recv",
    "uniform_tokens", "measured_at_capacity", "selected_capacity", "selected_budget_tokens",
    "over_provision", "validated", "validate_attempts", "timing_capacity",
)
TIMING_COLUMNS = (
    "campaign", "model", "backend", "timing_capacity", "budget_tokens", "status", "trials",
    "iters", "dispatch_ms_median", "dispatch_ms_p90", "combine_ms_median", "combine_ms_p90",
    "step_cv", "noise_floor_pct", "algbw_gbps", "peak_mem_bytes", "cell_dir",
    # appended
    "dispatch_ms_p10", "combine_ms_p10", "timer", "backend_impl",
)

ATTEMPTS_TSV = "capacity_attempts.tsv"
SELECTION_TSV = "capacity_selection.tsv"
TIMING_TSV = "timing.tsv"


def cell_text(value) -> str:
    """One TSV cell: '' for None, true/false for booleans, no tabs or newlines."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 6))
    text = str(value)
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


def read_rows(path: Path) -> list[dict]:
    """All rows of a TSV as dicts of strings ([] when the file does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    return [dict(r) for r in reader]


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a unique temp file in the same folder, fsync, then os.replace."""
    path = Path(path)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_table_atomic(path: Path, columns: Iterable[str], rows: Iterable[dict]) -> None:
    """Replace a whole TSV atomically (header + rows)."""
    columns = tuple(columns)
    text = "\t".join(columns) + "\n" + "".join(format_row(columns, r) for r in rows)
    write_text_atomic(path, text)
