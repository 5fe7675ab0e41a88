"""Errors shared across the harness, each mapped to a CLI exit code (docs/spec.md: command line)."""

from __future__ import annotations

import errno
import os
import tempfile
import traceback
from pathlib import Path


class EpcapError(Exception):
    """Base class; `exit_code` is what the CLI exits with, `path` the file it names (if any)."""

    exit_code = 2
    path: str | None = None


class BadInput(EpcapError):
    """Bad input or usage: the message names the file, line and field (exit 2)."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        if field is not None:
            where += f"{field}: "
        super().__init__(where + message)
        self.path, self.line, self.field = path, line, field


_HINTS = {
    errno.ENOSPC: "the disk is full: free space, then rerun the same command (it resumes)",
    errno.EDQUOT: "the disk quota is exceeded: free space, then rerun the same command",
    errno.EROFS: "the file system is read-only: choose a writable --results or remount",
    errno.EACCES: "permission denied: check the mode and owner, or choose another path",
    errno.EPERM: "operation not permitted: check the mode and owner, or choose another path",
    errno.ENAMETOOLONG: "the path is too long: choose a shorter one",
    errno.ENOENT: "no such file or directory: check the path",
    errno.EISDIR: "is a directory: give a file",
    errno.ENOTDIR: "a part of the path is not a directory: check the path",
}


def os_hint(exc: OSError) -> str:
    """What an OS error means for the user and what to do about it."""
    return _HINTS.get(exc.errno, exc.strerror or type(exc).__name__)


def boundary_message(exc: BaseException) -> str:
    """One line for an OS or decode error that reached the CLI: the path and what to do."""
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else "(no path)"
        if isinstance(where, bytes):
            where = where.decode("utf-8", "backslashreplace")
        where = str(where).encode("utf-8", "backslashreplace").decode("utf-8")
        return f"{where}: {os_hint(exc)}"
    if isinstance(exc, UnicodeError):
        return ("a path or file is not valid UTF-8: rename it (or give a UTF-8 path) and "
                "rerun")
    if isinstance(exc, RecursionError):
        return "input nested too deeply to process: simplify it (see docs/reliability.md)"
    if isinstance(exc, MemoryError):
        return "out of memory reading the input: it is far larger than any valid one"
    return f"a number is out of range ({type(exc).__name__}): see docs/reliability.md"


class Findings(EpcapError):
    """The command ran but found problems (audit --strict, failed validation): exit 1."""

    exit_code = 1


class CampaignStopped(EpcapError):
    """The campaign stopped for a person (a bug class, or an unclassified run past its
    retries under `limits.unclassified.then: stop`): exit 3."""

    exit_code = 3


class HarnessFailure(EpcapError):
    """The harness itself failed (an exception of its own, not bad input and not a run's
    failure): one line naming what broke and where, and the file that holds the full
    traceback (exit 2; docs/taxonomy.md#harness-failures)."""

    exit_code = 2


def where_raised(exc: BaseException) -> str:
    """`file.py:LINE in func` of the innermost frame that raised `exc` ('' without one)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f"{Path(last.filename).name}:{last.lineno} in {last.name}"


def what_broke(exc: BaseException) -> str:
    """'AttributeError: module 'torch' has no attribute 'x' (provenance.py:211 in f)'."""
    text = str(exc).strip().splitlines()
    where = where_raised(exc)
    found = getattr(getattr(exc, "obj", None), "__file__", None)   # AttributeError's module
    if isinstance(exc, AttributeError) and isinstance(found, str):
        where = f"{where}; that module was found at {found}" if where else found
    return (f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")
            + (f" ({where})" if where else ""))


def write_trace(exc: BaseException, folder: str | os.PathLike | None, name: str) -> str:
    """Write `exc`'s full traceback to `folder/name` (else, or when that fails, to a new file
    in the temporary directory); returns the path written, or '' when nothing could be."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if folder is not None:
        try:
            path = Path(folder) / name
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
            return str(path)
        except OSError:
            pass
    try:
        fd, path = tempfile.mkstemp(prefix="epcap-error-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path
    except OSError:
        return ""


def harness_failure(exc: BaseException, folder: str | os.PathLike | None, name: str,
                    after: str = "") -> HarnessFailure:
    """The HarnessFailure for an unexpected exception: its traceback written (write_trace),
    the message naming what broke, where, and that file."""
    path = write_trace(exc, folder, name)
    trace = f"; full traceback in {path}" if path else ""
    return HarnessFailure(f"harness failure (a bug or a broken environment, not your input "
                          f"and not a run's failure): {what_broke(exc)}{trace}{after}")
