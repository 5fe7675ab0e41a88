"""The repository's history as a witness (`history-rewritten`): an upload fetched from the Hub
(`epcap audit hf://...`) whose earlier commits hold a cell file, a launch's row or event log
bytes that a later commit replaced or removed. Live publishing (harness/publish/live.py)
commits each finished stage as it completes, so a launch deleted and run again after its
first commit shows here, with both commits named. harness/audit/history.py reads the history
(bounded: see there); this module judges it.

What may not change once published: every file of a cell (`cells/<cell>/...`: a finished
cell is never rewritten by the harness); each row of capacity_attempts.tsv and
timing_launches.tsv (one per launch, keyed by cell_dir, launch and phase); events.jsonl's
bytes (appended to, never rewritten). The derived tables, the report and the card are
rebuilt as the campaign goes and are not judged here (the replay judges their last state).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from harness.audit.history import APPEND_ONLY, KEYED_TABLES, History
from harness.audit.model import (
    FAIL,
    NOT_APPLICABLE,
    PASS,
    UNKNOWN,
    AuditContext,
    Check,
    Source,
    Upload,
    UploadRule,
    first,
)
from harness.audit.vocab import HISTORY_REWRITTEN

KEY_COLUMNS = ("cell_dir", "launch", "phase")


def is_cell_file(rel: str) -> bool:
    """A file inside a cell directory (`.../cells/<cell>/<file>`)."""
    parts = PurePosixPath(rel).parts
    return "cells" in parts[:-2]


def keyed_rows(data: bytes) -> dict[str, str]:
    """{cell_dir|launch|phase: the row's line} of a TSV (later duplicates kept apart)."""
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines:
        return {}
    header = lines[0].split("\t")
    idx = [header.index(c) for c in KEY_COLUMNS if c in header]
    rows: dict[str, str] = {}
    for line in lines[1:]:
        cells = line.split("\t")
        key = "|".join(cells[i] if i < len(cells) else "" for i in idx)
        while key in rows:
            key += "+"
        rows[key] = line
    return rows


def short(commit: str) -> str:
    return commit[:12]


def file_changes(h: History) -> list[str]:
    """Cell files replaced or removed after the commit that first held them."""
    found: list[str] = []
    first_seen: dict[str, tuple[int, str]] = {}
    reported: set[str] = set()
    for index, tree in enumerate(h.trees):
        for rel, (at, blob) in list(first_seen.items()):
            if tree.get(rel) != blob:
                how = "removed" if rel not in tree else "replaced"
                found.append(f"{rel}: first published in {short(h.commits[at])}, {how} in "
                             f"{short(h.commits[index])}")
                del first_seen[rel]
                reported.add(rel)
        for rel, blob in tree.items():
            if is_cell_file(rel) and rel not in first_seen and rel not in reported:
                first_seen[rel] = (index, blob)
    return found


def content_changes(h: History) -> list[str]:
    """Rows of the launch tables replaced or removed, events.jsonl rewritten."""
    found = []
    names = {rel for (_, rel) in h.texts}
    for rel in sorted(names):
        versions = sorted((i, data) for (i, r), data in h.texts.items() if r == rel)
        absent = [i for i, tree in enumerate(h.trees) if i > versions[0][0] and rel not in tree]
        if absent:
            found.append(f"{rel}: first published in {short(h.commits[versions[0][0]])}, "
                         f"removed in {short(h.commits[absent[0]])}")
            continue
        base = PurePosixPath(rel).name
        if base in APPEND_ONLY:
            for (i, old), (j, new) in zip(versions, versions[1:], strict=False):
                if not new.startswith(old):
                    found.append(f"{rel}: as published in {short(h.commits[i])} is not the "
                                 f"start of it in {short(h.commits[j])} (rewritten, not "
                                 "appended)")
                    break
        elif base in KEYED_TABLES:
            seen: dict[str, tuple[int, str]] = {}
            for j, data in versions:
                rows = keyed_rows(data)
                for key, (i, line) in list(seen.items()):
                    if rows.get(key) != line:
                        how = "removed" if key not in rows else "replaced"
                        found.append(f"{rel}: the row of {key.split('|')[0] or '?'} first "
                                     f"published in {short(h.commits[i])}, {how} in "
                                     f"{short(h.commits[j])}")
                        del seen[key]
                for key, line in rows.items():
                    seen.setdefault(key, (j, line))
    return found


def check_history(upload: Upload, ctx: AuditContext) -> Check:
    """`history-rewritten`: judge the upload's commit history (an hf:// target only)."""
    h = upload.history
    if h is None:
        return Check(HISTORY_REWRITTEN, NOT_APPLICABLE,
                     ["not read from the Hub (a local directory, or HF_HUB_OFFLINE=1): no "
                      "commit history to read"])
    found = file_changes(h) + content_changes(h)
    if found:
        return Check(HISTORY_REWRITTEN, FAIL,
                     [f"hf://datasets/{h.repo}'s history: " + first(found)])
    if h.problem:
        return Check(HISTORY_REWRITTEN, UNKNOWN, [f"hf://datasets/{h.repo}: {h.problem}"])
    held = sum(1 for t in h.trees if t)
    return Check(HISTORY_REWRITTEN, PASS,
                 [f"{held} of {len(h.commits)} commits hold this upload; no cell file, "
                  "launch row or event replaced or removed after it was first published"])


RULES = (
    UploadRule(HISTORY_REWRITTEN, "(an hf:// target) a cell file, a launch's row of "
               "capacity_attempts.tsv or timing_launches.tsv, or events.jsonl's bytes "
               "replaced or removed by a later commit of the repository (both named)",
               (Source("<commit history>", ()),), check_history,
               "a slow launch deleted and run again after it was first published"),
)
