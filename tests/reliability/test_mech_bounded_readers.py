"""Mechanism: every file a user names or a results directory holds is read through the
bounded readers (harness.io.safeio: regular file, size cap, no blocking open). Each reader
below, given any non-regular file (FIFO, /dev/zero, a directory, a socket, a link to one)
or an over-cap file, refuses it cleanly within a second instead of hanging or reading GB."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    os.symlink("/dev/zero", path)


def _directory(path: Path) -> None:
    path.mkdir()


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name(path.name + ".fifo"))
    os.symlink(path.name + ".fifo", path)


def _huge_sparse(path: Path) -> None:
    with open(path, "wb") as fh:
        fh.truncate(20 << 30)            # 20 GiB of holes: over every JSON/YAML cap


KINDS = {"fifo": _fifo, "dev_zero": _dev_zero, "directory": _directory, "socket": _socket,
         "link_to_fifo": _link_to_fifo, "huge": _huge_sparse}


def _campaign_json(p: Path):
    from harness.results.facts import read_facts
    return read_facts(p.parent)


def _trace(p: Path):
    from harness.loadmodel.traces import read_trace
    return read_trace([p])


def _placement(p: Path):
    from harness.forecast.cli import placement_file
    return placement_file(str(p), 8)


def _errata(p: Path):
    from harness.audit.errata import load_errata
    return load_errata(p)


def _cell_json(p: Path):
    from harness.taxonomy.cli import read_cell_json
    return read_cell_json(p.parent)


# reader -> the file name it reads (campaign.json and cell.json are found by name)
READERS = {"campaign.json": (_campaign_json, "campaign.json"), "trace": (_trace, "t.jsonl"),
           "placement": (_placement, "placement.txt"), "errata": (_errata, "errata.yaml"),
           "cell.json": (_cell_json, "cell.json")}


def _refused_quickly(fn, arg) -> BaseException | None:
    """Run fn(arg) in a daemon thread; the exception it raised (None: returned), or fail
    when it is still running after a second (a hang: a FIFO open or /dev/zero read)."""
    box: list = []

    def call():
        try:
            fn(arg)
            box.append(None)
        except BaseException as exc:  # noqa: BLE001 -- handed back to the test
            box.append(exc)
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout=3)
    assert not worker.is_alive(), f"{fn.__name__} still reading {arg} after 3 s"
    return box[0]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reader=st.sampled_from(sorted(READERS)), kind=st.sampled_from(sorted(KINDS)))
def test_every_reader_refuses_non_regular_and_huge_files(tmp_path_factory, reader, kind):
    from harness.loadmodel.traces import TraceError
    fn, name = READERS[reader]
    path = tmp_path_factory.mktemp("r") / name
    KINDS[kind](path)
    exc = _refused_quickly(fn, path)
    assert isinstance(exc, (BadInput, TraceError)), (reader, kind, repr(exc))
    assert any(w in str(exc) for w in ("regular file", "too large", "directory", "cannot open",
                                     "router_trace_rank")), str(exc)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_readers_still_read_regular_files(tmp_path, reader):
    fn, name = READERS[reader]
    path = tmp_path / name
    path.write_text({"campaign.json": "{}", "cell.json": '{"exit_code": 1}',
                     "t.jsonl": "", "placement.txt": "2: 0 0 0 0 1 1 1 1\n",
                     "errata.yaml": "fixes: []\n"}[name])
    try:
        fn(path)
    except BadInput as exc:             # a content problem, never the file kind
        assert "regular file" not in str(exc) and "too large" not in str(exc)
    except Exception as exc:  # noqa: BLE001 -- a trace error on empty content is fine
        assert "regular file" not in str(exc)
