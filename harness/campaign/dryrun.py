"""`epcap run --dry-run`: the plan, as it will run. Every planned cell (stage table order) that
this invocation would launch (`--stage`/`--until`, `--model`/`--backend` honoured), with its
command, capacity, budget, launch number and paths; each cell whose command is known gets
its batch script (Slurm) and a `repro.sh` under `<results>/<campaign>.dry-run/` (the campaign
directory itself is never touched); memory warnings per (model, backend) from the memory
model (harness/loadmodel/memory.py); one closing summary (runs, GPU-hours, wall clock)."""

from __future__ import annotations

import math
import shlex
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness.api.backend import LaunchSpec, RunRequest
from harness.api.registry import CLUSTER_KIND, load_backend
from harness.campaign.gpuhours import describe_estimate, hours_per_cell
from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.health import probe_tools
from harness.io.atomic import current_umask, write_text_atomic
from harness.io.redact import REDACTED, is_secret_env
from harness.launch.slurm import SlurmLauncher
from harness.launch.slurm_script import HIDDEN_ARG, hidden_values, script_argv
from harness.loadmodel.memory import estimate_memory_bytes, format_size
from harness.pipeline.stages import plan_cells, stage_mode, timed_arms
from harness.results.layout import Cell, PlannedCell, cell_dir
from harness.runbook.model import BackendConfig, Runbook
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


def repro_script(cell_name: str, spec: LaunchSpec) -> str:
    """A shell script that reruns one cell by hand: env with values (secrets come from the
    caller's environment, never from this file), cwd, one process per task with the launcher's
    rank variables, each into rank<R>.log."""
    q = shlex.quote
    lines = ["#!/bin/bash", f"# repro of {cell_name} (epcap run --dry-run); secrets are "
             "read from your environment", "set -euo pipefail"]
    for key, value in sorted(spec.env.items()):
        if is_secret_env(key):
            lines.append(f': "${{{key}:?set {key} in your environment ({REDACTED} here)}}"')
            lines.append(f"export {key}")
        else:
            lines.append(f"export {key}={q(str(value))}")
    for name in sorted(n for n in hidden_values(spec) if n.startswith(HIDDEN_ARG)):
        lines.append(f': "${{{name}:?set {name} to the secret argument ({REDACTED} here)}}"')
    if spec.cwd:
        lines.append(f"cd {q(spec.cwd)}")
    lines += [f"export WORLD_SIZE={int(spec.ntasks)} MASTER_ADDR=127.0.0.1 "
              "MASTER_PORT=\"${MASTER_PORT:-29500}\"",
              f"for rank in $(seq 0 {int(spec.ntasks) - 1}); do",
              "  RANK=$rank LOCAL_RANK=$rank " + " ".join(script_argv(spec))
              + ' > "rank$rank.log" 2>&1 &', "done", "wait", ""]
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


def print_dry_run(rb: Runbook, root: Path, launcher_name: str,
                  selection: PlanFilter | None = None) -> int:
    """Print the plan and write its scripts; returns the exit code (0)."""
    sel = selection or PlanFilter()
    sel.check(rb)
    planned = plan_cells(rb)
    modes = {p.stage: stage_mode(p.stage, sel.stages, sel.until) for p in planned}
    cells = [p for p in planned if modes[p.stage] == StageMode.RUN and sel.picks(p)]
    out_dir = dry_run_dir(root)
    print(f"campaign {rb.campaign}: runbook {rb.path}; results {root}; launcher {launcher_name}")
    print(f"shape: seq {rb.shape.seq} x micro_batch {rb.shape.micro_batch}, ep {rb.shape.ep}; "
          f"pad_multiple {rb.capacity.pad_multiple}; grid {rb.capacity.grid}")
    if rb.container.enabled:
        print(f"container: {rb.container.engine} {rb.container.image}")
    backends = {b.name: load_backend(b) for b in rb.backends}
    slurm = SlurmLauncher(rb) if launcher_name == "slurm" else None
    attempts: Counter = Counter()
    launches = {arm: i for i, arm in enumerate(timed_arms(rb)[1])}
    scripts: dict[str, dict[str, str]] = {}
    for number, p in enumerate(cells, 1):
        key = (p.model, p.backend, p.purpose)
        attempts[key] += 1
        n = rb.shape.uniform_tokens(rb.model(p.model).topk)
        launch = (f" launch {attempts[key]}/{rb.timing.launches}"
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
        cell = Cell(rb.campaign, p.model, p.backend, p.purpose, p.capacity, attempts[key])
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
        files = {REPRO_NAME: repro_script(cell.name, spec)}
        if slurm is not None:
            files["slurm.sbatch"] = slurm.script_text(cell.name, spec, cdir,
                                                      rb.limits.run_timeout_s)
        scripts[cell.name] = files
        print(f"  scripts: {out_dir}/cells/{cell.name}/ ({', '.join(sorted(files))})")
    write_plan(out_dir, scripts)
    print_summary(rb, cells, planned, modes, sel, out_dir, launcher_name)
    return 0


def print_summary(rb: Runbook, cells: list[PlannedCell], planned: list[PlannedCell],
                  modes: dict, sel: PlanFilter, out_dir: Path, launcher_name: str) -> None:
    """The closing screen: runs by stage, GPU-hours, wall clock, warnings, where the scripts are."""
    by_stage = Counter(p.stage for p in cells)
    skipped = sorted({s for s, m in modes.items() if m != StageMode.RUN})
    hours, basis = hours_per_cell(rb)
    waves = math.ceil(len(cells) / max(1, rb.max_parallel_cells))
    print("\n== summary ==")
    print(f"runs planned: {len(cells)} of {len(planned)} in the full plan ("
          + ", ".join(f"{s} {n}" for s, n in by_stage.items()) + ")"
          + (f"; not run now: {', '.join(skipped)}" if skipped else "")
          + ("; selectors: " + " ".join([*(f"--model {m}" for m in sel.models),
                                          *(f"--backend {b}" for b in sel.backends)])
             if sel.models or sel.backends else "")
          + " (re-measures and validation step-ups add runs)")
    print(describe_estimate(rb, len(cells)))
    print(f"wall clock: {len(cells) * hours:g} h serial ({len(cells)} runs x {hours:g} h, "
          f"{basis}); {waves * hours:g} h at max_parallel_cells {rb.max_parallel_cells}")
    print(timing_cost(rb, sum(1 for p in cells if p.purpose == Purpose.TIME)))
    warnings = memory_warnings(rb, sel)
    gpus = rb.slurm.gpus_per_node if launcher_name == "slurm" else 0
    if gpus and not probe_tools():
        warnings.append("this Python cannot probe GPUs (no nvidia-ml-py, no nvidia-smi): "
                        "a real run stops at preflight (`make cluster` installs the probe)")
    for line in warnings:
        print(f"WARNING: {line}")
    print(f"scripts: {out_dir}/cells/<cell>/ (repro.sh"
          + (", slurm.sbatch" if launcher_name == "slurm" else "") + ")")


def timing_cost(rb: Runbook, timed_runs: int) -> str:
    """What the launches and the A/A control cost over one launch per (model, backend)."""
    baseline, arms = timed_arms(rb)
    once = len(rb.models) * sum(1 for b in rb.backends if b.time)
    added = timed_runs - once
    return (f"timing: {timed_runs} timed runs = {len(rb.models)} models x {len(arms)} arms "
            f"({', '.join(arms) or 'none'}) x {rb.timing.launches} launches; baseline "
            f"{baseline}, max_cv {rb.timing.max_cv:g}\n  the launches and the control add "
            f"{added} runs over one launch per (model, backend): "
            f"{describe_estimate(rb, added)}" + resolution_cost(rb))


def resolution_cost(rb: Runbook) -> str:
    """With a timing.resolution: how many more rounds (and runs) it may add, at most."""
    t = rb.timing
    if t.resolution is None:
        return ""
    _, arms = timed_arms(rb)
    more = (t.launch_cap - t.launches) * len(arms) * len(rb.models)
    return (f"\n  timing.resolution {t.resolution:g}: further rounds until every interval is "
            f"within ±{100 * t.resolution:g}%, up to {t.launch_cap} launches (at most {more} "
            f"more runs: {describe_estimate(rb, more)})")
