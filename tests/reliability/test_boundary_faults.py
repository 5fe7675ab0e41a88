"""Faults at the boundaries: streams, external tools, URL credentials, a full disk, a killed
rewrite, a clock stepped back, an unreachable hub. Each test injects its fault and was seen
failing on the code before its fix (see docs/reliability.md, "Boundaries")."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harness.health import probe
from harness.results.provenance import repo_line
from harness.results.tables import read_rows

from .conftest import HERE, assert_bad_input, run_cli, valid_upload
from .test_campaign_faults import MOUNT_PROBLEM, tmpfs

REPO = HERE.parents[1]
PASSWORD = "PASSWORDalice0123456789"


def epcap(*argv: str, stdout=subprocess.PIPE, env: dict | None = None, timeout: float = 60,
          **kw) -> subprocess.CompletedProcess:
    """`python -m harness.cli ARGV` in a child process (real file descriptors)."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, **kw)


def campaign_log(tmp_path: Path) -> Path:
    root = tmp_path / "camp"
    root.mkdir()
    (root / "events.jsonl").write_text(json.dumps(
        {"ev": "campaign_start", "t": 1.0, "campaign": "x"}) + "\n")
    return root


# -- streams ---------------------------------------------------------------------------------------
def test_closed_stdout_is_named_not_a_nonetype_traceback(tmp_path):
    root = campaign_log(tmp_path)
    done = subprocess.run(f"{sys.executable} -m harness.cli status {root} --json >&-",
                          shell=True, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr
    assert "stdout: is closed" in done.stderr and "NoneType" not in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("as_json", [True, False])
def test_status_to_a_full_device_names_stdout_and_never_says_it_resumes(tmp_path, as_json):
    root = campaign_log(tmp_path)
    with open("/dev/full", "w") as full:
        done = epcap("status", str(root), *(["--json"] if as_json else []), stdout=full)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("epcap: error: stdout: cannot write"), done.stderr
    assert "(no path)" not in done.stderr and "resumes" not in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


# -- external tools ----------------------------------------------------------------------------------
def fake_tool(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    return folder


def test_git_missing_is_named_as_such(tmp_path, monkeypatch):
    empty = tmp_path / "nobin"
    empty.mkdir()
    repo = tmp_path / "clone"
    repo.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert repo_line(repo) == f"git-missing {repo}"
    res = run_cli("audit", tmp_path, "--git-repo", f"x={repo}", timeout_s=20)
    assert_bad_input(res, "git is not installed")
    assert "not a git checkout" not in res.err


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("git") is None,
                    reason="needs root (to give the clone to another user) and git")
def test_git_dubious_ownership_is_named_with_the_command(tmp_path, monkeypatch):
    repo = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 65534, 65534)
    monkeypatch.setenv("HOME", str(tmp_path))          # no safe.directory of the user's
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    assert repo_line(repo).startswith(f"git-refused {repo} (dubious ownership")
    res = run_cli("audit", tmp_path / "nothing-here", "--git-repo", f"x={repo}", timeout_s=20)
    assert_bad_input(res, "dubious ownership", f"git -C {repo} status", "safe.directory")
    assert "not a git checkout" not in res.err


def test_nvidia_smi_without_its_driver_is_not_ok(tmp_path, monkeypatch):
    bin_dir = fake_tool(tmp_path / "bin", "nvidia-smi",
                        "echo 'NVIDIA-SMI has failed because it couldn'\"'\"'t communicate "
                        "with the NVIDIA driver.' >&2\nexit 9\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    report = probe()
    assert not report.ok and report.status == "unhealthy", report
    assert "nvidia-smi failed (exit 9)" in report.failures[0]
    assert "communicate with the NVIDIA driver" in report.failures[0]


def test_nvidia_smi_non_utf8_output_is_blamed_on_the_tool(tmp_path, monkeypatch):
    bin_dir = fake_tool(tmp_path / "bin", "nvidia-smi", "printf '\\377\\376 garbage\\n'\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    report = probe()
    assert not report.ok
    assert "nvidia-smi's output is not UTF-8" in report.failures[0]
    res = run_cli("doctor", "--json", timeout_s=30)
    assert "not valid UTF-8: rename it" not in res.text and "Traceback" not in res.text


# -- URL credentials ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ("publish", "RESULTS", "--repo", f"https://alice:{PASSWORD}@huggingface.co/d/x"),
    ("audit", "RESULTS", "--git-repo", f"x=https://alice:{PASSWORD}@example.org/r.git"),
    ("audit", "RESULTS", "--git-repo", f"x=ssh://bob:{PASSWORD}@example.org/r.git"),
])
def test_url_credentials_are_never_echoed(tmp_path, argv):
    argv = tuple(str(tmp_path) if a == "RESULTS" else a for a in argv)
    res = run_cli(*argv, timeout_s=20)
    assert res.code == 2, res.text
    assert PASSWORD not in res.text, res.text


# -- disk, killed rewrites, clocks -------------------------------------------------------------------
@pytest.mark.skipif(MOUNT_PROBLEM is not None, reason=str(MOUNT_PROBLEM))
def test_a_full_disk_names_the_file(tiny, tmp_path, fake_launcher):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        assert run_cli("run", tiny, "--results", disk, "--until", "measure",
                       timeout_s=90).code == 0
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 65536):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        res = run_cli("run", tiny, "--results", disk, timeout_s=90)
        assert_bad_input(res, f"epcap: error: {disk / 'tiny'}/", "the disk is full")
        assert "(no path)" not in res.err


def test_temp_files_of_a_killed_rewrite_are_removed_on_the_next_start(tiny, tmp_path,
                                                                      fake_launcher):
    results = tmp_path / "r"
    assert run_cli("run", tiny, "--results", results, "--until", "measure",
                   timeout_s=90).code == 0
    root = results / "tiny"
    cell = next((root / "cells").iterdir())
    left = [root / ".capacity_attempts.tsv.k1ll3d_a.tmp", cell / ".cell.json.x9y8z7w6.tmp",
            root / "report" / ".report.md.abcdefgh.tmp"]
    (root / "report").mkdir(exist_ok=True)
    for path in left:
        path.write_text("half a table")
    keep = root / "notes.tmp"
    keep.write_text("the user's")
    assert run_cli("run", tiny, "--results", results, timeout_s=90).code == 0
    assert not any(p.exists() for p in left)
    assert keep.read_text() == "the user's"


def test_a_clock_stepped_back_writes_no_row_that_ends_before_it_starts(tiny, tmp_path,
                                                                       fake_launcher,
                                                                       monkeypatch):
    import harness.pipeline.analysis as analysis

    def a_day_ago() -> str:
        return (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    monkeypatch.setattr(analysis, "utc_now", a_day_ago)      # the clock steps back mid-run
    results = tmp_path / "r"
    assert run_cli("run", tiny, "--results", results, "--until", "measure",
                   timeout_s=90).code == 0
    rows = read_rows(results / "tiny" / "capacity_attempts.tsv")
    assert rows
    for row in rows:
        assert row["finished_utc"] >= row["started_utc"], row
        assert float(row["wall_s"]) >= 0


def test_a_clock_stepped_back_leaves_the_campaigns_durations_right(tiny, tmp_path,
                                                                  fake_launcher, monkeypatch):
    """The wall clock steps back an hour after the fifth event: the events' `t` labels go
    back, their monotonic readings do not, and the campaign's running span and ETA figures
    (campaign_stats) are measured from those: positive and no longer than the run took.
    Seen failing with durations from `t` (a running span of 0 s, no ETA figures)."""
    import time as real_time

    import harness.results.events as events_mod

    calls = [0]

    class SteppedClock:
        monotonic = staticmethod(real_time.monotonic)

        @staticmethod
        def time() -> float:
            calls[0] += 1
            return real_time.time() - (3600.0 if calls[0] > 5 else 0.0)

    monkeypatch.setattr(events_mod, "time", SteppedClock)
    results = tmp_path / "r"
    t0 = real_time.monotonic()
    assert run_cli("run", tiny, "--results", results, timeout_s=120).code == 0
    took = real_time.monotonic() - t0
    events = events_mod.read_events(results / "tiny" / "events.jsonl")
    assert min(e["t"] for e in events[5:]) < events[0]["t"] - 3000      # the labels went back
    stats = events_mod.campaign_stats(results / "tiny")
    assert 0 < stats["wall_span_s"] <= took + 1, (stats["wall_span_s"], took)
    assert stats["eta_error_at"]["50%"] is not None and stats["eta_error_at"]["50%"] > 0


# -- an unreachable hub --------------------------------------------------------------------------------
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_publish_to_a_hub_that_refuses_connections_stops_within_15_s(tmp_path):
    upload = valid_upload(tmp_path / "campaign")
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HUB_OFFLINE": "0",
           "HF_TOKEN": "hf_" + "x" * 34}
    t0 = time.monotonic()
    done = epcap("publish", str(upload), "--repo", "org/name", env=env, timeout=60)
    took = time.monotonic() - t0
    assert took < 15, f"publish took {took:.1f} s"
    assert done.returncode == 1, done.stderr
    assert "cannot be reached" in done.stderr and "Traceback" not in done.stderr
