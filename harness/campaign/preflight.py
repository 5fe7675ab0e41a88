"""Preflight gate: every planned cell's launch argv, checked statically by its own backend.

A cluster backend knows the flags its pinned Megatron-LM commit accepts
(backends/megatron_args); `Backend.preflight(argv)` names each unknown flag or choice and the
file that should define it. One refused argv stops the campaign before any cell runs (no
allocation is wasted on an argparse error at iteration 0).
"""

from __future__ import annotations

from pathlib import Path

from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.errors import BadInput
from harness.health import probe_tools
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


def argv_problems(rb: Runbook, root: Path = Path("results")) -> list[str]:
    """`model/purpose: problem` for every planned (model, backend, purpose) argv."""
    problems = []
    for config in rb.backends:
        backend = load_backend(config)
        for model in rb.models:
            for purpose in planned_purposes(config):
                cell = Cell(rb.campaign, model.name, config.name, purpose, rb.capacity.measure)
                spec = backend.command(RunRequest.for_cell(rb, cell, root / cell.name))
                problems += [f"{model.name}/{purpose}: {p}" for p in backend.preflight(spec.argv)]
    return problems


def check_backend_commands(rb: Runbook) -> None:
    """BadInput listing every refused argv (the first few), before anything runs."""
    problems = argv_problems(rb)
    if problems:
        shown = "\n  ".join(problems[:8])
        more = f"\n  ... and {len(problems) - 8} more" if len(problems) > 8 else ""
        raise BadInput(f"preflight: {len(problems)} launch argv problem(s); no cell ran:\n  "
                       f"{shown}{more}", path=str(rb.path), field="backends")


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
