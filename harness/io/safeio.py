"""Bounded, safe reads of files a user names: regular files only, a size cap, no blocking.

A runbook, a models file, a TSV, a log, campaign.json, a trace, a placement file or errata
may be hostile or simply wrong (`/dev/zero`, a FIFO, a 50 MB file, a directory). Every such
read goes through `read_bytes`/`read_text`/`read_json`/`open_stream`, which refuse anything
but a regular file within the cap, and whose errors never quote the content.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from harness.errors import BadInput
from harness.io.bounds import TooManyDigits, json_loads

RUNBOOK_MAX_BYTES = 1 << 20       # a runbook or models file: 1 MiB is far beyond any real one
TABLE_MAX_BYTES = 64 << 20        # one results TSV or events.jsonl
JSON_MAX_BYTES = 16 << 20         # campaign.json, cell.json, a placement file, errata
STREAM_MAX_BYTES = 16 << 30       # a file read line by line (a router trace, a rank log)
_CHUNK = 1 << 16

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR,
          "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """'a FIFO', 'a directory', ...: what a file of this st_mode is, for a refusal."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _open_checked(path: str | Path, max_bytes: int, field: str | None) -> int:
    """An fd on a regular file of at most `max_bytes` (opened without blocking on a FIFO)."""
    where = str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BadInput("file not found", path=where, field=field) from None
    except PermissionError:
        raise BadInput("permission denied: check the file's mode and owner", path=where,
                       field=field) from None
    except OSError as exc:
        raise BadInput(f"cannot open: {exc.strerror}", path=where, field=field) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"must be a regular file, got {file_kind(info.st_mode)}", path=where,
                           field=field)
        if info.st_size > max_bytes:
            raise BadInput(f"file too large: {info.st_size} bytes, limit {max_bytes}",
                           path=where, field=field)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | Path, *, max_bytes: int, field: str | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; BadInput (exit 2) otherwise."""
    where = str(path)
    fd = _open_checked(path, max_bytes, field)
    try:
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError as exc:
                raise BadInput(f"cannot read: {exc.strerror}", path=where, field=field) from None
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > max_bytes:       # the file grew while we read it
                raise BadInput(f"file too large: over {max_bytes} bytes", path=where,
                               field=field)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_text(path: str | Path, *, max_bytes: int, field: str | None = None) -> str:
    """`read_bytes` decoded as UTF-8; a decode error names the byte offset, never the text."""
    data = read_bytes(path, max_bytes=max_bytes, field=field)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"not UTF-8 text (invalid byte at offset {exc.start})", path=str(path),
                       field=field) from None


def read_json(path: str | Path, *, max_bytes: int = JSON_MAX_BYTES, field: str | None = None):
    """A JSON document from a regular file within the cap, every integer bounded in digits
    (harness.io.bounds.json_loads); malformed is BadInput naming path and line."""
    text = read_text(path, max_bytes=max_bytes, field=field)
    try:
        return json_loads(text)
    except json.JSONDecodeError as exc:
        line = None if isinstance(exc, TooManyDigits) else exc.lineno
        raise BadInput(f"not JSON: {exc.msg}", path=str(path), line=line, field=field) from None
    except RecursionError:
        raise BadInput("not JSON: nested too deeply", path=str(path), field=field) from None


def open_stream(path: str | Path, *, max_bytes: int = STREAM_MAX_BYTES,
                field: str | None = None, encoding: str | None = None):
    """A file object for line-by-line reading of a regular file within the cap (binary, or
    text with `encoding`); a FIFO, a device or a directory is BadInput, never a hang."""
    fd = _open_checked(path, max_bytes, field)
    os.set_blocking(fd, True)
    if encoding is None:
        return os.fdopen(fd, "rb")
    return os.fdopen(fd, "r", encoding=encoding)
