"""`epcap run --dry-run`: the plan, as it will run. Every planned cell (stage table order) that
this invocation would launch (`--stage`/`--until`, `--model`/`--backend` honoured), with its
command, capacity, budget, launch number and paths; each cell whose command is known gets
its batch script (Slurm) and a `repro.sh` under `<results>/<campaign>.dry-run/` (the campaign
directory itself is never touched); memory warnings per (model, backend) from the memory
model (harness/loadmodel/memory.py); one closing summary (runs, the time estimate with its
source and error band, GPU-hours, the Slurm ceiling). The plan is what is left: a campaign
directory that already holds runs is read (never written) and its standing runs replayed
through the pipelines, exactly as a resume would, so a finished campaign plans 0 runs."""

from __future__ import annotations

import math
import shlex
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness.api.backend import Backend, LaunchSpec, RunRequest
from harness.api.registry import CLUSTER_KIND, load_backend
from harness.campaign import store
from harness.campaign.driver import Campaign, Replay, group_name
from harness.campaign.estimate import band_text, ceiling_hours
from harness.campaign.progress import ProgressView, fmt_s
from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.health import probe_tools
from harness.io.atomic import current_umask, write_text_atomic
from harness.io.boundary.paths import node_local
from harness.io.redact import REDACTED, is_secret_env
from harness.launch.container import unmounted
from harness.launch.outdir import OUT_VAR, cell_dirs, out_dir_lines, out_words
from harness.launch.slurm import SlurmLauncher
from harness.launch.slurm_script import (
    HARNESS_ROOT,
    HIDDEN_ARG,
    SCRIPT_NAME,
    STEP_GAP_S,
    STEP_POLL_S,
    allocation_minutes,
    hidden_values,
)
from harness.loadmodel.memory import estimate_memory_bytes, format_size
from harness.pipeline.decisions import Context, model_pipeline
from harness.pipeline.stages import plan_cells, stage_mode, timed_arms
from harness.results.layout import EVENTS_JSONL, Cell, PlannedCell, cell_dir
from harness.runbook.model import ARCH_FIELDS, BackendConfig, Runbook
from harness.vocab import CONTROL_SUFFIX, Purpose, StageMode

DRY_RUN_SUFFIX = ".dry-run"
REPRO_NAME = "repro.sh"
PERSONALITIES = ("echo", "ultraep", "moonep")
# The cluster adapters' training profile (backends/megatron/base.py common_args: --bf16,
# --use-distributed-optimizer, Adam (Megatron's default optimizer), no recompute flag, real
# attention and embeddings); the optimizer is sharded over data parallel = the world.
CLUSTER_MEMORY = {"precision": "bf16", "optimizer": "adam", "recompute": "none", "dense": True}


@dataclass(frozen=True)
class PlanFilter:
    """What this invocation runs: `--stage`/`--until` and the `--model`/`--backend` selectors."""

    stages: tuple[str, ...] = ()
    until: str | None = None
    models: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()

    def check(self, rb: Runbook) -> None:
        """BadInput naming an unknown model or backend."""
        known_m = [m.name for m in rb.models]
        for name in self.models:
            if name not in known_m:
                raise BadInput(f"unknown model {name!r}; known: {', '.join(known_m)}",
                               field="--model")
        known_b = [b.name for b in rb.backends]
        for name in self.backends:
            if name not in known_b:
                raise BadInput(f"unknown backend {name!r}; known: {', '.join(known_b)}",
                               field="--backend")

    def picks(self, cell: PlannedCell) -> bool:
        base = cell.backend.removesuffix(CONTROL_SUFFIX)
        return ((not self.models or cell.model in self.models)
                and (not self.backends or base in self.backends))


def dry_run_dir(root: Path) -> Path:
    """`<results>/<campaign>.dry-run`: beside the campaign directory, never inside it."""
    return root.parent / f"{root.name}{DRY_RUN_SUFFIX}"


def validate_routing(rb: Runbook, backend: str) -> str:
    """The routing a validate cell runs on: seed, iterations, and whether it is held out."""
    v, warmup = rb.validate, rb.measure.warmup
    iters = f"{v.iters} iterations" + (f" after {warmup} warmup" if warmup else "")
    if not rb.held_out_routing(backend):
        why = ("a recorded routing trace is replayed" if v.held_out
               else "validate.seed = the campaign seed")
        return (f"seed {v.seed}, {iters}: the measured routing again ({why}; "
                "held_out=false)")
    plus = f" + {v.seed - rb.seed}" if 0 < v.seed - rb.seed < 1000 else ""
    how = f"campaign seed {rb.seed}{plus}" if plus else f"campaign seed {rb.seed} differs"
    return f"seed {v.seed} (held out: {how}), {iters}"


def memory_profile(rb: Runbook, backend: BackendConfig) -> tuple[str, dict]:
    """(personality, memory options) the memory model uses for one backend's cells."""
    if backend.kind == CLUSTER_KIND:
        world = rb.slurm.nodes * rb.slurm.gpus_per_node
        personality = backend.module if backend.module in PERSONALITIES else "raw"
        return personality, {**CLUSTER_MEMORY, "optimizer_shards": max(1, world)}
    options = backend.options
    memory = getattr(options, "memory", None) if not isinstance(options, dict) \
        else options.get("memory")
    personality = backend.module if backend.module in PERSONALITIES else "raw"
    return personality, dict(memory or {})


def memory_warnings(rb: Runbook, selection: PlanFilter) -> list[str]:
    """One line per (model, backend) the memory model says will not fit the device."""
    if rb.device_memory_bytes is None:
        return []
    out = []
    for model in rb.models:
        for backend in rb.backends:
            if not selection.picks(PlannedCell(model.name, backend.name, "", None)):
                continue
            personality, options = memory_profile(rb, backend)
            est = estimate_memory_bytes(model, rb.shape, rb.capacity.measure, personality,
                                        rb.shape.ep, options)
            if est["total"] > rb.device_memory_bytes:
                biggest = max(("expert_weights", "gradients", "optimizer", "activations",
                               "buffers"), key=lambda c: est[c])
                out.append(f"{model.name} {backend.name}: modelled {format_size(est['total'])} "
                           f"per GPU > device {format_size(rb.device_memory_bytes)} "
                           f"({model.layers} layers, capacity {rb.capacity.measure}; largest "
                           f"term {biggest} {format_size(est[biggest])}): expect does_not_fit "
                           f"-- reduce layers (models[].layers) or the device profile")
    return out


def flag_origin_lines(rb: Runbook, backends: dict[str, Backend], sel: PlanFilter
                      ) -> list[str]:
    """Per model (of the `--model` selection): each architecture aspect's flags and where
    they were written (the zoo entry or the runbook), the public config the zoo copied them
    from, the model's extra `flags`; then the flags each backend adds that are not the
    model's (harness defaults, numbers from the zoo, the runbook's backend flags)."""
    out = []
    for model in rb.models:
        if sel.models and model.name not in sel.models:
            continue
        origins = dict(rb.model_origins.get(model.name, ()))
        arch = dict(model.arch)
        out.append(f"model {model.name}: flags and where each comes from")
        for aspect in ARCH_FIELDS:
            flags = arch.get(aspect)
            shown = ("(not stated)" if flags is None
                     else shlex.join(flags) if flags else "(none: Megatron's default, stated)")
            out.append(f"  arch.{aspect}: {shown}  [{origins.get(f'arch.{aspect}', 'nowhere')}]")
        if "arch_source" in origins:
            out.append(f"  arch copied from the model's config: {origins['arch_source']}")
        if model.flags:
            out.append(f"  flags: {shlex.join(model.flags)}  [{origins.get('flags', '?')}]")
        added: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for b in rb.backends:
            for what, flags in backends[b.name].flag_origins(model):
                if flags:
                    added.setdefault((what, flags), []).append(b.name)
        for (what, flags), names in added.items():
            out.append(f"  {', '.join(names)} add ({what}): {shlex.join(flags)}")
    return out


def repro_script(cell_name: str, spec: LaunchSpec, cdir: Path | None = None) -> str:
    """A bash script that reruns one cell by hand, as the local launcher ran it: the same
    argv, environment (secrets come from the caller's environment, never from this file) and
    working directory, one process per task with the launcher's rank variables, each into
    OUT_DIR/rank<R>.log; every path inside the cell directory becomes one inside OUT_DIR
    (argument 1; default: a new directory beside this script), so it writes nowhere else. It
    exits with the first failing rank's status (0 when every rank exits 0) and needs no
    harness installed (only what the cell's own argv runs)."""
    q = shlex.quote
    dirs = cell_dirs(cdir)
    n = int(spec.ntasks)
    lines = ["#!/bin/bash",
             f"# repro of {cell_name}: the argv, environment and working directory epcap ran "
             "it with; secrets are read from your environment.",
             "# usage: repro.sh [OUT_DIR]   (default: a new directory <this script's folder>"
             ".repro.XXXXXX beside it); "
             "exit status: the first failing rank's.",
             "set -uo pipefail",
             'here=$(cd "$(dirname "$0")" && pwd)',
             *out_dir_lines('"$here"', ".repro", f"repro {cell_name}")]
    for key, value in sorted(spec.env.items()):
        if is_secret_env(key):
            lines.append(f': "${{{key}:?set {key} in your environment ({REDACTED} here)}}"')
            lines.append(f"export {key}")
        else:
            lines.append(f"export {key}={out_words(str(value), dirs)}")
    hidden = hidden_values(spec)
    for name in sorted(h for h in hidden if h.startswith(HIDDEN_ARG)):
        lines.append(f': "${{{name}:?set {name} to the secret argument ({REDACTED} here)}}"')
    argv = [f'"${{{HIDDEN_ARG}{i}}}"' if f"{HIDDEN_ARG}{i}" in hidden
            else out_words(str(a), dirs) for i, a in enumerate(spec.argv)]
    if spec.cwd:
        lines.append(f"cd {q(spec.cwd)} || exit 1")
    lines += [f"export WORLD_SIZE={n} LOCAL_WORLD_SIZE={n} MASTER_ADDR=127.0.0.1 "
              "MASTER_PORT=\"${MASTER_PORT:-29500}\"",
              "pids=()",
              f"for rank in $(seq 0 {n - 1}); do",
              "  RANK=$rank LOCAL_RANK=$rank " + " ".join(argv)
              + f' > "${OUT_VAR}/rank$rank.log" 2>&1 &',
              '  pids+=("$!")', "done",
              "status=0",
              'for pid in "${pids[@]}"; do',
              '  wait "$pid"; rc=$?',
              '  if [ "$status" = 0 ] && [ "$rc" != 0 ]; then status=$rc; fi',
              "done",
              f'echo "repro {cell_name}: exit $status" >&2',
              'exit "$status"', ""]
    return "\n".join(lines)


def write_plan(out_dir: Path, scripts: dict[str, dict[str, str]]) -> None:
    """Replace `out_dir` with the new plan's scripts (built beside it, then swapped in)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, files in scripts.items():
            (tmp / "cells" / name).mkdir(parents=True)
            for fname, text in files.items():
                write_text_atomic(tmp / "cells" / name / fname, text)
        tmp.chmod(0o777 & ~current_umask())
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def standing_plan(rb: Runbook, root: Path, sel: PlanFilter,
                  history_roots: tuple[Path, ...] = ()) -> Campaign:
    """The campaign as a resume would find it, read only: its standing runs (a result-bearing
    runbook edit's invalidations applied in memory) replayed through the pipelines up to the
    first run each needs, so `runs_left()` is what is left and `eta()` its estimate."""
    ctx = Context(rb, sel.stages, sel.until, sel.models, sel.backends)
    camp = Campaign(rb, root, None, ctx, ProgressView(enabled=False), [], history_roots,
                    writable=False)
    if not (root / EVENTS_JSONL).is_file():
        return camp
    rev = store.revision(root, rb)
    if rev is not None and rev[1]:
        gone = set(store.affected_cells(camp.finished, rev[1]))
        for key, runs in list(camp.finished.items()):
            camp.finished[key] = [ev for ev in runs if ev.cell not in gone]
    waiting: dict = {}
    try:
        for model in rb.models:
            camp.advance(model_pipeline(ctx, model.name), None, waiting, first=True)
    except Replay as exc:
        raise BadInput(str(exc), field="--stage") from exc
    return camp


def cells_left(rb: Runbook, sel: PlanFilter, left: list[tuple[str, str, str, int]]
               ) -> tuple[list[tuple[PlannedCell, int]], list[PlannedCell], dict]:
    """(planned cell, its attempt number) of the runs left, in stage-table order; the full
    plan; each stage's mode."""
    planned = plan_cells(rb)
    modes = {p.stage: stage_mode(p.stage, sel.stages, sel.until) for p in planned}
    todo: dict[tuple[str, str, str], list[int]] = {}
    for backend, model, purpose, attempt in left:
        todo.setdefault((model, backend, purpose), []).append(attempt)
    cells = []
    for p in planned:
        queue = todo.get((p.model, p.backend, p.purpose))
        if modes[p.stage] == StageMode.RUN and sel.picks(p) and queue:
            cells.append((p, queue.pop(0)))
    return cells, planned, modes


def print_dry_run(rb: Runbook, root: Path, launcher_name: str,
                  selection: PlanFilter | None = None,
                  history_roots: tuple[Path, ...] = (), test_only: bool = True) -> int:
    """Print the plan of what is left and write its scripts; with Slurm, `sbatch --test-only`
    once per resource shape (SubmitRefused, exit 2, on a refusal) unless `test_only` is
    False; returns the exit code (0)."""
    sel = selection or PlanFilter()
    sel.check(rb)
    camp = standing_plan(rb, root, sel, history_roots)
    left = camp.runs_left()
    cells, planned, modes = cells_left(rb, sel, left)
    out_dir = dry_run_dir(root)
    print(f"campaign {rb.campaign}: runbook {rb.path}; results {root}; launcher {launcher_name}")
    if camp.done_runs:
        print(f"standing: {camp.done_runs} finished runs in {root} (replayed, not rerun)")
    print(f"shape: seq {rb.shape.seq} x micro_batch {rb.shape.micro_batch}, ep {rb.shape.ep}; "
          f"pad_multiple {rb.capacity.pad_multiple}; grid {rb.capacity.grid}")
    if rb.container.enabled:
        print(f"container: {rb.container.engine} {rb.container.image}")
    backends = {b.name: load_backend(b) for b in rb.backends}
    for line in flag_origin_lines(rb, backends, sel):
        print(line)
    slurm = SlurmLauncher(rb) if launcher_name == "slurm" else None
    launches = {arm: i for i, arm in enumerate(timed_arms(rb)[1])}
    scripts: dict[str, dict[str, str]] = {}
    nth: Counter = Counter()
    for number, (p, attempt) in enumerate(cells, 1):
        key = (p.model, p.backend, p.purpose)
        nth[key] += 1
        n = rb.shape.uniform_tokens(rb.model(p.model).topk)
        launch = (f" launch {nth[key] + camp.standing(camp.finished.get(key, []))}/"
                  f"{rb.timing.launches}"
                  if p.purpose == Purpose.TIME and p.backend in launches else "")
        print(f"\n[{p.stage}] {p.model} {p.backend} {p.purpose}{launch}  (run {number} of "
              f"{len(cells)})")
        if p.purpose == Purpose.VALIDATE:
            print(f"  routing: {validate_routing(rb, p.backend)}")
        if p.capacity is None:
            print("  capacity: unknown until measured (set by the select stage; timing uses "
                  "max over the select backends' selections); its scripts are written when "
                  "it launches")
            print(f"  cells: {root}/cells/{p.model}__{p.backend}__{p.purpose}__cap<TAG>__a<N>/")
            continue
        cell = Cell(rb.campaign, p.model, p.backend, p.purpose, p.capacity, attempt)
        cdir = cell_dir(root, cell)
        budget = cap.budget_tokens(p.capacity, n)
        ok = cap.is_executable(p.capacity, n, rb.capacity.pad_multiple)
        spec = backends[p.backend].command(RunRequest.for_cell(rb, cell, cdir))
        print(f"  capacity {p.capacity}: N = {n}, budget = int({p.capacity} x {n}) = {budget}, "
              f"{'executable' if ok else 'NOT executable'} (pad {rb.capacity.pad_multiple})")
        shown = [REDACTED if HIDDEN_ARG + str(i) in hidden_values(spec) else a
                 for i, a in enumerate(spec.argv)]
        print(f"  command ({spec.ntasks} task(s), {spec.nodes} node(s)): {shlex.join(shown)}")
        if spec.env:
            print("  env: " + " ".join(f"{k}={REDACTED if is_secret_env(k) else shlex.quote(v)}"
                                       for k, v in sorted(spec.env.items())))
        print(f"  logs: {cdir}/rank<R>.log (R = global rank); provenance: "
              f"{cdir}/provenance.txt")
        files = {REPRO_NAME: repro_script(cell.name, spec, cdir)}
        if slurm is not None:
            files["slurm.sbatch"] = slurm.script_text(
                cell.name, spec, cdir, rb.limits.run_timeout_s,
                home=out_dir.resolve() / "cells" / cell.name)
        scripts[cell.name] = files
        print(f"  scripts: {out_dir}/cells/{cell.name}/ ({', '.join(sorted(files))})")
    write_plan(out_dir, scripts)
    for path in unmounted(rb.container, [root]):
        print(f"WARNING: container.mounts: the cells write under {path}, which no mount shows "
              "at the same path inside the container; a real run refuses this runbook")
    if slurm is not None:
        for line in login_only_paths(slurm.python, root):
            print(f"WARNING: {line}")
    if slurm is not None and test_only:     # a bad partition, account or QOS stops here
        for line in slurm.test_only(sorted(out_dir.glob(f"cells/*/{SCRIPT_NAME}"))):
            print(line)
    print_summary(rb, camp, [p for p, _ in cells], planned, modes, sel, out_dir, launcher_name)
    return 0


def estimate_source(camp: Campaign, left: list[tuple[str, str, str, int]]) -> str:
    """What the estimate of `left` rests on: the history of the same work, the cost model
    (scaled by the runs measured), or a fit; with how many runs each."""
    est = camp.estimator
    from_history = sum(1 for run in left if est.history.get(run))
    parts = []
    if from_history:
        where = ", ".join(camp.past.where) or "none"
        parts.append(f"{from_history} from the history of {camp.past.campaigns} earlier "
                     f"campaign(s) of the same work under {where}")
    if len(left) > from_history:
        what = est.source()
        if camp.cost is not None and "cost model" in what:
            what = f"{what}; {camp.cost.source()}"
        parts.append(f"{len(left) - from_history} from the {what}")
    return "; ".join(parts) or "nothing left"


def estimate_band(camp: Campaign, left: list[tuple[str, str, str, int]]
                  ) -> tuple[float, float] | None:
    """actual / estimated range the estimate's source was measured to hold: the cost
    model's for its kind (docs/campaign.md), the history's over its campaigns (their summed
    run times), or None (not measured)."""
    est = camp.estimator
    if left and all(est.history.get(run) for run in left):
        return camp.past.band
    return camp.cost.band if camp.cost is not None else None


def print_summary(rb: Runbook, camp: Campaign, cells: list[PlannedCell],
                  planned: list[PlannedCell], modes: dict, sel: PlanFilter, out_dir: Path,
                  launcher_name: str) -> None:
    """The closing screen: runs by stage, the time estimate (source, band), GPU-hours, the
    Slurm ceiling, warnings, where the scripts are."""
    by_stage = Counter(p.stage for p in cells)
    skipped = sorted({s for s, m in modes.items() if m != StageMode.RUN})
    left = camp.runs_left()
    print("\n== summary ==")
    print(f"runs planned: {len(cells)} of {len(planned)} in the full plan ("
          + (", ".join(f"{s} {n}" for s, n in by_stage.items()) or "nothing left") + ")"
          + (f"; standing: {camp.done_runs}" if camp.done_runs else "")
          + (f"; not run now: {', '.join(skipped)}" if skipped else "")
          + ("; selectors: " + " ".join([*(f"--model {m}" for m in sel.models),
                                          *(f"--backend {b}" for b in sel.backends)])
             if sel.models or sel.backends else "")
          + " (re-measures and validation step-ups add runs)")
    eta = camp.eta(left) if left else 0.0
    if eta is not None and left:
        eta += camp.startup_s
    band = estimate_band(camp, left)
    print(f"time estimate: {fmt_s(eta) if eta is not None else 'unknown'} wall for "
          f"{len(left)} runs at max_parallel_cells {rb.max_parallel_cells}"
          + band_text(eta, band, fmt_s) + f"; source: {estimate_source(camp, left)}")
    gpus = rb.slurm.nodes * rb.slurm.gpus_per_node if launcher_name == "slurm" else 0
    if gpus:
        if eta is not None:
            hours = eta * max(1, rb.max_parallel_cells) / 3600 * gpus
            print(f"estimated GPU-hours: {hours:.2f} = time estimate x {rb.slurm.nodes} nodes x "
                  f"{rb.slurm.gpus_per_node} GPUs" + band_text(hours, band, lambda h: f"{h:.2f}"))
        ceiling = ceiling_hours(rb)
        waves = math.ceil(len(cells) / max(1, rb.max_parallel_cells))
        print(f"ceiling (slurm.time_limit, what Slurm lets a cell hold, not an estimate): "
              f"{len(cells)} runs x {ceiling:g} h = {len(cells) * ceiling:g} h serial, "
              f"{waves * ceiling:g} h at max_parallel_cells {rb.max_parallel_cells}; "
              f"{len(cells) * ceiling * gpus:.2f} GPU-hours")
    print(timing_cost(rb, [p for p in cells if p.purpose == Purpose.TIME]))
    if launcher_name == "slurm":
        for line in allocation_words(rb, cells, gpus):
            print(line)
        print(queue_wait_words(rb.limits.max_pending_s))
    warnings = memory_warnings(rb, sel)
    if launcher_name == "slurm" and rb.slurm.gpus_per_node and not probe_tools():
        warnings.append("this Python cannot probe GPUs (no nvidia-ml-py, no nvidia-smi): "
                        "a real run stops at preflight (`make cluster` installs the probe)")
    for line in warnings:
        print(f"WARNING: {line}")
    print(f"scripts: {out_dir}/cells/<cell>/ (repro.sh"
          + (", slurm.sbatch" if launcher_name == "slurm" else "") + ")")


def login_only_paths(python: str, root: Path) -> list[str]:
    """The paths every slurm.sbatch names that lie on a file system of this host's own (the
    checkout on PYTHONPATH, the Python environment, the results directory): a compute node
    sees them only where the same path is there too (a shared file system, the same install).
    Nothing is said of paths on a network file system or where the mounts cannot be read."""
    out = []
    for what, path in (("the epcap checkout (PYTHONPATH)", HARNESS_ROOT),
                       ("the Python environment", Path(sys.prefix)),
                       ("the interpreter", Path(python)),
                       ("the results directory", root)):
        why = node_local(path)
        if why is not None:
            out.append(f"slurm.sbatch names {what} {path}, on {why} of this host: a compute "
                       "node runs the script only where the same path exists there too (a "
                       "shared file system, or the same install)")
    return out


def allocation_words(rb: Runbook, cells: list[PlannedCell], gpus: int) -> list[str]:
    """Slurm jobs per-cell and per-stage for these runs, and the GPU-hours a per-stage
    allocation holds idle between its steps (estimate: STEP_GAP_S per step after the first,
    STEP_POLL_S per allocation for its runner to see `done`)."""
    groups = Counter(group_name(p.stage, p.model) for p in cells)
    planned = Counter(group_name(p.stage, p.model) for p in plan_cells(rb))
    gaps = len(cells) - len(groups)
    idle_s = gaps * STEP_GAP_S + len(groups) * STEP_POLL_S
    longest = max((allocation_minutes(rb.slurm.time_limit, planned[g],
                                      rb.slurm.allocation_time_limit, str(rb.path))
                   for g in groups),
                  default=0)
    chosen = rb.slurm.allocation
    return [f"Slurm jobs (slurm.allocation {chosen}): per-cell {len(cells)} (one per run); "
            f"per-stage {len(groups)} (one per stage of each model, measure/select/validate "
            "as one; more when a re-measure or retry finds its allocation ended)",
            f"GPU-hours held idle between steps (estimate): per-cell 0.00 (a job ends with "
            f"its cell); per-stage {idle_s * gpus / 3600:.2f} = ({gaps} steps after another "
            f"x {STEP_GAP_S:g} s + {len(groups)} allocations x {STEP_POLL_S:g} s) x {gpus} "
            "GPUs; the queue wait and the container import are paid per job",
            f"per-stage allocation time limit: slurm.time_limit {rb.slurm.time_limit} x the "
            "cells planned for its stage, at most slurm.allocation_time_limit "
            f"({rb.slurm.allocation_time_limit or 'not set'}); the longest "
            f"{longest or 'UNLIMITED'} min (a cell that finds less than its own limit left "
            "gets a new allocation)"]


def queue_wait_words(limit_s: float) -> str:
    """What the driver does with a job Slurm keeps queued (limits.max_pending_s), in words:
    the estimates above count run time only, never the queue."""
    if not limit_s:
        return ("queue wait: not in the estimates; limits.max_pending_s 0: a pending job "
                "(held, drained node, partition down) is waited on forever, its reason printed")
    return (f"queue wait: not in the estimates; a job pending over {fmt_s(limit_s)} "
            "(limits.max_pending_s) stops the campaign, naming Slurm's reason")


def timing_cost(rb: Runbook, timed: list[PlannedCell]) -> str:
    """The timed runs planned, and how many of them the launches and the A/A control add
    over one launch of each timed backend per model (never negative: counted over the
    planned runs themselves)."""
    baseline, arms = timed_arms(rb)
    once = len({(p.model, p.backend.removesuffix(CONTROL_SUFFIX)) for p in timed})
    return (f"timing: {len(timed)} timed runs planned (full plan: {len(rb.models)} models x "
            f"{len(arms)} arms ({', '.join(arms) or 'none'}) x {rb.timing.launches} launches); "
            f"baseline {baseline}, max_cv {rb.timing.max_cv:g}; the launches and the control "
            f"add {len(timed) - once} of them over one launch per (model, backend)"
            + resolution_cost(rb))


def resolution_cost(rb: Runbook) -> str:
    """With a timing.resolution: how many more rounds (and runs) it may add, at most (not in
    the time estimate, which plans the runbook's `launches`)."""
    t = rb.timing
    if t.resolution is None:
        return ""
    _, arms = timed_arms(rb)
    more = (t.launch_cap - t.launches) * len(arms) * len(rb.models)
    return (f"\n  timing.resolution {t.resolution:g}: further rounds until every interval is "
            f"within ±{100 * t.resolution:g}%, up to {t.launch_cap} launches (at most {more} "
            f"more runs, not in the time estimate above)")
