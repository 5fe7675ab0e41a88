"""Evidence that is not there is UNKNOWN, never INVALID (docs/spec.md#audit-rules): an
evidence file that is a Git LFS pointer (`lfs-pointer`: a clone made without git-lfs), and a
cell that ran but holds no log at all (`missing-logs`: logs deleted or never uploaded).

Both say which files, the first few and how many, and what would fix the upload. A rule that
reads the same file sees no file (readers.safe_real refuses a pointer with the same words),
so a pointer never counts as a log, table or JSON that contradicts a row.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.audit.evidence import is_evidence
from harness.audit.model import (
    PASS,
    UNKNOWN,
    AuditContext,
    Check,
    Source,
    Upload,
    UploadRule,
    int_of,
)
from harness.audit.readers import lfs_pointer, plain_file
from harness.audit.vocab import LFS_POINTER, MISSING_LOGS, UPLOAD_MARKERS
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON
from harness.taxonomy.judge import LOG_SUFFIXES
from harness.vocab import LauncherState, Status

NAMED = 5                       # files named in a why; the rest are counted


def named(paths: list[str]) -> str:
    """The first few paths, and how many more."""
    shown = ", ".join(paths[:NAMED])
    return shown + (f" and {len(paths) - NAMED} more" if len(paths) > NAMED else "")


def lfs_pointers(folder: Path) -> list[str]:
    """Evidence files of the upload (a nested upload's aside; links and dot-directories not
    entered) that are Git LFS pointers, as paths inside the upload."""
    found = []
    for here, dirnames, filenames in os.walk(folder, followlinks=False):
        at = Path(here)
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and not (at / d).is_symlink()
            and not any(os.path.lexists(at / d / m) for m in UPLOAD_MARKERS))
        for name in sorted(filenames):
            rel = (at / name).relative_to(folder).as_posix()
            if is_evidence(rel) and plain_file(folder, at / name) and lfs_pointer(at / name):
                found.append(rel)
    return found


def has_logs(cell: Path) -> bool:
    """Whether a cell directory holds a log the taxonomy reads (taxonomy.judge.cell_logs): a
    file or a link (whether a link is followed, or a file readable, is the readers' call)."""
    try:
        return any((e.is_file(follow_symlinks=False) or e.is_symlink())
                   and Path(e.name).suffix in LOG_SUFFIXES for e in os.scandir(cell))
    except OSError:
        return True                 # unreadable: the readers say so, not this check


# statuses that only a log can give (telemetry rows, a bug signature); does_not_fit too,
# unless the launcher itself recorded the out-of-memory end (state oom)
LOGGED = (Status.OK, Status.DROPS, Status.LOWER_BOUND, Status.ASSERT, Status.BADFLAG)


def claims_a_run(upload: Upload, key: str) -> bool:
    """A cell whose cell.json or attempts row states telemetry rows, or a status only a log
    can give: it wrote logs. (A run that died before writing any -- a node lost at start,
    an infra or crash status -- holds none legitimately.)"""
    data = upload.cells[key].cell_json or {}
    summary = data.get("summary")
    if isinstance(summary, dict) and isinstance(summary.get("rows"), int) \
            and not isinstance(summary.get("rows"), bool) and summary["rows"] > 0:
        return True
    launcher = data.get("launcher")
    oom = isinstance(launcher, dict) and launcher.get("state") == LauncherState.OOM
    logged = LOGGED if oom else (*LOGGED, Status.DOES_NOT_FIT)
    if data.get("status") in logged:
        return True
    table = upload.tables.get(ATTEMPTS_TSV)
    return any((int_of(r.get("rows")) or 0) > 0 or r.get("status") in logged
               for r in (table.rows if table else [])
               if upload.cell_for(r) is upload.cells[key])


def check_lfs_pointers(upload: Upload, ctx: AuditContext | None = None) -> Check:
    """`lfs-pointer`: UNKNOWN, naming the evidence files that are Git LFS pointers and the
    fix; else pass."""
    pointers = lfs_pointers(upload.folder) if upload.folder is not None else []
    return Check(LFS_POINTER, UNKNOWN, [
        f"{len(pointers)} evidence file(s) are Git LFS pointers, not the files: "
        f"{named(pointers)}; fetch them (`git lfs pull` in the clone) and audit again"]) \
        if pointers else Check(LFS_POINTER, PASS, [])


def check_missing_logs(upload: Upload, ctx: AuditContext | None = None) -> Check:
    """`missing-logs`: UNKNOWN, naming the cells that ran and hold no log; else pass."""
    bare = sorted(key for key, cell in upload.cells.items()
                  if cell.where is not None and not cell.problem and not has_logs(cell.where)
                  and claims_a_run(upload, key))
    return Check(MISSING_LOGS, UNKNOWN, [
        f"{len(bare)} cell(s) state telemetry rows or a status only a log gives but hold no log "
        f"({', '.join(LOG_SUFFIXES)}): {named(bare)}; the evidence is missing, not "
        f"contradicted: upload the cells' logs"]) if bare else Check(MISSING_LOGS, PASS, [])


RULES: tuple[UploadRule, ...] = (
    UploadRule(LFS_POINTER, "(UNKNOWN) an evidence file is a Git LFS pointer, not the file",
               (Source("<evidence files>", ()),), check_lfs_pointers,
               "logs uploaded from a git clone made without git-lfs judged as lies"),
    UploadRule(MISSING_LOGS, "(UNKNOWN) a cell that ran holds no log at all",
               (Source(CELL_JSON, ("summary.rows", "status", "launcher.state")),
                Source(ATTEMPTS_TSV, ("rows", "status")), Source("<cell logs>", ())),
               check_missing_logs, "logs deleted or never uploaded"),
)
