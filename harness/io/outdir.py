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

TEMP_PREFIX, TEMP_SUFFIX = ".", ".tmp"
TEMP_ALPHABET = string.ascii_letters + string.digits + "_"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
LINK_REFUSED = ("is a symbolic link: epcap writes only into folders and files it opened "
                "itself; remove the link or name its target")


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


@contextmanager
def open_in(dir_fd: int, name: str, shown: str, mode: str = "wb") -> Iterator[IO]:
    """A file that appears as `name` in the folder `dir_fd` only complete: a new temp file
    (O_EXCL, O_NOFOLLOW) in the same folder, fsynced, renamed over `name` (renameat); removed
    when the block fails or is interrupted (SIGTERM raised as SystemExit included). An
    existing `name` that is a link is refused, never written through nor replaced."""
    why = name_problem(name)
    if why:
        raise BadInput(why, path=shown)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise BadInput(LINK_REFUSED, path=shown)
    except FileNotFoundError:
        pass
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
