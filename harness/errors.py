"""Errors shared across the harness, each mapped to a CLI exit code (docs/spec.md: command line)."""

from __future__ import annotations

import errno


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
