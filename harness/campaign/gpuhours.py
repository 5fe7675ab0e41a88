"""GPU-hours estimate of a plan, for `epcap run --dry-run` (an estimate, never a measurement)."""

from __future__ import annotations

from collections.abc import Sized

from harness.launch.slurm_time import parse_time_limit
from harness.runbook.model import Runbook


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
