"""Links as the Hugging Face Hub's cache lays them out: which links of a snapshot folder are
the repository's own files.

`huggingface_hub.snapshot_download` (and `huggingface-cli download`) leaves a revision as
`<cache>/<type>s--ORG--NAME/snapshots/<commit>/<path>`, each file a relative link into the
repository's `blobs/` (`../../blobs/<sha256 or git blob sha1>`), and `refs/<branch>` naming the
commit; a file stored with Xet may go one link further, into the cache-wide shared store
`<cache>/blobs/<2 hex>/<64 hex>` (marked by its `.huggingface-shared-blobs` file). Such links
leave any folder audited below `snapshots/<commit>/`, so a reader that follows only links
staying inside TARGET refuses every file of a snapshot.

`hub_link(path)` is the one rule: a link lying at or below `snapshots/<commit>/` of a folder
laid out as the Hub's (its name `<type>s--...`, a real `blobs/` beside `snapshots/`) is followed
when it resolves to a regular file of that same repository's `blobs/` (directly, or through its
blob's link into the marked shared store) or inside the snapshot itself; anything else (a
link to /etc/hostname, to another repository's blobs, a `blobs/` that is itself a link) is not.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

COMMIT = re.compile(r"[0-9a-f]{40}")
REPO_FOLDER = re.compile(r"(?:models|datasets|spaces|kernels)--.+")   # repo_folder_name()
SHARED_HASH = re.compile(r"[0-9a-f]{64}")                             # a Xet file hash
SHARED_MARKER = ".huggingface-shared-blobs"
SHARED_MARKER_TEXT = "1\n"
MAX_HOPS = 2                        # snapshot -> blobs/<etag> [-> <cache>/blobs/<xx>/<hash>]


@dataclass(frozen=True)
class Snapshot:
    """A revision's folder in a Hub cache: `repo/snapshots/<commit>` and its `repo/blobs`."""

    folder: Path                    # real path of snapshots/<commit>
    blobs: Path                     # real path of the repository's blobs/ (not a link)

    @property
    def repo(self) -> Path:
        return self.blobs.parent

    @property
    def commit(self) -> str:
        return self.folder.name

    def shared_store(self) -> Path | None:
        """The cache-wide shared blob store beside the repository folder, when marked."""
        store = self.repo.parent / "blobs"
        marker = store / SHARED_MARKER
        try:
            if not stat.S_ISDIR(os.lstat(store).st_mode) \
                    or not stat.S_ISREG(os.lstat(marker).st_mode):
                return None
            with open(marker, encoding="utf-8") as handle:
                return store if handle.read(16) == SHARED_MARKER_TEXT else None
        except OSError:
            return None


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


@functools.lru_cache(maxsize=4096)
def _snapshot_of(real: str) -> Snapshot | None:
    here = Path(real)
    for at in (here, *here.parents):
        if at.parent.name == "snapshots" and COMMIT.fullmatch(at.name):
            repo = at.parent.parent
            if REPO_FOLDER.fullmatch(repo.name) and _real_dir(repo / "blobs"):
                return Snapshot(at, repo / "blobs")
            return None
    return None


def snapshot_of(directory: Path) -> Snapshot | None:
    """The Hub snapshot a directory lies at or below (by the layout alone: `<type>s--NAME/
    snapshots/<40-hex commit>/` with a real `blobs/` beside `snapshots/`), else None."""
    return _snapshot_of(os.path.realpath(directory))


def _hop(link: Path) -> Path:
    """Where one link points, made absolute against its own (real) folder, not resolved
    further."""
    return Path(os.path.normpath(Path(os.path.realpath(link.parent)) / os.readlink(link)))


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def hub_link(path: Path) -> Path | None:
    """The file a link of a Hub snapshot stands for, when the Hub's cache made it so: `path`
    lies at or below `snapshots/<commit>/` and resolves to a regular file of that
    repository's own `blobs/` (one hop, or a blob's hop into the marked shared store) or
    inside the snapshot. None for anything else (not a link, not in a snapshot, elsewhere)."""
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return None
        snap = snapshot_of(path.parent)
        if snap is None:
            return None
        real = Path(os.path.realpath(path))
        if real.is_relative_to(snap.folder) and _regular(real):
            return real                                  # a link inside the revision itself
        blob = _hop(path)
        if blob.parent != snap.blobs:
            return None
        if _regular(blob):
            return blob
        store = snap.shared_store()
        if store is None or not stat.S_ISLNK(os.lstat(blob).st_mode):
            return None
        target = _hop(blob)
        if target.parent.parent != store or not SHARED_HASH.fullmatch(target.name) \
                or target.parent.name != target.name[:2] or not _real_dir(target.parent) \
                or not _regular(target):
            return None
        return target
    except (OSError, ValueError, RuntimeError):
        return None
