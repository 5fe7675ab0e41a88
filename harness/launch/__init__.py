"""Launchers run one cell's processes: `local` (subprocesses) or `slurm` (sbatch/srun).

The contract is harness/api/launcher.py; the names are the registry's (harness/api/registry.py).
Beside them: capture.py (rank output, redacted, into rank<R>.log), container.py (pyxis and
apptainer for Slurm cells), slurm_script.py, slurm_time.py, forkserver.py.
"""

from __future__ import annotations


def make_launcher(name: str, runbook=None):
    """The launcher called `name` (local | slurm), imported lazily. The imports are here, not
    at the top: every rank's capture (`python -m harness.launch.capture`, a new interpreter,
    4 per local run) imports this package first, and the registry's imports were half of its
    start-up (22 of 48 ms CPU; tests/unit/test_capture_imports.py)."""
    from harness.api.registry import load_launcher_class
    from harness.errors import BadInput
    try:
        cls = load_launcher_class(name)
    except ImportError as exc:
        raise BadInput(f"the {name} launcher is not available: {exc}", field="launcher") from exc
    return cls(runbook)
