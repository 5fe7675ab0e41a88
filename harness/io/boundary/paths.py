"""Paths that enter from a runbook, and paths epcap writes.

A relative path in a runbook means the same file wherever epcap is started: it resolves
against the runbook's folder (like `models_file` and `repositories`), never the current
directory or the checkout a backend runs in. Every path epcap writes for a campaign is
checked to lie under the results root (--results) before it is created.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.errors import BadInput
from harness.io.safeio import file_kind, read_text


def resolve_against(value: str, base: Path) -> str:
    """`value` as an absolute path: unchanged when absolute, else joined to `base` (the
    runbook's folder), made absolute, `..` collapsed lexically (the file may not exist yet)."""
    path = Path(os.path.expanduser(value))
    if path.is_absolute():
        return str(path)
    return os.path.normpath(os.path.abspath(Path(base) / path))


def special_file_problem(value: str) -> str | None:
    """Why a runbook path cannot be a backend's file: something other than a regular file or
    a directory is there, links followed (a FIFO would hang or fail the run, a device feed
    it endlessly); None when it is one of those or nothing is there yet (a path to record
    to, or one only the run's host sees: a copied runbook is still audited elsewhere)."""
    try:
        mode = os.stat(value).st_mode       # stat never opens: a FIFO cannot block it
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return f"must be a regular file or a directory, got {file_kind(mode)}"


def lies_under(path: Path, root: Path) -> bool:
    """True when `path` (links resolved as far as they exist) is `root` or inside it."""
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return real == top or top in real.parents


def check_under(path: Path, root: Path, field: str | None = None) -> Path:
    """`path` when it lies under `root`; BadInput naming it otherwise (a link or a name that
    would make epcap write outside the results directory)."""
    if not lies_under(path, root):
        raise BadInput(f"would be written outside the results directory {root}: refused",
                       path=str(path), field=field)
    return Path(path)


# File systems several hosts see at the same path (network and cluster file systems); any
# other type (ext4, xfs, btrfs, tmpfs, overlay, ...) is this host's own.
SHARED_FS_TYPES = frozenset({"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3",
                             "ceph", "cephfs", "glusterfs", "fuse.glusterfs", "panfs", "wekafs",
                             "fuse.weka", "orangefs", "pvfs2", "fuse.sshfs", "afs",
                             "fuse.juicefs", "fuse.s3fs", "virtiofs"})
MOUNTINFO = Path("/proc/self/mountinfo")


def file_system(path: Path, mountinfo: str | None = None) -> tuple[str, str] | None:
    """(mount point, file system type) holding `path` (its deepest mount in
    /proc/self/mountinfo: proc(5), fields 5 and the one after ` - `), None where that
    cannot be read (not Linux)."""
    if mountinfo is None:
        try:
            mountinfo = read_text(MOUNTINFO, max_bytes=1 << 22)
        except (OSError, BadInput):
            return None
    target = os.path.realpath(path)
    best: tuple[str, str] | None = None
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail.split():
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, tail.split()[0])
    return best


def node_local(path: Path, mountinfo: str | None = None) -> str | None:
    """Why `path` may exist only on this host (a local file system type, named with its
    mount point), else None (a shared file system, or not known)."""
    found = file_system(path, mountinfo)
    if found is None or found[1] in SHARED_FS_TYPES:
        return None
    return f"the {found[1]} file system at {found[0]}"
