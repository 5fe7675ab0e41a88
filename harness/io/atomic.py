"""Atomic writes: a file appears at its path only complete (fsynced temp file, then rename)."""

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
