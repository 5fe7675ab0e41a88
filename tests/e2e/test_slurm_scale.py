"""On the CI Slurm (scripts/ci-slurm.sh), Slurm at cluster scale, each check cheap:

- a job Slurm keeps in its queue is said, shown and bounded: the reduced campaign's first
  canary is submitted held (`sbatch --hold`, through `slurm.extra_sbatch`), so it stays
  PENDING with reason JobHeldUser; the driver prints the reason within one poll, `epcap
  status` shows it with the job id while the driver waits, and `limits.max_pending_s` ends
  the wait naming the reason (exit 3, the job cancelled);
- a dry run's slurm.sbatch, submitted by hand as written (`sbatch FILE`, nothing else), runs;
- with `slurm.cpus_per_rank`, each rank's CPU affinity is a set of its own (disjoint).

The warning before the time limit is checked in tests/e2e/test_slurm.py, whose one-minute
jobs already run there (it adds no wait of its own).

Skips where no Slurm answers; fails instead under EPCAP_REQUIRE_SLURM=1 (.ci/run)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_jobs import Rb, sbatch_by_hand

from harness.api.backend import LaunchSpec
from harness.launch import slurm as S
from harness.launch import slurm_script as SS

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("slurm_up")]

ROOT = Path(__file__).resolve().parents[2]
EPCAP = [sys.executable, "-m", "harness.cli"]
CORPUS_PY = ROOT / "tests" / "fixtures" / "uploads" / "corpus.py"
SLURM_LINE = 'slurm: {nodes: 1, gpus_per_node: 0, time_limit: "00:05:00"}'
LIMITS_LINE = "limits: {run_timeout_s: 60, infra_retries: 1}"
HELD = 'slurm: {nodes: 1, gpus_per_node: 0, time_limit: "00:05:00", extra_sbatch: ["--hold"]}'
MAX_PENDING_S = 10


def held_runbook(where: Path, max_pending_s: float) -> Path:
    """The short reduced runbook (tests/fixtures/uploads/corpus.py), its jobs submitted held
    and its queue wait bounded by `max_pending_s`."""
    spec = importlib.util.spec_from_file_location("upload_corpus_scale", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    text = corpus.short_runbook_text()
    assert SLURM_LINE in text and LIMITS_LINE in text
    limits = LIMITS_LINE.replace("}", f", max_pending_s: {max_pending_s}}}")
    path = where / "rb.yaml"
    path.write_text(text.replace(SLURM_LINE, HELD).replace(LIMITS_LINE, limits))
    return path


def events(results: Path) -> list[dict]:
    found = list(results.glob("*/events.jsonl"))
    if not found:
        return []
    return [json.loads(line) for line in found[0].read_text().splitlines() if line.strip()]


def test_a_held_job_is_said_shown_and_bounded_by_max_pending_s(tmp_path):
    """Catches: a pending job waited on in silence (no line, no event: the wait is found
    by the `cell_queued` event and the printed reason), `epcap status` saying only
    `running` while the job waits (it must say `pending: JobHeldUser` with the job id and
    that the ETA waits on the queue), and an unbounded wait (without the limit the driver
    never exits and the test fails at its deadline)."""
    rb = held_runbook(tmp_path, MAX_PENDING_S)
    results = tmp_path / "res"
    results.mkdir()
    out_path = tmp_path / "driver.out"
    with open(out_path, "w") as out:
        driver = subprocess.Popen([*EPCAP, "run", str(rb), "--launcher", "slurm", "--results",
                                   str(results), "--until", "preflight"], cwd=ROOT,
                                  stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while not any(e["ev"] == "cell_queued" for e in events(results)):
            assert driver.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.2)
        status = subprocess.run([*EPCAP, "status", str(results / "reduced")], cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert driver.poll() is None, "the driver stopped before status looked"
        code = driver.wait(timeout=90)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for ev in events(results):          # a held job left behind would wait forever
            if ev["ev"] == "cell_start" and ev.get("job_id"):
                S.run_cmd(["scancel", str(ev["job_id"])])
    said = out_path.read_text()
    evs = events(results)
    start = next(e for e in evs if e["ev"] == "cell_start")
    queued = next(e for e in evs if e["ev"] == "cell_queued")
    job = start["job_id"]
    # within one poll of its submission (the launcher asks Slurm at most every 0.5 s)
    assert queued["reason"] == "JobHeldUser" and queued["job_id"] == job
    assert queued["t"] - start["t"] <= 2 * S.MIN_POLL_S + 1.0, (start, queued)
    assert f"job {job} pending: JobHeldUser" in said
    assert status.returncode == 0, status.stderr
    assert f"pending: JobHeldUser (job {job}, cell {start['cell']}" in status.stdout
    assert "waiting on the queue" in status.stdout
    assert "the campaign stops after 10.0 s queued (limits.max_pending_s)" in status.stdout
    # the limit ends the wait, naming the job and the reason; the job is cancelled
    assert code == 3, said
    assert "over limits.max_pending_s" in said and "pending: JobHeldUser" in said
    stop = next(e for e in evs if e["ev"] == "campaign_stopped")
    assert stop["status"] == "pending" and f"job {job} pending: JobHeldUser" == stop["line"]
    assert any(e["ev"] == "cell_abandoned" and e["cell"] == start["cell"] for e in evs)
    # the job's pending time counts from its submission (Slurm's), not from the queued
    # event a poll later: seen 10.064 s after the submit, 0.065 s after it was said queued
    assert stop["t"] - start["t"] >= MAX_PENDING_S - 0.002      # events' times: ms
    reading = S.query_state(job)
    assert reading is not None and reading.state.startswith("CANCELLED"), reading
    after = subprocess.run([*EPCAP, "status", str(results / "reduced")], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert "stopped: pending in" in after.stdout and "JobHeldUser" in after.stdout


def short_runbook(where: Path) -> Path:
    """The short reduced runbook as it is (tests/fixtures/uploads/corpus.py)."""
    spec = importlib.util.spec_from_file_location("upload_corpus_scale_plain", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    path = where / "rb.yaml"
    path.write_text(corpus.short_runbook_text())
    return path


def test_a_dry_runs_batch_script_runs_when_submitted_by_hand_as_is(tmp_path):
    """`epcap run --dry-run`, then `sbatch <dry run>/cells/<canary>/slurm.sbatch` from
    another directory with no argument and no option. Catches: the script failing at once
    (its default output directory made with mktemp beside a cell that a dry run never
    creates), its batch log landing in the submitting directory (no #SBATCH --output), and
    a by-hand run writing into the campaign's own directory (the dry run creates none)."""
    results = tmp_path / "res"
    dry = subprocess.run([*EPCAP, "run", str(short_runbook(tmp_path)), "--launcher", "slurm",
                          "--results", str(results), "--until", "preflight", "--dry-run",
                          "--no-test-only"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    (script,) = [p for p in results.glob("*.dry-run/cells/*__echo__canary__*/slurm.sbatch")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done, job, state, code = sbatch_by_hand([str(script)], elsewhere, env)
    log = script.parent.parent / f"{script.parent.name}.rerun.{job}.out"
    assert (state, code) == ("COMPLETED", "0:0"), done.stdout + done.stderr + (
        log.read_text() if log.exists() else "(no batch log)")
    out = script.parent.parent / f"{script.parent.name}.rerun.{job}"
    rows = [line for line in (out / "rank0.log").read_text().splitlines()
            if "[MOE_DROP_DEBUG]" in line]
    assert rows, (out / "rank0.log").read_text()
    assert f"writing into {out}" in log.read_text()
    assert list(elsewhere.iterdir()) == []                   # nothing in the submitting dir
    assert [p.name for p in results.iterdir()] == [script.parents[2].name]   # no campaign dir



AFFINITY = ("import json, os\n"
            "status = open('/proc/self/status').read().splitlines()\n"
            "listed = next(l.split(':', 1)[1].strip() for l in status\n"
            "              if l.startswith('Cpus_allowed_list'))\n"
            "print('[AFFINITY]', json.dumps({'rank': int(os.environ['RANK']),\n"
            "      'cpus': sorted(os.sched_getaffinity(0)), 'listed': listed}), flush=True)\n")


def test_each_rank_runs_on_cores_of_its_own(tmp_path):
    """Two single-rank tasks with `slurm.cpus_per_rank: 1` on the CI Slurm (task/none: Slurm
    binds nothing, every task may use every core): each rank's affinity, read by the rank
    itself (sched_getaffinity and /proc/self/status Cpus_allowed_list), is one core and not
    the other's. Catches ranks left on the shared set (the script without its binding, or
    a binding by SLURM_LOCALID that gives every task the same slice)."""
    launcher = S.SlurmLauncher(Rb("e2e-scale", cpus_per_rank=1))
    cell = tmp_path / "bind"
    handle = launcher.submit("bind", LaunchSpec(argv=[sys.executable, "-c", AFFINITY],
                                                ntasks=2), cell, 120)
    deadline, result = time.monotonic() + 120, None
    while result is None:
        assert time.monotonic() < deadline, S.query_state(handle.job_id)
        result = launcher.poll(handle)
        time.sleep(0.5)
    assert result.state == "completed", result.detail
    seen = {}
    for log in result.log_paths:
        line = next(x for x in log.read_text().splitlines() if "[AFFINITY]" in x)
        doc = json.loads(line.split("[AFFINITY]", 1)[1])
        seen[doc["rank"]] = doc
    assert sorted(seen) == [0, 1]
    sets = [set(seen[r]["cpus"]) for r in (0, 1)]
    assert all(len(s) == 1 for s in sets) and not sets[0] & sets[1], seen
    assert [seen[r]["listed"] for r in (0, 1)] == [str(min(s)) for s in sets]
    batch = (cell / f"slurm-{handle.job_id}.out").read_text()
    assert "[EPCAP_SLURM] binding: 1 cores per task, 1 rank(s) per task" in batch
    assert "#SBATCH --cpus-per-task=1" in (cell / SS.SCRIPT_NAME).read_text()


ROWS = 6
COUNTED = ("import time\n"
           f"for it in range({ROWS}):\n"
           "    print(f'[MOE_DROP_DEBUG][dispatch] iter={it} layer=0 rank=0 expected_recv=128 '\n"
           "          'actual_valid_recv=100 budget=256', flush=True)\n"
           "    time.sleep(0.5)\n")


def rows_in(path: Path) -> int:
    return sum("[MOE_DROP_DEBUG][dispatch]" in ln for ln in path.read_text().splitlines())


def test_a_job_slurm_requeues_runs_again_and_keeps_the_earlier_runs_logs(tmp_path):
    """`slurm.requeue: true` and a running cell requeued (`scontrol requeue`, as preemption
    with requeue does): the driver's poll waits through REQUEUED/PENDING (no failure, no
    second job), the job runs the cell again from the top and completes; the cell's logs are
    the last run's, the first run's kept as rank0.log.requeued1, and the launcher detail says
    it was requeued once. The requeued job's ~2 min BeginTime wait is cut with `scontrol
    update StartTime=now` (an operator's command; the wait is Slurm's, not the driver's).
    Seen red: without the script's requeue lines the first run's rows were overwritten and
    the detail said nothing."""
    launcher = S.SlurmLauncher(Rb("e2e-requeue", requeue=True, time_limit="00:05:00",
                                   mem_per_task="256M"))
    cell = tmp_path / "cell"
    handle = launcher.submit("requeued", LaunchSpec(argv=[sys.executable, "-c", COUNTED],
                                                    ntasks=1), cell, 300)
    try:
        log, deadline = cell / "rank0.log", time.monotonic() + 120
        while not (log.is_file() and rows_in(log) >= 1):
            assert time.monotonic() < deadline, "the first run never logged a row"
            assert launcher.poll(handle) is None
            time.sleep(0.2)
        subprocess.run(["scontrol", "requeue", handle.job_id], check=True, timeout=30)
        requeued_at = deadline = time.monotonic()
        deadline += 60
        while (S.query_state(handle.job_id) or S.SlurmState("")).state != "PENDING":
            assert time.monotonic() < deadline, S.query_state(handle.job_id)
            assert launcher.poll(handle) is None, "a requeue is not the cell's end"
            time.sleep(0.2)
        # Not within the requeue's own second: slurmd revoked the first run's credential, and
        # a new one stamped in that same second is refused ("Killing non-startable batch
        # JobId=344: Job credential revoked", slurmctld.log; the job then ends FAILED 1:0).
        # Slurm's own BeginTime delay (~2 min) is what keeps a real requeue clear of this.
        time.sleep(max(0.0, 2.5 - (time.monotonic() - requeued_at)))
        subprocess.run(["scontrol", "update", f"JobId={handle.job_id}", "StartTime=now"],
                       check=True, timeout=30)
        result, deadline = None, time.monotonic() + 120
        while result is None:
            assert time.monotonic() < deadline, S.query_state(handle.job_id)
            result = launcher.poll(handle)
            time.sleep(0.2)
    finally:
        launcher.cancel(handle)
    assert result.state == "completed", result
    assert "requeued by Slurm 1 time(s)" in result.detail, result.detail
    assert rows_in(cell / "rank0.log") == ROWS
    assert 1 <= rows_in(cell / "rank0.log.requeued1") < ROWS
    assert len((cell / SS.REQUEUED_FILE).read_text().splitlines()) == 1
    assert not list(cell.glob("*.requeued2"))
    # the batch log holds both runs (--open-mode=append) and says which logs were kept
    batch = "".join(p.read_text() for p in cell.glob("slurm-*.out"))
    assert batch.count("epcap cell: writing into") == 2, batch
    assert "requeued by Slurm (restart 1)" in batch and batch.count("srun exit 0") == 1, batch
