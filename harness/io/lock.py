"""An exclusive lock per campaign directory: held for the whole run, released by the OS.

`flock` on `<campaign>/.epcap.lock` is dropped by the kernel when the holder dies, so a killed
run never leaves a stale lock; a second `epcap run` on the same directory exits 2 naming the
holder's pid and host instead of resuming into the running campaign.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from harness.errors import BadInput, os_hint

LOCK_NAME = ".epcap.lock"
_HOLDER_MAX_BYTES = 4096


class CampaignLock:
    """Context manager: `with CampaignLock(dir): ...` holds the directory's lock."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> CampaignLock:
        """Take the lock without waiting; BadInput naming the holder when it is taken."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BadInput(f"cannot create the campaign lock: {os_hint(exc)}",
                           path=str(self.path)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise BadInput(f"campaign directory is in use by {holder}: wait for that run to "
                           "finish (or stop it), or pass another --results directory",
                           path=str(self.path.parent)) from None
        except OSError as exc:
            os.close(fd)
            raise BadInput(f"cannot lock the campaign directory: {os_hint(exc)}",
                           path=str(self.path.parent)) from None
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        except OSError:
            pass            # the lock itself is what matters; the holder note is a courtesy
        self.fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (closing the descriptor releases it)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> CampaignLock:
        return self.acquire()

    def __exit__(self, *_exc) -> None:
        self.release()


def _holder(fd: int) -> str:
    """'pid 123 on host h (since ...)' from the lock file, or a plain phrase when unreadable."""
    try:
        record = json.loads(os.pread(fd, _HOLDER_MAX_BYTES, 0).decode("utf-8"))
        return f"pid {int(record['pid'])} on host {str(record['host'])[:255]} " \
               f"(since {str(record['since_utc'])[:32]})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another epcap run"
