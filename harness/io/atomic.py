"""Atomic writes: a file appears at its path only complete (fsynced temp file, then rename).

The temp file gets the mode a plain open() would give under the user's umask (mkstemp makes
it 0600, which would hide results from the analysts sharing a results directory)."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

TEMP_PREFIX, TEMP_SUFFIX = ".", ".tmp"
# open_atomic's temp names: ".<name>.<mkstemp's 8 characters>.tmp"
TEMP_NAME = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp")
MAX_SWEPT = 100_000                 # entries looked at by one sweep


@contextmanager
def open_atomic(path: Path, mode: str = "wb") -> Iterator[IO]:
    """A file that appears at `path` only complete: a unique temp file in the same folder,
    fsynced and renamed over `path` when the block ends; removed if the block fails."""
    path = Path(path)
    handle, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", suffix=TEMP_SUFFIX,
                                   dir=path.parent)
    os.fchmod(handle, 0o666 & ~current_umask())
    text = "b" not in mode
    try:
        with os.fdopen(handle, "w" if text else "wb", **(
                {"encoding": "utf-8", "newline": "\n"} if text else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:        # a write or fsync: name the file being written
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process umask: Linux's /proc/self/status, else set and restore it (POSIX has no
    pure getter; the set-and-restore is not thread-safe, hence /proc first)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` atomically (open_atomic)."""
    with open_atomic(path, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically (newlines kept as written)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def sweep_temps(folder: Path, depth: int = 2) -> list[Path]:
    """Remove the temp files a killed atomic rewrite left in `folder` and up to `depth`
    levels below it (call only while holding the folder's lock: no writer is running);
    returns what was removed. Links and non-matching names are left alone."""
    removed: list[Path] = []
    level, seen = [Path(folder)], 0
    for _ in range(depth + 1):
        below = []
        for d in level:
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for entry in entries:
                seen += 1
                if seen > MAX_SWEPT:
                    return removed
                if entry.is_dir(follow_symlinks=False):
                    below.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False) and TEMP_NAME.fullmatch(entry.name):
                    try:
                        os.unlink(entry.path)
                        removed.append(Path(entry.path))
                    except OSError:
                        pass
        level = below
    return removed
