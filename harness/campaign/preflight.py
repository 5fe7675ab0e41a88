"""Preflight gate: every planned cell's launch argv, checked statically by its own backend.

A cluster backend knows the flags its pinned Megatron-LM commit accepts
(backends/megatron_args); `Backend.preflight(argv)` names each unknown flag or choice and the
file that should define it. One refused argv stops the campaign before any cell runs (no
allocation is wasted on an argparse error at iteration 0).

Then each backend validates its planned launches with the code it runs
(`Backend.validate_commands`: for Megatron, the tree's own parse_args, validate_args and
transformer config in a CPU subprocess); a rejection stops the campaign the same way. What
was checked, and how long it took, is printed (docs/cluster.md "Real validation").
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.api.backend import LaunchSpec, RunRequest
from harness.api.launcher import Launcher
from harness.api.registry import load_backend
from harness.errors import BadInput
from harness.health import probe_tools
from harness.launch.container import plugin_problem, unmounted
from harness.results.layout import Cell
from harness.runbook.model import BackendConfig, Runbook
from harness.vocab import Purpose


def planned_purposes(backend: BackendConfig) -> tuple[str, ...]:
    """The purposes a backend's cells run with: canary, measure and validate when selected,
    time when timed (their argv differ: trace flags, seed, iterations)."""
    out = [Purpose.CANARY]
    if backend.select:
        out += [Purpose.MEASURE, Purpose.VALIDATE]
    if backend.time:
        out.append(Purpose.TIME)
    return tuple(out)


def planned_launches(rb: Runbook, config: BackendConfig, root: Path = Path("results")
                     ) -> list[tuple[str, LaunchSpec]]:
    """(`model/purpose`, launch) for every planned (model, purpose) of one backend."""
    backend = load_backend(config)
    out = []
    for model in rb.models:
        for purpose in planned_purposes(config):
            cell = Cell(rb.campaign, model.name, config.name, purpose, rb.capacity.measure)
            out.append((f"{model.name}/{purpose}",
                        backend.command(RunRequest.for_cell(rb, cell, root / cell.name))))
    return out


def argv_problems(rb: Runbook, root: Path = Path("results")) -> list[str]:
    """`model/purpose: problem` for every planned (model, backend, purpose) argv."""
    problems = []
    for config in rb.backends:
        backend = load_backend(config)
        for label, spec in planned_launches(rb, config, root):
            problems += [f"{label}: {p}" for p in backend.preflight(spec.argv)]
    return problems


def validation_problems(rb: Runbook, root: Path = Path("results")
                        ) -> tuple[list[str], list[str]]:
    """(notes saying how each backend's launches were checked and how long it took,
    problems) from each backend's own validation of its planned launches. The backends'
    checks are subprocesses, so they run side by side; notes and problems keep runbook order."""
    def one(config: BackendConfig) -> tuple[str, list[str]]:
        backend = load_backend(config)
        launches = planned_launches(rb, config, root)
        start = time.monotonic()
        how, found = backend.validate_commands(launches)
        note = (f"{config.name}: {len(launches)} command(s) checked {how} "
                f"({time.monotonic() - start:.1f} s)") if how else ""
        return note, found

    with ThreadPoolExecutor(max_workers=max(1, len(rb.backends))) as pool:
        answers = list(pool.map(one, rb.backends))
    notes = [note for note, _ in answers if note]
    problems = [p for _, found in answers for p in found]
    return notes, problems


def provenance_fields(rb: Runbook) -> dict[str, str]:
    """`preflight.<backend>: how its commands are checked` for provenance.txt (what code
    validates them, or that only argument names are checked); nothing is run here."""
    out = {}
    for config in rb.backends:
        how, _ = load_backend(config).validate_commands([])
        if how:
            out[f"preflight.{config.name}"] = " ".join(how.split())
    return out


def check_backend_commands(rb: Runbook) -> list[str]:
    """BadInput listing every refused argv (the first few), before anything runs; else the
    notes of how the commands were checked (also printed on stderr)."""
    start = time.monotonic()
    problems = argv_problems(rb)
    notes: list[str] = []
    if not problems:
        notes, problems = validation_problems(rb)
        if notes:           # only backends that validate say anything (reference: silent)
            notes.append(f"commands checked in {time.monotonic() - start:.1f} s")
        for note in notes:
            print(f"preflight: {note}", file=sys.stderr)
    if problems:
        shown = "\n  ".join(problems[:8])
        more = f"\n  ... and {len(problems) - 8} more" if len(problems) > 8 else ""
        raise BadInput(f"preflight: {len(problems)} launch argv problem(s); no cell ran:\n  "
                       f"{shown}{more}", path=str(rb.path), field="backends")
    return notes


GPU_PROBE_REMEDY = ("install the cluster extra in the Python that submits and runs the cells "
                    "(`make cluster`, i.e. pip install -e '.[cluster]', which brings "
                    "nvidia-ml-py), or put NVIDIA's nvidia-smi on PATH")


def check_launcher_setup(rb: Runbook, launcher_name: str) -> None:
    """What the chosen launcher cannot honour is an error, not ignored: a `container:` with
    the local launcher (`--launcher local` over a Slurm runbook)."""
    if rb.container.enabled and launcher_name != "slurm":
        raise BadInput(f"container engine {rb.container.engine} runs under the Slurm launcher "
                       f"only; the {launcher_name} launcher would ignore it (use --launcher "
                       f"slurm, or container.engine: none)", path=str(rb.path),
                       field="container.engine")
    check_gpu_probe(rb, launcher_name)
    problem = plugin_problem(rb.container) if launcher_name == "slurm" else None
    if problem:
        raise BadInput(f"preflight: {problem}; no cell ran", path=str(rb.path),
                       field="container.engine")


def check_container_mounts(rb: Runbook, results_root: Path) -> None:
    """Every path a containerised cell writes lies under a mount that shows it at the same
    path inside: the campaign directory below `results_root` holds them all (rank logs,
    cell.json, and what the ranks write themselves, e.g. `--moe-routing-trace-path`).
    BadInput naming container.mounts, before anything is written or submitted."""
    root = Path(os.path.abspath(results_root))
    if unmounted(rb.container, [root]):
        shown = ", ".join(rb.container.mounts) or "none"
        raise BadInput(f"the cells write under {root} (their logs, traces such as "
                       f"--moe-routing-trace-path), which no container mount shows at the same "
                       f"path inside the image (mounts: {shown}); add e.g. '{root}:{root}' or "
                       "choose --results under a mount", path=str(rb.path),
                       field="container.mounts")


def node_requirements(rb: Runbook) -> tuple[int, list[str]]:
    """What `epcap doctor --runbook` checks on this node for a runbook: the GPUs a Slurm
    cell asks for per node, and the container plugin problem (if any)."""
    gpus = rb.slurm.gpus_per_node if rb.launcher == "slurm" else 0
    problem = plugin_problem(rb.container)
    return gpus, [problem] if problem else []


def check_submission(rb: Runbook, launcher: Launcher, root: Path) -> list[str]:
    """Preflight gate: the scheduler would accept every planned launch (Slurm: `sbatch
    --test-only` once per resource shape), so a bad partition, account or QOS stops (exit 2,
    the cluster's message) before any cell runs; the lines it answered."""
    cells = []
    for config in rb.backends:
        for label, spec in planned_launches(rb, config, root):
            name = label.replace("/", "__") + f"__{config.name}"
            cells.append((name, spec, root / "cells" / name))
    lines = launcher.check_submission(cells)
    for line in lines:
        print(f"preflight: {line}", file=sys.stderr)
    return lines


def check_gpu_probe(rb: Runbook, launcher_name: str, tools: list[str] | None = None) -> None:
    """A runbook that asks for GPUs needs a GPU probe here (the node-side check runs this same
    Python): without NVML bindings or nvidia-smi every cell would end node_fail on a healthy
    node. BadInput with the remedy, before any directory is written."""
    gpus = rb.slurm.gpus_per_node if launcher_name == "slurm" else 0
    if gpus <= 0:
        return
    found = probe_tools() if tools is None else tools
    if not found:
        raise BadInput(f"preflight: the runbook asks for {gpus} GPU(s) per node but this Python "
                       f"cannot probe GPUs (no nvidia-ml-py, no nvidia-smi on PATH); the "
                       f"node-side health check would fail every cell. Remedy: "
                       f"{GPU_PROBE_REMEDY}", path=str(rb.path), field="slurm.gpus_per_node")
