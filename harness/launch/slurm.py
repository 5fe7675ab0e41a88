"""Slurm launcher: one `sbatch` job per cell, `srun` for its ranks, state from `sacct`.

The batch script is written to `cell_dir/slurm.sbatch`; every runbook value in it is quoted
with `shlex.quote` and values with control characters are refused, so nothing from a runbook
reaches a shell unquoted. The job name is derived from the campaign, the cell name and the
cell directory, so a restarted driver finds its job (`find_existing`) instead of submitting
twice. The ranks' stdout and stderr reach `cell_dir/rank<R>.log` (R = global rank) through
the redacting capture (harness/launch/capture.py; a torchrun node's merged output also stays
as `node<N>.log`); the batch script's own output goes to `cell_dir/slurm-<jobid>.out`; the
node-side health probe to `cell_dir/health<N>.log`. A runbook `container:` puts the ranks
inside its image (harness/launch/container.py); the health probe and the capture run on the
host.

State comes from `scontrol show job` (the controller's own record, current the moment a job
ends and with the reason a queued job waits), falling back to `sacct` (the accounting record,
which can lag the end by seconds after slurmdbd returns) once the controller has purged the
job, then `squeue --states=all`. A pending job's reason (Priority, Resources, JobHeldUser,
...) is kept per job and offered to the driver (`queue_wait`).
With `TaskPlugin=task/none` Slurm kills a step over its memory limit (JobAcctGatherParams=
OverMemoryKill) but records the job as FAILED/CANCELLED, not OUT_OF_MEMORY; slurmstepd's
"exceeded memory limit" line in the logs is then read as `oom` too.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.api.backend import LaunchSpec
from harness.api.launcher import JobHandle, JobResult, Launcher, QueueWait
from harness.errors import BadInput, EpcapError
from harness.health import PRE_CELL_FAIL_EXIT
from harness.io.atomic import write_text_atomic
from harness.io.boundary.tools import run_tool
from harness.io.bounds import clip_line
from harness.io.yamldoc import line_of
from harness.launch.container import container_launch
from harness.launch.slurm_script import (
    ALLOC_FILE,
    ALLOC_SCRIPT,
    CLOSED_FILE,
    DONE_FILE,
    REQUEUED_FILE,
    SCRIPT_NAME,
    SHELL_SIGNAL_BASE,
    WARNED_FILE,
    allocation_minutes,
    allocation_options,
    batch_script,
    campaign_prefix,
    hidden_values,
    job_name,
    parse_step_rc,
    ranks_per_task,
    runner_script,
    sbatch_options,
    script_meta,
    step_name,
    step_script,
    submit_options,
)
from harness.launch.slurm_time import elapsed_seconds, time_minutes
from harness.runbook.model import ContainerConfig, SlurmConfig
from harness.telemetry.summary import iter_rows
from harness.vocab import LauncherState

CMD_TIMEOUT_S = 30.0            # every Slurm client call
UNKNOWN_GRACE_S = 120.0         # a job no Slurm command knows for this long -> node_fail
MIN_POLL_S = 0.5                # at most two sacct queries per job per second (drivers poll fast)
JOB_FILE = "slurm_job.json"
ALLOC_DIR = "slurm-alloc"       # per-stage: <campaign results>/slurm-alloc/<group>.<shape>.<k>/

RUNNING_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                            "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING",
                            "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "EXPEDITING"})
TERMINAL_STATES = {"COMPLETED": LauncherState.COMPLETED, "FAILED": LauncherState.FAILED, "TIMEOUT": LauncherState.TIMEOUT,
                   "DEADLINE": LauncherState.TIMEOUT, "NODE_FAIL": LauncherState.NODE_FAIL, "BOOT_FAIL": LauncherState.NODE_FAIL,
                   "PREEMPTED": LauncherState.NODE_FAIL, "OUT_OF_MEMORY": LauncherState.OOM, "CANCELLED": LauncherState.CANCELLED,
                   "REVOKED": LauncherState.CANCELLED, "SPECIAL_EXIT": LauncherState.FAILED}
# Why sbatch failed, as Slurm says it: the texts of slurm_strerror (SchedMD/slurm
# src/common/slurm_errno.c) and sbatch's own retry lines (src/sbatch/sbatch.c, _submit; sbatch
# retries EAGAIN, ESLURM_MAX_JOB_COUNT, ESLURM_NODES_BUSY and ESLURM_PORTS_BUSY itself, up to
# MAX_RETRIES 15, then prints "Batch job submission failed: %m"), both @284c3b95f08a2dc2478499837b03355e1b9c5c75.
# A transient one is retried with backoff; any other refusal is permanent and stops the
# campaign with the cluster's message (invalid partition, account, QOS, policy, resources).
TRANSIENT_SUBMIT = (
    "Socket timed out on send/recv operation",          # SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT
    "Zero Bytes were transmitted or received",          # SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT
    "Unable to contact slurm controller",               # SLURMCTLD_COMMUNICATIONS_*_ERROR
    "Communication connection failure",                 # SLURM_COMMUNICATIONS_CONNECTION_ERROR
    "Slurm backup controller in standby mode",          # ESLURM_IN_STANDBY_MODE
    "Slurm temporarily unable to accept job",           # sbatch.c: EAGAIN
    "Resource temporarily unavailable",                 # strerror(EAGAIN) after sbatch's retries
    "Slurm job queue full",                             # sbatch.c: ESLURM_MAX_JOB_COUNT
    "MaxJobCount limit reached",                        # ESLURM_MAX_JOB_COUNT
    "Job creation temporarily disabled",                # sbatch.c: ESLURM_NODES/PORTS_BUSY
    "Requested nodes are busy",                         # ESLURM_NODES_BUSY
    "Required ports are in use",                        # ESLURM_PORTS_BUSY
)
# A submit limit: slurmctld refuses the job with ESLURM_ACCOUNTING_POLICY and, as its message,
# the limit's reason word (src/slurmctld/job_mgr.c, _job_create: `*err_msg =
# xstrdup(job_state_reason_string(acct_reason))`), which sbatch logs as `sbatch: error: <word>`
# before `Batch job submission failed: Job violates accounting/QOS policy (job submit limit,
# ...)` (src/common/slurm_protocol_pack.c, _unpack_return_code2_msg). The words are those of
# the submit-job limits in src/common/job_state_reason.c; all @284c3b95f08a2dc2478499837b03355e1b9c5c75.
# They clear as the user's (or account's) other jobs end: waited on, not a refusal. The
# policy message alone (no word: time or size limits too) stays permanent.
SUBMIT_LIMITS = (
    "QOSMaxSubmitJobPerUserLimit",                      # WAIT_QOS_MAX_SUB_JOB
    "QOSGrpSubmitJobsLimit",                            # WAIT_QOS_GRP_SUB_JOB
    "MaxSubmitJobsPerAccount",                          # WAIT_QOS_MAX_SUB_JOB_PER_ACCT
    "AssocMaxSubmitJobLimit",                           # WAIT_ASSOC_MAX_SUB_JOB
    "AssocGrpSubmitJobsLimit",                          # WAIT_ASSOC_GRP_SUB_JOB
)
# Permanent refusals a runbook field causes, for the message (slurm_errno.c, same commit).
REFUSAL_FIELDS = {"Invalid partition name specified": "slurm.partition",
                  "Required partition not available": "slurm.partition",
                  "Invalid account or account/partition combination specified": "slurm.account",
                  "Invalid qos specification": "slurm.extra_sbatch",
                  "Invalid generic resource (gres) specification": "slurm.gpus_per_node",
                  "Requested time limit is invalid": "slurm.time_limit"}
SUBMIT_BACKOFF_S = (2.0, 5.0, 10.0, 20.0, 40.0, 60.0)   # then the refusal stands (~2.3 min)
MEMORY_KILL = re.compile(r"exceeded (?:job )?memory limit|oom[-_ ]kill|OUT_OF_MEMORY",
                         re.IGNORECASE)


class SlurmError(EpcapError):
    """A Slurm command failed or is missing (message carries its stderr)."""

    exit_code = 2


def resource_shape(script_text: str) -> tuple[str, ...]:
    """The #SBATCH lines of a batch script that ask for resources (not its name, output or
    directory): two cells with the same shape are placed alike."""
    skip = ("--job-name=", "--output=", "--chdir=")
    return tuple(line for line in script_text.splitlines()
                 if line.startswith("#SBATCH ") and not line[8:].lstrip("'").startswith(skip))


class SubmitRefused(BadInput):
    """sbatch refused a job for good (bad partition, account, QOS, ...): Slurm's own words."""


class SubmitLimit(SubmitRefused):
    """sbatch refused a job for a submit limit (SUBMIT_LIMITS) that did not clear in time."""


def is_transient(text: str) -> bool:
    """Whether sbatch's message says the controller was busy or unreachable (retry), not that
    the job can never be accepted."""
    return any(t in text for t in TRANSIENT_SUBMIT)


def submit_limit(text: str) -> str | None:
    """The submit limit sbatch's message names (SUBMIT_LIMITS), else None."""
    return next((word for word in SUBMIT_LIMITS if re.search(rf"\b{word}\b", text)), None)


def refusal_field(text: str) -> str:
    """The runbook field a permanent refusal points at (`slurm` when none is named)."""
    return next((f for t, f in REFUSAL_FIELDS.items() if t in text), "slurm")


def sbatch_retrying(argv: list[str], cwd: Path | None = None,
                    extra_env: dict[str, str] | None = None, where: str | None = None,
                    submitted: Callable[[], str | None] | None = None,
                    sleep: Callable[[float], None] = time.sleep,
                    say: Callable[[str], None] | None = None,
                    limit_wait_s: float | None = None) -> subprocess.CompletedProcess:
    """sbatch's answer, retrying transient failures with backoff (SUBMIT_BACKOFF_S);
    SubmitRefused with the cluster's message on a permanent refusal or once the retries are
    spent. A submit limit (SUBMIT_LIMITS: the user's or account's queue is full) is retried
    too, past the backoff every SUBMIT_BACKOFF_S[-1] s, for `limit_wait_s` seconds in all
    (0: until it clears; None: not retried, SubmitLimit at once). Before each retry
    `submitted()` may name a job the failed call made after all (a timed-out reply can follow
    an accepted job): its id is returned instead of a second job."""
    waited, attempt = 0.0, 0
    while True:
        try:
            proc = run_cmd(argv, cwd=cwd, extra_env=extra_env)
            if proc.returncode == 0:
                return proc
            text = proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"
        except SlurmError as exc:
            if "not found" in str(exc):
                raise
            text = str(exc)                 # no answer in time: a busy controller
        delay = SUBMIT_BACKOFF_S[min(attempt, len(SUBMIT_BACKOFF_S) - 1)]
        limit = submit_limit(text)
        if limit is not None and limit_wait_s is not None and (
                not limit_wait_s or waited + delay <= limit_wait_s):
            if say is not None:
                bound = (f"up to limits.max_pending_s {limit_wait_s:g} s" if limit_wait_s
                         else "until it clears (limits.max_pending_s 0)")
                say(f"sbatch: Slurm's submit limit {limit} (the queue holds as many of this "
                    f"user's or account's jobs as it allows; it clears as they end); waited "
                    f"{waited:g} s, retry {attempt + 1} in {delay:g} s, {bound}")
            sleep(delay)
            waited, attempt = waited + delay, attempt + 1
            continue
        if limit is not None:
            script = next((a for a in argv if a.endswith(SCRIPT_NAME)), argv[-1])
            raise SubmitLimit(f"{argv[0]} refused {script}: Slurm's submit limit {limit}"
                              + (f" did not clear in {waited:g} s (limits.max_pending_s)"
                                 if waited else "") + f": {clip_line(text)}",
                              path=where, line=line_of(where, "limits.max_pending_s"),
                              field="limits.max_pending_s")
        if (not is_transient(text) and "did not answer" not in text) \
                or attempt >= len(SUBMIT_BACKOFF_S):
            spent = f" (after {attempt} retries)" if attempt else ""
            script = next((a for a in argv if a.endswith(SCRIPT_NAME)), argv[-1])
            field = refusal_field(text)
            raise SubmitRefused(f"{argv[0]} refused {script}{spent}: {clip_line(text)}",
                                path=where, line=line_of(where, field), field=field)
        if say is not None:
            say(f"sbatch: transient failure ({clip_line(text)}); retry {attempt + 1} of "
                f"{len(SUBMIT_BACKOFF_S)} in {delay:g} s")
        sleep(delay)
        attempt += 1
        job = submitted() if submitted is not None else None
        if job:
            return subprocess.CompletedProcess(argv, 0, f"{job}\n", "")


@dataclass(frozen=True)
class SlurmState:
    """One reading of a job: Slurm's state word, ExitCode text, elapsed, and who said it."""

    state: str
    exit_code: str = ""
    elapsed: str = ""
    source: str = ""
    reason: str = ""                # why a pending job waits (scontrol Reason=, squeue %r)


# ---- pure helpers (unit-tested without Slurm) -------------------------------------------

def exit_code_of(text: str) -> int | None:
    """Slurm 'code:signal' -> the exit code, or -signal when killed by a signal."""
    code, _, sig = (text or "").partition(":")
    try:
        code_i, sig_i = int(code), int(sig or 0)
    except ValueError:
        return None
    return -sig_i if code_i == 0 and sig_i else code_i


def map_state(reading: SlurmState, memory_killed: bool = False) -> str | None:
    """Launcher state for a Slurm state word; None while queued or running."""
    word = reading.state.split()[0].rstrip("+").upper() if reading.state else ""
    if word in RUNNING_STATES or not word:
        return None
    state = TERMINAL_STATES.get(word, LauncherState.FAILED)
    if memory_killed and state in (LauncherState.FAILED, LauncherState.CANCELLED):
        return LauncherState.OOM
    return state


def parse_sacct(out: str) -> SlurmState | None:
    """Last `State|ExitCode|Elapsed` line of `sacct -X -n -P` output (the newest record when
    a job id was reused after a controller reset)."""
    found = None
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            found = SlurmState(parts[0], parts[1], parts[2] if len(parts) > 2 else "", "sacct")
    return found


def requeue_words(cell_dir: Path) -> str:
    """The launcher detail's note of the runs Slurm requeued (slurm_script.requeue_lines):
    empty when none; else how many, and that the earlier runs' logs are kept aside."""
    try:
        lines = [ln for ln in (cell_dir / REQUEUED_FILE).read_text().splitlines() if ln.strip()]
    except OSError:
        return ""
    if not lines:
        return ""
    return (f"; requeued by Slurm {len(lines)} time(s) (slurm.requeue: true): the result is "
            "the last run's, the earlier runs' logs are kept as <log>.requeued<N>")


def parse_scontrol(out: str) -> SlurmState | None:
    """JobState/ExitCode/RunTime/Reason from `scontrol show job -o` output (scontrol writes
    `JobState=%s ` and `Reason=%s ` with the reason's white space made `_`: SchedMD/slurm
    src/scontrol/info_job.c @284c3b95f08a2dc2478499837b03355e1b9c5c75)."""
    fields = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
    if "JobState" not in fields:
        return None
    reason = fields.get("Reason", "")
    return SlurmState(fields["JobState"], fields.get("ExitCode", ""), fields.get("RunTime", ""),
                      "scontrol", "" if reason == "None" else reason)


def parse_squeue(out: str) -> SlurmState | None:
    """`%T|%r` (state, reason) of `squeue -h` output: its first line (squeue's format letters,
    src/squeue/opts.c @284c3b95f08a2dc2478499837b03355e1b9c5c75)."""
    line = out.strip().split("\n")[0] if out else ""
    word, _, reason = line.partition("|")
    if not word.strip():
        return None
    reason = reason.strip()
    return SlurmState(word.strip(), "", "", "squeue", "" if reason == "None" else reason)


# ---- the launcher ---------------------------------------------------------------------------

def run_cmd(argv: list[str], timeout: float = CMD_TIMEOUT_S,
            cwd: Path | None = None,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a Slurm client through the one boundary for external tools (io.boundary.tools:
    argv list, no shell, a deadline, output decoded as UTF-8); SlurmError if it is missing or
    does not answer. `extra_env` adds variables to its environment (the cell's secrets, for
    sbatch)."""
    env = {**os.environ, **extra_env} if extra_env else None
    run = run_tool(argv, timeout_s=timeout, cwd=str(cwd) if cwd is not None else None, env=env)
    if run.missing:
        raise SlurmError(f"{argv[0]} not found: is Slurm installed on this host? "
                         f"({run.problem})")
    if run.code is None:
        raise SlurmError(f"{argv[0]} did not answer within {timeout:g} s")
    return subprocess.CompletedProcess(list(run.argv), run.code, run.out, run.err)


def _try(argv: list[str]) -> str | None:
    """stdout of a query that may fail (job unknown, daemon down): None on any failure."""
    try:
        proc = run_cmd(argv)
    except SlurmError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def slurm_available() -> tuple[bool, str]:
    """(True, '') when `sinfo` answers, else (False, why) -- used to skip Slurm tests."""
    try:
        proc = run_cmd(["sinfo", "-h", "-o", "%P %a"], timeout=15)
    except SlurmError as exc:
        return False, str(exc)
    if proc.returncode != 0:
        return False, f"sinfo failed: {proc.stderr.strip() or proc.returncode}"
    return True, ""


def query_state(job_id: str) -> SlurmState | None:
    """The job's state from scontrol (the controller: current at once, a pending job's
    reason), else sacct (after the controller purged it, MinJobAge), else squeue; None when
    none knows it. sacct is not asked first: after slurmdbd comes back its record of a job
    that just ended can read RUNNING for many seconds."""
    out = _try(["scontrol", "show", "job", job_id, "-o"])
    reading = parse_scontrol(out) if out else None
    if reading and reading.state.upper() == "CANCELLED":
        # who cancelled it (`CANCELLED by <uid>`) is sacct's word, once it has the end
        out = _try(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode,Elapsed"])
        told = parse_sacct(out) if out else None
        if told is not None and told.state.upper().startswith("CANCELLED BY"):
            return dataclasses.replace(reading, state=told.state)
    if reading:
        return reading
    out = _try(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode,Elapsed"])
    reading = parse_sacct(out) if out else None
    if reading and reading.state.split()[0].upper() == "PENDING":
        queued = parse_squeue(_try(["squeue", "-h", "-j", job_id, "-o", "%T|%r"]) or "")
        return reading if queued is None else queued
    if reading:
        return reading
    return parse_squeue(_try(["squeue", "--states=all", "-h", "-j", job_id, "-o", "%T|%r"])
                        or "")


def _read_json(path: Path) -> dict:
    """A small JSON object file, {} when missing or not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _tail_matches(path: Path, pattern: re.Pattern, limit: int = 256 * 1024) -> str | None:
    """The first line in the last `limit` bytes of a file that matches, else None."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - limit))
            for raw in handle:
                line = raw.decode("utf-8", "replace").rstrip()
                if pattern.search(line):
                    return clip_line(line)          # copied into the job's detail
    except OSError:
        return None
    return None


def last_complete_iteration(logs: list[Path]) -> int | None:
    """The last iteration every rank logged a well-formed dispatch row for (a rank's line cut
    by the kill is malformed, not counted); None when no iteration is."""
    ranks: dict[int, set[int]] = {}
    seen: set[int] = set()
    for row in iter_rows([p for p in logs if p.is_file()]):
        ranks.setdefault(row.iter, set()).add(row.rank)
        seen.add(row.rank)
    done = [it for it, who in ranks.items() if who == seen]
    return max(done) if done else None


def limit_words(cell_dir: Path, logs: list[Path]) -> str:
    """What a job at its time limit left: whether Slurm's warning came (the trap's mark,
    WARNED_FILE) and the last iteration every rank logged."""
    try:
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                           time.gmtime(int((cell_dir / WARNED_FILE).read_text().split()[0])))
        warned = f"warned (USR1) at {at}"
    except (OSError, ValueError, IndexError):
        warned = "no warning signal recorded"
    last = last_complete_iteration(logs)
    return warned + ("; no iteration logged by every rank" if last is None
                     else f"; last complete iteration {last}")


@dataclass
class SlurmPoll:
    """What the driver learned polling one job (kept in memory: a restart starts afresh)."""

    queried_at: float = -MIN_POLL_S     # monotonic time of the last Slurm query
    unknown_since: float | None = None  # when no Slurm command knew the job any more
    log_size: int | None = None         # summed rank-log size at the last look
    grew_at: float = 0.0                # when that size last changed
    driver_timeout: bool = False        # the driver cancelled it for no progress
    pending_since: float | None = None  # when this driver first saw it PENDING
    reason: str = ""                    # Slurm's reason at the last PENDING reading


@dataclass
class Allocation:
    """One per-stage allocation: its spool folder and job (slurm_script's step runner)."""

    group: str
    spool: Path
    job_id: str
    job_name: str

    def next_step(self) -> int:
        """The number the next dropped step gets (those already in the spool, plus one)."""
        return len(list(self.spool.glob("step-*.sh"))) + 1

    def open(self, need_s: float = 0.0) -> bool:
        """Whether the runner still takes a step that may run `need_s` seconds: not told
        done, not ended idle, its job queued or running with that much of its time limit
        left (scontrol's TimeLimit - RunTime)."""
        if (self.spool / DONE_FILE).exists() or (self.spool / CLOSED_FILE).exists():
            return False
        out = _try(["scontrol", "show", "job", self.job_id, "-o"]) or ""
        reading = parse_scontrol(out)
        if reading is None or map_state(reading) is not None:
            return False
        return time_left_s(out) >= need_s


def time_left_s(scontrol_out: str) -> float:
    """Seconds a job has left: TimeLimit - RunTime of `scontrol show job -o` (inf for
    UNLIMITED, `Partition_Limit` or when it does not say). scontrol writes `RunTime=%s `
    (0 while pending) and `TimeLimit=%s ` or `TimeLimit=Partition_Limit ` (SchedMD/slurm
    src/api/job_info.c, slurm_sprint_job_info @01afe1f164f8a99dbc5fa72a4d19cfb093dbbda8)."""
    fields = dict(tok.split("=", 1) for tok in scontrol_out.split() if "=" in tok)
    try:
        limit = time_minutes(fields.get("TimeLimit", "UNLIMITED")) * 60
    except ValueError:
        return float("inf")
    return limit - (elapsed_seconds(fields.get("RunTime", "")) or 0.0)


def poll_key(handle: JobHandle) -> str:
    """What a poll state is kept under: the job id, and the step in an allocation (its steps
    share the job id)."""
    step = handle.extra.get("step")
    return f"{handle.job_id}.{step}" if step else str(handle.job_id)


def step_reading(text: str, cancelled: bool) -> SlurmState | None:
    """A step's rc file as a Slurm-like reading: COMPLETED on 0, CANCELLED when the driver
    asked, else FAILED with the exit (bash's 128+N for a signal N reads as `0:N`)."""
    parsed = parse_step_rc(text)
    if parsed is None:
        return None
    rc, start, end = parsed
    code = f"0:{rc - SHELL_SIGNAL_BASE}" if rc > SHELL_SIGNAL_BASE else f"{rc}:0"
    word = "COMPLETED" if rc == 0 else ("CANCELLED" if cancelled else "FAILED")
    secs = max(0, int(end - start))
    return SlurmState(word, code, f"{secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}",
                      "step runner")


class SlurmLauncher(Launcher):
    """Submits each cell as one sbatch job; see the module docstring."""

    name = "slurm"
    adopts_orphans = True

    def __init__(self, runbook=None) -> None:
        self.slurm: SlurmConfig = getattr(runbook, "slurm", None) or SlurmConfig()
        self.container: ContainerConfig = (getattr(runbook, "container", None)
                                           or ContainerConfig())
        self.campaign: str = getattr(runbook, "campaign", None) or "epcap"
        limits = getattr(runbook, "limits", None)
        self.max_pending_s = float(getattr(limits, "max_pending_s", 0.0) or 0.0)
        path = getattr(runbook, "path", None)
        self.where = str(path) if path else None
        self.python = sys.executable
        self.polls: dict[str, SlurmPoll] = {}
        self.say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
        self.sleep: Callable[[float], None] = time.sleep      # the submission backoff
        self.holds_allocations = self.slurm.allocation == "per-stage"
        self.group: tuple[str, int, Path] | None = None       # (group, planned, spool root)
        self.allocs: dict[str, Allocation] = {}

    def poll_state(self, handle: JobHandle) -> SlurmPoll:
        """The typed poll state of one job (of one step, in an allocation)."""
        return self.polls.setdefault(poll_key(handle), SlurmPoll())

    # -- submit ----------------------------------------------------------------------------
    def write_script(self, cell_name: str, spec: LaunchSpec, cell_dir: Path,
                     timeout_s: float | None = None) -> Path:
        """Write cell_dir/slurm.sbatch atomically; returns its path."""
        cell_dir = Path(cell_dir).resolve()
        cell_dir.mkdir(parents=True, exist_ok=True)
        path = cell_dir / SCRIPT_NAME
        write_text_atomic(path, self.script_text(cell_name, spec, cell_dir, timeout_s))
        return path

    def script_text(self, cell_name: str, spec: LaunchSpec, cell_dir: Path,
                    timeout_s: float | None = None, home: Path | None = None) -> str:
        """The batch script of one cell (pure: the dry run shows it without writing the cell;
        `home`: the folder the script is written to, where a by-hand run writes beside)."""
        cell_dir = Path(cell_dir).resolve()
        name = job_name(self.campaign, cell_name, cell_dir)
        opts = sbatch_options(self.slurm, spec, name, cell_dir, self.where)
        gpus = spec.gpus_per_node or self.slurm.gpus_per_node
        meta = {"cell": cell_name, "job_name": name, "ntasks": spec.ntasks,
                "ranks": spec.ntasks * ranks_per_task(spec, gpus), "timeout_s": timeout_s}
        return batch_script(opts, spec, cell_dir, self.python, gpus, meta=meta,
                            container=container_launch(self.container, gpus), home=home,
                            bind=bool(self.slurm.cpus_per_rank))

    def submit(self, cell_name: str, spec: LaunchSpec, cell_dir: Path,
               timeout_s: float) -> JobHandle:
        """sbatch the cell's batch script; returns at once with the job id."""
        cell_dir = Path(cell_dir).resolve()
        script = self.write_script(cell_name, spec, cell_dir, timeout_s)
        if self.holds_allocations and self.group is not None:
            return self._submit_step(cell_name, spec, cell_dir, timeout_s, script)
        name = job_name(self.campaign, cell_name, cell_dir)
        since = script.stat().st_mtime - 5
        out = sbatch_retrying(["sbatch", "--parsable", *submit_options(name, cell_dir),
                               str(script), str(cell_dir)], cwd=cell_dir,
                              extra_env=hidden_values(spec), where=self.where, say=self.say,
                              sleep=self.sleep, limit_wait_s=self.max_pending_s,
                              submitted=lambda: max(self.job_ids_named(name, since=since),
                                                    key=int, default=None)).stdout
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch gave no job id for {script}: {clip_line(out)}")
        write_text_atomic(cell_dir / JOB_FILE, json.dumps({"job_id": job_id, "job_name": name}))
        ranks = spec.ntasks * ranks_per_task(spec, spec.gpus_per_node or self.slurm.gpus_per_node)
        return self._handle(cell_name, cell_dir, job_id, ranks, timeout_s)

    # -- one allocation per stage (slurm.allocation: per-stage) ---------------------------------
    def use_group(self, group: str, planned_cells: int, spool_root: Path) -> None:
        """The cells submitted next are steps of `group`'s allocation (see Launcher)."""
        self.group = (group, int(planned_cells), Path(spool_root).resolve() / ALLOC_DIR)

    def close_group(self, group: str) -> None:
        """Tell `group`'s runners (those this driver opened or found in the spool) that no
        step follows: each ends once its running step ended."""
        if self.group is None:
            return
        root = self.group[2]
        for spool in sorted(root.glob("*")) if root.is_dir() else []:
            meta = _read_json(spool / ALLOC_FILE)
            if meta.get("group") == group and not (spool / DONE_FILE).exists():
                write_text_atomic(spool / DONE_FILE, "stage done\n")
                reading = query_state(str(meta.get("job_id", "")))
                if reading is not None and reading.state.split()[0].upper() == "PENDING":
                    run_cmd(["scancel", str(meta["job_id"])])   # never started: not needed
        self.allocs = {k: a for k, a in self.allocs.items() if a.group != group}

    def _submit_step(self, cell_name: str, spec: LaunchSpec, cell_dir: Path, timeout_s: float,
                     script: Path) -> JobHandle:
        """Drop the cell's step into its group's allocation (opened on first use, or when
        the one found ended); returns a handle naming the allocation's job and the step."""
        group, planned, root = self.group
        shape = hashlib.sha256("\n".join(
            [line for line in resource_shape(script.read_text())
             if not line[8:].lstrip("'").startswith("--time=")]
            + sorted(hidden_values(spec))).encode()).hexdigest()[:8]
        key = f"{group}.{shape}"
        alloc = self.allocs.get(key) or self._found_allocation(root, key)
        need_s = time_minutes(self.slurm.time_limit) * 60
        if alloc is None or not alloc.open(need_s):
            alloc = self._open_allocation(root, key, group, planned, cell_name, spec, cell_dir)
        self.allocs[key] = alloc
        n = alloc.next_step()
        step = step_name(n)
        write_text_atomic(alloc.spool / f"{step}.sh", step_script(cell_name, cell_dir, n))
        write_text_atomic(cell_dir / JOB_FILE, json.dumps(
            {"job_id": alloc.job_id, "job_name": alloc.job_name, "spool": str(alloc.spool),
             "step": step}))
        ranks = spec.ntasks * ranks_per_task(spec, spec.gpus_per_node or self.slurm.gpus_per_node)
        handle = self._handle(cell_name, cell_dir, alloc.job_id, ranks, timeout_s)
        handle.extra.update(spool=str(alloc.spool), step=step)
        return handle

    @staticmethod
    def _found_allocation(root: Path, key: str) -> Allocation | None:
        """The newest allocation of `key` in the spool root (a restarted driver's), else None."""
        spools = [p for p in root.glob(f"{glob.escape(key)}.*") if (p / ALLOC_FILE).is_file()
                  and p.name.rsplit(".", 1)[1].isdigit()]
        if not spools:
            return None
        spool = max(spools, key=lambda p: int(p.name.rsplit(".", 1)[1]))
        meta = _read_json(spool / ALLOC_FILE)
        if not str(meta.get("job_id", "")).isdigit():
            return None
        return Allocation(str(meta.get("group")), spool, str(meta["job_id"]),
                          str(meta.get("job_name", "")))

    def _open_allocation(self, root: Path, key: str, group: str, planned: int,
                         cell_name: str, spec: LaunchSpec, cell_dir: Path) -> Allocation:
        """sbatch a new step runner for `key`, sized like this cell, its time limit
        slurm.time_limit x `planned` cells (slurm_script.allocation_minutes)."""
        index = 1 + max((int(p.name.rsplit(".", 1)[1]) for p in root.glob(f"{glob.escape(key)}.*")
                         if p.name.rsplit(".", 1)[1].isdigit()), default=0)
        spool = root / f"{key}.{index}"
        spool.mkdir(parents=True, exist_ok=True)
        name = job_name(self.campaign, f"alloc.{key}.{index}", spool)
        minutes = allocation_minutes(self.slurm.time_limit, planned,
                                     self.slurm.allocation_time_limit, self.where)
        opts = allocation_options(sbatch_options(self.slurm, spec, name, cell_dir, self.where),
                                  name, minutes)
        meta = {"group": group, "job_name": name, "planned_cells": planned,
                "time_minutes": minutes, "first_cell": cell_name}
        script = spool / ALLOC_SCRIPT
        write_text_atomic(script, runner_script(opts, self.slurm.allocation_idle_s, meta))
        since = script.stat().st_mtime - 5
        out = sbatch_retrying(["sbatch", "--parsable", f"--job-name={name}",
                               f"--output={spool / 'slurm-%j.out'}", str(script), str(spool)],
                              cwd=spool, extra_env=hidden_values(spec), where=self.where,
                              say=self.say, sleep=self.sleep, limit_wait_s=self.max_pending_s,
                              submitted=lambda: max(self.job_ids_named(name, since=since),
                                                    key=int, default=None)).stdout
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch gave no job id for {script}: {clip_line(out)}")
        write_text_atomic(spool / ALLOC_FILE, json.dumps({**meta, "job_id": job_id}))
        self.say(f"slurm: allocation job {job_id} for {group} ({minutes or 'UNLIMITED'} min = "
                 f"slurm.time_limit x {planned} planned cells), spool {spool}")
        return Allocation(group, spool, job_id, name)

    def _poll_step(self, handle: JobHandle) -> JobResult | None:
        """A step of an allocation: its rc file once the runner wrote it; else the
        allocation's state (queued: its reason; ended without the step's rc: how it ended,
        or node_fail when the step never started, so it is retried elsewhere)."""
        spool, step = Path(handle.extra["spool"]), str(handle.extra["step"])
        rc_file = spool / f"{step}.rc"
        if rc_file.is_file():
            reading = step_reading(rc_file.read_text(), (spool / f"{step}.cancel").exists())
            if reading is not None:
                return self._result(handle, reading)
        now, state = time.monotonic(), self.poll_state(handle)
        if now - state.queried_at < MIN_POLL_S:
            return None
        state.queried_at = now
        reading = query_state(handle.job_id)
        if reading is None:
            return self._unknown(handle)
        state.unknown_since = None
        self._note_queue(state, reading, now)
        started = (spool / f"{step}.started").is_file()
        if map_state(reading) is None:
            return self._check_progress(handle, reading) if started else None
        if rc_file.is_file():               # written just before the runner ended
            return self._poll_step(handle)
        if not started:
            return JobResult(LauncherState.NODE_FAIL, None, self.log_paths(handle), None,
                             f"allocation job {handle.job_id} ended ({reading.state}) before "
                             f"its {step} started")
        if reading.state.split()[0].upper() == "COMPLETED":
            reading = dataclasses.replace(reading, state="FAILED")    # the runner died
        return self._result(handle, reading)

    def _handle(self, cell_name: str, cell_dir: Path, job_id: str, ranks: int,
                timeout_s: float | None) -> JobHandle:
        return JobHandle(cell_name=cell_name, cell_dir=cell_dir, job_id=job_id,
                         extra={"job_name": job_name(self.campaign, cell_name, cell_dir),
                                "ntasks": ranks, "timeout_s": timeout_s,
                                "batch_log": str(cell_dir / f"slurm-{job_id}.out")})

    def check_submission(self, cells: list[tuple[str, LaunchSpec, Path]]) -> list[str]:
        """`sbatch --test-only` on the cells' batch scripts (written to a scratch directory,
        one per distinct resource shape; see test_only)."""
        with tempfile.TemporaryDirectory(prefix="epcap-test-only.") as tmp:
            paths = []
            for i, (name, spec, cdir) in enumerate(cells):
                path = Path(tmp) / str(i) / name / SCRIPT_NAME
                path.parent.mkdir(parents=True)
                path.write_text(self.script_text(name, spec, cdir))
                paths.append(path)
            return self.test_only(paths)

    def test_only(self, scripts: list[Path]) -> list[str]:
        """`sbatch --test-only` on one script per distinct resource shape (the #SBATCH lines
        but the job's name, output and directory): what Slurm said of each. SubmitRefused with
        the cluster's message when one is refused, so a bad partition, account or QOS stops
        before any job runs. No sbatch on this host: says so and checks nothing."""
        if shutil.which("sbatch") is None:
            return ["sbatch --test-only: not run (no sbatch on this host)"]
        shapes: dict[tuple[str, ...], Path] = {}
        for path in scripts:
            shapes.setdefault(resource_shape(path.read_text()), path)
        said = []
        for path in shapes.values():
            try:
                proc = sbatch_retrying(["sbatch", "--test-only", str(path)], where=self.where,
                                       say=self.say, sleep=self.sleep)
            except SubmitLimit as exc:      # full now, not wrong: a run waits for it
                said.append(f"sbatch --test-only {path.parent.name}: {exc.args[0]} (a run "
                            "waits for it to clear, limits.max_pending_s)")
                continue
            line = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            said.append(f"sbatch --test-only {path.parent.name}: {line[-1] if line else 'accepted'}")
        return said

    # -- find after a restart ----------------------------------------------------------------
    def find_existing(self, cell_name: str, cell_dir: Path) -> JobHandle | None:
        """The newest job with this cell's name submitted from this cell dir, else None."""
        cell_dir = Path(cell_dir).resolve()
        script = cell_dir / SCRIPT_NAME
        if not script.is_file():
            return None                     # nothing was ever submitted from this directory
        recorded_job = _read_json(cell_dir / JOB_FILE)
        if recorded_job.get("spool") and str(recorded_job.get("job_id", "")).isdigit():
            meta = script_meta(script)      # a step of a per-stage allocation
            handle = self._handle(cell_name, cell_dir, str(recorded_job["job_id"]),
                                  int(meta.get("ranks") or meta.get("ntasks") or 1),
                                  meta.get("timeout_s"))
            handle.extra.update(spool=recorded_job["spool"], step=recorded_job["step"])
            return handle
        name = job_name(self.campaign, cell_name, cell_dir)
        ids = set(self.job_ids_named(name, since=script.stat().st_mtime - 120))
        try:
            recorded = json.loads((cell_dir / JOB_FILE).read_text()).get("job_id")
        except (OSError, ValueError):
            recorded = None
        if recorded and (recorded in ids or query_state(str(recorded)) is not None):
            ids.add(str(recorded))
        if not ids:
            return None
        meta = script_meta(script)
        return self._handle(cell_name, cell_dir, max(ids, key=int),
                            int(meta.get("ranks") or meta.get("ntasks") or 1),
                            meta.get("timeout_s"))

    def job_ids_named(self, name: str, since: float | None = None) -> list[str]:
        """Ids of jobs called `name`, queued/running (squeue) or finished (sacct)."""
        ids = []
        out = _try(["squeue", "-h", "--states=all", "--name", name, "-o", "%i"])
        ids += out.split() if out else []
        argv = ["sacct", "-X", "-n", "-P", "--name", name, "-o", "JobID"]
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since or time.time() - 86400))
        out = _try(argv + ["-S", start])
        ids += [line.strip() for line in out.splitlines()] if out else []
        return sorted({i for i in ids if i.isdigit()}, key=int)

    # -- poll --------------------------------------------------------------------------------
    def poll(self, handle: JobHandle) -> JobResult | None:
        """None while queued or running; else how the job ended (see TERMINAL_STATES)."""
        if handle.extra.get("spool"):
            return self._poll_step(handle)
        now, state = time.monotonic(), self.poll_state(handle)
        if now - state.queried_at < MIN_POLL_S:
            return None
        state.queried_at = now
        reading = query_state(handle.job_id)
        if reading is None:
            return self._unknown(handle)
        state.unknown_since = None
        self._note_queue(state, reading, now)
        if map_state(reading) is None:
            return self._check_progress(handle, reading)
        return self._result(handle, reading)

    @staticmethod
    def _note_queue(state: SlurmPoll, reading: SlurmState, now: float) -> None:
        """Keep the pending reason and since when the job waits (cleared once it left)."""
        if reading.state.split()[0].upper() != "PENDING":
            state.pending_since, state.reason = None, ""
            return
        if state.pending_since is None:
            state.pending_since = now
        state.reason = reading.reason or "unknown (Slurm gave no reason)"

    def queue_wait(self, handle: JobHandle) -> QueueWait | None:
        """Slurm's pending reason and how long this driver has seen the job pending, as of
        the last poll; None once it runs or ended."""
        state = self.polls.get(poll_key(handle))
        if state is None or state.pending_since is None:
            return None
        return QueueWait(state.reason, time.monotonic() - state.pending_since)

    def _unknown(self, handle: JobHandle) -> JobResult | None:
        """A job no Slurm command knows: wait a grace period (accounting lag), then node_fail."""
        state = self.poll_state(handle)
        if state.unknown_since is None:
            state.unknown_since = time.monotonic()
        if time.monotonic() - state.unknown_since < UNKNOWN_GRACE_S:
            return None
        return JobResult(LauncherState.NODE_FAIL, None, self.log_paths(handle), None,
                         f"job {handle.job_id} unknown to sacct, scontrol and squeue")

    def _check_progress(self, handle: JobHandle, reading: SlurmState) -> JobResult | None:
        """Driver-side no-progress limit (like the local launcher): logs must keep growing."""
        limit = handle.extra.get("timeout_s")
        if not limit or not reading.state.startswith("RUNNING"):
            return None
        size = sum(p.stat().st_size for p in self.log_paths(handle) if p.exists())
        now, state = time.monotonic(), self.poll_state(handle)
        if size != state.log_size:
            state.log_size, state.grew_at = size, now
        if now - state.grew_at <= limit:
            return None
        self.cancel(handle)
        state.driver_timeout = True
        return JobResult(LauncherState.TIMEOUT, None, self.log_paths(handle), None,
                         f"no log growth for {limit:g} s; job {handle.job_id} cancelled")

    def _result(self, handle: JobHandle, reading: SlurmState) -> JobResult:
        """Terminal reading -> JobResult (memory kills and failed health probes recognised)."""
        logs = self.log_paths(handle)
        batch_log = Path(handle.extra.get("batch_log", ""))
        mem_line = next(filter(None, (_tail_matches(p, MEMORY_KILL) for p in logs + [batch_log]
                                      if p.is_file())), None)
        state = map_state(reading, memory_killed=mem_line is not None)
        code = exit_code_of(reading.exit_code)
        detail = f"slurm {reading.state} exit {reading.exit_code or '?'} ({reading.source})"
        if self.poll_state(handle).driver_timeout and state == LauncherState.CANCELLED:
            state = LauncherState.TIMEOUT
        if state == LauncherState.OOM:
            detail += f"; {mem_line or 'OUT_OF_MEMORY'}"
        if state == LauncherState.TIMEOUT or (Path(handle.cell_dir) / WARNED_FILE).is_file():
            detail += "; " + limit_words(Path(handle.cell_dir), logs)
        detail += requeue_words(Path(handle.cell_dir))
        health = self.health_failures(handle)
        if state == LauncherState.FAILED and code == PRE_CELL_FAIL_EXIT and health:
            state, logs = LauncherState.NODE_FAIL, logs + self.health_logs(handle)
            detail += "; health probe failed: " + "; ".join(health)
        return JobResult(state, code, logs, elapsed_seconds(reading.elapsed), detail)

    def log_paths(self, handle: JobHandle) -> list[Path]:
        """cell_dir/rank<R>.log for every global rank (extra["ntasks"] counts ranks)."""
        ntasks = int(handle.extra.get("ntasks") or 1)
        return [Path(handle.cell_dir) / f"rank{r}.log" for r in range(ntasks)]

    def health_logs(self, handle: JobHandle) -> list[Path]:
        return sorted(Path(handle.cell_dir).glob("health*.log"))

    def health_failures(self, handle: JobHandle) -> list[str]:
        """The `[EPCAP_HEALTH] FAIL` lines the node-side probe wrote."""
        out = []
        for path in self.health_logs(handle):
            try:
                out += [ln.strip() for ln in path.read_text(errors="replace").splitlines()
                        if "FAIL" in ln]
            except OSError:
                pass
        return out

    # -- cancel ------------------------------------------------------------------------------
    def cancel(self, handle: JobHandle) -> None:
        """scancel the job (by id; by name when the id is unknown). Finished jobs are fine.
        A step of an allocation: its cancel file (the runner ends or skips the step; the
        allocation goes on)."""
        if handle.extra.get("spool"):
            spool = Path(handle.extra["spool"])
            write_text_atomic(spool / f"{handle.extra['step']}.cancel", "cancelled\n")
            return
        if handle.job_id:
            argv = ["scancel", str(handle.job_id)]
        else:
            argv = ["scancel", "--name", job_name(self.campaign, handle.cell_name,
                                                   Path(handle.cell_dir).resolve())]
        for _ in range(3):
            try:
                proc = run_cmd(argv)
            except SlurmError:
                time.sleep(1)
                continue
            if proc.returncode == 0 or "already completing or completed" in proc.stderr \
                    or "Invalid job id" in proc.stderr:
                return
            time.sleep(1)

    def cancel_all(self, campaign: str | None = None) -> list[str]:
        """scancel every queued or running job of a campaign (by job-name prefix); the ids."""
        prefix = campaign_prefix(campaign or self.campaign)
        out = _try(["squeue", "-h", "-o", "%i|%j"]) or ""
        ids = [line.split("|", 1)[0] for line in out.splitlines()
               if "|" in line and line.split("|", 1)[1].startswith(prefix)]
        if ids:
            run_cmd(["scancel", *ids])
        return ids


