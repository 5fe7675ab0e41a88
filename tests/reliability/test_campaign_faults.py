"""Faults around a running campaign (issue 17): a second run on the same directory, a lost
event log or cell directory, a read-only or full results disk, and secrets. Each ends with
its documented outcome (exit 2 naming the path and what to do), nothing lost, and a resume
that completes to the same tables as an uninterrupted run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.results.events import read_events
from harness.results.tables import read_rows

from .conftest import ENV_SECRET, HERE, TOKEN, assert_bad_input, assert_no_secret, run_cli

VOLATILE = {"started_utc", "finished_utc", "wall_s", "cell_dir"}
TABLES = ("capacity_attempts.tsv", "capacity_selection.tsv", "timing.tsv")


def tables(root: Path) -> dict[str, list[dict]]:
    """The campaign's TSVs without the columns that differ between two identical runs."""
    return {name: [{k: v for k, v in row.items() if k not in VOLATILE}
                   for row in read_rows(root / name)] for name in TABLES}


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under root (what 'nothing lost, nothing overwritten' compares);
    the lock's holder note is rewritten by every run that takes it."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".epcap.lock"}


def run(book: Path, results: Path, *extra: str, **kw):
    return run_cli("run", book, "--results", results, *extra, timeout_s=kw.get("timeout_s", 90))


@pytest.fixture
def reference(tiny, tmp_path_factory, fake_launcher) -> dict:
    """The tables of one uninterrupted tiny campaign."""
    results = tmp_path_factory.mktemp("reference")
    res = run(tiny, results)
    assert res.code == 0, res.text
    return tables(results / "tiny")


def test_uninterrupted_run_writes_campaign_done_after_the_report(tiny, tmp_path, fake_launcher):
    res = run(tiny, tmp_path / "r")
    assert res.code == 0, res.text
    root = tmp_path / "r" / "tiny"
    names = [e["ev"] for e in read_events(root / "events.jsonl")]
    assert names.index("report") < names.index("campaign_done") == len(names) - 1
    assert (root / "report" / "report.md").is_file()
    assert (root / ".epcap.lock").is_file()
    status = run_cli("status", root)
    assert status.code == 0 and "stage: done" in status.out and "None" not in status.out


# -- two runs on one directory ----------------------------------------------------------------
def test_second_run_is_refused_and_the_first_completes(tiny, tmp_path, reference,
                                                       fake_launcher):
    results = tmp_path / "r"
    env = {**os.environ, "FAKE_RANK_SLEEP_S": "0.4",
           "PYTHONPATH": str(HERE.parents[1])}
    first = subprocess.Popen([sys.executable, str(HERE / "run_fake.py"), "run", str(tiny),
                              "--results", str(results)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    events = results / "tiny" / "events.jsonl"
    deadline = time.monotonic() + 60
    while not (events.exists() and b"cell_start" in events.read_bytes()):
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "first run never started a cell"
        time.sleep(0.05)
    second = run(tiny, results)
    assert_bad_input(second, f"in use by pid {first.pid} on host {socket.gethostname()}",
                     str(results / "tiny"))
    out, _ = first.communicate(timeout=90)
    assert first.returncode == 0, out
    assert tables(results / "tiny") == reference
    starts = [e for e in read_events(events) if e["ev"] == "run_start"]
    assert len(starts) == 1, "the refused run wrote into the campaign"


def test_lock_is_released_when_the_holder_dies(tiny, tmp_path, fake_launcher, reference):
    """A SIGKILLed run leaves no stale lock: the next run resumes and completes."""
    results = tmp_path / "r"
    env = {**os.environ, "FAKE_RANK_SLEEP_S": "0.4", "PYTHONPATH": str(HERE.parents[1])}
    first = subprocess.Popen([sys.executable, str(HERE / "run_fake.py"), "run", str(tiny),
                              "--results", str(results)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events = results / "tiny" / "events.jsonl"
    deadline = time.monotonic() + 60
    while not (events.exists() and b"cell_start" in events.read_bytes()):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    first.kill()
    first.wait()
    res = run(tiny, results)
    assert res.code == 0, res.text
    assert tables(results / "tiny") == reference


# -- lost state --------------------------------------------------------------------------------
def test_lost_event_log_is_refused_and_fresh_never_overwrites(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run(tiny, results).code == 0
    root = results / "tiny"
    (root / "events.jsonl").unlink()
    before = snapshot(root)
    res = run(tiny, results)
    assert_bad_input(res, str(root), "no events.jsonl", "--fresh")
    assert snapshot(root) == before, "a refused resume changed the old directory"
    fresh = run(tiny, results, "--fresh")
    assert fresh.code == 0, fresh.text
    assert (results / "tiny-2" / "events.jsonl").is_file()
    assert snapshot(root) == before


def test_deleted_cell_directory_is_refused_on_resume(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run(tiny, results, "--until", "measure").code == 0
    root = results / "tiny"
    lost = next((root / "cells").glob("*__measure__*"))
    shutil.rmtree(lost)
    before = snapshot(root)
    res = run(tiny, results)
    assert_bad_input(res, lost.name, "is missing", "--fresh")
    assert snapshot(root) == before


# -- read-only and full results disks ----------------------------------------------------------
def can_mount() -> str | None:
    """Why tmpfs mounts cannot be used here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs"
    probe = Path(f"/tmp/epcap-mount-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                              capture_output=True, timeout=10)
        if done.returncode != 0:
            return f"mount refused: {done.stderr.decode(errors='replace').strip()}"
        subprocess.run(["umount", str(probe)], timeout=10)
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"mount unavailable: {exc}"
    finally:
        probe.rmdir()


MOUNT_PROBLEM = can_mount()


@contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True, timeout=10)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], timeout=10)


@pytest.mark.skipif(MOUNT_PROBLEM is not None, reason=str(MOUNT_PROBLEM))
def test_read_only_results_directory(tiny, tmp_path, reference, fake_launcher):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        assert run(tiny, disk, "--until", "measure").code == 0
        before = snapshot(disk / "tiny")
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, timeout=10)
        res = run(tiny, disk)
        assert_bad_input(res, "read-only")
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True, timeout=10)
        assert snapshot(disk / "tiny") == before, "nothing may be lost"
        res = run(tiny, disk)
        assert res.code == 0, res.text
        assert tables(disk / "tiny") == reference


@pytest.mark.skipif(MOUNT_PROBLEM is not None, reason=str(MOUNT_PROBLEM))
def test_full_disk_then_resume_after_freeing_space(tiny, tmp_path, reference, fake_launcher):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        assert run(tiny, disk, "--until", "measure").code == 0
        kept = {k: v for k, v in tables(disk / "tiny").items()}
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)     # unbuffered: fill to the last block
        try:
            while os.write(fd, b"\0" * 65536):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        res = run(tiny, disk)
        assert_bad_input(res, "the disk is full", "rerun the same command")
        filler.unlink()
        after = tables(disk / "tiny")
        for name, rows in kept.items():
            assert after[name][:len(rows)] == rows, f"{name}: rows lost"
        res = run(tiny, disk)
        assert res.code == 0, res.text
        assert tables(disk / "tiny") == reference


def test_unwritable_results_root_is_exit_2(tiny, tmp_path, fake_launcher):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    assert_bad_input(run(tiny, blocker / "results"), str(blocker))


# -- secrets -----------------------------------------------------------------------------------
def secret_book(tiny: Path, flags: list[str]) -> Path:
    """The tiny runbook under a file name holding the token, models file likewise, backend
    flags holding it too."""
    models = tiny.parent / f"models-{TOKEN}.yaml"
    shutil.copy(tiny.parent / "models.yaml", models)
    text = tiny.read_text().replace("models_file: models.yaml", f"models_file: {models.name}")
    text = text.replace("options: {launch: single}}",
                        "options: {launch: single}, flags: " + json.dumps(flags) + "}")
    book = tiny.parent / f"run-{TOKEN}.yaml"
    book.write_text(text)
    return book


@pytest.mark.parametrize("fail", [False, True], ids=["completes", "stops-on-assert"])
def test_tokens_reach_no_file_and_no_printed_line(tiny, tmp_path, monkeypatch, fake_launcher,
                                                  fail):
    monkeypatch.setenv("HF_TOKEN", ENV_SECRET)
    monkeypatch.setenv("MY_API_KEY", TOKEN)
    flags = [f"--hf-token={TOKEN}", "--api-key", ENV_SECRET, f"--note={TOKEN}"]
    book = secret_book(tiny, flags + (["--fake-fail"] if fail else []))
    results = tmp_path / "r"
    res = run(book, results)
    assert res.code == (3 if fail else 0), res.text
    root = results / "tiny"
    if fail:
        stopped = (root / "STOPPED.txt").read_text()
        assert "AssertionError" in stopped and "REDACTED" in stopped
        cell = json.loads(next((root / "cells").glob("*canary*/cell.json")).read_text())
        assert "REDACTED" in json.dumps(cell["failure"])
        # redacted at capture (harness/launch/capture.py): the rank log never held the token
        logs = list((root / "cells").glob("*/rank0.log"))
        assert logs and any(b"REDACTED" in p.read_bytes() for p in logs)
    status = run_cli("status", root)
    assert_no_secret(root, [res.out, res.err, status.out, status.err], [TOKEN, ENV_SECRET])


def test_publish_refuses_a_tree_holding_a_token_shape(tiny, tmp_path, monkeypatch,
                                                      fake_launcher):
    results = tmp_path / "r"
    assert run(tiny, results).code == 0
    root = results / "tiny"
    log = next((root / "cells").glob("*__measure__*/rank0.log"))
    with open(log, "a") as fh:
        fh.write(f"login ok with {TOKEN}\n")      # no variable holds it at publish time
    monkeypatch.delenv("HF_TOKEN", raising=False)
    res = run_cli("publish", root, "--repo", "org/name", "--dry-run", timeout_s=60)
    assert res.code == 1, res.text
    assert "rank0.log contains" in res.err and TOKEN not in res.text
