"""Launchers run one cell's processes: `local` (subprocesses) or `slurm` (sbatch/srun)."""

from __future__ import annotations

from harness.errors import BadInput


def make_launcher(name: str, runbook=None):
    """The launcher called `name` (local | slurm); slurm is imported lazily."""
    if name == "local":
        from harness.launch.local import LocalLauncher  # lazy: the launcher asked for only
        return LocalLauncher()
    if name == "slurm":
        try:
            from harness.launch.slurm import SlurmLauncher  # lazy: the launcher asked for only
        except ImportError as exc:
            raise BadInput(f"the slurm launcher is not available: {exc}",
                           field="launcher") from exc
        return SlurmLauncher(runbook) if runbook is not None else SlurmLauncher()
    raise BadInput(f"unknown launcher {name!r}; use local or slurm", field="launcher")
