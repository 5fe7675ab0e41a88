"""GPU-hours estimate of a plan, for `epcap run --dry-run` (an estimate, never a measurement)."""

from __future__ import annotations

from collections.abc import Sized

from harness.errors import BadInput
from harness.runbook.model import Runbook


def parse_time_limit(text: str) -> float:
    """Slurm time limit in hours: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    days, dash, clock = str(text).strip().rpartition("-")
    if dash and not days:
        raise BadInput(f"bad time limit {text!r}", field="slurm.time_limit")
    try:
        parts = [int(p) for p in clock.split(":")]
        day_count = int(days) if days else 0
    except ValueError as exc:
        raise BadInput(f"bad time limit {text!r}", field="slurm.time_limit") from exc
    if len(parts) > 3 or any(p < 0 for p in parts):
        raise BadInput(f"bad time limit {text!r}", field="slurm.time_limit")
    if len(parts) == 3:
        hours, minutes, seconds = parts
    elif days:                                   # D-HH or D-HH:MM
        hours, minutes, seconds = (parts + [0, 0])[:3]
    else:                                        # MM or MM:SS
        hours, minutes, seconds = 0, parts[0], (parts + [0])[1]
    return day_count * 24 + hours + minutes / 60 + seconds / 3600


def hours_per_cell(runbook: Runbook) -> tuple[float, str]:
    """Wall hours one cell holds its allocation, and where that figure came from."""
    if runbook.gpu_hours_per_cell is not None:
        return float(runbook.gpu_hours_per_cell), "gpu_hours_per_cell (runbook estimate)"
    return parse_time_limit(runbook.slurm.time_limit), "slurm.time_limit (upper bound)"


def estimate_gpu_hours(runbook: Runbook, cells: int | Sized) -> float:
    """cells x nodes x gpus_per_node x hours per cell (0 for a GPU-less local runbook)."""
    n_cells = cells if isinstance(cells, int) else len(cells)
    hours, _ = hours_per_cell(runbook)
    return n_cells * runbook.slurm.nodes * runbook.slurm.gpus_per_node * hours


def describe_estimate(runbook: Runbook, cells: int | Sized) -> str:
    """One line for the dry-run plan: the estimate and the numbers behind it."""
    n_cells = cells if isinstance(cells, int) else len(cells)
    hours, basis = hours_per_cell(runbook)
    total = estimate_gpu_hours(runbook, n_cells)
    return (f"estimated GPU-hours: {total:.2f} = {n_cells} cells x {runbook.slurm.nodes} "
            f"nodes x {runbook.slurm.gpus_per_node} GPUs x {hours:g} h ({basis})")
