"""Jobs the end-to-end tests put on the CI Slurm: the failing jobs test_slurm.py classifies
(exit 3, memory limit, time limit, no log progress, a warned cell and allocation step, outside
TERM/USR1), and a batch script submitted by hand as a user would, waited on.

The time-limit jobs need 60-90 s of Slurm time (a one-minute limit, enforced on slurmctld's
30 s check), so tests/e2e/conftest.py submits them at the session's first Slurm test: the
wait overlaps the Slurm modules before test_slurm.py instead of being paid there."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from harness.api.backend import LaunchSpec
from harness.launch import slurm as S
from harness.runbook.model import SlurmConfig

PY = sys.executable
EXIT3 = ("import os, sys; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], "
         "'master', os.environ['MASTER_ADDR'], flush=True); sys.exit(3)")
HOG = ("import time; print('allocating', flush=True); a = bytearray(700 * 2**20); "
       "a[::4096] = b'x' * len(a[::4096]); time.sleep(60)")
# a running job the tests signal from outside: it outlives the Slurm tests before
# test_slurm.py's failure tests (about 3 minutes), and a killed session's copy ends by itself
SLEEP = "import time; print('started', flush=True); time.sleep(600)"
ITERATING = ("import os, time\n"
             "rank = int(os.environ['RANK'])\n"
             "for it in range(10**6):\n"
             "    print(f'[MOE_DROP_DEBUG][dispatch] iter={it} layer=0 rank={rank} '\n"
             "          'expected_recv=128 actual_valid_recv=100 budget=256', flush=True)\n"
             "    time.sleep(1)\n")


class Rb:
    """The parts of a runbook the Slurm launcher reads."""

    def __init__(self, campaign: str, **slurm):
        self.campaign, self.slurm, self.path = campaign, SlurmConfig(**slurm), None


def submit_failure_jobs(base: Path) -> tuple[dict, dict]:
    """Submit every failing job under `base`: (handles, the launcher that owns each)."""
    # 12 tasks of plain `python -c` (a few MiB each): 256M per task, not DefMemPerCPU's 2 GiB,
    # so they leave the node's memory to the campaigns that run beside them (the per-stage
    # allocation waited 50 s behind them for a node whose memory they held)
    lean = "256M"
    plain = S.SlurmLauncher(Rb("e2e-fail", mem_per_task=lean))
    small = S.SlurmLauncher(Rb("e2e-fail", mem_per_task="150M"))
    short = S.SlurmLauncher(Rb("e2e-fail", time_limit="1", mem_per_task=lean))  # 1 minute
    # a one-minute allocation (one planned cell) whose step runs to its limit
    staged = S.SlurmLauncher(Rb("e2e-fail", time_limit="1", allocation="per-stage",
                                mem_per_task=lean))
    staged.use_group("time.M", 1, base)
    handles, owners = {}, {}
    for key, launcher, code, ntasks, timeout_s in (
            ("exit3", plain, EXIT3, 2, 300), ("oom", small, HOG, 1, 300),
            ("slurm_timeout", short, SLEEP, 1, 300), ("no_progress", plain, SLEEP, 1, 4),
            ("warned", short, ITERATING, 2, 300), ("warned_step", staged, ITERATING, 1, 300),
            ("term", plain, SLEEP, 2, 300), ("usr1", plain, SLEEP, 2, 300)):
        spec = LaunchSpec(argv=[PY, "-c", code], ntasks=ntasks)
        handles[key] = launcher.submit(key, spec, base / key, timeout_s)
        owners[key] = launcher
    return handles, owners


# slurmctld's states of a job that ended (COMPLETING is not one: its epilog still runs)
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
         "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def sbatch_by_hand(args: list[str], cwd: Path, env: dict, limit_s: float = 300,
                   ) -> tuple[subprocess.CompletedProcess, str, str, str]:
    """`sbatch ARGS` as a user types it, then the job's end as slurmctld says it: (sbatch's
    answer, job id, JobState, ExitCode). Polled every 0.25 s, not with `sbatch --wait`, which
    asks at 2 s and then 8 s later (Slurm 22.05 here, MinJobAge 3600): measured, a 3 s job
    came back after 10.0 s."""
    done = subprocess.run(["sbatch", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)
    found = re.search(r"Submitted batch job (\d+)", done.stdout + done.stderr)
    if done.returncode or not found:
        return done, "?", "not submitted", "?"
    job, deadline = found[1], time.monotonic() + limit_s
    while True:
        show = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True,
                              text=True, timeout=60).stdout
        state = re.search(r"JobState=(\S+)", show)
        code = re.search(r"ExitCode=(\S+)", show)
        if state and code and state[1] in ENDED:
            return done, job, state[1], code[1]
        assert time.monotonic() < deadline, f"job {job} did not end in {limit_s:g} s: {show}"
        time.sleep(0.25)
