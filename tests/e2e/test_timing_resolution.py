"""Launches added to a real (small) campaign keep the ones already run, and a
`timing.resolution` launches further rounds until the intervals are that narrow or the cap
is hit, saying which (docs/timing-verdicts.md#resolution); the audit judges the result VALID.

Before, `timing.launches` was part of the time cells' result fingerprint: raising it from 1
to 2 invalidated every time cell and re-ran all of them (a cells_invalidated event naming
the first round's cells, which this test forbids).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.events import read_events
from harness.results.tables import read_rows

ROOT = Path(__file__).resolve().parents[2]
CORPUS_PY = ROOT / "tests" / "fixtures" / "uploads" / "corpus.py"
EPCAP = [sys.executable, "-m", "harness.cli"]
UNTIL = ("--until", "time")     # the tables and the audit, not the report (its plots: the suite's time)


def runbook_text(timing: str) -> str:
    """The short reduced runbook (echo and ultraep, two models) with this timing line."""
    spec = importlib.util.spec_from_file_location("upload_corpus_resolution", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    text = corpus.short_runbook_text()
    old = "timing: {warmup: 1, iters: 2, trials: 2, launches: 1}"
    assert old in text
    return text.replace(old, "timing: {warmup: 1, iters: 2, trials: 2, " + timing + "}")


def epcap(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*EPCAP, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=env)


def time_finishes(camp: Path) -> list[str]:
    return [e["cell"] for e in read_events(camp / "events.jsonl")
            if e["ev"] == "cell_finish" and e.get("purpose") == "time"]


@pytest.mark.slow
def test_added_launches_keep_the_run_ones_and_resolution_says_why_it_stopped(tmp_path):
    rb, res = tmp_path / "rb.yaml", tmp_path / "res"
    rb.write_text(runbook_text("launches: 1"))
    first = epcap("run", rb, "--results", res, *UNTIL)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    camp = res / "reduced"
    before = time_finishes(camp)
    assert len(before) == 2 * 2                          # 2 models x 2 arms x 1 launch

    rb.write_text(runbook_text("launches: 2"))
    second = epcap("run", rb, "--results", res, *UNTIL)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    events = read_events(camp / "events.jsonl")
    assert not [e for e in events if e["ev"] == "cells_invalidated"]
    after = time_finishes(camp)
    assert after[:len(before)] == before                 # the round run is kept
    added = after[len(before):]
    assert len(added) == 4 and all(c.endswith("__a2") for c in added)
    assert {r["launches"] for r in read_rows(camp / "timing.tsv")} == {"2"}
    trials = read_rows(camp / "timing_trials.tsv")
    assert {r["launch"] for r in trials} == {"1", "2"}
    assert {r["stopped_by"] for r in read_rows(camp / "comparison.tsv")} == {"launches"}

    rb.write_text(runbook_text("launches: 2, resolution: 0.2, max_launches: 3"))
    third = epcap("run", rb, "--results", res, *UNTIL)
    assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-2000:]
    assert time_finishes(camp)[:len(after)] == after
    rows = read_rows(camp / "comparison.tsv")
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    for model_rows in by_model.values():
        stop = {r["stopped_by"] for r in model_rows}
        assert len(stop) == 1 and stop <= {"resolution", "max_launches"}
        launches = {int(r["launches"]) for r in model_rows}
        if stop == {"resolution"}:
            assert all(float(r["halfwidth"]) <= 0.2 and r["resolved"] == "true"
                       for r in model_rows)
        else:
            assert launches == {3} and any(r["resolved"] == "false" for r in model_rows)
    audit = epcap("audit", camp, "--json")
    assert '"VALID": 1' in audit.stdout, audit.stdout[-3000:]
