"""The one writer for a command's output folder: the folder is opened once (a directory fd,
`O_NOFOLLOW`), and every file is created and renamed relative to that fd, so a folder that is
a link, or one swapped for a link after it was opened, never sends a byte elsewhere.

Which links are refused: the output folder itself (`report`, `--out DIR`) and any file name
written into it, when they are symbolic links epcap did not make. The folders above the
output folder are the user's choice and are followed (a results directory may be a link).
Calls used: os.open/os.mkdir/os.replace/os.unlink with `dir_fd` (POSIX openat, mkdirat,
renameat, unlinkat; Python's os module documents `dir_fd` support per platform in
`os.supports_dir_fd`).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import secrets
import stat
import string
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from harness.errors import BadInput
from harness.io.safeio import file_kind

TEMP_PREFIX, TEMP_SUFFIX = ".", ".tmp"
TEMP_ALPHABET = string.ascii_letters + string.digits + "_"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
LINK_REFUSED = ("is a symbolic link: epcap writes only into folders and files it opened "
                "itself; remove the link or name its target")
OWN_LINK_REFUSED = ("is a symbolic link: epcap writes its own campaign files in place, never "
                    "through a link it did not make; put the file itself there")


def name_problem(name: str) -> str | None:
    """Why `name` is not one plain entry of a folder (None when it is)."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        return f"{name!r} is not one file name"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"{name!r} is not valid UTF-8"
    return None


class OutDir:
    """An output folder held open by its fd; `folder / name` names a file written through it."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, Path(path)

    @classmethod
    def open(cls, path: Path | str, field: str | None = None, create: bool = True) -> OutDir:
        """Open the output folder `path` (creating it and its missing parents unless
        `create` is False); BadInput when `path` itself is a symbolic link or not a folder."""
        path = Path(path)
        parent = path.parent
        if not path.name or path.name in (".", ".."):       # "." or "/": the folder as given
            path = Path(os.path.abspath(path))
            parent = path.parent
        if create:
            parent.mkdir(parents=True, exist_ok=True)       # the user's part: links followed
        try:
            pfd = os.open(parent, DIR_FLAGS)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        try:
            try:
                if create:
                    os.mkdir(path.name, 0o777, dir_fd=pfd)
            except FileExistsError:
                pass
            try:
                fd = os.open(path.name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=pfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    st = os.stat(path.name, dir_fd=pfd, follow_symlinks=False)
                    raise BadInput(LINK_REFUSED if stat.S_ISLNK(st.st_mode)
                                   else "is not a folder", path=str(path), field=field) from None
                raise OSError(exc.errno, exc.strerror, str(path)) from None
        finally:
            os.close(pfd)
        return cls(fd, path)

    def __truediv__(self, name: str) -> OutFile:
        why = name_problem(name)
        if why:
            raise BadInput(why, path=str(self.path))
        return OutFile(self, name)

    def names(self) -> list[str]:
        """The entries of the folder (through the fd, not the path)."""
        return os.listdir(self.fd)

    def remove_matching(self, pattern: str) -> list[str]:
        """Remove this folder's entries matching the glob `pattern` (links removed, never
        followed; folders left alone); returns their names."""
        gone = []
        for name in sorted(self.names()):
            if fnmatch.fnmatchcase(name, pattern):
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(name, dir_fd=self.fd)
                    gone.append(name)
        return gone

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OutDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class OutFile:
    """One file of an OutDir (what `open_atomic` writes when given one instead of a path)."""

    folder: OutDir
    name: str

    def __str__(self) -> str:
        return str(self.folder.path / self.name)


def temp_name(name: str) -> str:
    """`.<name>.<8 random characters>.tmp` (atomic.TEMP_NAME matches it; sweeps find it)."""
    return f"{TEMP_PREFIX}{name}.{''.join(secrets.choice(TEMP_ALPHABET) for _ in range(8))}" \
           f"{TEMP_SUFFIX}"


def refuse_special(dir_fd: int, name: str, shown: str) -> None:
    """BadInput (exit 2) when `name` exists in the folder `dir_fd` and is not a regular file:
    a link is never written through, and a FIFO, a device, a socket or a folder is never
    renamed over (an output path that is /dev/null or a pipe stays what it was)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise BadInput(LINK_REFUSED, path=shown)
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"is {file_kind(st.st_mode)}, not a regular file: epcap replaces only a "
                       "file it could have written there; remove it or name another path",
                       path=shown)


def open_own(path: Path | str, flags: int) -> int:
    """An fd on one of epcap's own campaign files (events.jsonl, a results table) opened with
    `flags` for an append or a repair: never through a link (O_NOFOLLOW: epcap makes none
    there), never blocking on a FIFO (O_NONBLOCK), a regular file only; BadInput naming it
    otherwise, so no write lands outside the campaign and no read of a device is unbounded."""
    where = str(path)
    try:
        fd = os.open(where, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInput(OWN_LINK_REFUSED, path=where) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):       # a FIFO without a reader; a folder
            kind = "a FIFO" if exc.errno == errno.ENXIO else "a directory"
            raise BadInput(f"must be a regular file, got {kind}", path=where) from None
        raise OSError(exc.errno, exc.strerror, where) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadInput(f"must be a regular file, got {file_kind(mode)}", path=where)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def open_in(dir_fd: int, name: str, shown: str, mode: str = "wb") -> Iterator[IO]:
    """A file that appears as `name` in the folder `dir_fd` only complete: a new temp file
    (O_EXCL, O_NOFOLLOW) in the same folder, fsynced, renamed over `name` (renameat); removed
    when the block fails or is interrupted (SIGTERM raised as SystemExit included). An
    existing `name` that is not a regular file (a link, a FIFO, a device) is refused, never
    written through nor replaced (refuse_special)."""
    why = name_problem(name)
    if why:
        raise BadInput(why, path=shown)
    refuse_special(dir_fd, name, shown)
    text = "b" not in mode
    tmp = None
    try:
        for _ in range(100):
            candidate = temp_name(name)
            try:
                handle = os.open(candidate, NEW_FILE, 0o666, dir_fd=dir_fd)  # umask applies
                tmp = candidate
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "no free temp name", shown)
        with os.fdopen(handle, "w" if text else "wb", **(
                {"encoding": "utf-8", "newline": "\n"} if text else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = None
    except OSError as exc:
        if exc.filename is None:        # a write or fsync: name the file being written
            raise OSError(exc.errno, exc.strerror, shown) from None
        raise
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
