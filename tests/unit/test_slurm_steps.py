"""slurm.allocation: per-stage without Slurm: the step runner's script run by bash on a spool
folder (steps in order, exit status, cancel, USR1, done, idle end), the step file's quoting,
the rc protocol and the launcher's reading of it (Slurm's answers faked)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.api.launcher import JobHandle
from harness.campaign.driver import INTERLEAVED, group_name
from harness.campaign.dryrun import allocation_words
from harness.errors import BadInput
from harness.launch import slurm as S
from harness.launch import slurm_script as SS
from harness.launch.slurm_time import time_minutes
from harness.pipeline.stages import plan_cells
from harness.runbook.load import load_runbook
from harness.runbook.model import SlurmConfig
from harness.vocab import Stage

ROOT = Path(__file__).resolve().parents[2]


def start_runner(spool: Path, idle_s: int = 30) -> subprocess.Popen:
    """The runner script, as the allocation would run it, on `spool` (no Slurm needed)."""
    spool.mkdir(parents=True, exist_ok=True)
    opts = SS.allocation_options(["--job-name=x.rerun", "--time=5", "--ntasks=1"], "alloc", 10)
    script = spool / SS.ALLOC_SCRIPT
    script.write_text(SS.runner_script(opts, idle_s, {"group": "measure.M"}))
    env = {**os.environ, "SLURM_JOB_ID": "77"}
    return subprocess.Popen(["bash", str(script), str(spool)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def drop(spool: Path, n: int, body: str) -> None:
    tmp = spool / "tmp.sh"
    tmp.write_text("#!/bin/bash\n# a test step\n" + body + "\n")
    tmp.rename(spool / f"{SS.step_name(n)}.sh")


def wait_for(path: Path, limit_s: float = 10) -> str:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.05)
    return path.read_text()


def test_runner_runs_steps_in_order_records_exits_and_ends_on_done(tmp_path):
    """Catches: steps run out of order or twice, an exit status lost, a runner that does not
    end when the driver says the stage is done."""
    spool = tmp_path / "spool"
    proc = start_runner(spool)
    try:
        drop(spool, 1, f"echo one >> {tmp_path}/order")
        drop(spool, 2, f"echo two >> {tmp_path}/order; exit 3")
        first = SS.parse_step_rc(wait_for(spool / "step-000001.rc"))
        second = SS.parse_step_rc(wait_for(spool / "step-000002.rc"))
        assert first[0] == 0 and second[0] == 3 and first[1] <= first[2] <= second[1]
        assert (tmp_path / "order").read_text() == "one\ntwo\n"
        (spool / SS.DONE_FILE).write_text("stage done\n")
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "stage done after 2 step(s)" in out, out
    assert not (spool / SS.CLOSED_FILE).exists()


def test_a_cancelled_step_is_ended_and_one_cancelled_before_it_started_is_skipped(tmp_path):
    """Catches: a cancel file the runner ignores (the step runs to its end, 30 s), a step
    cancelled before it started that still runs."""
    spool = tmp_path / "spool"
    proc = start_runner(spool)
    try:
        drop(spool, 1, "sleep 30")
        wait_for(spool / "step-000001.started")
        t0 = time.monotonic()
        (spool / "step-000001.cancel").write_text("cancelled\n")
        (spool / "step-000002.cancel").write_text("cancelled\n")
        drop(spool, 2, f"touch {tmp_path}/ran")
        rc1 = SS.parse_step_rc(wait_for(spool / "step-000001.rc"))
        assert rc1[0] == 128 + signal.SIGTERM and time.monotonic() - t0 < 5
        rc2 = SS.parse_step_rc(wait_for(spool / "step-000002.rc"))
        assert rc2[0] == SS.CANCELLED_RC and rc2[1] == rc2[2]
        assert not (spool / "step-000002.started").exists() and not (tmp_path / "ran").exists()
        reading = S.step_reading((spool / "step-000001.rc").read_text(), cancelled=True)
        assert reading.state == "CANCELLED" and S.map_state(reading) == "cancelled"
    finally:
        proc.kill()


def test_usr1_reaches_the_running_step(tmp_path):
    """Slurm's --signal=B:USR1 goes to the runner (the batch shell); catches a runner that
    does not pass it on (the cell's own trap never marks the cell)."""
    spool = tmp_path / "spool"
    proc = start_runner(spool)
    try:
        drop(spool, 1, f"trap 'date +%s > {tmp_path}/warned' USR1\n"
                       "for _ in $(seq 30); do sleep 0.1; done")
        wait_for(spool / "step-000001.started")
        time.sleep(0.3)
        proc.send_signal(signal.SIGUSR1)
        wait_for(tmp_path / "warned", 5)
        assert SS.parse_step_rc(wait_for(spool / "step-000001.rc", 20))[0] == 0
    finally:
        proc.kill()
        proc.wait(timeout=5)


def test_an_idle_runner_ends_and_says_it_is_closed(tmp_path):
    """Catches a runner that holds its allocation for ever when the driver died."""
    spool = tmp_path / "spool"
    proc = start_runner(spool, idle_s=2)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "no step for 2 s" in out, out
    assert (spool / SS.CLOSED_FILE).exists()


@settings(max_examples=25, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)
       .filter(lambda t: "/" not in t and t not in (".", "..")))
def test_a_step_file_runs_its_cells_script_on_its_cell_whatever_the_name(tmp_path_factory,
                                                                          name):
    """Generated cell folder names (quotes, `$(...)`, spaces): the step file runs that cell's
    slurm.sbatch with the folder as its argument and its log there; catches an unquoted
    path."""
    base = tmp_path_factory.mktemp("step")
    cell = base / name
    cell.mkdir()
    (cell / SS.SCRIPT_NAME).write_text('printf "%s" "$1" > "$1/got"; echo logged\n')
    (base / "step.sh").write_text(SS.step_script(name, cell, 1))
    run = subprocess.run(["bash", str(base / "step.sh")], env={**os.environ,
                         "SLURM_JOB_ID": "9"}, cwd=base, capture_output=True, text=True,
                         timeout=10)
    assert run.returncode == 0, run.stderr
    assert (cell / "got").read_text() == str(cell)
    assert (cell / "slurm-9.out").read_text() == "logged\n"
    assert sorted(p.name for p in base.iterdir()) == sorted([name, "step.sh"])


@given(st.lists(st.integers(1, SS.MAX_STEPS), min_size=2, max_size=30, unique=True))
def test_step_names_list_in_their_order(numbers):
    assert sorted(SS.step_name(n) for n in numbers) == [SS.step_name(n) for n in sorted(numbers)]
    with pytest.raises(ValueError):
        SS.step_name(SS.MAX_STEPS + 1)


@given(st.integers(0, 255), st.integers(0, 10**9), st.integers(0, 10**5), st.booleans())
def test_rc_file_round_trip(rc, start, took, cancelled):
    """The runner's `<exit> <start> <end>` read back: exit code or signal, elapsed, state."""
    reading = S.step_reading(f"{rc} {start} {start + took}\n", cancelled)
    assert S.elapsed_seconds(reading.elapsed) == pytest.approx(took)
    assert S.exit_code_of(reading.exit_code) == (rc if rc <= 128 else -(rc - 128))
    expected = "completed" if rc == 0 else ("cancelled" if cancelled else "failed")
    assert S.map_state(reading) == expected
    assert S.step_reading("garbage", cancelled) is None


@given(st.sampled_from(["1", "30", "00:05:00", "01:30:00", "2-00", "1-12:00:00"]),
       st.integers(1, 60))
def test_allocation_time_is_the_cells_limits_summed(limit, planned):
    minutes = SS.allocation_minutes(limit, planned)
    assert minutes == pytest.approx(time_minutes(limit) * planned, abs=1)
    opts = SS.allocation_options(["--job-name=cell.rerun", f"--time={limit}", "--ntasks=2",
                                  "--signal=B:USR1@30"], "alloc", minutes)
    assert opts == ["--job-name=alloc", f"--time={minutes}", "--ntasks=2", "--signal=B:USR1@30"]
    assert SS.allocation_minutes("UNLIMITED", planned) == 0
    capped = SS.allocation_minutes(limit, planned, cap="3-00:00:00")
    assert capped == min(minutes, 3 * 1440)
    with pytest.raises(BadInput):
        SS.allocation_minutes("2-00", planned, cap="1-00")      # shorter than one cell


# ---- the launcher's side (Slurm's answers faked) -------------------------------------------

class FakeRunbook:
    def __init__(self):
        self.slurm = SlurmConfig(allocation="per-stage")
        self.campaign, self.path = "camp", None


def step_handle(tmp_path: Path, launcher: S.SlurmLauncher) -> JobHandle:
    spool, cell = tmp_path / "spool", tmp_path / "cell"
    spool.mkdir()
    cell.mkdir()
    (spool / "step-000001.sh").write_text("true\n")
    handle = launcher._handle("cell", cell, "41", 1, 60)
    handle.extra.update(spool=str(spool), step="step-000001")
    return handle


@pytest.mark.parametrize("rc,state", [("0 10 12", "completed"), ("3 10 12", "failed")])
def test_poll_reads_the_steps_rc_without_asking_slurm(tmp_path, monkeypatch, rc, state):
    launcher = S.SlurmLauncher(FakeRunbook())
    handle = step_handle(tmp_path, launcher)
    monkeypatch.setattr(S, "query_state", lambda job: pytest.fail("asked Slurm"))
    (Path(handle.extra["spool"]) / "step-000001.rc").write_text(rc)
    result = launcher.poll(handle)
    assert result.state == state and result.wall_s == 2


@pytest.mark.parametrize("slurm_state,started,state", [
    ("RUNNING", True, None), ("PENDING", False, None),
    ("COMPLETED", False, "node_fail"), ("CANCELLED", False, "node_fail"),
    ("TIMEOUT", True, "timeout"), ("COMPLETED", True, "failed"),
    ("NODE_FAIL", True, "node_fail")])
def test_poll_falls_back_to_the_allocations_state(tmp_path, monkeypatch, slurm_state,
                                                  started, state):
    """An allocation that ended before the step started: node_fail (retried in a new one);
    one that ended under it: its end (a time limit is the step's timeout); a runner that
    ended with a started step and no rc: failed, never completed."""
    launcher = S.SlurmLauncher(FakeRunbook())
    handle = step_handle(tmp_path, launcher)
    if started:
        (Path(handle.extra["spool"]) / "step-000001.started").write_text("10")
    monkeypatch.setattr(S, "query_state", lambda job: S.SlurmState(slurm_state, "0:0",
                                                                     "00:00:05", "scontrol"))
    result = launcher.poll(handle)
    assert (result.state if result else None) == state


def test_cancel_of_a_step_writes_its_cancel_file_and_scancels_nothing(tmp_path, monkeypatch):
    launcher = S.SlurmLauncher(FakeRunbook())
    handle = step_handle(tmp_path, launcher)
    monkeypatch.setattr(S, "run_cmd", lambda argv, **kw: pytest.fail(f"ran {argv}"))
    launcher.cancel(handle)
    assert (Path(handle.extra["spool"]) / "step-000001.cancel").is_file()


def test_a_restarted_driver_finds_the_step_from_the_cells_job_file(tmp_path, monkeypatch):
    launcher = S.SlurmLauncher(FakeRunbook())
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / SS.SCRIPT_NAME).write_text(SS.META_TAG + ' {"ranks": 2, "timeout_s": 60}\n')
    (cell / S.JOB_FILE).write_text(json.dumps({"job_id": "41", "job_name": "n",
                                               "spool": str(tmp_path / "sp"),
                                               "step": "step-000003"}))
    monkeypatch.setattr(S, "run_cmd", lambda argv, **kw: pytest.fail(f"ran {argv}"))
    found = launcher.find_existing("cell", cell)
    assert (found.job_id, found.extra["step"], found.extra["ntasks"]) == ("41", "step-000003", 2)
    assert S.poll_key(found) == "41.step-000003"


@given(st.integers(1, 3000), st.integers(0, 3000 * 60), st.integers(0, 3000 * 60))
def test_a_cell_needing_more_than_the_allocation_has_left_gets_a_new_one(limit_min, ran_s,
                                                                          need_s):
    """scontrol's TimeLimit - RunTime decides whether a step may go into the allocation;
    catches a step dropped into an allocation that ends under it (recorded a timeout)."""
    out = (f"JobId=5 JobState=RUNNING RunTime={ran_s // 3600:02d}:{ran_s % 3600 // 60:02d}:"
           f"{ran_s % 60:02d} TimeLimit={limit_min // 60:02d}:{limit_min % 60:02d}:00")
    left = limit_min * 60 - ran_s
    assert S.time_left_s(out) == pytest.approx(left)
    alloc = S.Allocation("g", Path("/nonexistent-spool"), "5", "n")
    S_try = S._try
    try:
        S._try = lambda argv: out
        assert alloc.open(need_s) == (left >= need_s)
        S._try = lambda argv: out.replace("RUNNING", "COMPLETED")
        assert not alloc.open(0)
    finally:
        S._try = S_try
    assert S.time_left_s("JobId=5 JobState=PENDING TimeLimit=UNLIMITED") == float("inf")


# ---- the driver's groups and the dry run's figures -------------------------------------------

@given(st.sampled_from(list(Stage)), st.sampled_from(list(Stage)),
       st.sampled_from(["A", "B"]), st.sampled_from(["A", "B"]))
def test_interleaved_stages_share_a_group_others_do_not(s1, s2, m1, m2):
    """measure/select/validate of one model are one allocation group; any other pair of
    (stage, model) differs. Catches a group per stage (capacity cells interleave: one
    allocation opened again and again)."""
    same = m1 == m2 and (s1 == s2 or {s1, s2} <= INTERLEAVED)
    assert (group_name(s1, m1) == group_name(s2, m2)) == same


def test_the_dry_run_counts_jobs_both_ways_and_the_idle_gpu_hours():
    rb = load_runbook(ROOT / "runbooks" / "tierb-b200-gbs8.yaml")
    cells = plan_cells(rb)
    lines = allocation_words(rb, cells, 8)
    groups = {group_name(p.stage, p.model) for p in cells}
    assert f"per-cell {len(cells)} (one per run); per-stage {len(groups)} " in lines[0]
    idle = ((len(cells) - len(groups)) * SS.STEP_GAP_S + len(groups) * SS.STEP_POLL_S) * 8
    assert f"per-stage {idle / 3600:.2f} = ({len(cells) - len(groups)} steps" in lines[1]
    assert rb.slurm.allocation == "per-stage" and len(groups) == 1 + 2 * len(rb.models)


@given(st.text("AB3_.-[]*?!", min_size=1, max_size=12).filter(lambda t: t not in (".", "..")))
@settings(max_examples=40, deadline=None)
def test_a_restarted_driver_finds_its_groups_newest_allocation_whatever_the_model(
        tmp_path_factory, model):
    """Generated model names (glob characters `[`, `*`, `?` among them): the newest spool of
    the group's key is found, another key's never. Catches a key used as a glob pattern."""
    root = tmp_path_factory.mktemp("alloc")
    key = f"time.{model}.0123abcd"
    for k, job in ((1, "7"), (2, "8")):
        (root / f"{key}.{k}").mkdir()
        (root / f"{key}.{k}" / SS.ALLOC_FILE).write_text(json.dumps({"job_id": job,
                                                                     "group": "g"}))
    (root / f"{key}x.3").mkdir()
    (root / f"{key}x.3" / SS.ALLOC_FILE).write_text(json.dumps({"job_id": "9"}))
    found = S.SlurmLauncher._found_allocation(root, key)
    assert (found.job_id, found.spool.name) == ("8", f"{key}.2")
