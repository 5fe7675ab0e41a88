"""SIGKILL the runner at random moments, resume each time: same selection, no lost or
duplicated attempt rows, no stale processes."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.results.events import read_events
from harness.results.rows import SELECTION_COLUMNS
from harness.results.tables import read_rows

ROOT = Path(__file__).resolve().parents[2]
REDUCED = ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
EPCAP = [sys.executable, "-m", "harness.cli", "run"]
KILLS = 4
CORPUS_PY = ROOT / "tests" / "fixtures" / "uploads" / "corpus.py"
NON_TIMING = [c for c in SELECTION_COLUMNS if c != "timing_capacity"]


def live_marked(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if f"EPCAP_CELL_DIR={marker}".encode() in (proc / "environ").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def finishes(results: Path) -> int:
    """cell_finish events written so far under `results`."""
    logs = list(results.rglob("events.jsonl"))
    return logs[0].read_text(encoding="utf-8").count('"cell_finish"') if logs else 0


def run(runbook: Path, results: Path, kill: tuple[int, float] | None = None) -> int | None:
    """Run the campaign; with `kill` = (n, delay), SIGKILL the runner (only) `delay` seconds
    after its n-th run finished: a kill in the middle of the campaign however fast its runs
    are (forked runs take ~0.5 s; a fixed delay could outlast the whole rest)."""
    proc = subprocess.Popen([*EPCAP, str(runbook), "--results", str(results)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    if kill is None:
        return proc.wait(timeout=900)
    target, deadline = finishes(results) + kill[0], time.monotonic() + 300
    while proc.poll() is None and finishes(results) < target and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        return proc.wait(timeout=kill[1])
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def rows_of(path: Path, columns) -> list[tuple]:
    return [tuple(r[c] for c in columns) for r in read_rows(path)]


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path, tmp_path_factory):
    # the uninterrupted run: the session's shared run of the same runbook (read only)
    spec = importlib.util.spec_from_file_location("upload_corpus_resume", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    base = corpus.harness_campaign(tmp_path_factory.getbasetemp())
    # the killed campaign: the same selection work without the timed-only backend and with one
    # timing launch (13 runs, not 21: the suite's time)
    short = tmp_path / "short.yaml"
    short.write_text(corpus.short_runbook_text())
    rng = random.Random(1129)
    killed = tmp_path / "killed"
    kills = 0
    while True:
        kill = (rng.randint(1, 2), rng.uniform(0.0, 0.6)) if kills < KILLS else None
        code = run(short, killed, kill=kill)
        if code is None:
            kills += 1
            continue
        assert code == 0
        break
    camp = killed / "reduced"
    assert kills == KILLS
    # same selection as the uninterrupted run, on every non-timing column
    assert rows_of(camp / "capacity_selection.tsv", NON_TIMING) == \
        rows_of(base / "capacity_selection.tsv", NON_TIMING)
    # finished cells never rerun, none missing: the same runs as the uninterrupted campaign
    def runs(path):
        return Counter((r["model"], r["backend"], r["purpose"], r["capacity"], r["status"])
                       for r in read_rows(path) if r["purpose"] in ("measure", "validate"))
    assert runs(camp / "capacity_attempts.tsv") == runs(base / "capacity_attempts.tsv")
    events = read_events(camp)
    finished = [e for e in events if e["ev"] == "cell_finish" and e["purpose"] != "canary"]
    attempts = read_rows(camp / "capacity_attempts.tsv")
    keys = [(r["model"], r["backend"], r["purpose"], int(r["attempt"])) for r in attempts]
    assert len(keys) == len(set(keys)), "duplicate attempt rows"
    assert Counter(keys) == Counter((e["model"], e["backend"], e["purpose"], int(e["attempt"]))
                                    for e in finished), "attempt rows != finished runs"
    # every attempt number ever started is accounted for: finished, or abandoned by a kill
    started = {e["cell"] for e in events if e["ev"] == "cell_submit"}
    closed = {e["cell"] for e in events if e["ev"] in ("cell_finish", "cell_abandoned")}
    assert started == closed
    per_key = Counter((e["model"], e["backend"], e["purpose"]) for e in events
                      if e["ev"] == "cell_submit")
    for (m, b, p), count in per_key.items():
        numbers = sorted(int(e["attempt"]) for e in events
                         if e["ev"] == "cell_submit" and (e["model"], e["backend"], e["purpose"])
                         == (m, b, p))
        assert numbers == list(range(1, count + 1))
    # each (model, backend) has exactly one timing row; no process outlives the campaign
    timing = [(r["model"], r["backend"]) for r in read_rows(camp / "timing.tsv")]
    assert len(timing) == len(set(timing)) == 4
    time.sleep(0.3)
    assert live_marked(str(camp.resolve())) == []
