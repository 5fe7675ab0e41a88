"""Mechanism: a results table is absent only when nothing is at its path
(harness.results.tables.read_table / read_rows, `os.path.lexists`): a FIFO, a device, a
folder, a dangling link or a link to a special file there is read through safeio's bounded
reader and refused, exit 2 naming it, never reported as "not found (stage not run)".

Seen failing on the code before (28ad19d): rounds23 B21, `timing.tsv` a FIFO (or a link to
/dev/zero): `epcap report` rc 0, saying "timing.tsv not found (time stage not run)";
read_table's `is_file()` check took every non-regular entry for an absent one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.results.layout import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    FRONTIER_TSV,
    SELECTION_TSV,
    TIMING_TSV,
)
from harness.results.rows import ATTEMPT_COLUMNS
from harness.results.tables import read_rows, read_table

from .conftest import assert_bad_input, run_cli

HEALTH = [HealthCheck.function_scoped_fixture]
TABLES = [TIMING_TSV, SELECTION_TSV, COMPARISON_TSV, FRONTIER_TSV, ATTEMPTS_TSV]
KINDS = ["fifo", "char-device", "directory", "dangling-link", "link-to-fifo", "socket"]


def make_special(at: Path, kind: str) -> None:
    """One entry at `at` that is not a regular file (devices made in the test's folder)."""
    import socket
    if at.exists() or at.is_symlink():
        at.unlink()
    if kind == "fifo":
        os.mkfifo(at)
    elif kind == "char-device":
        os.mknod(at, 0o600 | 0o020000, os.makedev(1, 5))     # a private /dev/zero
    elif kind == "directory":
        at.mkdir()
    elif kind == "dangling-link":
        at.symlink_to(at.with_name("nowhere"))
    elif kind == "link-to-fifo":
        os.mkfifo(at.with_name("a-fifo"))
        at.symlink_to(at.with_name("a-fifo"))
    else:
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(at.parent)         # bound by its name: a tmp path under xdist's popen-gwN/
        try:                        # can pass AF_UNIX's 108 bytes
            sock.bind(at.name)
        finally:
            os.chdir(here)
            sock.close()


def results_with(case: Path) -> Path:
    """A results folder `epcap report` accepts: a header-only attempts table, and an empty
    provenance.txt (so the folder is recognised whichever table is made special)."""
    res = case / "res"
    res.mkdir()
    (res / ATTEMPTS_TSV).write_text("\t".join(ATTEMPT_COLUMNS) + "\n")
    (res / "provenance.txt").write_text("")
    assert run_cli("report", res).code == 0
    return res


@pytest.mark.timeout(120)
@settings(max_examples=20, deadline=None, suppress_health_check=HEALTH)
@given(name=st.sampled_from(TABLES), kind=st.sampled_from(KINDS))
def test_report_names_a_special_table_instead_of_calling_it_absent(tmp_path, name, kind):
    """`epcap report` over a results folder whose table NAME is a special entry: exit 2
    naming it, no "not found (... stage not run)"."""
    res = results_with(Path(tempfile.mkdtemp(dir=tmp_path)))
    make_special(res / name, kind)
    result = run_cli("report", res, timeout_s=60)
    assert_bad_input(result, f"{res / name}: ")        # the file is the error's subject
    assert "not found (" not in result.text


@settings(max_examples=30, deadline=None, suppress_health_check=HEALTH)
@given(kind=st.sampled_from(KINDS), reader=st.sampled_from(["table", "rows"]))
def test_the_table_readers_refuse_a_special_entry(tmp_path, kind, reader):
    """read_table and read_rows: BadInput naming the file; only a missing path is absent."""
    case = Path(tempfile.mkdtemp(dir=tmp_path))
    assert read_table(case / TIMING_TSV) is None and read_rows(case / TIMING_TSV) == []
    make_special(case / TIMING_TSV, kind)
    with pytest.raises(BadInput) as caught:
        (read_table if reader == "table" else read_rows)(case / TIMING_TSV)
    assert TIMING_TSV in str(caught.value)


def test_the_exact_probe_b21_a_fifo_timing_tsv(tmp_path):
    """rounds23 B21 as written: a FIFO timing.tsv is named, exit 2."""
    res = results_with(tmp_path)
    os.mkfifo(res / TIMING_TSV)
    assert_bad_input(run_cli("report", res), "timing.tsv", "must be a regular file, got a FIFO")
