"""Mechanism: epcap's own campaign files (events.jsonl, the appended results tables) are
opened for an append or a repair by one function, harness.io.outdir.open_own: never through
a link (O_NOFOLLOW: epcap makes no link there), never blocking on a FIFO, a regular file
only, and the event log's tail repair reads back from the end a chunk at a time within
EVENTS_MAX_BYTES. Anything else is one `epcap: error:` line naming the file, exit 2.

Seen failing on the code before (28ad19d): rounds23 B16, events.jsonl linked to /dev/zero,
`epcap run` read it whole in events.repair_tail (23.7 GB, OOM-killed); here a 300 MiB sparse
file stands in for the device, and was read whole then truncated to 0 bytes; B17, events.jsonl
linked to a file outside --results with no trailing newline: `epcap run` truncated that file
(its last line lost), and EventLog.append and tables.append_row wrote through any link.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.results.events import EVENTS_MAX_BYTES, EventLog, read_events, repair_tail
from harness.results.rows import ATTEMPT_COLUMNS
from harness.results.tables import append_row

from .conftest import FakeLauncher, assert_bad_input, finished_tiny, run_cli

HEALTH = [HealthCheck.function_scoped_fixture]
OUTSIDE_TEXT = b'{"ev": "note", "t": 1}\nuser text, no newline'


@pytest.fixture(scope="module")
def done_campaign(tmp_path_factory) -> tuple[Path, Path]:
    """(runbook, a finished tiny campaign directory), made once with fake ranks."""
    return finished_tiny(tmp_path_factory.mktemp("own"))


def digest(folder: Path) -> dict[str, str]:
    """sha256 of every regular file under `folder` (links and specials not followed)."""
    out = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(dirpath, name)
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


KINDS = ["link-outside", "link-outside-newline", "dangling-link", "link-chain", "link-fifo",
         "fifo", "char-device", "directory", "sparse-huge"]


def make_hostile(at: Path, kind: str, outside: Path) -> None:
    """Put a hostile entry of one kind at `at` (a campaign's events.jsonl or table); the
    files a link points to live in `outside`."""
    target = outside / "precious.txt"
    target.write_bytes(OUTSIDE_TEXT + (b"\n" if kind == "link-outside-newline" else b""))
    if at.exists() or at.is_symlink():
        at.unlink()
    if kind in ("link-outside", "link-outside-newline"):
        at.symlink_to(target)
    elif kind == "dangling-link":
        at.symlink_to(outside / "not-yet")
    elif kind == "link-chain":
        hop = outside / "hop"
        hop.symlink_to(target)
        at.symlink_to(hop)
    elif kind == "link-fifo":
        os.mkfifo(outside / "fifo")
        at.symlink_to(outside / "fifo")
    elif kind == "fifo":
        os.mkfifo(at)
    elif kind == "char-device":
        os.mknod(at, 0o600 | 0o020000, os.makedev(1, 5))   # a private /dev/zero, never /dev's
    elif kind == "directory":
        at.mkdir()
    elif kind == "sparse-huge":                 # stands in for /dev/zero: 300 MiB of zeros
        with open(at, "wb") as fh:
            fh.truncate(EVENTS_MAX_BYTES + (44 << 20))


@pytest.mark.timeout(300)
@settings(max_examples=12, deadline=None, suppress_health_check=HEALTH)
@given(kind=st.sampled_from(KINDS), table=st.booleans())
def test_run_over_a_hostile_event_log_or_table_is_refused(done_campaign, tmp_path, kind,
                                                          table, monkeypatch):
    """`epcap run` resuming a campaign whose events.jsonl (or capacity_attempts.tsv, with
    the events made to need one more append) is a link, a FIFO, a device, a folder or a huge
    file: exit 2 naming it, within seconds, nothing outside the campaign changed."""
    import harness.campaign.cli as campaign_cli
    monkeypatch.setattr(campaign_cli, "make_launcher", lambda name, rb=None: FakeLauncher())
    book, done = done_campaign
    case = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copytree(done, case / "res" / "tiny")
    outside = case / "outside"
    outside.mkdir()
    name = "capacity_attempts.tsv" if table and kind != "sparse-huge" else "events.jsonl"
    make_hostile(case / "res" / "tiny" / name, kind, outside)
    before = digest(outside)
    res = run_cli("run", book, "--results", case / "res", timeout_s=60)
    if name == "events.jsonl" or res.code != 0:
        assert_bad_input(res, name)
    assert digest(outside) == before, "a file outside --results was changed"
    assert not (outside / "not-yet").exists()


def test_the_exact_probe_b17_a_linked_log_without_newline_is_left_whole(done_campaign,
                                                                       tmp_path):
    """rounds23 B17 as written: the outside file keeps its last line."""
    book, done = done_campaign
    shutil.copytree(done, tmp_path / "r17" / "tiny")
    precious = tmp_path / "outside" / "precious.txt"
    precious.parent.mkdir()
    precious.write_bytes((done / "events.jsonl").read_bytes() + b"user text, no newline")
    before = precious.read_bytes()
    log = tmp_path / "r17" / "tiny" / "events.jsonl"
    log.unlink()
    log.symlink_to(precious)
    res = run_cli("run", book, "--results", tmp_path / "r17")
    assert_bad_input(res, "events.jsonl", "symbolic link")
    assert precious.read_bytes() == before


@settings(max_examples=30, deadline=None, suppress_health_check=HEALTH)
@given(kind=st.sampled_from(KINDS), writer=st.sampled_from(["open", "append", "row"]))
def test_every_write_of_an_own_file_refuses_a_link_or_special(tmp_path, kind, writer):
    """The functions themselves: EventLog (its tail repair), EventLog.append on a log made
    hostile after it was opened, append_row: BadInput naming the file, the outside intact
    (a huge regular file is the repair's concern only: an append reads nothing)."""
    if kind == "sparse-huge" and writer != "open":
        return
    case = Path(tempfile.mkdtemp(dir=tmp_path))
    outside = case / "outside"
    outside.mkdir()
    at = case / ("capacity_attempts.tsv" if writer == "row" else "events.jsonl")
    log = EventLog(at) if writer == "append" else None
    make_hostile(at, kind, outside)
    before = digest(outside)
    with pytest.raises(BadInput) as caught:
        if writer == "open":
            EventLog(at)
        elif writer == "append":
            log.append("note", x=1)
        else:
            append_row(at, ATTEMPT_COLUMNS, {"model": "m"})
    assert str(at) in str(caught.value)
    assert digest(outside) == before


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")),
                      max_size=6),
       tail=st.binary(max_size=70_000).map(lambda b: b.replace(b"\n", b"")))
def test_the_bounded_tail_repair_cuts_exactly_the_partial_line(tmp_path_factory, lines, tail):
    """The chunked repair keeps every complete line and cuts only the unterminated tail,
    also when the tail is longer than one read chunk (64 KiB)."""
    path = tmp_path_factory.mktemp("tail") / "events.jsonl"
    whole = b"".join(line + b"\n" for line in lines)
    path.write_bytes(whole + tail)
    repair_tail(path)
    assert path.read_bytes() == whole


def test_a_dangling_event_log_is_not_read_as_absent(tmp_path):
    """A dangling link at events.jsonl is named, not taken for a new campaign's empty log."""
    (tmp_path / "events.jsonl").symlink_to(tmp_path / "nowhere")
    with pytest.raises(BadInput, match="file not found"):
        read_events(tmp_path / "events.jsonl")
