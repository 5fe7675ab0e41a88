"""Atomic writes: a file appears at its path only complete (fsynced temp file, then rename).

The temp file gets the mode a plain open() would give under the user's umask (created by
os.open with 0666, so the umask applies; mkstemp's 0600 would hide results from the analysts
sharing a results directory). The one writer is harness.io.outdir; this module keeps the
path-based entry points and the sweep."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from harness.io.outdir import DIR_FLAGS, OutFile, name_problem, open_in

# open_atomic's temp names: ".<name>.<8 characters>.tmp" (outdir.temp_name)
TEMP_NAME = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp")
MAX_SWEPT = 100_000                 # entries looked at by one sweep


@contextmanager
def open_atomic(path: Path | OutFile, mode: str = "wb") -> Iterator[IO]:
    """A file that appears at `path` only complete (harness.io.outdir.open_in: a new temp
    file in the same folder, fsynced, renamed over it; removed if the block fails). An OutFile
    is written through its folder's open fd; a path's folder is opened here, once."""
    if isinstance(path, OutFile):
        with open_in(path.folder.fd, path.name, str(path), mode) as fh:
            yield fh
        return
    path = Path(path)
    why = name_problem(path.name)
    if why:
        raise IsADirectoryError(errno.EISDIR, why, str(path))
    try:
        dir_fd = os.open(path.parent, DIR_FLAGS)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path.parent)) from None
    try:
        with open_in(dir_fd, path.name, str(path), mode) as fh:
            yield fh
    finally:
        os.close(dir_fd)


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


def write_bytes_atomic(path: Path | OutFile, data: bytes) -> None:
    """Write `data` atomically (open_atomic)."""
    with open_atomic(path, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: Path | OutFile, text: str) -> None:
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
