"""What a harness run recorded about itself, held against the upload (issue 23).

`events.jsonl`, replayed through the harness's own event reader
(harness.results.events.read_events): every cell the run recorded as finished (`cell_finish`,
canaries included: the driver writes no attempts row for a canary, so only the events say it
ran) must be in the upload; a deleted canary or attempt cell is `missing-cell`.
`repo.<name>` lines of a harness-written provenance.txt (the campaign's and every cell's) have
the one form harness.results.provenance.repo_line writes: `<sha> <commit-iso-date> <branch>
dirty=<true|false>`, `missing <path>` or `not-a-git-checkout <path>`; else
`provenance-incomplete`.
"""

from __future__ import annotations

import re
from datetime import datetime

from harness.audit.model import NOT_APPLICABLE, Check, Upload, verdict_of
from harness.audit.rules.rederive import as_run, upload_events
from harness.audit.vocab import IGNORED_TAG, MISSING_CELL, PROVENANCE_INCOMPLETE
from harness.results.layout import EVENTS_JSONL
from harness.vocab import Event


def finished_cells(upload: Upload) -> tuple[list[str] | None, str | None]:
    """The cell name of every cell_finish, in order; None and why when the log cannot be
    read; (None, None) when the upload has no events.jsonl."""
    events, problem = upload_events(upload)
    if events is None:
        return None, problem
    return [str(e.get("cell")) for e in events if e.get("ev") == Event.CELL_FINISH], None


def check_replay(upload: Upload) -> Check:
    """Every cell events.jsonl records as finished is a cell directory of the upload."""
    finished, problem = finished_cells(upload)
    if problem:
        return Check(MISSING_CELL, "unknown", [problem])
    if finished is None:
        return Check(MISSING_CELL, NOT_APPLICABLE, [f"no {EVENTS_JSONL}"])
    present = {c.name for c in upload.cells.values()} | set(upload.ignored_cells)
    bad = [f"{EVENTS_JSONL}: a cell_finish event's field cell {name!r} names a cell that is "
           f"not in the upload" for name in finished
           if name not in present and not IGNORED_TAG.search(name)]
    return verdict_of(bad, [], MISSING_CELL, [])


SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")           # git's full sha-1 or sha-256 (%H)
BRANCH = re.compile(r"\S+")
NOT_A_COMMIT = ("missing", "not-a-git-checkout", "git-missing", "git-refused")   # repo_line's
#                                                       other forms: no commit could be read


def repo_value_problem(value: str) -> str | None:
    """Why a `repo.<name>` value is not in repo_line's form (None when it is)."""
    head, _, rest = value.partition(" ")
    if head in NOT_A_COMMIT:
        return None if rest.strip() else "names no path"
    parts = value.split(" ")
    if len(parts) != 4:
        return "is not '<sha> <commit-iso-date> <branch> dirty=<bool>'"
    sha, date, branch, dirty = parts
    if not SHA.fullmatch(sha):
        return f"sha {sha[:48]!r} is not a full commit id"
    try:
        datetime.fromisoformat(date)
    except ValueError:
        return f"commit date {date[:40]!r} is not ISO 8601"
    if not BRANCH.fullmatch(branch):
        return "names no branch"
    if dirty not in ("dirty=true", "dirty=false"):
        return f"{dirty[:40]!r} is not dirty=true or dirty=false"
    return None


def check_repo_lines(upload: Upload) -> Check:
    """Every `repo.<name>` line of a harness-written upload's provenance files (the
    campaign's, every cell's) in the form the harness writes."""
    if not as_run(upload):
        return Check(PROVENANCE_INCOMPLETE, NOT_APPLICABLE, ["no runbook as run"])
    files = {"provenance.txt": upload.provenance or {}}
    for cell in upload.cells.values():
        if cell.provenance_at and cell.provenance is not None:
            files.setdefault(cell.provenance_at, cell.provenance)
    bad = [f"{where}: field {key} {problem}"
           for where, fields in sorted(files.items())
           for key, value in sorted(fields.items()) if key.startswith("repo.")
           for problem in [repo_value_problem(value)] if problem]
    return verdict_of(bad, [], PROVENANCE_INCOMPLETE, [])
