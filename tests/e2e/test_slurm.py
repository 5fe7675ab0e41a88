"""Against a real Slurm (scripts/ci-slurm.sh): failure classes, find/cancel, campaigns.

Skips with the reason where no Slurm answers (`sinfo` missing or failing); with
EPCAP_REQUIRE_SLURM=1 (set by .ci/run after starting Slurm) it fails instead.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from slurm_jobs import PY, SLEEP, Rb

from harness.api.backend import DEFAULT_FAILURE_PATTERNS, LaunchSpec
from harness.launch import slurm as S
from harness.launch import slurm_script as SS

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("slurm_up")]

ROOT = Path(__file__).resolve().parents[2]
EPCAP = [sys.executable, "-m", "harness.cli"]
REDUCED = ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
CORPUS_PY = ROOT / "tests" / "fixtures" / "uploads" / "corpus.py"


def wait_all(launcher: S.SlurmLauncher, handles: dict, limit_s: float) -> dict:
    """Poll every handle until all ended (or fail after limit_s)."""
    results, deadline = {}, time.monotonic() + limit_s
    while len(results) < len(handles):
        assert time.monotonic() < deadline, f"jobs still running: {set(handles) - set(results)}"
        for key, h in handles.items():
            if key not in results and (res := launcher.poll(h)) is not None:
                results[key] = res
        time.sleep(0.5)
    return results


def classify(result):
    from harness.taxonomy.judge import classify_logs
    return classify_logs(result.exit_code, result.state, result.log_paths,
                         DEFAULT_FAILURE_PATTERNS, rows=0)


def log_text(result) -> str:
    return "".join(p.read_text(errors="replace") for p in result.log_paths if p.exists())


# ---- finding and cancelling jobs -------------------------------------------------------------

def test_restarted_driver_finds_its_job_under_an_odd_name(tmp_path):
    campaign = "it's a \"camp\" $(touch PWNED)"
    first = S.SlurmLauncher(Rb(campaign))
    spec = LaunchSpec(argv=[PY, "-c", "import time; time.sleep(30)"], ntasks=1)
    h = first.submit("cellA", spec, tmp_path / "cellA", 300)
    try:
        again = S.SlurmLauncher(Rb(campaign))                     # a new driver
        found = again.find_existing("cellA", tmp_path / "cellA")
        assert found is not None and found.job_id == h.job_id
        assert again.find_existing("cellB", tmp_path / "cellB") is None
        out = S.run_cmd(["squeue", "-h", "-j", h.job_id, "-o", "%j"]).stdout.strip()
        assert out == SS.job_name(campaign, "cellA", tmp_path / "cellA")
        assert not list(tmp_path.rglob("PWNED*")) and not Path("PWNED").exists()
    finally:
        first.cancel(h)


def test_cancel_and_cancel_all(tmp_path):
    launcher = S.SlurmLauncher(Rb("e2e-cancel"))
    spec = LaunchSpec(argv=[PY, "-c", SLEEP], ntasks=1)
    one = launcher.submit("one", spec, tmp_path / "one", 300)
    two = launcher.submit("two", spec, tmp_path / "two", 300)
    launcher.cancel(one)
    assert wait_all(launcher, {"one": one}, 60)["one"].state == "cancelled"
    assert launcher.cancel_all("e2e-cancel") == [two.job_id]
    assert wait_all(launcher, {"two": two}, 60)["two"].state == "cancelled"
    launcher.cancel(one)                                          # already gone: no error


# ---- campaigns through `epcap run --launcher slurm` ------------------------------------------

def short_runbook(where: Path) -> Path:
    """corpus.short_runbook_text() as a file: REDUCED's selection in 13 Slurm jobs, not 21."""
    path = where / "short.yaml"
    path.write_text(load_corpus().short_runbook_text())
    return path


def run_epcap(launcher: str, results: Path, timeout: float = 240,
              runbook: Path = REDUCED) -> subprocess.CompletedProcess:
    return subprocess.run([*EPCAP, "run", str(runbook), "--launcher", launcher,
                           "--results", str(results)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def start_epcap(launcher: str, results: Path, runbook: Path = REDUCED) -> subprocess.Popen:
    """The driver in the background; its output goes to results/driver-<n>.out."""
    results.mkdir(parents=True, exist_ok=True)
    out = results / f"driver-{len(list(results.glob('driver-*.out')))}.out"
    with open(out, "w") as handle:
        proc = subprocess.Popen([*EPCAP, "run", str(runbook), "--launcher", launcher,
                                 "--results", str(results)], cwd=ROOT, stdout=handle,
                                stderr=subprocess.STDOUT, text=True)
    proc.out_path = out
    return proc


def finish(proc: subprocess.Popen, timeout: float) -> str:
    """Wait for a background driver; its output."""
    proc.wait(timeout=timeout)
    return proc.out_path.read_text()


def selection(results: Path) -> list[dict]:
    """capacity_selection.tsv rows without timing-dependent columns."""
    (path,) = results.rglob("capacity_selection.tsv")
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    drop = [c for c in (rows[0] if rows else {}) if "wall" in c or c.endswith("_ms")
            or "utc" in c or c == "cell_dir"]
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def jobs_under(results: Path, full: bool = False) -> list[tuple]:
    """(job id, state[, script]) of queued/running jobs whose batch script is under `results`."""
    out = S.run_cmd(["squeue", "-h", "-o", "%i|%T|%o"]).stdout
    rows = [line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2]
    mine = [r for r in rows if r[2].startswith(str(results.resolve()))]
    return [tuple(r) if full else (r[0], r[1]) for r in mine]


def wait_running_job(proc: subprocess.Popen, results: Path, limit_s: float = 180,
                     name_has: str = "") -> str:
    """Id of the first RUNNING job of the campaign (whose script path contains name_has)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.out_path.read_text()
        running = [i for i, st, cmd in jobs_under(results, full=True)
                   if st == "RUNNING" and name_has in cmd]
        if running:
            return running[0]
        time.sleep(0.2)
    raise AssertionError("no job of the campaign started running")


def submissions(results: Path) -> dict[str, int]:
    """Jobs sacct holds per cell directory under `results` (by the cell's job name)."""
    counts = {}
    for script in results.rglob(SS.SCRIPT_NAME):
        cell_dir = script.parent
        name = SS.script_meta(script)["job_name"]
        assert name == SS.job_name(campaign_of(), cell_dir.name, cell_dir)
        out = S.run_cmd(["sacct", "-X", "-n", "-P", "--name", name, "-o", "JobID",
                         "-S", "now-1days"]).stdout
        counts[cell_dir.name] = len([x for x in out.split() if x.strip()])
    return counts


def campaign_of() -> str:
    from harness.runbook.load import load_runbook
    return load_runbook(REDUCED).campaign


def load_corpus():
    """tests/fixtures/uploads/corpus.py (the session's shared campaign, the short runbook)."""
    spec = importlib.util.spec_from_file_location("upload_corpus_slurm", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    return corpus


@pytest.fixture(scope="module")
def local_run(slurm_up, tmp_path_factory):
    """The reference: the session's shared run of the reduced runbook with the local launcher
    (tests/fixtures/uploads/corpus.py; read only)."""
    return load_corpus().harness_campaign(tmp_path_factory.getbasetemp())


def per_stage_runbook(where: Path) -> Path:
    """short_runbook with `slurm.allocation: per-stage`, an idle limit that outlasts the
    driver's restart below, and one model (QWEN3_30B: its measure, validate and timing
    stages; the second model's runs doubled the test's time and added no allocation kind)."""
    text = load_corpus().short_runbook_text()
    text = "\n".join(line for line in text.splitlines()
                     if "name: DEEPSEEK_V2_LITE" not in line) + "\n"
    line = 'slurm: {nodes: 1, gpus_per_node: 0, time_limit: "00:05:00"}'
    assert line in text
    path = where / "per-stage.yaml"
    path.write_text(text.replace(line, line[:-1] + ", allocation: per-stage, "
                                 "allocation_idle_s: 120}"))
    return path


def campaign_events(results: Path) -> list[dict]:
    (path,) = results.glob("*/events.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def allocation_jobs(results: Path) -> dict[str, list[str]]:
    """Job ids sacct holds per allocation spool under `results` (by the runner's job name)."""
    jobs = {}
    for meta in results.rglob(f"{S.ALLOC_DIR}/*/{SS.ALLOC_FILE}"):
        name = json.loads(meta.read_text())["job_name"]
        out = S.run_cmd(["sacct", "-X", "-n", "-P", "--name", name, "-o", "JobID",
                         "-S", "now-1days"]).stdout
        jobs[meta.parent.name] = [x for x in out.split() if x.strip()]
    return jobs


def test_reduced_campaign_per_stage_killed_resumed_same_selection_as_local(tmp_path,
                                                                            local_run):
    """slurm.allocation: per-stage on the short reduced runbook (one model): the
    driver is SIGKILLed while a measure step runs inside its allocation; the resumed driver
    adopts that allocation (the same job runs the rest of the stage), reruns no finished
    cell, submits every cell once, and the selection is the local launcher's. Slurm jobs
    (sacct, by the runners' names; one each, no per-cell job) <= stages x models. Seen red:
    with one group per stage (measure and validate apart) 11 allocations opened and the
    resumed driver ran no later cell in the adopted one."""
    rb = per_stage_runbook(tmp_path)
    results = tmp_path / "res"
    proc = start_epcap("slurm", results, rb)
    step = wait_running_step(proc, results, "__measure__")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = len(campaign_events(results))
    assert jobs_under(results), "the killed driver's allocation should still be in Slurm"
    again = run_epcap("slurm", results, timeout=400, runbook=rb)
    assert again.returncode == 0, again.stdout + again.stderr
    evs = campaign_events(results)
    assert not [e for e in evs if e["ev"] == "cell_abandoned"]
    submits = Counter(e["cell"] for e in evs if e["ev"] == "cell_submit")
    finishes = Counter(e["cell"] for e in evs if e["ev"] == "cell_finish")
    assert len(submits) >= 6 and set(submits.values()) == {1}, submits
    assert set(finishes) == set(submits) and set(finishes.values()) == {1}, finishes
    # the step in flight at the kill: its start is the killed driver's, its finish the
    # resumed one's, in the allocation job that ran it before the kill
    (started,) = [e for e in evs[:killed_at] if e["ev"] == "cell_start"
                  and e.get("job_extra", {}).get("step") == step[1]
                  and e["job_extra"].get("spool") == step[0]]
    assert any(e["ev"] == "cell_finish" and e["cell"] == started["cell"]
               for e in evs[killed_at:])
    assert f"adopting job {started['job_id']}" in again.stdout
    after = [e for e in evs[killed_at:] if e["ev"] == "cell_start"
             and e.get("job_extra", {}).get("spool") == step[0]]
    assert after, "the resumed driver ran none of the stage's later cells in the allocation"
    jobs = allocation_jobs(results)
    assert all(len(ids) == 1 for ids in jobs.values()), jobs
    models, stages = 1, {e["stage"] for e in evs if e["ev"] == "cell_finish"}
    assert len(jobs) <= len(stages) * models, (sorted(jobs), stages)
    ran_in = {json.loads((d / S.JOB_FILE).read_text())["job_id"]
              for d in results.rglob("cells/*") if (d / S.JOB_FILE).is_file()}
    assert ran_in == {i for ids in jobs.values() for i in ids}     # no per-cell job
    expected = [row for row in selection(local_run) if row["model"] == "QWEN3_30B"]
    assert expected and selection(results) == expected
    deadline = time.monotonic() + 30
    while jobs_under(results) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not jobs_under(results)


def wait_running_step(proc: subprocess.Popen, results: Path, name_has: str,
                      limit_s: float = 180) -> tuple[str, str]:
    """(spool, step) of the first step of the campaign whose cell name has `name_has` and
    that the runner started but not finished."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.out_path.read_text()
        for started in sorted(results.rglob(f"{S.ALLOC_DIR}/*/step-*.started")):
            step = started.name[:-len(".started")]
            text = (started.parent / f"{step}.sh").read_text()
            if name_has in text and not (started.parent / f"{step}.rc").exists():
                return str(started.parent), step
        time.sleep(0.2)
    raise AssertionError("no step of the campaign started running")


def test_sigint_driver_cancels_its_jobs(tmp_path):
    proc = start_epcap("slurm", tmp_path)
    job = wait_running_job(proc, tmp_path)
    proc.send_signal(signal.SIGINT)
    out = finish(proc, 60)
    assert proc.returncode == 128 + signal.SIGINT, out
    deadline = time.monotonic() + 30
    while jobs_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert jobs_under(tmp_path) == []
    # slurmdbd records the end asynchronously: sacct may say PENDING for a moment after
    # squeue has dropped the job, so wait (bounded) for the accounting to catch up.
    deadline = time.monotonic() + 30
    state = S.query_state(job)
    while (state is None or not state.state.startswith("CANCELLED")) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
        state = S.query_state(job)
    assert state is not None and state.state.startswith("CANCELLED"), state


# ---- (b) failures reach the right taxonomy class, with their logs ----------------------------

@pytest.fixture(scope="module")
def failures(failure_jobs):
    """Wait until every failing job ended."""
    handles, owners = failure_jobs
    for key, sig in (("term", "TERM"), ("usr1", "USR1")):     # an outside signal, mid-run
        wait_started(handles[key], 120)
        S.run_cmd(["scancel", f"--signal={sig}", handles[key].job_id])
    results = {}
    for key in handles:
        results.update(wait_all(owners[key], {key: handles[key]}, 180))
    return results


def test_exit_3_is_a_crash_with_rank_logs(failures):
    res = failures["exit3"]
    assert (res.state, res.exit_code) == ("failed", 3)
    assert classify(res).status == "crash"
    assert [p.name for p in res.log_paths] == ["rank0.log", "rank1.log"]
    text = log_text(res)
    host = os.uname().nodename.split(".")[0]
    assert "rank 0 of 2" in text and "rank 1 of 2" in text and f"master {host}" in text


def wait_started(handle, limit_s: float) -> None:
    """Wait until every rank of a SLEEP job printed `started` (the job is running)."""
    deadline = time.monotonic() + limit_s
    ranks = [Path(handle.cell_dir) / f"rank{r}.log" for r in range(int(handle.extra["ntasks"]))]
    while not all(p.is_file() and "started" in p.read_text(errors="replace") for p in ranks):
        assert time.monotonic() < deadline, f"job {handle.job_id} never started"
        time.sleep(0.3)


def judged(res, cell_dir: Path):
    """The campaign's verdict of a finished job: judge_run over the cell's logs as
    pipeline.analysis reads them (rank logs and Slurm's slurm-<job>.out)."""
    from harness.taxonomy.judge import cell_logs, judge_run
    return judge_run(res.exit_code, res.state, cell_logs(cell_dir, res.log_paths),
                     DEFAULT_FAILURE_PATTERNS)


def test_slurm_memory_limit_is_a_configuration_failure(failures, failure_jobs):
    """slurmstepd's memory-limit kill is the runbook's limit, never a memory finding:
    catches the kill read as `does_not_fit` (data) instead of a configuration failure."""
    res = failures["oom"]
    assert res.state == "oom", res.detail
    verdict = judged(res, Path(failure_jobs[0]["oom"].cell_dir))
    assert verdict.status == "badflag", verdict.outcome.reason
    assert "slurm.mem_per_task" in verdict.outcome.reason
    assert "exceeded memory limit" in (verdict.outcome.line or "")
    assert "allocating" in log_text(res) and "memory limit" in log_text(res)


@pytest.mark.parametrize("key,signame", [("term", "SIGTERM"), ("usr1", "SIGUSR1")])
def test_scancel_signal_is_cancelled_not_crash(failures, failure_jobs, key, signame):
    """`scancel --signal=TERM|USR1` on a running job (sacct FAILED 15:0 / 10:0, srun's
    `tasks 0-1: Terminated`) was stopped from outside: catches it read as `crash` (or as
    unclassified) because no rank printed a signature."""
    res = failures[key]
    assert res.state == "failed", res.detail
    verdict = judged(res, Path(failure_jobs[0][key].cell_dir))
    assert verdict.status == "cancelled", verdict.outcome.reason
    assert signame in verdict.outcome.reason


def test_slurm_time_limit_is_timeout(failures):
    res = failures["slurm_timeout"]
    assert res.state == "timeout" and "TIMEOUT" in res.detail, res.detail
    assert classify(res).status == "timeout"
    assert "started" in log_text(res)


def test_no_log_progress_is_timeout_and_cancels(failures):
    res = failures["no_progress"]
    assert res.state == "timeout" and "no log growth" in res.detail
    assert classify(res).status == "timeout"


def test_a_cell_at_its_time_limit_is_warned_and_recorded_timeout_with_its_last_iteration(
        failures, failure_jobs):
    """Two ranks logging a dispatch row a second under a one-minute limit: Slurm's USR1
    (`--signal=B:USR1@30`, the default grace for a one-minute limit) reaches
    the batch shell while its step runs, the trap marks the cell and says it in the batch
    log, and the TIMEOUT is recorded `timeout` naming the warning and the last iteration
    both ranks logged. Catches: no --signal line (no mark), a trap bash defers until the
    step ends (the step runs in the foreground: the mark never comes before the kill), and
    a timeout recorded without its last iteration."""
    result, handle = failures["warned"], failure_jobs[0]["warned"]
    cell = Path(handle.cell_dir)
    assert result.state == "timeout" and "TIMEOUT" in result.detail, result.detail
    assert (cell / SS.WARNED_FILE).is_file(), sorted(p.name for p in cell.iterdir())
    warned_at = int((cell / SS.WARNED_FILE).read_text().split()[0])
    last = S.last_complete_iteration(result.log_paths)
    assert last is not None and last >= 1
    assert "warned (USR1) at " in result.detail
    assert f"last complete iteration {last}" in result.detail
    batch = (cell / f"slurm-{handle.job_id}.out").read_text()
    assert "[EPCAP_SLURM] USR1 at " in batch and "slurm.signal_grace_s" in batch
    # the ranks ran on to the limit (a row a second for a minute; the warning came at
    # most 30 s + Slurm's 60 s resolution before it): the warning did not stop them
    assert last >= 30
    # the warning came while the step ran, well before the kill (a trap that bash deferred
    # until the step ended runs at the kill, after the ranks' last line)
    assert warned_at <= (cell / "rank0.log").stat().st_mtime - 10
    assert classify(result).status == "timeout"


def test_a_step_of_an_allocation_at_its_limit_is_warned_through_the_runner(failures,
                                                                            failure_jobs):
    """slurm.allocation: per-stage, one cell in a one-minute allocation: Slurm's
    `--signal=B:USR1@30` reaches the step runner (the allocation's batch shell), which
    passes it to the running step; the cell's own trap marks it, and the allocation's
    TIMEOUT is the step's `timeout` with its last iteration. Catches a runner that does not
    forward USR1 (no mark) and a step result read as completed or node_fail."""
    result, handle = failures["warned_step"], failure_jobs[0]["warned_step"]
    cell, spool = Path(handle.cell_dir), Path(handle.extra["spool"])
    assert result.state == "timeout" and "TIMEOUT" in result.detail, result.detail
    assert (cell / SS.WARNED_FILE).is_file(), sorted(p.name for p in cell.iterdir())
    assert "warned (USR1) at " in result.detail and "last complete iteration" in result.detail
    assert (spool / f"{handle.extra['step']}.started").is_file()
    runner_log = (spool / f"slurm-{handle.job_id}.out").read_text()
    assert "[EPCAP_SLURM] USR1 at " in runner_log and "passed to step 1" in runner_log
    batch = (cell / f"slurm-{handle.job_id}.out").read_text()
    assert "[EPCAP_SLURM] USR1 at " in batch and "slurm.signal_grace_s" in batch


def test_campaign_stops_on_the_memory_limit_naming_the_field(tmp_path):
    """`epcap run` with slurm.mem_per_task too small for the process: Slurm kills the first
    job at the limit and the campaign stops (exit 3) naming the runbook field, with no
    `does_not_fit` row. Catches the kill published as a memory finding (campaign `done`,
    rc 0, does_not_fit rows)."""
    text = REDUCED.read_text()
    text = text.replace("models_file: ../../../runbooks/models.yaml",
                        f"models_file: {ROOT / 'runbooks' / 'models.yaml'}")
    text = text.replace("repositories: {epcap: ../../..}", f"repositories: {{epcap: {ROOT}}}")
    text = text.replace('time_limit: "00:05:00"}', 'time_limit: "00:05:00", mem_per_task: "40M"}')
    assert 'mem_per_task: "40M"' in text and str(ROOT) in text
    rb = tmp_path / "tight.yaml"
    rb.write_text(text)
    proc = run_epcap("slurm", tmp_path / "res", timeout=180, runbook=rb)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "slurm.mem_per_task" in proc.stderr and "exceeded memory limit" in proc.stderr
    (stopped,) = (tmp_path / "res").rglob("STOPPED.txt")
    assert "slurm.mem_per_task" in stopped.read_text()
    statuses = [json.loads(p.read_text()).get("status")
                for p in (tmp_path / "res").rglob("cells/*/cell.json")]
    for table in (tmp_path / "res").rglob("*.tsv"):
        with open(table, newline="") as handle:
            statuses += [r.get("status") for r in csv.DictReader(handle, delimiter="\t")]
    assert "badflag" in statuses and "does_not_fit" not in statuses, statuses
