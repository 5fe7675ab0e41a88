"""One bounded reader for every log (harness/io/boundary/logs.py), whichever command reads
it. Before it, `epcap report` hung on a rank log that is a FIFO or a link to /dev/zero
(classify and parse did not: two readers, two rules), and a sparse log of NULs with no
newline took twice its size in memory in report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.io.boundary.logs import lines, open_log

from .conftest import HERE, assert_bad_input, run_cli

REPO = HERE.parents[1]
MEASURE_LOG = "rank0.log"


def measured_campaign(tiny: Path, results: Path) -> Path:
    """A tiny campaign run to the end (fake ranks); its directory."""
    res = run_cli("run", tiny, "--results", results, timeout_s=90)
    assert res.code == 0, res.text
    return results / "tiny"


def measure_cell(root: Path) -> Path:
    return next(p for p in sorted((root / "cells").iterdir()) if "__measure__" in p.name)


def report(root: Path, timeout_s: float = 60) -> tuple[int, str, int]:
    """`epcap report ROOT` in a child process: exit code, output, the child's peak RSS (KiB)."""
    probe = ("import resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "sys.stdout.write(r.stdout + r.stderr)\n"
             "print('MAXRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.exit(r.returncode)\n")
    proc = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "harness.cli",
                           "report", str(root)], capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, "PYTHONPATH": str(REPO)})
    out, _, rss = proc.stdout.rpartition("MAXRSS ")
    return proc.returncode, out + proc.stderr, int(rss.strip() or 0)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "directory"])
def test_report_does_not_hang_on_a_special_rank_log(tiny, tmp_path, fake_launcher, kind):
    root = measured_campaign(tiny, tmp_path / "r")
    log = measure_cell(root) / MEASURE_LOG
    log.unlink()
    if kind == "fifo":
        os.mkfifo(log)
    elif kind == "dev-zero-link":
        log.symlink_to("/dev/zero")
    else:
        log.mkdir()
    code, out, _ = report(root, timeout_s=60)          # before: never returned
    assert code == 2 and f"{log}: must be a regular file" in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_classify_and_parse_follow_the_same_rule(tiny, tmp_path, fake_launcher, kind):
    root = measured_campaign(tiny, tmp_path / "r")
    cell = measure_cell(root)
    log = cell / MEASURE_LOG
    log.unlink()
    os.mkfifo(log) if kind == "fifo" else log.symlink_to("/dev/zero")
    res = run_cli("classify", cell, timeout_s=20)       # before: "ok", rc 0, the log dropped
    assert res.code == 2 and f"{log}: must be a regular file" in res.err, res.text
    res = run_cli("parse", log, timeout_s=20)
    assert res.code == 2 and "regular file" in res.err, res.text


SPECIAL_KINDS = ("fifo", "dev-zero-link", "directory", "socket")


def make_special(path: Path, kind: str) -> None:
    """A non-regular entry at `path`, made under a temp dir (never a device itself)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(SPECIAL_KINDS),
       name=st.sampled_from(["rank0.log", "rank1.log", "node0.log", "slurm-7.out", "health0.err"]),
       state=st.sampled_from(["completed", "failed"]), as_json=st.booleans())
@example(kind="fifo", name="rank1.log", state="completed", as_json=False)
def test_classify_refuses_any_special_log_naming_it(tmp_path_factory, kind, name, state, as_json):
    """Every log `epcap classify` would read is listed through `logs.logs_in`, which refuses a
    special entry as `open_log` does. Seen failing before: judge.cell_logs kept `is_file()`
    entries only, so a FIFO rank1.log beside a good rank0.log gave `ok`, rc 0."""
    cell = tmp_path_factory.mktemp("c") / "M__b__measure__cap2p00__a1"
    cell.mkdir()
    (cell / "cell.json").write_text(json.dumps(
        {"launcher": {"state": state, "exit_code": 0 if state == "completed" else 1},
         "cell": {"backend": "b"}}))
    (cell / ("rank1.log" if name == "rank0.log" else "rank0.log")).write_text("hello\n")
    make_special(cell / name, kind)
    res = run_cli("classify", cell, *(["--json"] if as_json else []), timeout_s=20)
    assert_bad_input(res, f"{cell / name}: ")
    assert "regular file" in res.err or "cannot open" in res.err, res.err


@pytest.mark.slow
def test_report_memory_is_bounded_on_a_sparse_log(tiny, tmp_path, fake_launcher):
    root = measured_campaign(tiny, tmp_path / "r")
    code, out, base_rss = report(root)
    assert code == 0, out
    log = measure_cell(root) / MEASURE_LOG
    with open(log, "ab") as fh:                       # 512 MiB of NULs, no newline
        fh.truncate(log.stat().st_size + (512 << 20))
    code, out, rss = report(root, timeout_s=240)
    assert code == 0, out
    assert rss - base_rss < 160 << 10, f"report grew by {(rss - base_rss) >> 10} MiB"


def test_the_reader_refuses_special_files_and_bounds_lines(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(BadInput, match="regular file"):
            open_log(path)
    big = tmp_path / "big.log"
    big.write_bytes(b"a" * 5000 + b"\nshort\n" + b"b" * 3000)
    got = list(lines(big, max_line=1000))
    assert [(n, len(t)) for n, t in got] == [(1, 1000), (2, 5), (3, 1000)]
