"""`epcap status` is the plan minus what stands: after `--model`, `--backend`, `--until`,
`--stage`, a lost stdout reader (SIGPIPE: the campaign goes on, its lines go to driver.log)
and a SIGKILL, status gives the state, the stage the campaign stands at and the runs left of
the full plan (those a plain `epcap run --dry-run` plans), never 0 with runs to go."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results.events import read_events

from .conftest import HERE, run_cli

MODELS = """models:
  QWEN3_30B: {hf_name: Qwen/Qwen3-30B-A3B, layers: 48, hidden: 2048, experts: 128, topk: 8,
              expert_ffn: 768}
  QWEN2_57B: {hf_name: Qwen/Qwen2-57B-A14B, layers: 28, hidden: 3584, experts: 64, topk: 8,
              expert_ffn: 2560}
"""
RUNBOOK = """campaign: duo
models_file: models.yaml
models:
  - {name: QWEN3_30B, layers: 2, hidden: 32, expert_ffn: 16}
  - {name: QWEN2_57B, layers: 2, hidden: 32, expert_ffn: 16}
shape: {seq: 128, micro_batch: 1, global_batch: 2, ep: 2}
backends:
  - {name: echo, kind: reference, module: echo, options: {launch: single}}
  - {name: ultraep, kind: reference, module: ultraep, options: {launch: single}}
capacity: {measure: "2.00", pad_multiple: 128, grid: exact}
measure: {warmup: 0, iters: 2}
timing: {warmup: 1, iters: 2, trials: 2, launches: 2}
limits: {run_timeout_s: 60, infra_retries: 1}
launcher: local
seed: 1234
"""
FULL_PLAN = 2 + 2 * 2 * (1 + 1 + 2)     # 2 canaries; per (model, backend): measure, validate, 2 launches


@pytest.fixture
def duo(tmp_path) -> Path:
    book = tmp_path / "book"
    book.mkdir()
    (book / "models.yaml").write_text(MODELS)
    (book / "duo.yaml").write_text(RUNBOOK)
    return book / "duo.yaml"


def status(camp: Path) -> dict:
    res = run_cli("status", camp, "--json")
    assert res.code == 0, res.text
    return json.loads(res.out)


def planned(runbook: Path, results: Path) -> int:
    """Runs a plain dry run plans for the campaign as it stands."""
    res = run_cli("run", runbook, "--results", results, "--dry-run")
    assert res.code == 0, res.text
    line = next(ln for ln in res.out.splitlines() if ln.startswith("runs planned:"))
    return int(line.split()[2])


def standing(camp: Path) -> int:
    return sum(1 for e in read_events(camp) if e["ev"] == "cell_finish")


def test_a_fresh_plan_is_the_full_plan(duo, tmp_path):
    assert planned(duo, tmp_path / "r") == FULL_PLAN


@pytest.mark.slow
@pytest.mark.parametrize("selector,stage", [
    (("--model", "QWEN3_30B"), "measure"),        # QWEN2_57B's measure is next
    (("--backend", "echo"), "preflight"),          # ultraep's canary waited too
])
def test_status_after_a_selector(duo, tmp_path, fake_launcher, selector, stage):
    res = run_cli("run", duo, "--results", tmp_path / "r", *selector)
    assert res.code == 0, res.text
    camp = tmp_path / "r" / "duo"
    doc = status(camp)
    left = FULL_PLAN - standing(camp)
    assert 0 < left < FULL_PLAN
    assert doc["runs_left"] == left == planned(duo, tmp_path / "r")
    assert doc["state"] == "stopped_after" and doc["stage"] == stage
    assert "stopped after the --model/--backend selection" in run_cli("status", camp).out
    assert run_cli("run", duo, "--results", tmp_path / "r").code == 0     # the rest
    doc = status(camp)
    assert (doc["state"], doc["runs_left"], doc["stage"]) == ("done", 0, "done")
    assert planned(duo, tmp_path / "r") == 0


def test_status_after_until_and_stage(duo, tmp_path, fake_launcher):
    camp = tmp_path / "r" / "duo"
    assert run_cli("run", duo, "--results", tmp_path / "r", "--until", "preflight").code == 0
    doc = status(camp)
    assert (doc["state"], doc["stage"], doc["runs_left"]) == ("stopped_after", "measure",
                                                              FULL_PLAN - 2)
    assert "stopped after preflight" in run_cli("status", camp).out
    assert run_cli("run", duo, "--results", tmp_path / "r", "--stage", "measure").code == 0
    doc = status(camp)
    assert (doc["state"], doc["stage"]) == ("stopped_after", "validate")
    assert doc["runs_left"] == FULL_PLAN - standing(camp) == planned(duo, tmp_path / "r") > 0


def _epcap(duo: Path, results: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "run_fake.py"), "run", str(duo),
                             "--results", str(results)], cwd=HERE.parents[1], **kw)


@pytest.mark.slow
def test_sigpipe_on_stdout_does_not_stop_the_campaign(duo, tmp_path):
    """`epcap run | head -1`: the reader leaves after one line; the campaign finishes (exit 0)
    and its later lines are in driver.log."""
    env = {**os.environ, "FAKE_RANK_SLEEP_S": "0.2"}
    proc = _epcap(duo, tmp_path / "r", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  env=env)
    assert proc.stdout.readline()
    proc.stdout.close()                                   # what `head -1` does
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
    camp = tmp_path / "r" / "duo"
    doc = status(camp)
    assert (doc["state"], doc["runs_left"]) == ("done", 0)
    log = (camp / "driver.log").read_text()
    assert "stdout's reader went away" in log and "results:" in log


@pytest.mark.slow
def test_status_after_a_kill(duo, tmp_path):
    env = {**os.environ, "FAKE_RANK_SLEEP_S": "0.3"}
    proc = _epcap(duo, tmp_path / "r", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                  env=env)
    camp = tmp_path / "r" / "duo"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not camp.is_dir() or standing(camp) < 4):
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    doc = status(camp)
    assert doc["state"] == "interrupted" and doc["signal"] == "unknown (the driver died)"
    assert doc["runs_left"] == FULL_PLAN - standing(camp) == planned(duo, tmp_path / "r") > 0
    assert doc["stage"] in ("measure", "validate", "time")
