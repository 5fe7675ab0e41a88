"""End to end: the reduced runbook through `epcap run` (real processes), and the launcher."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.api.backend import LaunchSpec
from harness.campaign.store import choose_dir, mark_campaign
from harness.grid.capacity import budget_tokens, is_executable
from harness.launch import make_launcher
from harness.launch.local import LocalLauncher
from harness.results.events import read_events
from harness.results.tables import read_rows
from harness.runbook.load import load_runbook

ROOT = Path(__file__).resolve().parents[2]
REDUCED = ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
CORPUS_PY = ROOT / "tests" / "fixtures" / "uploads" / "corpus.py"
EPCAP = [sys.executable, "-m", "harness.cli"]


def epcap(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*EPCAP, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=kw.pop("timeout", 600), **kw)


def live_marked(marker: str) -> list[int]:
    """pids whose environment carries the launcher's cell marker under `marker`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"EPCAP_CELL_DIR={marker}".encode() in env:
            pids.append(int(proc.name))
    return pids


# -- launcher ---------------------------------------------------------------------------------

def wait(launcher, handle, limit=30.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        result = launcher.poll(handle)
        if result is not None:
            return result
        time.sleep(0.05)
    raise AssertionError("launcher never finished")


def test_local_launcher_env_logs_and_exit(tmp_path):
    code = ("import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'], "
            "os.environ['MASTER_ADDR'], os.environ['X']); raise SystemExit(int(os.environ['RANK']))")
    launcher = make_launcher("local")
    handle = launcher.submit("c", LaunchSpec([sys.executable, "-c", code], {"X": "y"}, ntasks=2),
                             tmp_path, 10)
    result = wait(launcher, handle)
    assert result.state == "failed" and result.exit_code == 1
    assert (tmp_path / "rank0.log").read_text().split() == ["0", "2", "127.0.0.1", "y"]
    assert (tmp_path / "rank1.log").read_text().startswith("1 2")
    assert len(set(handle.extra["pgids"])) == 2                     # one group per rank


def test_local_launcher_timeout_kills_the_group(tmp_path):
    code = "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    launcher = LocalLauncher()
    handle = launcher.submit("c", LaunchSpec([sys.executable, "-c", code], ntasks=1), tmp_path,
                             timeout_s=1.0)
    result = wait(launcher, handle)
    assert result.state == "timeout"
    time.sleep(0.3)
    assert live_marked(str(tmp_path.resolve())) == []               # grandchild gone too


def test_local_launcher_progress_is_not_a_timeout(tmp_path):
    code = "import time\nfor i in range(6):\n    print(i, flush=True); time.sleep(0.4)"
    launcher = LocalLauncher()
    handle = launcher.submit("c", LaunchSpec([sys.executable, "-c", code]), tmp_path, 1.0)
    assert wait(launcher, handle).state == "completed"


def test_cancel_from_an_earlier_driver(tmp_path):
    first = LocalLauncher()
    handle = first.submit("c", LaunchSpec(["sleep", "60"], ntasks=2), tmp_path, 100)
    assert len(live_marked(str(tmp_path.resolve()))) == 2
    found = LocalLauncher().find_existing("c", tmp_path)              # no handle: via /proc
    assert sorted(found.extra["pids"]) == sorted(handle.extra["pids"])
    LocalLauncher().cancel(handle)                                    # new driver, same handle
    time.sleep(0.2)
    assert live_marked(str(tmp_path.resolve())) == []
    assert LocalLauncher().find_existing("c", tmp_path) is None


def test_choose_dir_never_reuses_with_fresh(tmp_path):
    """Directories count as the campaign's by the record epcap wrote (mark_campaign), never by
    name: a bare folder named like the campaign is left alone."""
    assert choose_dir(tmp_path, "c", fresh=False) == tmp_path / "c"
    (tmp_path / "c").mkdir()
    assert choose_dir(tmp_path, "c", fresh=False) == tmp_path / "c-2"   # not epcap's: kept
    mark_campaign(tmp_path / "c", "c")
    assert choose_dir(tmp_path, "c", fresh=False) == tmp_path / "c"
    assert choose_dir(tmp_path, "c", fresh=True) == tmp_path / "c-2"
    (tmp_path / "c-2").mkdir()
    mark_campaign(tmp_path / "c-2", "c")
    assert choose_dir(tmp_path, "c", fresh=False) == tmp_path / "c-2"     # resume the newest
    assert choose_dir(tmp_path, "c", fresh=True) == tmp_path / "c-3"
    (tmp_path / "c-7").mkdir()                          # no record: never resumed, skipped
    assert choose_dir(tmp_path, "c", fresh=False) == tmp_path / "c-2"


def test_dry_run_tierb_without_gpus(tmp_path):
    out = epcap("run", ROOT / "runbooks" / "tierb-b200-gbs8.yaml", "--dry-run",
                "--no-test-only", "--results", tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "QWEN2_57B echo measure" in text and "unknown until measured" in text
    assert "budget = int(2.00 x 65536) = 131072, executable" in text
    assert "torchrun" in text and "estimated GPU-hours" in text
    assert "cells/QWEN2_57B__echo__measure__cap2p00__a1/rank<R>.log" in text
    # only the plan's scripts, beside (never inside) the campaign directory
    assert [p.name for p in tmp_path.iterdir()] == ["tierb-b200-gbs8.dry-run"]


# -- the reduced campaign end to end -----------------------------------------------------------

@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory):
    """The session's shared run of the reduced runbook (tests/fixtures/uploads/corpus.py),
    copied (a re-run below must not touch the shared one), with what `epcap run` printed."""
    spec = importlib.util.spec_from_file_location("upload_corpus_campaign", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    base = tmp_path_factory.getbasetemp()
    shared = corpus.harness_campaign(base)
    results = tmp_path_factory.mktemp("results")
    camp = corpus.copy(shared, results / shared.name)
    out = subprocess.CompletedProcess(["epcap", "run"], 0,
                                      corpus.harness_campaign_stdout(base), "")
    return camp, out


@pytest.mark.slow
def test_reduced_campaign_end_to_end(reduced_run):
    camp, out = reduced_run
    assert out.returncode == 0, out.stdout + out.stderr
    finished = [e for e in read_events(camp) if e["ev"] == "cell_finish"]
    assert f"done: {len(finished)} runs;" in out.stdout                # the count, not the words
    assert re.search(r"ETA error \(estimated/actual\) [0-9.]+;", out.stdout)   # measured, not n/a
    rb = load_runbook(REDUCED)
    attempts = read_rows(camp / "capacity_attempts.tsv")
    selection = {(r["model"], r["backend"]): r for r in read_rows(camp / "capacity_selection.tsv")}
    timing = {(r["model"], r["backend"]): r for r in read_rows(camp / "timing.tsv")}
    for model in rb.models:
        n = rb.shape.uniform_tokens(model.topk)
        for b in ("echo", "ultraep"):
            purposes = {r["purpose"] for r in attempts
                        if r["model"] == model.name and r["backend"] == b}
            assert {"measure", "validate"} <= purposes
            row = selection[(model.name, b)]
            assert is_executable(row["selected_capacity"], n)
            assert row["validated"] == "true"
            assert int(row["selected_budget_tokens"]) >= int(row["peak_actual_valid_recv"])
            assert budget_tokens(row["selected_capacity"], n) == int(row["selected_budget_tokens"])
        tcap = max((selection[(model.name, b)]["selected_capacity"] for b in ("echo", "ultraep")),
                   key=float)
        for b in ("echo", "ultraep", "moonep"):
            assert timing[(model.name, b)]["timing_capacity"] == tcap
    dnf = timing[("QWEN3_30B", "moonep")]
    assert dnf["status"] == "does_not_fit" and dnf["dispatch_ms_median"] == ""
    ok = timing[("DEEPSEEK_V2_LITE", "moonep")]
    assert ok["status"] == "ok" and float(ok["dispatch_ms_median"]) > 0
    keys = [(r["model"], r["backend"], r["purpose"], r["attempt"]) for r in attempts]
    assert len(keys) == len(set(keys))
    for r in attempts:
        cdir = camp / r["cell_dir"]
        doc = json.loads((cdir / "cell.json").read_text())
        assert doc["status"] == r["status"] and isinstance(doc["env_keys"], list)
        assert "env" not in doc and (cdir / "provenance.txt").is_file()
    assert (camp / "runbook.yaml").read_bytes() == REDUCED.read_bytes()
    assert "command_line" in (camp / "provenance.txt").read_text()


@pytest.mark.slow
def test_rerun_resumes_without_rerunning(reduced_run):
    camp, first = reduced_run
    assert first.returncode == 0
    before = (camp / "capacity_attempts.tsv").read_text()
    sel = (camp / "capacity_selection.tsv").read_text()
    events = (camp / "events.jsonl").read_bytes()
    out = epcap("run", REDUCED, "--results", camp.parent)
    assert out.returncode == 0, out.stderr
    # a finished campaign is frozen: it says so, where the report is, and writes nothing
    assert "campaign reduced" in out.stdout and "is done" in out.stdout
    assert "nothing to run; report: " in out.stdout
    assert (camp / "events.jsonl").read_bytes() == events
    assert (camp / "capacity_attempts.tsv").read_text() == before
    assert (camp / "capacity_selection.tsv").read_text() == sel
    status = epcap("status", camp)
    assert status.returncode == 0 and "stage: done" in status.stdout
    assert "state: done" in status.stdout
    assert "failures by class: does_not_fit 1" in status.stdout          # words, not a repr
    for text in (status.stdout, first.stdout, out.stdout):          # no Python reprs
        assert "{'" not in text and "': None" not in text and "baseline None" not in text
    doc = json.loads(epcap("status", camp, "--json").stdout)
    assert doc["state"] == "done" and doc["failures"] == {"does_not_fit": 1}
    assert {"campaign", "state", "pid", "host", "since", "stage", "runs_done", "runs_left",
            "eta_s", "failures"} <= set(doc)
    rows = (camp / "timing_launches.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["campaign", "model", "backend", "launch", "phase",
                                   "median_ms", "p10_ms", "p90_ms", "trials", "cell_dir",
                                   "backend_impl"]
    assert len(rows) > 1


@pytest.mark.slow
def test_assert_stops_the_campaign_with_exit_3(tmp_path):
    """UltraEP asserts on a bf16 router: exit 3 naming the cell, the log and the line."""
    text = REDUCED.read_text().replace(
        "{name: DEEPSEEK_V2_LITE, layers: 2,", "{name: DEEPSEEK_V2_LITE, router_dtype: bf16, layers: 2,")
    rb = tmp_path / "rb.yaml"
    rb.write_text(text.replace("../../../runbooks/models.yaml", str(ROOT / "runbooks/models.yaml")))
    out = epcap("run", rb, "--results", tmp_path / "res")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "DEEPSEEK_V2_LITE__ultraep__canary__cap2p00__a1" in out.stderr
    assert "rank0.log:" in out.stderr and "ultra_ep.cpp:909" in out.stderr
    camp = tmp_path / "res" / "reduced"
    events = read_events(camp)
    assert events[-1]["ev"] == "campaign_stopped" and events[-1]["status"] == "assert"
    assert not any(e.get("purpose") == "measure" for e in events)  # stopped before the matrix


@pytest.mark.slow
def test_sigterm_checkpoints_and_stops_children(tmp_path):
    proc = subprocess.Popen([*EPCAP, "run", str(REDUCED), "--results", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events_path = tmp_path / "reduced" / "events.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if events_path.exists() and any(e["ev"] == "cell_start" for e in read_events(events_path)):
            break
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 143
    events = read_events(events_path)
    assert events[-1]["ev"] == "checkpoint" and events[-1]["reason"] == "SIGTERM"
    abandoned = [e["cell"] for e in events if e["ev"] == "cell_abandoned"]
    assert abandoned
    for name in abandoned:         # marked so in its cell.json, not `running` forever
        doc = json.loads((tmp_path / "reduced" / "cells" / name / "cell.json").read_text())
        assert doc["status"] == "abandoned" and doc["abandoned"]["reason"]
    state = json.loads(epcap("status", tmp_path / "reduced", "--json").stdout)
    assert state["state"] == "interrupted" and state["signal"] == "SIGTERM" and state["when"]
    time.sleep(0.3)
    assert live_marked(str((tmp_path / "reduced").resolve())) == []
