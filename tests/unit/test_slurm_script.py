"""Slurm launcher without Slurm: batch script generation, quoting, state mapping, find/cancel."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.api.backend import LaunchSpec
from harness.api.launcher import JobHandle
from harness.errors import BadInput
from harness.launch import slurm as S
from harness.launch import slurm_script as SS
from harness.launch import slurm_time
from harness.runbook.model import SlurmConfig

HOSTILE = "x'; touch PWNED; echo \"$(touch PWNED2)\" `touch PWNED3` $HOME \\ ;"


class FakeRunbook:
    def __init__(self, slurm: SlurmConfig, campaign: str = "camp", path: str = "rb.yaml"):
        self.slurm, self.campaign, self.path = slurm, campaign, Path(path)


def spec(**kw) -> LaunchSpec:
    base = dict(argv=["python", "-m", "backends.reference", "--x", HOSTILE],
                env={"EPCAP_A": HOSTILE, "B": "plain"}, ntasks=4)
    base.update(kw)
    return LaunchSpec(**base)


# ---- names ----------------------------------------------------------------------------------

def test_job_name_stable_and_specific(tmp_path):
    a = SS.job_name("camp", "M__echo__measure__cap2p00__a1", tmp_path / "c")
    assert a == SS.job_name("camp", "M__echo__measure__cap2p00__a1", tmp_path / "c")
    assert a.startswith("epcap.camp.M__echo__measure__cap2p00__a1.")
    assert a != SS.job_name("camp", "M__echo__measure__cap2p00__a2", tmp_path / "c")
    assert a != SS.job_name("camp", "M__echo__measure__cap2p00__a1", tmp_path / "other")
    assert a != SS.job_name("camp2", "M__echo__measure__cap2p00__a1", tmp_path / "c")


# ---- #SBATCH options ------------------------------------------------------------------------

def test_options_from_runbook(tmp_path):
    cfg = SlurmConfig(partition="gpu", account="proj 1", nodes=2, gpus_per_node=8,
                      time_limit="01:00:00", mem_per_task="16G",
                      extra_sbatch=("--exclusive", "--constraint=h100&ib"))
    opts = SS.sbatch_options(cfg, spec(), "NAME", tmp_path)
    assert opts == ["--job-name=NAME.rerun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2",
                    "--cpus-per-task=1", "--time=01:00:00",
                    "--partition=gpu", "--account=proj 1", "--gres=gpu:8",
                    "--mem=32G", "--no-requeue", "--signal=B:USR1@120", "--export=ALL", "--exclusive", "--constraint=h100&ib"]


def test_resources_from_the_shape_never_mem_per_cpu(tmp_path):
    """A torchrun node task hosting 8 ranks asks for 8 CPUs, memory per node, no requeue:
    `--mem-per-cpu` with `--exclusive` would ask for that much times every CPU."""
    torch = spec(ntasks=1, nodes=1, gpus_per_node=8)
    cfg = SlurmConfig(gpus_per_node=8, mem_per_task="512G", extra_sbatch=("--exclusive",))
    opts = SS.sbatch_options(cfg, torch, "N", tmp_path)
    assert "--cpus-per-task=8" in opts and "--ntasks-per-node=1" in opts
    assert "--mem=512G" in opts and "--gres=gpu:8" in opts and "--no-requeue" in opts
    assert not [o for o in opts if o.startswith("--mem-per-cpu")]
    opts = SS.sbatch_options(SlurmConfig(mem_per_gpu="200G", cpus_per_task=14, requeue=True),
                             torch, "N", tmp_path)
    assert {"--mem-per-gpu=200G", "--cpus-per-task=14", "--requeue",
            "--open-mode=append"} <= set(opts)
    assert "--no-requeue" not in opts
    text = SS.batch_script(opts, torch, tmp_path, "python3", 8)
    assert '--cpus-per-task="${SLURM_CPUS_PER_TASK:-1}"' in text      # srun 22.05 inherits none
    with pytest.raises(BadInput) as err:
        SS.sbatch_options(SlurmConfig(mem_per_task="1G", mem_per_gpu="1G"), torch, "N", tmp_path)
    assert err.value.field == "slurm.mem_per_gpu"


def test_script_refuses_a_missing_workdir_and_a_missing_pyxis(tmp_path):
    """The script checks --chdir on the node (Slurm would run in /tmp) and, with pyxis, that
    srun knows --container-image; each says so in rank0.log, which the taxonomy stops on."""
    from harness.launch.container import ContainerLaunch
    from harness.taxonomy.judge import classify_logs
    gone = tmp_path / "no such dir"
    text = SS.batch_script([], spec(cwd=str(gone)), tmp_path, "python3",
                           container=ContainerLaunch(srun_options=("--container-image=x",)))
    assert "srun --help" in text and SS.PYXIS_OPTION in text
    body = text.split("srun --help")[0]                   # up to the pyxis check
    proc = subprocess.run(["bash", "-c", body, "slurm.sbatch", str(tmp_path)], cwd="/",
                          capture_output=True, text=True)
    assert proc.returncode == SS.SETUP_FAIL_EXIT, proc.stdout + proc.stderr
    line = (tmp_path / "rank0.log").read_text()
    assert f"working directory {gone} is missing" in line
    out = classify_logs(SS.SETUP_FAIL_EXIT, "failed", [tmp_path / "rank0.log"], None, rows=0)
    assert out.status == "badflag" and "FATAL setup" in out.line


def test_no_gres_without_gpus(tmp_path):
    opts = SS.sbatch_options(SlurmConfig(), spec(), "N", tmp_path)
    assert not any(o.startswith("--gres") for o in opts)
    opts = SS.sbatch_options(SlurmConfig(), spec(gpus_per_node=1), "N", tmp_path)
    assert "--gres=gpu:1" in opts


@pytest.mark.parametrize("cfg, field", [
    (SlurmConfig(partition="gpu\n#SBATCH --uid=0"), "slurm.partition"),
    (SlurmConfig(account="a\rb"), "slurm.account"),
    (SlurmConfig(time_limit="half an hour"), "slurm.time_limit"),
    (SlurmConfig(mem_per_task="16 gigs"), "slurm.mem_per_task"),
    (SlurmConfig(mem_per_gpu="lots"), "slurm.mem_per_gpu"),
    (SlurmConfig(cpus_per_task=0), "slurm.cpus_per_task"),
    (SlurmConfig(extra_sbatch=("--x=1", "--y\nrm -rf /")), "slurm.extra_sbatch[1]"),
    (SlurmConfig(extra_sbatch=("exclusive",)), "slurm.extra_sbatch[0]"),
])
def test_bad_values_refused_with_field(tmp_path, cfg, field):
    with pytest.raises(BadInput) as err:
        SS.sbatch_options(cfg, spec(), "N", tmp_path, where="rb.yaml")
    assert err.value.field == field and str(err.value).startswith("rb.yaml: ")


@pytest.mark.parametrize("text, minutes", [("30", 30), ("5:30", 5.5), ("01:00:00", 60),
                                           ("1-02", 1560), ("1-00:30:00", 1470),
                                           ("UNLIMITED", float("inf"))])
def test_time_minutes(text, minutes):
    assert slurm_time.TIME_RE.match(text) and slurm_time.time_minutes(text) == minutes


@pytest.mark.parametrize("seconds, text", [(0, "00:00:00"), (65, "00:01:05"),
                                           (1800.2, "00:30:01"), (86401, "1-00:00:01")])
def test_format_time_is_read_back(seconds, text):
    assert slurm_time.format_time(seconds) == text and slurm_time.TIME_RE.match(text)
    assert slurm_time.time_minutes(text) * 60 == -(-seconds // 1)


# ---- the script itself ----------------------------------------------------------------------

def sbatch_lines(text: str) -> list[str]:
    """What sbatch reads from #SBATCH lines (it splits them like a shell, as tested in e2e)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            words = shlex.split(line[len("#SBATCH "):])
            assert len(words) == 1, line
            out += words
    return out


def test_sbatch_lines_round_trip(tmp_path):
    cfg = SlurmConfig(account="it's \"mine\" $(id)", extra_sbatch=("--comment=a b; c",))
    opts = SS.sbatch_options(cfg, spec(), "N", tmp_path)
    text = SS.batch_script(opts, spec(), tmp_path, "/usr/bin/python3")
    assert sbatch_lines(text) == [opts[0], SS.rerun_output(tmp_path), *opts[1:]]


def test_env_key_must_be_a_name(tmp_path):
    with pytest.raises(BadInput):
        SS.batch_script([], spec(env={"A;rm -rf /": "1"}), tmp_path, "python3")
    with pytest.raises(BadInput):
        SS.batch_script([], spec(env={"A": "line1\nline2"}), tmp_path, "python3")


def fake_bin(tmp_path: Path) -> Path:
    """srun/scontrol stand-ins: srun runs its command like a task, recording the argv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text("#!/bin/sh\necho node-a; echo node-b\n")
    (bindir / "srun").write_text(
        "#!/bin/sh\n"
        "for a in \"$@\"; do case \"$a\" in --*) shift;; *) break;; esac; done\n"
        "export SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0\n"
        "exec \"$@\"\n")
    for name in ("scontrol", "srun"):
        (bindir / name).chmod(0o755)
    return bindir


def run_script(tmp_path: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    record = tmp_path / "argv.json"
    prog = ("import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, "
            f"open({str(record)!r}, 'w'))")
    sp = LaunchSpec(argv=["python3", "-c", prog, *argv], env=env, ntasks=4)
    text = SS.batch_script([], sp, tmp_path, "true", gpus_per_node=1)  # health: `true` passes
    script = tmp_path / "job.sh"
    script.write_text(text)
    path = f"{fake_bin(tmp_path)}:{os.environ['PATH']}"
    proc = subprocess.run(["bash", str(script), str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True,
                          env={"PATH": path, "SLURM_JOB_ID": "12345",
                               "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_JOB_NUM_NODES": "1"},
                          timeout=30)
    return proc


def test_script_passes_argv_and_env_verbatim(tmp_path):
    argv = [HOSTILE, "--flag=a b", "", "*", "$SLURM_JOB_ID"]
    proc = run_script(tmp_path, argv, {"EPCAP_A": HOSTILE})
    assert proc.returncode == 0, proc.stderr
    got = json.loads((tmp_path / "argv.json").read_text())
    assert got["argv"] == argv
    assert got["env"]["EPCAP_A"] == HOSTILE
    assert got["env"]["MASTER_ADDR"] == "node-a"
    assert got["env"]["MASTER_PORT"] == str(20000 + 12345 % 20000)
    assert got["env"]["RANK"] == "0" and got["env"]["WORLD_SIZE"] == "4"
    assert got["env"]["EPCAP_CELL_DIR"] == str(tmp_path)
    assert not list(tmp_path.glob("PWNED*"))


def test_script_propagates_rank_exit_code(tmp_path):
    sp = LaunchSpec(argv=["python3", "-c", "import sys; sys.exit(3)"], ntasks=1)
    script = tmp_path / "job.sh"
    script.write_text(SS.batch_script([], sp, tmp_path, "true"))
    env = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "SLURM_JOB_ID": "1",
           "SLURM_JOB_NODELIST": "n", "SLURM_JOB_NUM_NODES": "1"}
    proc = subprocess.run(["bash", str(script), str(tmp_path)], env=env, capture_output=True,
                          timeout=30, cwd=tmp_path)          # as epcap submits it
    assert proc.returncode == 3


def test_failed_health_step_stops_before_ranks(tmp_path):
    sp = LaunchSpec(argv=["touch", str(tmp_path / "RAN")], ntasks=1)
    script = tmp_path / "job.sh"
    script.write_text(SS.batch_script([], sp, tmp_path, "false", gpus_per_node=2))  # probe fails
    env = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "SLURM_JOB_ID": "1",
           "SLURM_JOB_NODELIST": "n", "SLURM_JOB_NUM_NODES": "1"}
    proc = subprocess.run(["bash", str(script), str(tmp_path)], env=env, capture_output=True,
                          timeout=30, cwd=tmp_path)          # as epcap submits it
    assert proc.returncode == S.PRE_CELL_FAIL_EXIT and not (tmp_path / "RAN").exists()


def test_a_rerun_by_hand_writes_only_into_its_directory(tmp_path):
    """`sbatch slurm.sbatch` with no argument writes into a new directory beside the cell,
    with DIR into DIR: the cell directory is left as it was, byte for byte (argv and
    environment paths inside the cell directory follow the output directory)."""
    cell = tmp_path / "cells" / "M__echo__measure__cap2p00__a1"
    cell.mkdir(parents=True)
    (cell / "rank0.log").write_text("the cell's own log\n")
    prog = ("import os, sys; open(sys.argv[1], 'w').write(os.environ['EPCAP_CELL_DIR'] + '|' "
            "+ os.environ['TRACE'] + '|' + os.getcwd())")
    sp = LaunchSpec(argv=["python3", "-c", prog, str(cell / "out.txt")], ntasks=1,
                    env={"TRACE": str(cell / "trace.bin")})
    script = cell / SS.SCRIPT_NAME
    script.write_text(SS.batch_script(SS.sbatch_options(SlurmConfig(), sp, "N", cell), sp, cell,
                                      sys.executable))
    before = {p.name: p.read_bytes() for p in cell.iterdir()}
    env = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "n", "SLURM_JOB_NUM_NODES": "1",
           "PYTHONPATH": str(Path(SS.__file__).resolve().parents[2])}
    by_hand = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
    assert by_hand.returncode == 0, by_hand.stderr
    (made,) = [p for p in cell.parent.iterdir() if p.name.startswith(cell.name + ".rerun.")]
    assert (made / "out.txt").read_text() == f"{made}|{made}/trace.bin|{made}"
    assert {p.name: p.read_bytes() for p in cell.iterdir()} == before
    given = tmp_path / "mine"
    given.mkdir()
    again = subprocess.run(["bash", str(script), str(given)], env=env, capture_output=True,
                           text=True, timeout=60, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (given / "out.txt").read_text() == f"{given}|{given}/trace.bin|{given}"
    assert {p.name: p.read_bytes() for p in cell.iterdir()} == before
    missing = subprocess.run(["bash", str(script), str(tmp_path / "nowhere")], env=env,
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert missing.returncode == SS.SETUP_FAIL_EXIT and "nowhere is missing" in missing.stderr
    assert "--job-name=N" in SS.submit_options("N", cell)[0] and SS.RERUN_SUFFIX == ".rerun"


def test_cpu_only_cells_skip_the_probe(tmp_path):
    sp = LaunchSpec(argv=["true"], ntasks=1)
    assert "harness.health" not in SS.batch_script([], sp, tmp_path, "py")
    text = SS.batch_script([], sp, tmp_path, "py", gpus_per_node=4)
    assert "py -m harness.health --pre-cell --require-gpus 4 --max-used-mib 1024" in text


def test_write_script_is_atomic_and_carries_meta(tmp_path):
    launcher = S.SlurmLauncher(FakeRunbook(SlurmConfig(partition="p")))
    path = launcher.write_script("cellX", spec(ntasks=3), tmp_path / "cell", 42.0)
    assert path.name == "slurm.sbatch" and not list(path.parent.glob(".*tmp*"))
    assert SS.script_meta(path) == {"cell": "cellX", "ntasks": 3, "ranks": 3, "timeout_s": 42.0,
                                   "job_name": SS.job_name("camp", "cellX", tmp_path / "cell")}
    assert "--job-name=epcap.camp.cellX." in path.read_text()


# ---- state mapping ----------------------------------------------------------------------------

@pytest.mark.parametrize("word, state", [
    ("COMPLETED", "completed"), ("FAILED", "failed"), ("TIMEOUT", "timeout"),
    ("NODE_FAIL", "node_fail"), ("OUT_OF_MEMORY", "oom"), ("CANCELLED by 0", "cancelled"),
    ("BOOT_FAIL", "node_fail"), ("PREEMPTED", "node_fail"), ("DEADLINE", "timeout"),
    ("PENDING", None), ("RUNNING", None), ("CONFIGURING", None), ("COMPLETING", None),
    ("SUSPENDED", None), ("", None), ("SOMETHING_NEW", "failed")])
def test_map_state(word, state):
    assert S.map_state(S.SlurmState(word)) == state


def test_memory_kill_turns_failed_and_cancelled_into_oom_only():
    assert S.map_state(S.SlurmState("FAILED"), memory_killed=True) == "oom"
    assert S.map_state(S.SlurmState("CANCELLED by 0"), memory_killed=True) == "oom"
    assert S.map_state(S.SlurmState("COMPLETED"), memory_killed=True) == "completed"
    assert S.map_state(S.SlurmState("TIMEOUT"), memory_killed=True) == "timeout"


@pytest.mark.parametrize("text, code", [("3:0", 3), ("0:0", 0), ("0:9", -9), ("137:0", 137),
                                        ("", None), ("x:y", None)])
def test_exit_code_of(text, code):
    assert S.exit_code_of(text) == code


def test_parsers():
    assert S.parse_sacct("FAILED|3:0|00:01:05\n") == S.SlurmState("FAILED", "3:0", "00:01:05",
                                                                    "sacct")
    assert S.parse_sacct("") is None
    assert S.parse_sacct("COMPLETED|0:0|00:00:09\nRUNNING|0:0|00:00:01\n").state == "RUNNING"
    out = "JobId=7 JobName=x JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 RunTime=00:01:30"
    assert S.parse_scontrol(out) == S.SlurmState("TIMEOUT", "0:15", "00:01:30", "scontrol",
                                                 "TimeLimit")
    assert S.parse_scontrol("garbage") is None
    assert slurm_time.elapsed_seconds("00:01:05") == 65
    assert slurm_time.elapsed_seconds("1-00:00:01") == 86401
    assert slurm_time.elapsed_seconds("") is None
    assert slurm_time.elapsed_seconds("1:2:3:4") is None


# ---- poll / find / cancel with Slurm commands faked ------------------------------------------

@pytest.fixture(autouse=True)
def no_poll_rate_limit(monkeypatch):
    monkeypatch.setattr(S, "MIN_POLL_S", 0.0)


def test_poll_rate_limited(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "MIN_POLL_S", 30.0)
    calls = []
    monkeypatch.setattr(S, "query_state", lambda job_id: calls.append(job_id) or
                        S.SlurmState("RUNNING"))
    h, launcher = handle(tmp_path), S.SlurmLauncher()
    assert launcher.poll(h) is None and launcher.poll(h) is None
    assert calls == ["77"]


def handle(tmp_path: Path, ntasks: int = 2, timeout_s: float | None = None) -> JobHandle:
    launcher = S.SlurmLauncher(FakeRunbook(SlurmConfig()))
    return launcher._handle("cell", tmp_path, "77", ntasks, timeout_s)


def fake_state(monkeypatch, reading):
    monkeypatch.setattr(S, "query_state", lambda job_id: reading)


def test_poll_memory_kill_in_rank_log_is_oom(tmp_path, monkeypatch):
    (tmp_path / "rank0.log").write_text("step 1\n")
    (tmp_path / "rank1.log").write_text(
        "slurmstepd-vm: error: StepId=77.1 exceeded memory limit (6e8 > 1e8), being killed\n")
    fake_state(monkeypatch, S.SlurmState("FAILED", "137:0", "00:00:04", "sacct"))
    result = S.SlurmLauncher().poll(handle(tmp_path))
    assert result.state == "oom" and result.exit_code == 137 and result.wall_s == 4
    assert "exceeded memory limit" in result.detail
    assert result.log_paths == [tmp_path / "rank0.log", tmp_path / "rank1.log"]


def test_poll_plain_failure_stays_failed(tmp_path, monkeypatch):
    (tmp_path / "rank0.log").write_text("Traceback ...\nValueError: memory layout\n")
    fake_state(monkeypatch, S.SlurmState("FAILED", "3:0", "00:00:01", "sacct"))
    result = S.SlurmLauncher().poll(handle(tmp_path))
    assert (result.state, result.exit_code) == ("failed", 3)


def test_poll_failed_health_probe_is_node_fail(tmp_path, monkeypatch):
    (tmp_path / "health0.log").write_text(
        "[EPCAP_HEALTH] FAIL n1: gpu3 (GPU-3): ecc: 2 uncorrected volatile ECC error(s)\n")
    fake_state(monkeypatch, S.SlurmState("FAILED", f"{S.PRE_CELL_FAIL_EXIT}:0", "", "sacct"))
    result = S.SlurmLauncher().poll(handle(tmp_path))
    assert result.state == "node_fail" and "gpu3 (GPU-3): ecc" in result.detail
    assert tmp_path / "health0.log" in result.log_paths


def test_exit_97_without_health_failure_is_plain_failure(tmp_path, monkeypatch):
    fake_state(monkeypatch, S.SlurmState("FAILED", f"{S.PRE_CELL_FAIL_EXIT}:0", "", "sacct"))
    assert S.SlurmLauncher().poll(handle(tmp_path)).state == "failed"


def test_poll_running_is_none(tmp_path, monkeypatch):
    fake_state(monkeypatch, S.SlurmState("PENDING", "0:0", "", "squeue"))
    assert S.SlurmLauncher().poll(handle(tmp_path)) is None


def test_unknown_job_waits_then_node_fail(tmp_path, monkeypatch):
    fake_state(monkeypatch, None)
    h = handle(tmp_path)
    launcher = S.SlurmLauncher()
    assert launcher.poll(h) is None
    monkeypatch.setattr(S, "UNKNOWN_GRACE_S", 0.0)
    assert launcher.poll(h).state == "node_fail"


def test_no_progress_cancels_and_reports_timeout(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(S, "run_cmd", lambda argv, **kw: calls.append(argv) or
                        subprocess.CompletedProcess(argv, 0, "", ""))
    fake_state(monkeypatch, S.SlurmState("RUNNING", "0:0", "", "sacct"))
    (tmp_path / "rank0.log").write_text("started\n")
    h, launcher = handle(tmp_path, ntasks=1, timeout_s=0.2), S.SlurmLauncher()
    assert launcher.poll(h) is None
    time.sleep(0.1)
    (tmp_path / "rank0.log").write_text("started\nprogress\n")        # growth resets the clock
    assert launcher.poll(h) is None
    time.sleep(0.3)
    result = launcher.poll(h)
    assert result.state == "timeout" and calls == [["scancel", "77"]]
    fake_state(monkeypatch, S.SlurmState("CANCELLED by 0", "0:15", "", "sacct"))
    assert launcher.poll(h).state == "timeout"                       # not "cancelled" later


def test_find_existing_without_script_asks_nobody(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "run_cmd", lambda *a, **k: pytest.fail("Slurm was queried"))
    assert S.SlurmLauncher().find_existing("cell", tmp_path) is None


def test_find_existing_picks_newest_job_of_the_name(tmp_path, monkeypatch):
    launcher = S.SlurmLauncher(FakeRunbook(SlurmConfig()))
    launcher.write_script("cell", spec(ntasks=3), tmp_path, 60.0)
    seen = []

    def fake(argv, **kw):
        seen.append(argv)
        out = "12\n" if argv[0] == "squeue" else "9\n12\n"
        return subprocess.CompletedProcess(argv, 0, out, "")
    monkeypatch.setattr(S, "run_cmd", fake)
    found = launcher.find_existing("cell", tmp_path)
    assert found.job_id == "12" and found.extra["ntasks"] == 3 and found.extra["timeout_s"] == 60
    name = SS.job_name("camp", "cell", tmp_path)
    assert all(name in argv for argv in seen)


def test_cancel_all_matches_prefix_exactly(monkeypatch):
    calls = []

    def fake(argv, **kw):
        calls.append(argv)
        out = "5|epcap.c1.cellA.1234\n6|epcap.c10.cellA.1234\n7|other\n8|epcap.c1.cellB.99\n"
        return subprocess.CompletedProcess(argv, 0, out if argv[0] == "squeue" else "", "")
    monkeypatch.setattr(S, "run_cmd", fake)
    assert S.SlurmLauncher().cancel_all("c1") == ["5", "8"]
    assert calls[-1] == ["scancel", "5", "8"]


def test_cancel_tolerates_finished_job(monkeypatch):
    calls = []
    monkeypatch.setattr(S, "run_cmd", lambda argv, **kw: calls.append(argv) or
                        subprocess.CompletedProcess(argv, 1, "", "Job/step already completing "
                                                                 "or completed"))
    S.SlurmLauncher().cancel(JobHandle("c", Path("/nonexistent"), "5"))
    assert calls == [["scancel", "5"]]


def test_slurm_missing_is_reported(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    ok, why = S.slurm_available()
    assert not ok and "sinfo not found" in why
