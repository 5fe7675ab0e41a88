"""The standard streams as an output boundary: a closed stdout, or one on a full device, is
named as the stream it is (never "(no path)", never "it resumes": the command's own files
are complete), and ends the command with exit 2 instead of a traceback."""

from __future__ import annotations

import os
import sys

from harness.errors import BadInput, os_hint

STDOUT = "stdout"


def check_stdout_open() -> None:
    """BadInput when stdout is closed (`epcap ... >&-`): what the command prints would be lost
    (Python sets sys.stdout to None, and print() then silently writes nothing)."""
    if sys.stdout is None:
        raise BadInput("is closed (>&-): what this command prints would be lost; send it to a "
                       "file or to /dev/null", path=STDOUT)


def stream_error(exc: OSError, name: str = STDOUT) -> BadInput:
    """BadInput for a failed write to a standard stream, naming the stream."""
    why = exc.strerror or type(exc).__name__
    return BadInput(f"cannot write this command's output ({why}); the files it wrote are "
                    f"complete: send {name} to a file on a device with space and rerun",
                    path=name)


def flush_stdout() -> None:
    """Flush stdout (a closed pipe raises BrokenPipeError for the caller); any other write
    failure is BadInput naming stdout."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise stream_error(exc) from None


def stdout_fails() -> bool:
    """True when stdout cannot be written (probed with one newline, only after a command
    already failed with an OSError that names no file), so that error is put on stdout."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, AttributeError, ValueError):
        return False                # no descriptor (an in-memory stream): not the cause
    try:
        os.write(fd, b"\n")
    except OSError:
        return True
    return False


def unnamed_os_error(exc: OSError) -> str:
    """One line for an OS error that carries no file name: a write to a stream or a
    descriptor (every file epcap writes names its path), with what it means."""
    return f"an output stream (stdout or stderr): {exc.strerror or os_hint(exc)}"
