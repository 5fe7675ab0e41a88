"""An exclusive lock per campaign directory: held for the whole run, released by the OS.

`flock` is dropped by the kernel when the holder dies, so a killed run never leaves a stale
lock; a second `epcap run` on the same directory exits 2 naming the holder's pid and host
instead of resuming into the running campaign. The lock is taken on the campaign directory
itself, so deleting or replacing `<campaign>/.epcap.lock` (which only notes the holder) does
not free it; where a file system refuses to lock a directory, the lock file is locked
instead and its inode re-checked against the path, and a mismatch is refused.
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
        self.dir_fd: int | None = None

    def acquire(self) -> CampaignLock:
        """Take the lock without waiting; BadInput naming the holder when it is taken."""
        directory = self.path.parent
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise BadInput(f"cannot open the campaign directory: {os_hint(exc)}",
                           path=str(directory)) from None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # never a link
        except OSError as exc:
            os.close(dir_fd)
            raise BadInput(f"cannot create the campaign lock: {os_hint(exc)}",
                           path=str(self.path)) from None
        try:
            self._lock(dir_fd, fd)
        except BaseException:
            os.close(fd)
            os.close(dir_fd)
            raise
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        except OSError:
            pass            # the lock itself is what matters; the holder note is a courtesy
        self.fd, self.dir_fd = fd, dir_fd
        return self

    def _lock(self, dir_fd: int, fd: int) -> None:
        """flock the directory (the file where a directory cannot be locked); BadInput when
        another run holds it, or when the lock file was replaced under us."""
        directory = self.path.parent
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._in_use(fd) from None
        except OSError:                 # e.g. a file system without directory locks
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._in_use(fd) from None
            except OSError as exc:
                raise BadInput(f"cannot lock the campaign directory: {os_hint(exc)}",
                               path=str(directory)) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except OSError:
                same = False
            if not same:
                raise BadInput(f"the campaign lock {LOCK_NAME} was deleted or replaced while "
                               "taking it: another run may be using this directory",
                               path=str(directory)) from None

    def _in_use(self, fd: int) -> BadInput:
        return BadInput(f"campaign directory is in use by {_holder(fd)}: wait for that run to "
                        "finish (or stop it), or pass another --results directory",
                        path=str(self.path.parent))

    def release(self) -> None:
        """Drop the lock (closing the descriptors releases it)."""
        for name in ("fd", "dir_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

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
