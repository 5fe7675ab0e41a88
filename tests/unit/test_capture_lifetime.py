"""Capture processes never outlive their cell, and a local cell's rank<R>.log holds rank R's
lines only (a task that starts its own ranks gives each rank its own FIFO and capture; the
task's own lines go to node<T>.log)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.api.backend import LaunchSpec
from harness.launch.local import LocalLauncher, drain, start_capture

ROOT = Path(__file__).resolve().parents[2]


def test_a_capture_whose_rank_never_opens_its_fifo_gives_up(tmp_path):
    fifo = tmp_path / "f" / "out.fifo"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    t0 = time.monotonic()
    cap = start_capture(tmp_path, 0, {}, fifos=[(fifo, None)], fifo_timeout_s=1.0)
    assert cap.wait(timeout=30) == 1
    assert time.monotonic() - t0 < 30 and not fifo.exists()


def test_drain_releases_a_capture_still_waiting_for_its_writer(tmp_path):
    fifo = tmp_path / "f" / "out.fifo"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    cap = start_capture(tmp_path, 3, {}, fifos=[(fifo, None)], fifo_timeout_s=600)
    deadline = time.monotonic() + 20       # until it waits in open()
    while not _waits_on_fifo(cap.pid):
        assert time.monotonic() < deadline, "the capture never waited on its FIFO"
        time.sleep(0.05)
    t0 = time.monotonic()
    drain([cap])
    assert cap.poll() == 0 and time.monotonic() - t0 < 5
    assert (tmp_path / "rank3.log").read_bytes() == b""


def test_one_capture_copies_each_ranks_fifo_to_its_own_log_and_gives_up_on_a_silent_one(
        tmp_path):
    """A task's ranks share one capture (one thread per FIFO): each FIFO's lines land in its
    own log, redacted; a FIFO no rank opens is released after the timeout and removed, the
    others still copied to their end, and the capture exits 1 (as a single capture that
    gives up). Seen red: with the release left out, the silent FIFO and its folder were
    left behind; with one Capture shared by the threads, rank 1's lines landed in
    rank0.log."""
    fifo_dir = tmp_path / "f"
    fifo_dir.mkdir()
    pairs = [(fifo_dir / f"rank{r}.fifo", f"rank{r}.log") for r in range(3)]
    for fifo, _ in pairs:
        os.mkfifo(fifo)
    token = "hf_" + "a1B2" * 9
    cap = start_capture(tmp_path, 0, {}, fifos=pairs, fifo_timeout_s=1.0)
    for r in (0, 1):
        with open(pairs[r][0], "w") as out:
            out.write(f"line of rank {r}\ntoken {token}\n")
    assert cap.wait(timeout=30) == 1
    for r in (0, 1):
        text = (tmp_path / f"rank{r}.log").read_text()
        assert text.startswith(f"line of rank {r}\n") and token not in text, text
    assert (tmp_path / "rank2.log").read_bytes() == b""
    assert not any(fifo.exists() for fifo, _ in pairs) and not fifo_dir.exists()


def test_drain_releases_a_shared_capture_whose_ranks_never_started(tmp_path):
    pairs = [(tmp_path / f"rank{r}.fifo", f"rank{r}.log") for r in range(2)]
    for fifo, _ in pairs:
        os.mkfifo(fifo)
    cap = start_capture(tmp_path, 0, {}, fifos=pairs, fifo_timeout_s=600)
    deadline = time.monotonic() + 20       # until both its threads wait in open()
    while time.monotonic() < deadline and _threads_on_fifo(cap.pid) < 2:
        time.sleep(0.05)
    t0 = time.monotonic()
    drain([cap])
    assert cap.poll() == 0 and time.monotonic() - t0 < 5
    assert all((tmp_path / log).read_bytes() == b"" for _, log in pairs)


def _threads_on_fifo(pid: int) -> int:
    """Threads of `pid` blocked opening a FIFO (waiting for its writer)."""
    try:
        return sum(Path(f"/proc/{pid}/task/{t}/wchan").read_text() in
                   ("pipe_wait", "wait_for_partner", "fifo_open")
                   for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _waits_on_fifo(pid: int) -> bool:
    """Some thread of `pid` blocks opening a FIFO (the capture reads each FIFO in a thread
    of its own: the main thread's wchan is a futex, so every task's is read; reading only
    the main one never matched and the caller waited out its whole deadline)."""
    try:
        chans = [Path(f"/proc/{pid}/task/{tid}/wchan").read_text()
                 for tid in os.listdir(f"/proc/{pid}/task")]
        return any("fifo" in c or c in ("pipe_wait", "wait_for_partner") for c in chans) or \
            any("out.fifo" in os.readlink(f"/proc/{pid}/fd/{fd}") for fd in
                os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_a_task_that_fails_before_starting_its_ranks_leaves_no_capture(tmp_path):
    """A task of 3 ranks exits 2 at once: its rank captures end with the cell."""
    spec = LaunchSpec(argv=[sys.executable, "-c", "import sys; print('bad flag'); sys.exit(2)"],
                      ranks_per_task=3)
    launcher = LocalLauncher()
    handle = launcher.submit("c", spec, tmp_path, timeout_s=600)
    t0 = time.monotonic()
    while (result := launcher.poll(handle)) is None:
        time.sleep(0.05)
    assert result.exit_code == 2 and time.monotonic() - t0 < 8
    assert (tmp_path / "node0.log").read_text() == "bad flag\n"
    assert all((tmp_path / f"rank{r}.log").read_text() == "" for r in range(3))
    assert not _captures_of(tmp_path)


def _captures_of(cell: Path) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(ln.split()[0]) for ln in out.splitlines()
            if "harness.launch.capture" in ln and str(cell.resolve()) in ln]


@pytest.mark.slow
def test_each_rank_log_holds_one_rank(tmp_path):
    """The reference worker started once with --ranks 2 (launch: single) forks its ranks:
    each rank's lines land in its own rank<R>.log."""
    from harness.api.backend import RunRequest
    from harness.api.registry import load_backend
    from harness.results.layout import Cell
    from harness.runbook.load import load_runbook
    rb = load_runbook(ROOT / "tests" / "reliability" / "fixtures" / "tiny.yaml")
    cell = Cell(rb.campaign, "QWEN3_30B", "echo", "measure", "2.00", 1)
    spec = load_backend(rb.backend("echo")).command(RunRequest.for_cell(rb, cell, tmp_path))
    assert spec.ntasks == 1 and spec.ranks_per_task == 2
    launcher = LocalLauncher()
    handle = launcher.submit(cell.name, spec, tmp_path, timeout_s=120)
    while (result := launcher.poll(handle)) is None:
        time.sleep(0.1)
    assert result.exit_code == 0
    for rank in (0, 1):
        ranks = set(re.findall(r"\[MOE_DROP_DEBUG\]\[dispatch\].* rank=(\d+)",
                               (tmp_path / f"rank{rank}.log").read_text()))
        assert ranks == {str(rank)}
    assert not _captures_of(tmp_path)


def test_a_fork_asked_for_before_its_capture_failed_to_start_is_killed(tmp_path, monkeypatch):
    """The fork server forks a run while its captures start; when a capture fails to
    start, the forked child (blocked opening its log FIFO, no reader will come) is still
    named and killed with the cell, never left behind (nor its pid left unread, to be taken
    by the next cell's start). Seen red: with the pid not collected when the capture failed,
    no pid was named and the child was left blocked on its FIFO."""
    import harness.launch.local as local
    from harness.launch.forkserver import PREFORK_ENV, ForkServer

    pids: list[int] = []
    real_started = ForkServer.started

    def started(self):
        proc = real_started(self)
        pids.append(proc.pid)
        return proc

    def no_capture(*args, **kwargs):
        raise OSError("no capture today")

    monkeypatch.setattr(ForkServer, "started", started)
    monkeypatch.setattr(local, "start_capture", no_capture)
    spec = LaunchSpec(argv=[sys.executable, "-m", "json.tool"], env={PREFORK_ENV: "json"})
    launcher = LocalLauncher()
    try:
        with pytest.raises(OSError, match="no capture today"):
            launcher.submit("c", spec, tmp_path / "c", timeout_s=60)
        assert len(pids) == 1
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(pids[0]):
            time.sleep(0.05)
        assert not _alive(pids[0])
    finally:
        launcher.close()


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
