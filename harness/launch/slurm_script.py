"""The Slurm batch script of one cell: validated #SBATCH options, the shell-quoted script
and its metadata line. Pure (no Slurm needed); every runbook value is quoted with
`shlex.quote` and values with control characters are refused."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

from harness.api.backend import RANK_FIFOS_ENV, LaunchSpec
from harness.errors import BadInput
from harness.health import DEFAULT_MAX_USED_MIB, PRE_CELL_FAIL_EXIT
from harness.io.redact import is_secret_env, redact_argv
from harness.launch.capture import FIFO_TIMEOUT_S
from harness.launch.container import PYXIS_OPTION, ContainerLaunch
from harness.launch.outdir import OUT_VAR, cell_dirs, out_dir_lines, out_words
from harness.launch.slurm_time import TIME_RE, time_minutes
from harness.runbook.model import SlurmConfig

SCRIPT_NAME = "slurm.sbatch"
NAME_PREFIX = "epcap."
META_TAG = "# epcap-meta:"
MEM_RE = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
RANK_WRAPPER = ('export RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS" '
                'LOCAL_RANK="$SLURM_LOCALID"; exec "$@"')
# torchrun: tee each worker's output to the console, each line led by its global rank
# (harness/launch/capture.py splits on it; sources there). Single quotes: torchrun expands it.
TORCHRUN_PREFIX = "[rank${rank}]:"
HARNESS_ROOT = Path(__file__).resolve().parents[2]     # the checkout holding `harness`


HIDDEN_ARG = "EPCAP_HIDDEN_ARG_"
# A setup the node cannot honour (missing --chdir, no container plugin): the script says so in
# rank0.log and exits with this; the taxonomy's epcap-slurm-setup signature makes it badflag.
SETUP_FATAL = "[EPCAP_SLURM] FATAL setup:"
SETUP_FAIL_EXIT = 96
RERUN_SUFFIX = ".rerun"        # the job name in the script: a by-hand rerun of the cell
# The warning before the time limit: Slurm sends USR1 to the batch shell (`B:`) N seconds
# before it (`--signal=[{R|B}:]<sig>[@sig_time]`, sig_time at most 0xffff: SchedMD/slurm
# src/common/proc_args.c get_signal_opts; "may be sent up to 60 seconds earlier than
# specified": doc/man/man1/sbatch.1; both @284c3b95f08a2dc2478499837b03355e1b9c5c75). The
# script's trap writes the time into WARNED_FILE in the cell and says so in its batch log.
WARN_SIGNAL = "USR1"
WARNED_FILE = "slurm_warned.txt"
REQUEUED_FILE = "slurm_requeued.txt"   # one line per requeue that found the earlier run's logs
MAX_SIGNAL_TIME_S = 0xFFFF
DEFAULT_SIGNAL_GRACE_S = 120


def signal_grace(value: int | None, limit_s: float) -> int:
    """The warning's lead in seconds: `slurm.signal_grace_s`, else DEFAULT_SIGNAL_GRACE_S at
    most half the time limit (a one-minute cell is warned 30 s before)."""
    if value is not None:
        return int(value)
    return int(min(DEFAULT_SIGNAL_GRACE_S, limit_s // 2, MAX_SIGNAL_TIME_S))


def submit_options(name: str, cell_dir: Path) -> list[str]:
    """What the harness's own sbatch adds before the script (command-line options override
    #SBATCH lines): the cell's stable job name and its batch log in the cell directory."""
    return [f"--job-name={name}", f"--output={Path(cell_dir) / 'slurm-%j.out'}"]


def hidden_values(spec: LaunchSpec) -> dict[str, str]:
    """Secret argv elements and secret-named env values, by the variable that carries them.

    The batch script names them (`"${EPCAP_HIDDEN_ARG_3}"`, `HF_TOKEN` from the job's
    environment) instead of holding them, and `sbatch` receives them in its environment
    (it exports the submitter's environment by default), so no file under the results
    directory holds a secret (docs/slurm.md#secrets)."""
    shown = redact_argv([str(a) for a in spec.argv])
    out = {f"{HIDDEN_ARG}{i}": str(a) for i, (a, r) in enumerate(zip(spec.argv, shown,
                                                                      strict=True))
           if str(a) != r}
    out.update({k: str(v) for k, v in spec.env.items() if is_secret_env(k)})
    return out


def script_argv(spec: LaunchSpec, dirs: tuple[str, ...] = ()) -> list[str]:
    """The argv as shell words: each value quoted (a path inside the cell directory `dirs`
    as one inside "$OUT"), each secret a reference to its variable."""
    hidden = hidden_values(spec)
    return [f'"${{{HIDDEN_ARG}{i}}}"' if f"{HIDDEN_ARG}{i}" in hidden else out_words(str(a), dirs)
            for i, a in enumerate(spec.argv)]


def ranks_per_task(spec: LaunchSpec, gpus_per_node: int) -> int:
    """Ranks one srun task hosts: a worker that starts its own ranks (spec.ranks_per_task,
    a worker given --ranks) that many; a torchrun per node (ntasks == nodes, several GPUs)
    gpus_per_node; otherwise one rank per task."""
    if int(spec.ranks_per_task) > 1:
        return int(spec.ranks_per_task)
    if spec.ntasks == max(1, spec.nodes) and gpus_per_node > 1:
        return int(gpus_per_node)
    return 1


def job_name(campaign: str, cell_name: str, cell_dir: Path) -> str:
    """`epcap.<campaign>.<cell>.<hash of the cell dir>`: stable across driver restarts."""
    digest = hashlib.sha256(str(Path(cell_dir).resolve()).encode()).hexdigest()[:8]
    return f"{NAME_PREFIX}{campaign}.{cell_name}.{digest}"


def campaign_prefix(campaign: str) -> str:
    """Job-name prefix of every job of one campaign (for cancel_all)."""
    return f"{NAME_PREFIX}{campaign}."


def check_value(value: str, field: str, where: str | None) -> str:
    """Refuse values a batch script line cannot hold safely (newlines, control chars)."""
    if CONTROL_RE.search(value):
        raise BadInput(f"control character in {value!r}", path=where, field=field)
    return value


def tasks_per_node(spec: LaunchSpec, nodes: int) -> int:
    """srun tasks on each node (the tasks spread evenly over the nodes)."""
    return max(1, -(-int(spec.ntasks) // max(1, nodes)))


def cpus_per_task(slurm: SlurmConfig, spec: LaunchSpec, gpus_per_node: int) -> int:
    """`slurm.cpus_per_rank` x the ranks the task hosts, else `slurm.cpus_per_task`, else one
    CPU per rank the task hosts (a torchrun node task with 8 ranks asks for 8, not Slurm's
    default of 1)."""
    if slurm.cpus_per_rank:
        return int(slurm.cpus_per_rank) * ranks_per_task(spec, gpus_per_node)
    return int(slurm.cpus_per_task or ranks_per_task(spec, gpus_per_node))


# Each task on its own cores (slurm.cpus_per_rank): srun --cpu-bind=cores binds a task to the
# cores Slurm gave it where the cluster's task plugin binds (task/affinity, task/cgroup);
# where it does not (task/none: every task may run on every core the job has), the wrapper
# takes cores LOCALID*k .. LOCALID*k+k-1 of the set it was allowed (k = cores per task) with
# taskset, so the node's tasks never share one. It says what it bound in the batch log.
BIND_WRAPPER = (
    'k="${SLURM_CPUS_PER_TASK:-1}"; cpus=(); list="$(taskset -cp $$ 2>/dev/null)"; '
    'list="${list##*: }"; for part in ${list//,/ }; do lo="${part%-*}"; hi="${part#*-}"; '
    'for ((c = lo; c <= hi; c++)); do cpus+=("$c"); done; done; '
    'if (( ${#cpus[@]} > k )); then first=$(( SLURM_LOCALID * k )); '
    'if (( first + k <= ${#cpus[@]} )); then mine="$(IFS=,; echo "${cpus[*]:first:k}")"; '
    'echo "[EPCAP_SLURM] task $SLURM_PROCID: cores $mine (bound here: ${#cpus[@]} allowed, '
    '$k per task)" >&2; set -- taskset -c "$mine" "$@"; '
    'else echo "[EPCAP_SLURM] task $SLURM_PROCID: no cores of its own (${#cpus[@]} allowed, '
    '$k per task): left unbound" >&2; fi; '
    'else echo "[EPCAP_SLURM] task $SLURM_PROCID: cores ${list:-unknown (no taskset)} (as '
    'Slurm gave them)" >&2; fi; ')


def scale_mem(size: str, factor: int) -> str:
    """A Slurm memory size times `factor`, in the same unit (`16G` x 8 = `128G`)."""
    digits = size.rstrip("KMGTkmgt")
    return f"{int(digits) * factor}{size[len(digits):]}"


def memory_options(slurm: SlurmConfig, per_node_tasks: int, where: str | None) -> list[str]:
    """`--mem` (mem_per_task x tasks per node) or `--mem-per-gpu`; never `--mem-per-cpu`,
    which with `--exclusive` asks for that much times every CPU of the node."""
    for field in ("mem_per_task", "mem_per_gpu"):
        value = getattr(slurm, field)
        if value is not None and not MEM_RE.match(str(value)):
            raise BadInput(f"not a Slurm memory size ({value!r}); use e.g. 16G",
                           path=where, field=f"slurm.{field}")
    if slurm.mem_per_task and slurm.mem_per_gpu:
        raise BadInput("set mem_per_task or mem_per_gpu, not both (Slurm takes one of --mem "
                       "and --mem-per-gpu)", path=where, field="slurm.mem_per_gpu")
    if slurm.mem_per_task:
        return [f"--mem={scale_mem(str(slurm.mem_per_task), per_node_tasks)}"]
    if slurm.mem_per_gpu:
        return [f"--mem-per-gpu={slurm.mem_per_gpu}"]
    return []


def sbatch_options(slurm: SlurmConfig, spec: LaunchSpec, name: str, cell_dir: Path,
                   where: str | None = None) -> list[str]:
    """The `#SBATCH` arguments of one cell, validated; each is one sbatch argument. No
    --output or --chdir: the script writes into the directory given as its argument, and the
    job name is the cell's with RERUN_SUFFIX (the harness's own submission overrides name and
    output on sbatch's command line: submit_options), so a job a user submits by hand is never
    taken for the cell's own on resume."""
    if not TIME_RE.match(slurm.time_limit):
        raise BadInput(f"not a Slurm time ({slurm.time_limit!r}); use e.g. 00:30:00",
                       path=where, field="slurm.time_limit")
    for field in ("cpus_per_task", "cpus_per_rank"):
        value = getattr(slurm, field)
        if value is not None and int(value) < 1:
            raise BadInput(f"{field} must be at least 1, not {value!r}", path=where,
                           field=f"slurm.{field}")
    if slurm.cpus_per_task and slurm.cpus_per_rank:
        raise BadInput("set cpus_per_rank (cores of each rank's own) or cpus_per_task, not "
                       "both", path=where, field="slurm.cpus_per_rank")
    nodes = spec.nodes if spec.nodes > 1 else slurm.nodes
    gpus = spec.gpus_per_node or slurm.gpus_per_node
    per_node = tasks_per_node(spec, nodes)
    opts = [f"--job-name={name}{RERUN_SUFFIX}", f"--nodes={nodes}", f"--ntasks={spec.ntasks}",
            f"--ntasks-per-node={per_node}",
            f"--cpus-per-task={cpus_per_task(slurm, spec, gpus)}",
            f"--time={slurm.time_limit}"]
    if slurm.partition:
        opts.append(f"--partition={check_value(slurm.partition, 'slurm.partition', where)}")
    if slurm.account:
        opts.append(f"--account={check_value(slurm.account, 'slurm.account', where)}")
    if gpus > 0:
        opts.append(f"--gres=gpu:{int(gpus)}")
    opts += memory_options(slurm, per_node, where)
    # a requeued job's batch log is opened again: appended to, so the earlier run's lines stay
    # (truncated by default, JobFileAppend=0: seen on the CI Slurm 22.05; `--open-mode`:
    # SchedMD/slurm doc/man/man1/sbatch.1 @284c3b95)
    opts += ["--requeue", "--open-mode=append"] if slurm.requeue else ["--no-requeue"]
    limit_s = time_minutes(slurm.time_limit) * 60
    grace = signal_grace(slurm.signal_grace_s, limit_s)
    if grace < 0 or grace > MAX_SIGNAL_TIME_S or (grace and grace >= limit_s):
        raise BadInput(f"signal_grace_s must be 0 (no warning) or 1..{MAX_SIGNAL_TIME_S} s "
                       f"and shorter than slurm.time_limit ({slurm.time_limit}), not {grace}",
                       path=where, field="slurm.signal_grace_s")
    if grace:
        opts.append(f"--signal=B:{WARN_SIGNAL}@{grace}")
    # stated, not left to the cluster's default: the job gets the submitting shell's
    # environment (a secret the script names comes from there: hidden_values); a later
    # --export in extra_sbatch overrides it (the steps keep the script's: srun --export=ALL)
    opts.append("--export=ALL")
    for i, extra in enumerate(slurm.extra_sbatch):
        check_value(str(extra), f"slurm.extra_sbatch[{i}]", where)
        if not str(extra).startswith("-"):
            raise BadInput(f"{extra!r} is not an sbatch option (must start with '-')",
                           path=where, field=f"slurm.extra_sbatch[{i}]")
        opts.append(str(extra))
    for opt in opts:
        check_value(opt, "slurm", where)
    return opts


def rerun_output(home: Path) -> str:
    """`--output` of a by-hand run: `<home>.rerun.%j.out`, beside the directory it writes
    (`<home>.rerun.<job id>`), never inside the cell (classify and the audit read a cell's
    slurm-*.out); the directory holding `home` exists, as sbatch needs."""
    return f"--output={home}{RERUN_SUFFIX}.%j.out"


def requeue_lines(out: str) -> list[str]:
    """A job Slurm requeued (`slurm.requeue: true`: preemption with requeue, a node failure,
    `scontrol requeue`) runs this script again from the top in the same directory, with
    SLURM_RESTART_COUNT = N > 0 (SchedMD/slurm doc/man/man1/sbatch.1, OUTPUT ENVIRONMENT
    VARIABLES, @284c3b95; 1 after one `scontrol requeue` on the CI Slurm 22.05, where the
    requeued job then waits about 2 minutes with Reason=BeginTime). The earlier run's rank
    and node logs are kept beside the new ones as `<log>.requeued<N>` (not `*.log`: only the
    last run's rows are the cell's), and a line goes to REQUEUED_FILE, which the driver reads
    into the cell's launcher detail. A run that wrote no log before the requeue leaves no
    mark."""
    return [
        "# a run Slurm requeued (slurm.requeue: true): keep the earlier run's logs beside",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
        "  moved=0",
        f"  for f in {out}/rank*.log {out}/node*.log; do",
        '    if [ -e "$f" ]; then mv -f "$f" "$f.requeued$SLURM_RESTART_COUNT"; '
        "moved=$((moved + 1)); fi",
        "  done",
        '  if [ "$moved" -gt 0 ]; then',
        f'    echo "$(date +%s) restart $SLURM_RESTART_COUNT" >> {out}/{REQUEUED_FILE}',
        '    echo "[EPCAP_SLURM] requeued by Slurm (restart $SLURM_RESTART_COUNT): the earlier '
        "run's $moved log(s) kept as *.log.requeued$SLURM_RESTART_COUNT\"",
        "  fi",
        "fi"]


def batch_script(options: list[str], spec: LaunchSpec, cell_dir: Path, python: str,
                 gpus_per_node: int = 0, max_used_mib: int = DEFAULT_MAX_USED_MIB,
                 meta: dict | None = None, container: ContainerLaunch | None = None,
                 home: Path | None = None, bind: bool = False) -> str:
    """The batch script: #SBATCH lines, env, MASTER_ADDR/PORT where the ranks rendezvous by
    them, health probe (on the host), srun of the ranks (inside the container when one is
    set), piped through the redacting capture that writes rank<R>.log by global rank
    (harness/launch/capture.py). `home`: where a by-hand run with no directory argument
    writes beside (default the cell directory; the dry run's copy of the script, its own
    folder, which exists after a dry run where the cell does not)."""
    container = container or ContainerLaunch()
    q = shlex.quote
    cell = Path(cell_dir)
    home = Path(home) if home is not None else cell
    dirs = cell_dirs(cell)
    out = f'"${OUT_VAR}"'
    for key, value in spec.env.items():
        if not ENV_KEY_RE.match(key):
            raise BadInput(f"not an environment variable name: {key!r}", field="env")
        check_value(str(value), f"env.{key}", None)
    lines = ["#!/bin/bash", "# epcap cell batch script (generated; every value shell-quoted)",
             f"# usage: sbatch [--output=DIR/slurm-%j.out] {SCRIPT_NAME} [DIR]   (DIR: where "
             f"this run writes; default: a new directory {home.name}{RERUN_SUFFIX}.<job id> "
             f"beside {home}, its batch log beside it as {home.name}{RERUN_SUFFIX}.<job id>"
             ".out; epcap passes the cell directory and its --output)"]
    if meta:
        lines.append(f"{META_TAG} {json.dumps(meta, sort_keys=True)}")
    lines += [f"#SBATCH {q(opt)}" for opt in [*options[:1], rerun_output(home), *options[1:]]]
    workdir = out if not spec.cwd else out_words(str(spec.cwd), dirs)
    shown = "$OUT" if not spec.cwd else str(spec.cwd)
    lines += ["set -u", *out_dir_lines(q(str(home)), RERUN_SUFFIX, "epcap cell",
                                       missing=f"{SETUP_FATAL} output directory",
                                       missing_exit=SETUP_FAIL_EXIT,
                                       fresh='"${SLURM_JOB_ID:-$$}"'),
              f"export EPCAP_CELL_DIR={out}",
              *requeue_lines(out),
              "# the working directory, checked on the node (a missing one is not /tmp)",
              f"if ! cd {workdir} 2>/dev/null; then",
              f'  echo "{SETUP_FATAL} working directory {shown} is missing on '
              f'$(hostname)" | tee -a {out}/rank0.log; exit {SETUP_FAIL_EXIT}; fi',
              "# the harness (health probe, capture) from the checkout that wrote this script",
              f'export PYTHONPATH={q(str(HARNESS_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}"']
    lines += [f"export {key}={out_words(str(value), dirs)}" for key, value in spec.env.items()
              if not is_secret_env(key)]
    hidden = sorted(hidden_values(spec))
    if hidden:
        lines += ["# secrets come from sbatch's environment, never from this file",
                  ": " + " ".join(f'"${{{name}:?not in the job environment}}"'
                                  for name in hidden)]
    lines += ["# torchrun tees worker output with the global rank in front (capture splits it)",
              "export PET_TEE=3",
              "# shellcheck disable=SC2016  # expanded by torchrun, not by this shell",
              f"export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE={q(TORCHRUN_PREFIX)}"]
    if rendezvous_by_master(spec, gpus_per_node):
        lines += ["# the ranks' env:// rendezvous (several tasks; torchrun's multi-node trampoline)",
                  'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
                  "export MASTER_ADDR",
                  "export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))"]
    if gpus_per_node > 0:          # CPU-only cells skip the probe (it would say no-gpu)
        health = [q(python), "-m", "harness.health", "--pre-cell", "--require-gpus",
                  str(int(gpus_per_node)), "--max-used-mib", str(int(max_used_mib))]
        lines += ['srun --export=ALL --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 '
                  f"--output={out}/health%t.log " + " ".join(health)
                  + f" || exit {PRE_CELL_FAIL_EXIT}"]
    for value in (*container.srun_options, *container.exec_prefix):
        check_value(str(value), "container", None)
    if container.srun_options:          # pyxis: the plugin must be loaded, else srun refuses
        lines += [f"srun --help 2>&1 | grep -q -e {q(PYXIS_OPTION)} || {{ echo "
                  f"{q(SETUP_FATAL + ' container plugin missing: srun has no ' + PYXIS_OPTION)}"
                  f' "on $(hostname) (pyxis not loaded)" | tee -a {out}/rank0.log;'
                  f" exit {SETUP_FAIL_EXIT}; }}"]
    # --export=ALL: the steps get this script's environment (its exports, PATH) even when the
    # job was submitted with --export=NONE (srun would inherit SLURM_EXPORT_ENV=NONE)
    # --kill-on-bad-exit: one task failing ends its peers (several tasks only; one task is
    # the whole step already)
    srun = (["srun", "--export=ALL", f"--ntasks={int(spec.ntasks)}",
             *(["--kill-on-bad-exit=1"] if int(spec.ntasks) > 1 else []), "--label",
             '--cpus-per-task="${SLURM_CPUS_PER_TASK:-1}"',
             *(["--cpu-bind=cores"] if bind else [])]
            + [q(o) for o in container.srun_options]
            + [q(a) for a in container.exec_prefix]
            + ["bash", "-c", q((BIND_WRAPPER if bind else "") + RANK_WRAPPER), "epcap-rank"]
            + script_argv(spec, dirs))
    if bind:
        per = ranks_per_task(spec, gpus_per_node)
        lines += [f"# binding: each task on its own cores (slurm.cpus_per_rank x {per} "
                  "rank(s) per task = --cpus-per-task), srun --cpu-bind=cores; where Slurm "
                  "does not bind, each task takes its own slice with taskset",
                  f'echo "[EPCAP_SLURM] binding: $SLURM_CPUS_PER_TASK cores per task, {per} '
                  'rank(s) per task, --cpu-bind=cores" >&2']
    capture = [q(python), "-m", "harness.launch.capture", out, "--ranks-per-task",
               str(ranks_per_task(spec, gpus_per_node))]
    own = own_ranks_lines(spec, python, meta)
    lines += own
    lines += warning_trap(options)
    # the step runs in the background and this shell waits for it, so that a trapped signal
    # is handled at once (bash runs a trap only after the foreground command ends); the
    # pipeline's statuses come back through a file outside the cell
    lines += ['step_status="$(mktemp "${TMPDIR:-/tmp}/epcap-step.XXXXXX")" || exit 1',
              "# shellcheck disable=SC2016  # the rank wrapper expands on the node",
              "( " + " ".join(srun) + " 2>&1 | " + " ".join(capture)
              + '; echo "${PIPESTATUS[0]} ${PIPESTATUS[1]}" > "$step_status" ) &',
              'step=$!',
              'while ! wait "$step"; do kill -0 "$step" 2>/dev/null || break; done',
              'read -r -a status < "$step_status" || status=(1 0)', 'rm -f "$step_status"',
              'rc="${status[0]:-1}"',
              'echo "[EPCAP_SLURM] srun exit $rc"',
              'if [ "${status[1]:-0}" != 0 ]; then echo "[EPCAP_SLURM] capture exit ${status[1]}"; '
              '[ "$rc" != 0 ] || rc="${status[1]}"; fi']
    if own:
        lines += OWN_RANKS_END
    lines += ['exit "$rc"', ""]
    return "\n".join(lines)


def warning_trap(options: list[str]) -> list[str]:
    """With `--signal=B:USR1@N` among the options: a trap that marks the cell (the time of
    the warning in WARNED_FILE) and says it in the batch log. The ranks run on (USR1 would
    end a rank that does not handle it); the capture writes their logs line by line, so what
    they logged up to the kill is in rank<R>.log, and the launcher names the last iteration
    every rank logged."""
    grace = next((o.rsplit("@", 1)[1] for o in options
                  if o.startswith(f"--signal=B:{WARN_SIGNAL}@")), None)
    if grace is None:
        return []
    return [f"# Slurm's warning, {grace} s before the time limit (slurm.signal_grace_s)",
            "# shellcheck disable=SC2317  # called by the trap",
            "epcap_warned() {",
            f'  date -u +%s > "${OUT_VAR}/{WARNED_FILE}"',
            f'  echo "[EPCAP_SLURM] {WARN_SIGNAL} at $(date -u +%FT%TZ): the time limit is '
            f'at most {grace} s away (slurm.signal_grace_s); rank logs are written up to now" '
            ">&2",
            "}",
            f"trap epcap_warned {WARN_SIGNAL}"]


def rendezvous_by_master(spec: LaunchSpec, gpus_per_node: int) -> bool:
    """Whether the ranks find each other through MASTER_ADDR/MASTER_PORT: several srun tasks
    (torch.distributed's env:// rendezvous; backends/megatron/base.py's multi-node
    trampoline), or a task that is one rank (backends/reference needs them). A single task
    hosting all its ranks (torchrun --standalone; a worker forking its ranks on 127.0.0.1,
    backends/ranks.py) meets on its own: no unused variables."""
    return int(spec.ntasks) > 1 or ranks_per_task(spec, gpus_per_node) == 1


# after srun: a rank capture whose FIFO no rank opened (the worker failed first) is stopped
# (it has nothing to write); the others finish their logs; the FIFO directory goes
OWN_RANKS_END = [
    'for i in "${!rank_captures[@]}"; do',
    f'  if [ -p "${RANK_FIFOS_ENV}/rank$i.fifo" ]; then kill "${{rank_captures[$i]}}" 2>/dev/null;'
    ' wait "${rank_captures[$i]}" 2>/dev/null',
    '  elif ! wait "${rank_captures[$i]}"; then echo "[EPCAP_SLURM] capture of rank$i exit 1";'
    ' [ "$rc" != 0 ] || rc=1; fi',
    "done",
    f'rm -rf "${RANK_FIFOS_ENV}"']


def own_ranks_lines(spec: LaunchSpec, python: str, meta: dict | None) -> list[str]:
    """A task that starts its own ranks (spec.ranks_per_task > 1, one task on one node) gets
    one FIFO per rank, each read by its own capture into rank<R>.log, as the local launcher
    does (harness/launch/local.py; backends/ranks.py writes rank R's output to
    `$EPCAP_RANK_FIFOS/rank<R>.fifo`); the task's own lines go to node0.log. The FIFOs are
    node-local: the batch script runs on the job's one node, where the task runs."""
    per_task = int(spec.ranks_per_task)
    if per_task <= 1:
        return []
    if int(spec.ntasks) != 1 or int(spec.nodes) > 1:
        raise BadInput(f"a task that starts its own {per_task} ranks runs alone on one node "
                       f"(ntasks {spec.ntasks}, nodes {spec.nodes})", field="launch")
    q = shlex.quote
    wait_s = int((meta or {}).get("timeout_s") or FIFO_TIMEOUT_S)
    return ["# this task starts its own ranks: one FIFO and one capture per rank "
            "(rank<R>.log), the task's own lines to node0.log",
            f'{RANK_FIFOS_ENV}="$(mktemp -d "${{TMPDIR:-/tmp}}/epcap-ranks.XXXXXX")"',
            f"export {RANK_FIFOS_ENV}",
            "rank_captures=()",
            f"for r in $(seq 0 {per_task - 1}); do",
            f'  mkfifo -m 600 "${RANK_FIFOS_ENV}/rank$r.fifo"',
            f'  {q(python)} -m harness.launch.capture "${OUT_VAR}" --rank "$r" '
            f'--fifo "${RANK_FIFOS_ENV}/rank$r.fifo" --fifo-timeout {wait_s} &',
            '  rank_captures+=("$!")',
            "done"]


def script_meta(script: Path) -> dict:
    """The epcap-meta JSON of a written batch script (ntasks, timeout_s), {} if absent."""
    for line in script.read_text(errors="replace").splitlines():
        if line.startswith(META_TAG):
            try:
                return json.loads(line[len(META_TAG):])
            except ValueError:
                return {}
    return {}


# ---- one allocation per stage (slurm.allocation: per-stage) ---------------------------------
# The allocation's batch script is a step runner. It owns a spool folder; the driver drops
# each cell's step there as `step-<n>.sh` (n = 1, 2, ... in order, written atomically), the
# runner runs it (the cell's own slurm.sbatch, run by bash inside the allocation, so its srun
# steps, capture and warning trap are the per-cell ones), marks it `step-<n>.started`, and
# writes `step-<n>.rc` ("<exit> <start> <end>", epoch seconds, GNU date's %N fraction) when
# it ends. `step-<n>.cancel`
# from the driver ends that step (TERM to its process group, KILL 10 s later) or skips it.
# The runner ends when the driver wrote DONE_FILE and no step waits, or after
# slurm.allocation_idle_s with no step (a dead driver never holds the GPUs longer), leaving
# CLOSED_FILE. USR1 (--signal=B:USR1@grace) reaches the runner, which passes it to the step.
ALLOC_SCRIPT = "allocation.sbatch"
ALLOC_FILE = "allocation.json"
DONE_FILE = "done"
CLOSED_FILE = "closed"
# The runner looks at its spool, and at its running step, five times a second: a step's end
# and the next step's file are seen within 0.2 s (a `[ -f ]` and a `sleep`: no Slurm call).
# At 1 s the allocation idled about 1.5 s per step (measured gaps 1.009-2.044 s).
STEP_POLL_S = 0.2
# Seconds an allocation waits between one step's end and the next one's start: the driver
# reads the result, classifies and writes it, decides the next cell and drops it, and the
# runner sees it within STEP_POLL_S. Measured: the mean of the 10 gaps (0.208-0.844 s,
# median 0.209 s; .started - previous .rc end) of the short reduced runbook's one model with
# per-stage on the CI Slurm, killed and resumed (tests/e2e/test_slurm.py), 2026-12-06, with
# other work on the 2 cores. At STEP_POLL_S = 1 the same measure gave 1.009-2.044 s, mean 1.13.
STEP_GAP_S = 0.34
STEP_KILL_AFTER_S = 10          # a cancelled step still alive after TERM gets KILL
SHELL_SIGNAL_BASE = 128   # a shell reports a child ended by signal n as exit 128 + n
CANCELLED_RC = SHELL_SIGNAL_BASE + 15   # a step skipped (cancelled before it started): TERM
MAX_STEPS = 999_999             # six digits: the names list in step order


def step_name(n: int) -> str:
    """`step-<n>`, zero-padded so the spool lists in order."""
    if not 1 <= int(n) <= MAX_STEPS:
        raise ValueError(f"steps count from 1 to {MAX_STEPS}, not {n}")
    return f"step-{int(n):06d}"


def allocation_minutes(time_limit: str, planned_cells: int, cap: str | None = None,
                       where: str | None = None) -> int:
    """The allocation's time limit in minutes: the per-cell `slurm.time_limit` times the
    cells the plan gives its stage for this model (each cell may use its whole limit), at
    most `slurm.allocation_time_limit` (`cap`, e.g. the partition's MaxTime). A cell that
    finds less than its own limit left in the allocation, or the allocation gone (a retry,
    a step-up past the plan), gets a new one. UNLIMITED stays unlimited (0 here)."""
    minutes = time_minutes(time_limit)
    total = float("inf") if minutes == float("inf") else minutes * max(1, int(planned_cells))
    if cap is not None:
        if not TIME_RE.match(str(cap)):
            raise BadInput(f"not a Slurm time ({cap!r}); use e.g. 04:00:00", path=where,
                           field="slurm.allocation_time_limit")
        if time_minutes(cap) < minutes:
            raise BadInput(f"slurm.allocation_time_limit {cap} is shorter than one cell's "
                           f"slurm.time_limit {time_limit}", path=where,
                           field="slurm.allocation_time_limit")
        total = min(total, time_minutes(cap))
    return 0 if total == float("inf") else int(-(-total // 1))


def allocation_options(cell_options: list[str], name: str, minutes: int) -> list[str]:
    """The allocation's #SBATCH options: the first cell's resources (nodes, tasks, CPUs,
    GPUs, memory, --signal, --export, extra_sbatch), its own job name and time limit
    (`minutes`; 0: UNLIMITED)."""
    keep = [o for o in cell_options if not o.startswith(("--job-name=", "--time="))]
    when = str(int(minutes)) if minutes else "UNLIMITED"
    return [f"--job-name={check_value(name, 'slurm', None)}", f"--time={when}", *keep]


def step_script(cell_name: str, cell_dir: Path, n: int) -> str:
    """What the driver drops into the spool for one cell: run the cell's own batch script
    (its #SBATCH lines are comments to bash) on its cell directory inside the allocation,
    its batch log as a per-cell job's, `slurm-<allocation job id>.out` in the cell."""
    q = shlex.quote
    cell = Path(cell_dir)
    check_value(str(cell), "cell", None)
    check_value(cell_name, "cell", None)
    return "\n".join([
        "#!/bin/bash",
        f"# epcap step {int(n)}: cell {q(cell_name)}",
        f"exec bash {q(str(cell / SCRIPT_NAME))} {q(str(cell))} "
        f'> {q(str(cell))}/slurm-"$SLURM_JOB_ID".out 2>&1', ""])


def runner_script(options: list[str], idle_s: int, meta: dict | None = None) -> str:
    """The allocation's batch script: the step runner described above. Readable and
    resubmittable as is: `sbatch allocation.sbatch SPOOL` runs the steps found in SPOOL."""
    q = shlex.quote
    idle = int(idle_s)
    lines = ["#!/bin/bash",
             "# epcap step runner: one allocation for a stage's cells (slurm.allocation: "
             "per-stage; generated, every value shell-quoted)",
             f"# usage: sbatch [--output=SPOOL/slurm-%j.out] {ALLOC_SCRIPT} SPOOL   (SPOOL: the "
             "folder holding step-<n>.sh files; the runner runs them in order, writes "
             "step-<n>.rc, and ends on SPOOL/done or after "
             f"{idle} s without a step)"]
    if meta:
        lines.append(f"{META_TAG} {json.dumps(meta, sort_keys=True)}")
    lines += [f"#SBATCH {q(opt)}" for opt in options]
    lines += [
        "set -u",
        'spool="${1:?usage: sbatch ' + ALLOC_SCRIPT + ' SPOOL}"',
        f'cd "$spool" 2>/dev/null || {{ echo "{SETUP_FATAL} spool $spool is missing on '
        f'$(hostname)" >&2; exit {SETUP_FAIL_EXIT}; }}',
        f"idle={idle}",
        "set -m    # each step in its own process group: a cancel ends all of it",
        'child=""; n=1; last=$(date +%s)',
        'put() { printf \'%s\\n\' "$2" > "$1.tmp" && mv -f "$1.tmp" "$1"; }',
        f"# Slurm's warning before the time limit ({WARN_SIGNAL}) goes on to the running step,",
        "# whose own trap marks its cell",
        "# shellcheck disable=SC2317  # called by the trap",
        "epcap_forward() {",
        f'  echo "[EPCAP_SLURM] {WARN_SIGNAL} at $(date -u +%FT%TZ): passed to step $n" >&2',
        f'  if [ -n "$child" ]; then kill -{WARN_SIGNAL} "$child" 2>/dev/null; fi',
        "}",
        f"trap epcap_forward {WARN_SIGNAL}",
        "while :; do",
        "  step=$(printf 'step-%06d' \"$n\")",
        '  if [ -f "$step.rc" ]; then n=$((n + 1)); continue; fi    # ran before a requeue',
        '  if [ -f "$step.sh" ]; then',
        "    start=$(date +%s.%N)",
        '    if [ -f "$step.cancel" ]; then',
        f'      put "$step.rc" "{CANCELLED_RC} $start $start"; '
        'echo "[EPCAP_SLURM] step $n cancelled before it started"',
        "      n=$((n + 1)); last=$(date +%s); continue",
        "    fi",
        '    put "$step.started" "$start"',
        '    echo "[EPCAP_SLURM] step $n starts: $(sed -n 2p "$step.sh")"',
        '    bash "$step.sh" &',
        "    child=$!; stopped=0",
        '    while kill -0 "$child" 2>/dev/null; do',
        '      if [ -f "$step.cancel" ]; then',
        "        now=$(date +%s)",
        '        if (( stopped == 0 )); then kill -TERM -- "-$child" 2>/dev/null; stopped=$now',
        f'        elif (( now - stopped >= {STEP_KILL_AFTER_S} )); then '
        'kill -KILL -- "-$child" 2>/dev/null; fi',
        "      fi",
        f"      sleep {STEP_POLL_S} & wait $!",
        "    done",
        '    wait "$child"; rc=$?; child=""',
        '    put "$step.rc" "$rc $start $(date +%s.%N)"',
        '    echo "[EPCAP_SLURM] step $n exit $rc"',
        "    n=$((n + 1)); last=$(date +%s); continue",
        "  fi",
        f'  if [ -f {DONE_FILE} ]; then echo "[EPCAP_SLURM] stage done after $((n - 1)) '
        'step(s)"; exit 0; fi',
        "  if (( $(date +%s) - last >= idle )); then",
        f"    : > {CLOSED_FILE}",
        f'    if [ -f "$step.sh" ]; then rm -f {CLOSED_FILE}; continue; fi   # dropped just now',
        '    echo "[EPCAP_SLURM] no step for $idle s (slurm.allocation_idle_s): the allocation '
        'ends"; exit 0',
        "  fi",
        f"  sleep {STEP_POLL_S} & wait $!",
        "done", ""]
    return "\n".join(lines)


def parse_step_rc(text: str) -> tuple[int, float, float] | None:
    """`<exit> <start> <end>` of a step-<n>.rc file; None when it is not that."""
    parts = text.split()
    if len(parts) != 3:
        return None
    try:
        return int(parts[0]), float(parts[1]), float(parts[2])
    except ValueError:
        return None
