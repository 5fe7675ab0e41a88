"""Atomic writes: a file appears at its path only complete (fsynced temp file, then rename).

The temp file gets the mode a plain open() would give under the user's umask (mkstemp makes
it 0600, which would hide results from the analysts sharing a results directory)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def open_atomic(path: Path, mode: str = "wb") -> Iterator[IO]:
    """A file that appears at `path` only complete: a unique temp file in the same folder,
    fsynced and renamed over `path` when the block ends; removed if the block fails."""
    path = Path(path)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(handle, 0o666 & ~current_umask())
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
