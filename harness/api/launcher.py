"""The Launcher interface: submit a cell, poll it, cancel it, read its exit status and logs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from harness.api.backend import LaunchSpec


@dataclass
class JobHandle:
    """What a launcher needs to find a submitted cell again (also after a driver restart)."""

    cell_name: str
    cell_dir: Path
    job_id: str                       # pid (local) or Slurm job id
    extra: dict = field(default_factory=dict)


@dataclass
class JobResult:
    """A finished job. `state` is the launcher's view of how it ended:
    completed | failed | timeout | oom | node_fail | cancelled."""

    state: str
    exit_code: int | None
    log_paths: list[Path]
    wall_s: float | None = None
    detail: str = ""                  # e.g. Slurm's State/ExitCode text
    # The harness's own failure, when the harness (its launcher, the fork server, the
    # driver) failed and the run did not: what broke, one line; its traceback is written to
    # the cell's harness.txt. The run is then class `harness` (docs/taxonomy.md#harness).
    harness: str | None = None
    harness_trace: str = ""           # the traceback text behind `harness`, when there is one


@dataclass(frozen=True)
class QueueWait:
    """A job the scheduler still holds in its queue: the scheduler's reason (Slurm's
    `%r`: Priority, Resources, JobHeldUser, ...) and how long this driver has seen it wait."""

    reason: str
    pending_s: float


class Launcher(ABC):
    """Runs `spec.ntasks` copies of `spec.argv` for one cell, logs under `cell_dir`."""

    name: str = "base"
    # Whether a job outlives its driver and can be polled by a later one (Slurm: yes; the
    # local launcher's ranks are children of the driver that started them).
    adopts_orphans: bool = False
    # Seconds the driver sleeps between polls: a run's end is seen this much late, on average
    # half of it (a scheduler's launcher bounds its own queries: harness.launch.slurm).
    poll_s: float = 0.05

    @abstractmethod
    def submit(self, cell_name: str, spec: LaunchSpec, cell_dir: Path,
               timeout_s: float) -> JobHandle:
        """Start the cell; returns at once. Logs go to cell_dir/rank<R>.log (one per task)."""

    @abstractmethod
    def poll(self, handle: JobHandle) -> JobResult | None:
        """None while the job is queued or running, else how it ended."""

    @abstractmethod
    def cancel(self, handle: JobHandle) -> None:
        """Stop the job and all its processes."""

    def warm(self, specs: list[LaunchSpec]) -> None:
        """Start, without waiting, what these runs will be started from (the local launcher's
        fork servers), so their imports overlap the first runs instead of queueing behind
        them. Most launchers have nothing to start."""
        return None

    def check_submission(self, cells: list[tuple[str, LaunchSpec, Path]]) -> list[str]:
        """Ask the scheduler whether it would accept these cells (name, launch, cell dir),
        running nothing; lines saying what it answered. A refusal raises (exit 2)."""
        return []

    def queue_wait(self, handle: JobHandle) -> QueueWait | None:
        """Why the job is still queued, as of the last poll; None when it is not queued
        (running, finished, or a launcher without a queue)."""
        return None

    # Whether cells of one group (a stage of one model) share an allocation, so that the
    # driver should launch a group's cells one after another (Slurm's per-stage allocation).
    holds_allocations: bool = False

    def use_group(self, group: str, planned_cells: int, spool_root: Path) -> None:
        """The cells submitted next belong to `group` (one model's stage; `planned_cells` of
        it in the plan, `spool_root` a folder of the campaign for its allocation's files).
        A launcher without allocations ignores it."""
        return None

    def close_group(self, group: str) -> None:
        """No further cells of `group` come: its allocation may end once its last step ends."""
        return None

    # Whether one instance may serve several campaigns of one command (an imbalance ladder's
    # steps, docs/ladder.md): it holds nothing of the runbook it was made with. The local
    # launcher's fork servers then import torch and megatron-core once for the whole command.
    shared: bool = False

    def close(self) -> None:
        """The command is done with this launcher: end what it started to serve runs (the
        local launcher's fork servers) and wait for it, so its CPU time is its parent's.
        What a job in flight needs ends as it would when the driver exits."""
        return None

    def find_existing(self, cell_name: str, cell_dir: Path) -> JobHandle | None:
        """A job already submitted for this cell by an earlier driver (Slurm), else None."""
        return None
