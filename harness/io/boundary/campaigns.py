"""Campaign directories under a results root, recognised by the record epcap wrote in them,
never by parsing a directory's name.

epcap names a campaign's directory (`<campaign>`, then `<campaign>-<N>` for --fresh) and
writes MARKER into it on creation: the campaign, the directory name it was given and its
sequence number. A directory is campaign C's when its marker says C *and* names the
directory it sits in (a backup copy `tiny-20261201` of `tiny` carries `tiny`'s marker, so it
is not taken for a newer run), or, for a campaign started before markers existed, when its
events.jsonl opens with C's campaign_start. Anything else under the root (`tiny-²`, stray
folders, files) is ignored, and `epcap status` lists it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.boundary.events import decode_line, record_problem
from harness.io.safeio import JSON_MAX_BYTES, open_stream, read_json

MARKER = ".epcap-campaign"        # {"campaign", "dir", "seq"}: written once, at creation
MAX_ENTRIES = 100_000             # entries of a results root looked at
_FIRST_LINE_MAX = 1 << 16         # a campaign_start record: far below 64 KiB


@dataclass(frozen=True, order=True)
class CampaignRecord:
    """What a directory's record says: its campaign and when it was made (seq, then time)."""

    seq: int
    started: float
    exact: bool                   # its name is the campaign's own (the first directory)
    path: Path
    campaign: str


def write_marker(folder: Path, campaign: str, seq: int) -> None:
    """Record in `folder` that epcap made it for `campaign` (atomic, under the umask)."""
    write_text_atomic(Path(folder) / MARKER, json.dumps(
        {"campaign": campaign, "dir": Path(folder).name, "seq": seq}) + "\n")


def _marker(folder: Path) -> tuple[str, int] | None:
    """(campaign, seq) of a marker naming this very directory, else None."""
    try:
        data = read_json(folder / MARKER, max_bytes=JSON_MAX_BYTES)
    except BadInput:
        return None
    if not isinstance(data, dict) or data.get("dir") != folder.name:
        return None
    campaign, seq = data.get("campaign"), data.get("seq")
    if not isinstance(campaign, str) or isinstance(seq, bool) or not isinstance(seq, int) \
            or not 0 <= seq <= 10**9:
        return None
    return campaign, seq


def _first_event(folder: Path, events_name: str) -> dict | None:
    """The checked first record of `folder`'s event log, else None."""
    try:
        with open_stream(folder / events_name) as fh:
            raw = fh.readline(_FIRST_LINE_MAX)
    except (BadInput, OSError):
        return None
    record, _, _ = decode_line(raw.rstrip(b"\n"))
    if record is None or record_problem(record) is not None:
        return None
    return record


def campaign_record(folder: Path, events_name: str) -> CampaignRecord | None:
    """The record that makes `folder` a campaign directory, or None for anything else."""
    folder = Path(folder)
    try:
        if folder.is_symlink() or not folder.is_dir():
            return None
    except OSError:
        return None
    first = _first_event(folder, events_name)
    started = float(first["t"]) if first else 0.0
    marked = _marker(folder)
    if marked is None and os.path.lexists(folder / MARKER):
        return None                 # a copy (its marker names another directory), or damaged
    if marked is not None:
        campaign, seq = marked
    elif first is not None and first.get("ev") == "campaign_start" \
            and isinstance(first.get("campaign"), str):
        campaign, seq = first["campaign"], 0          # started before markers existed
    else:
        return None
    return CampaignRecord(seq, started, folder.name == campaign, folder, campaign)


def entries(root: Path) -> list[Path]:
    """The entries directly under a results root (at most MAX_ENTRIES), sorted."""
    try:
        with os.scandir(root) as it:
            names = []
            for entry in it:
                names.append(entry.name)
                if len(names) >= MAX_ENTRIES:
                    break
    except OSError:
        return []
    return [Path(root) / n for n in sorted(names)]


def records_under(root: Path, events_name: str) -> tuple[list[CampaignRecord], list[Path]]:
    """(campaign records directly under `root`, oldest first; everything else there)."""
    found, other = [], []
    for path in entries(root):
        rec = campaign_record(path, events_name)
        (other if rec is None else found).append(rec or path)
    return sorted(found), other


def enclosing_campaign(path: Path, events_name: str) -> Path | None:
    """The nearest folder above `path` (links resolved) that is a campaign directory (its
    record, or an event log), or None: nothing is created inside a campaign but its own."""
    for parent in Path(os.path.realpath(path)).parents:
        if campaign_record(parent, events_name) is not None \
                or os.path.lexists(parent / events_name):
            return parent
    return None


def choose_campaign_dir(root: Path, campaign: str, fresh: bool, events_name: str
                        ) -> tuple[Path, int]:
    """(the newest directory of `campaign` under `root` to resume, or a new one's path, and
    the sequence number a new one gets). `root` that is itself a campaign directory is
    refused (a new campaign is never nested inside one), unless it is this campaign's; so is
    a `root` anywhere inside one (`<campaign>/cells`, a cell, `<campaign>/report`)."""
    root = Path(root)
    own = campaign_record(root, events_name)
    if own is not None or (root / events_name).exists():
        if own is not None and own.campaign == campaign and not fresh:
            return root, own.seq
        what = f"campaign {own.campaign!r}" if own is not None else "a campaign"
        raise BadInput(f"is the directory of {what}, not a results root: give its parent "
                       f"(--results {root.parent}) so campaigns are not nested",
                       path=str(root), field="--results")
    above = enclosing_campaign(root, events_name)
    if above is not None:
        rec = campaign_record(above, events_name)
        what = f"campaign {rec.campaign!r}" if rec is not None else "a campaign"
        raise BadInput(f"is inside the directory of {what} ({above}): a folder written there "
                       "is one its audit does not know; give a results root outside it "
                       f"(--results {above.parent})", path=str(root), field="--results")
    mine = [r for r in records_under(root, events_name)[0] if r.campaign == campaign]
    if mine and not fresh:
        return mine[-1].path, mine[-1].seq
    seq = max([r.seq for r in mine] + [len(mine)]) + 1
    name, n = campaign, 2
    while os.path.lexists(root / name):
        name, n = f"{campaign}-{n}", n + 1
    return root / name, seq
