"""Bounded, safe reads of files a user names: regular files only, a size cap, no blocking.

A runbook, a models file, a TSV or a log may be hostile or simply wrong (`/dev/zero`, a FIFO,
a 50 MB file, a directory). Every such read goes through `read_bytes`/`read_text`, which
refuse anything but a regular file within the cap, and whose errors never quote the content.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.errors import BadInput

RUNBOOK_MAX_BYTES = 1 << 20       # a runbook or models file: 1 MiB is far beyond any real one
TABLE_MAX_BYTES = 64 << 20        # one results TSV or events.jsonl
_CHUNK = 1 << 16

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR,
          "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str | Path, *, max_bytes: int, field: str | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; BadInput (exit 2) otherwise."""
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
            raise BadInput(f"must be a regular file, got {_kind(info.st_mode)}", path=where,
                           field=field)
        if info.st_size > max_bytes:
            raise BadInput(f"file too large: {info.st_size} bytes, limit {max_bytes}",
                           path=where, field=field)
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
