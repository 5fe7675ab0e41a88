"""On the CI Slurm (scripts/ci-slurm.sh), what an HPC operator expects of the Slurm launcher:
a transient sbatch failure retried, a bad partition stopped at the dry run, a job that
finished while no driver watched adopted on resume, `--export=NONE` honoured, a user's
scancel classed `cancelled` and not retried, a container that would write outside its mounts
refused at load. Each runs the short reduced campaign up to preflight (two canary jobs).

Skips where no Slurm answers; fails instead under EPCAP_REQUIRE_SLURM=1 (.ci/run)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_jobs import sbatch_by_hand

from harness.launch import slurm as S
from harness.launch import slurm_script as SS

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("slurm_up")]

ROOT = Path(__file__).resolve().parents[2]
EPCAP = [sys.executable, "-m", "harness.cli"]
CORPUS_PY = ROOT / "tests" / "fixtures" / "uploads" / "corpus.py"
SLURM_LINE = 'slurm: {nodes: 1, gpus_per_node: 0, time_limit: "00:05:00"}'
FAIL = "sbatch: error: Batch job submission failed: "


def runbook(where: Path, slurm: str = SLURM_LINE, extra: str = "") -> Path:
    """The short reduced runbook (tests/fixtures/uploads/corpus.py) with this slurm line."""
    spec = importlib.util.spec_from_file_location("upload_corpus_ops", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    text = corpus.short_runbook_text()
    assert SLURM_LINE in text
    path = where / "rb.yaml"
    path.write_text(text.replace(SLURM_LINE, slurm) + extra)
    return path


def epcap_argv(rb: Path, results: Path, *args: str) -> list[str]:
    return [*EPCAP, "run", str(rb), "--launcher", "slurm", "--results", str(results),
            "--until", "preflight", *args]


def run_epcap(rb: Path, results: Path, *args: str, env: dict | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(epcap_argv(rb, results, *args), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def start_epcap(rb: Path, results: Path) -> subprocess.Popen:
    results.mkdir(parents=True, exist_ok=True)
    out = open(results / f"driver-{time.monotonic_ns()}.out", "w")   # closed with the test
    return subprocess.Popen(epcap_argv(rb, results), cwd=ROOT, stdout=out,
                            stderr=subprocess.STDOUT, text=True)


def events(results: Path) -> list[dict]:
    (path,) = results.glob("*/events.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def of(evs: list[dict], name: str, cell_has: str = "") -> list[dict]:
    return [e for e in evs if e["ev"] == name and cell_has in e.get("cell", "")]


def jobs_of_cell(cell_dir: Path) -> list[tuple[str, str]]:
    """(job id, state) of every job sacct holds under this cell's stable job name."""
    name = SS.script_meta(cell_dir / SS.SCRIPT_NAME)["job_name"]
    out = S.run_cmd(["sacct", "-X", "-n", "-P", "--name", name, "-o", "JobID,State",
                     "-S", "now-1days"]).stdout
    return [tuple(line.split("|", 1)) for line in out.splitlines() if line.strip()]


def running_job(proc: subprocess.Popen, results: Path, limit_s: float = 120) -> str:
    """Id of the first queued or running job whose batch script lies under `results`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the driver ended before any job ran"
        out = S.run_cmd(["squeue", "-h", "-o", "%i|%T|%o"]).stdout
        for line in out.splitlines():
            job, state, script = line.split("|", 2)
            if script.startswith(str(results.resolve())) and state in ("RUNNING", "PENDING"):
                return job
        time.sleep(0.2)
    raise AssertionError("no job of the campaign appeared")


def wait_state(job: str, prefix: str, limit_s: float = 120) -> str:
    """Slurm's state of a job once it starts with `prefix` (accounting may lag a little)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        reading = S.query_state(job)
        if reading and reading.state.startswith(prefix):
            return reading.state
        time.sleep(0.5)
    raise AssertionError(f"job {job} never reached {prefix}: {S.query_state(job)}")


def all_cells_ran_once(results: Path, limit_s: float = 60) -> None:
    """Each cell's stable job name holds exactly one job in sacct. Accounting records a job a
    moment after it ends (slurmctld -> accounting storage), so a cell whose job ended just
    before the driver exited is polled for until it appears; a second job would already be
    there (it was submitted, and ended, earlier)."""
    for script in results.rglob(SS.SCRIPT_NAME):
        deadline = time.monotonic() + limit_s
        jobs = jobs_of_cell(script.parent)
        while not jobs and time.monotonic() < deadline:
            time.sleep(0.5)
            jobs = jobs_of_cell(script.parent)
        assert len(jobs) == 1, (script.parent.name, jobs)


def test_a_transient_sbatch_failure_is_retried_and_the_campaign_goes_on(tmp_path):
    """An sbatch that once says `Socket timed out on send/recv operation` (a busy
    slurmctld): retried after the backoff, both canaries run once each, exit 0."""
    real = shutil.which("sbatch")
    wrap = tmp_path / "bin"
    wrap.mkdir()
    (wrap / "sbatch").write_text(
        "#!/bin/bash\n"
        f'case " $* " in *" --test-only "*) exec {real} "$@" ;; esac\n'
        f'if [ ! -e {tmp_path}/failed-once ]; then touch {tmp_path}/failed-once\n'
        f'  echo "{FAIL}Socket timed out on send/recv operation" >&2; exit 1; fi\n'
        f'exec {real} "$@"\n')
    (wrap / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{wrap}:{os.environ['PATH']}"}
    results = tmp_path / "res"
    out = run_epcap(runbook(tmp_path), results, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "failed-once").exists()
    assert "sbatch: transient failure (" in out.stderr and "retry 1 of" in out.stderr
    evs = events(results)
    assert [e["status"] for e in of(evs, "cell_finish")] == ["ok", "ok"]
    assert len(of(evs, "cell_submit")) == 2 and not of(evs, "cell_abandoned")
    all_cells_ran_once(results)


def telemetry(log: Path) -> list[str]:
    """The dispatch telemetry lines of a rank log (the rows a cell's numbers come from), in
    order (one task's spawned ranks interleave their lines)."""
    return sorted(line for line in log.read_text().splitlines() if "[MOE_DROP_DEBUG]" in line)


def test_a_cells_batch_script_rerun_by_hand_reproduces_it_elsewhere(tmp_path):
    """`sbatch slurm.sbatch DIR` on the real Slurm, nothing set by hand: the same
    telemetry rows and exit status as the cell's own job, written only into DIR; the cell
    directory is left byte for byte, and the by-hand job is not the cell's (`.rerun`)."""
    results = tmp_path / "res"
    out = run_epcap(runbook(tmp_path), results)
    assert out.returncode == 0, out.stdout + out.stderr
    (cell,) = [s.parent for s in results.rglob(SS.SCRIPT_NAME) if "__echo__" in s.parent.name]
    before = {p.name: p.read_bytes() for p in cell.iterdir()}
    mine = tmp_path / "mine"
    mine.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done, job, state, code = sbatch_by_hand([f"--output={mine}/slurm-%j.out",
                                             str(cell / SS.SCRIPT_NAME), str(mine)],
                                            tmp_path, env)
    assert (state, code) == ("COMPLETED", "0:0"), done.stdout + done.stderr
    assert telemetry(mine / "rank0.log") == telemetry(cell / "rank0.log") != []
    assert {p.name: p.read_bytes() for p in cell.iterdir()} == before
    # asked by id AND name: sacct -j alone can answer with an older job of the same id (job
    # ids restart with a controller's fresh state while slurmdbd keeps every earlier record;
    # CI once read the name "allocation" of such a job here)
    want = SS.script_meta(cell / SS.SCRIPT_NAME)["job_name"] + SS.RERUN_SUFFIX
    ids: list[str] = []
    for _ in range(40):             # the record reaches slurmdbd a moment after the job ends
        ids = S.run_cmd(["sacct", "-X", "-n", "-P", "--duplicates", "-j", job, "--name",
                         want, "-o", "JobID"]).stdout.split()
        if ids:
            break
        time.sleep(0.25)
    assert ids == [job], (ids, want, done.stdout)


def test_a_bad_partition_stops_at_the_dry_run_before_any_job(tmp_path):
    rb = runbook(tmp_path, SLURM_LINE.replace("nodes: 1", "partition: nosuchpart, nodes: 1"))
    results = tmp_path / "res"
    dry = run_epcap(rb, results, "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    line = next(i for i, text in enumerate(rb.read_text().splitlines(), 1) if "nosuchpart" in text)
    assert f"{rb}:{line}: slurm.partition: " in dry.stderr, dry.stderr
    assert "Invalid partition name specified" in dry.stderr
    real = run_epcap(rb, results)
    assert real.returncode == 2 and "Invalid partition name specified" in real.stderr
    assert not list(results.glob("*/events.jsonl"))            # nothing started
    out = S.run_cmd(["squeue", "-h", "-o", "%o"]).stdout
    assert str(results.resolve()) not in out


def test_a_job_that_completes_after_its_driver_was_killed_is_adopted(tmp_path):
    """SIGKILL the driver while a canary job runs; the job completes with no driver; the
    resumed driver adopts its result (no cell_abandoned, no second job, sacct: one job)."""
    rb, results = runbook(tmp_path), tmp_path / "res"
    proc = start_epcap(rb, results)
    job = running_job(proc, results)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert wait_state(job, "COMPLETED") == "COMPLETED"          # finished, nobody watching
    again = run_epcap(rb, results)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"adopting job {job}" in again.stdout
    evs = events(results)
    assert not of(evs, "cell_abandoned")
    adopted = [e for e in of(evs, "cell_start") if e.get("job_id") == job]
    assert len(adopted) == 1
    cell = adopted[0]["cell"]
    assert len(of(evs, "cell_submit", cell)) == 1
    assert [e["status"] for e in of(evs, "cell_finish", cell)] == ["ok"]
    second = max(i for i, e in enumerate(evs) if e["ev"] == "run_start")
    assert evs.index(of(evs, "cell_finish", cell)[0]) > second  # recorded by the resume
    assert jobs_of_cell(Path(adopted[0]["cell_dir"])) == [(job, "COMPLETED")]
    all_cells_ran_once(results)


def test_export_none_in_extra_sbatch_still_runs_the_cells(tmp_path):
    rb = runbook(tmp_path, SLURM_LINE.replace("}", ', extra_sbatch: ["--export=NONE"]}'))
    results = tmp_path / "res"
    out = run_epcap(rb, results)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [e["status"] for e in of(events(results), "cell_finish")] == ["ok", "ok"]
    assert all("#SBATCH --export=NONE" in p.read_text() for p in results.rglob("slurm.sbatch"))


def test_a_users_scancel_is_cancelled_and_not_retried(tmp_path):
    """infra_retries is 1 in this runbook: an infra class would run the canary again."""
    rb, results = runbook(tmp_path), tmp_path / "res"
    proc = start_epcap(rb, results)
    job = running_job(proc, results)
    subprocess.run(["scancel", job], check=True, timeout=60)
    proc.wait(timeout=120)
    assert proc.returncode == 1                                   # a failed canary: findings
    evs = events(results)
    (start,) = [e for e in of(evs, "cell_start") if e.get("job_id") == job]
    cell = start["cell"]
    assert [e["status"] for e in of(evs, "cell_finish", cell)] == ["cancelled"]
    key = cell.rsplit("__a", 1)[0]
    assert len(of(evs, "cell_submit", key)) == 1                   # not retried
    # Slurm's word, with the uid once the accounting has the end (scontrol's says no uid)
    assert wait_state(job, "CANCELLED by ").startswith("CANCELLED by ")


def test_a_container_whose_mounts_miss_the_results_is_refused_at_load(tmp_path):
    extra = ("container: {engine: pyxis, image: /nonexistent/image.sqsh, "
             'mounts: ["/lustre/fsw:/lustre/fsw"]}\n')
    results = tmp_path / "res"
    out = run_epcap(runbook(tmp_path, extra=extra), results)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "container.mounts: " in out.stderr and str(results.resolve()) in out.stderr
    assert not results.exists()                                   # nothing written
