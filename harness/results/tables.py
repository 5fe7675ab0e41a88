"""The TSVs of a results directory (docs/spec.md: results layout): how a cell prints, the
fsynced append and the atomic rewrite, and the one TSV reader (strict for our own results,
lenient and bounded for untrusted uploads). Their columns are the rows'
(harness.results.rows); their file names are harness.results.layout's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.outdir import OutFile, open_own
from harness.io.redact import redact_text, secret_values
from harness.io.safeio import TABLE_MAX_BYTES, read_bytes
from harness.results.rows import Row

RowLike = Row | Mapping[str, Any]       # a typed row, or a dict (audit, forecast, tests)


def cell_text(value, secrets: list[str] | None = None) -> str:
    """One TSV cell: '' for None, true/false for booleans, no tabs or newlines. `secrets`:
    the secret values to scrub (harness.io.redact.secret_values(), read once per table)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 6))
    text = redact_text(str(value), secrets)
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def format_row(columns: Iterable[str], row: RowLike, secrets: list[str] | None = None) -> str:
    """A row as one tab-separated line (with the trailing newline); a column the row lacks
    is an empty cell."""
    values = row.as_dict() if isinstance(row, Row) else row
    secrets = secret_values() if secrets is None else secrets
    cells = tuple(values.get(c) for c in columns)
    try:                # typed: True and 1, 1 and 1.0 print differently
        return _line_of(tuple((type(v), v) for v in cells), tuple(secrets))
    except TypeError:   # a value that cannot be a key (a list): formatted here
        return "\t".join(cell_text(v, secrets) for v in cells) + "\n"


@functools.lru_cache(maxsize=1 << 16)
def _line_of(typed: tuple[tuple[type, Any], ...], secrets: tuple[str, ...]) -> str:
    """A row's line from its (type, value) cells: the driver rewrites its derived tables
    after every run, and each rewrite formats (and redacts) the same earlier rows again."""
    return "\t".join(cell_text(v, list(secrets)) for _, v in typed) + "\n"


def append_row(path: Path, columns: Iterable[str], row: RowLike) -> None:
    """Append one row with a single fsynced write; writes the header when creating the file."""
    columns = tuple(columns)
    path = Path(path)
    line = format_row(columns, row)
    fd = open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)     # never a link
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
    if not os.path.lexists(path):       # only an absent file is absent: a FIFO, a folder,
        return None                     # a dangling link is BadInput from read_bytes
    table = parse_table(str(path), read_bytes(path, max_bytes=TABLE_MAX_BYTES), strict=True)
    missing = [c for c in required if c not in table.columns]
    if missing:     # the header is not quoted: a linked file may be anything
        raise BadInput(f"missing column ({len(table.columns)} columns in the header; is it a "
                       "results TSV?)", path=str(path), line=1, field=missing[0])
    return table


def read_rows(path: Path) -> list[dict]:
    """All rows of one of our TSVs as dicts of strings ([] when the file does not exist)."""
    path = Path(path)
    if not os.path.lexists(path) or (path.is_file() and path.stat().st_size == 0):
        return []
    return read_table(path).rows


def write_table_atomic(path: Path | OutFile, columns: Iterable[str], rows: Iterable[RowLike]) -> None:
    """Replace a whole TSV atomically (header + rows). The environment's secret values are
    read once per table, not once per cell; a file that already holds exactly this text is
    left alone (the driver rewrites its derived tables after every cell: no fsync for an
    unchanged one)."""
    columns = tuple(columns)
    secrets = secret_values()
    text = "\t".join(columns) + "\n" + "".join(format_row(columns, r, secrets) for r in rows)
    if isinstance(path, OutFile):       # an output folder's file: written through its fd
        write_text_atomic(path, text)
        return
    path = Path(path)
    try:
        if path.is_file() and path.stat().st_size == len(text.encode("utf-8")) \
                and path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass            # unreadable or odd: rewrite it
    write_text_atomic(path, text)
