"""Replaying an upload's `events.jsonl` through the harness's own event reader
(harness.results.events.read_events, issue 23): every cell the run recorded as finished
(`cell_finish`, canaries included: the driver writes no attempts row for a canary, so only the
events say it ran) must be in the upload. A deleted canary or attempt cell is `missing-cell`.
"""

from __future__ import annotations

from harness.audit.model import NOT_APPLICABLE, Check, Upload, verdict_of
from harness.audit.readers import safe_real
from harness.audit.vocab import IGNORED_TAG, MISSING_CELL
from harness.errors import EpcapError
from harness.results.events import EVENTS_MAX_BYTES, read_events
from harness.results.layout import EVENTS_JSONL
from harness.vocab import Event


def finished_cells(upload: Upload) -> tuple[list[str] | None, str | None]:
    """The cell name of every cell_finish, in order; None and why when the log cannot be
    read; (None, None) when the upload has no events.jsonl."""
    folder = upload.folder
    if folder is None or not (folder / EVENTS_JSONL).exists():
        return None, None
    real, problem = safe_real(folder, folder / EVENTS_JSONL, EVENTS_MAX_BYTES)
    if real is None:
        return None, f"{EVENTS_JSONL}: {problem}"
    try:
        events = read_events(real)
    except EpcapError as exc:
        return None, f"{EVENTS_JSONL}: {str(exc)[:200]}"
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
