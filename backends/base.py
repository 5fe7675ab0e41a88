"""The Backend interface: cell -> launch argv/env; log contract; failure patterns; timing.

Every backend (the reference emulation and each cluster adapter) is one module that exposes
`make_backend(config: BackendConfig) -> Backend`. The harness finds it through the runbook
only (see backends/__init__.py); nothing in harness/ names a backend.

Timing contract (what a timed run's log must contain, on any rank's log, once):

    [EPCAP_TIMING] {"trials": 3, "iters": 10, "dispatch_ms_median": ..., "dispatch_ms_p10": ...,
                    "dispatch_ms_p90": ..., "combine_ms_median": ..., "combine_ms_p10": ...,
                    "combine_ms_p90": ..., "step_cv": ..., "noise_floor_pct": ...,
                    "algbw_gbps": ..., "algbw_formula": "...", "peak_mem_bytes": ...,
                    "timer": "cuda-events|perf_counter", "backend_impl": "reference|<lib>",
                    "per_trial": [{"dispatch_ms_median": ..., "combine_ms_median": ...}, ...]}

A JSON object on one line after the tag. Keys may be added; none renamed.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.plan import Cell
from harness.runbook import BackendConfig, ModelSpec, PhaseConfig, Runbook, Shape, SlurmConfig

TIMING_TAG = "[EPCAP_TIMING]"

# Taxonomy classes a failure pattern may name (SPEC section 3). Checked in this order:
# bug classes first, so an assertion that mentions memory is still an assertion.
FAILURE_CLASSES = ("assert", "badflag", "does_not_fit", "infra")

DEFAULT_FAILURE_PATTERNS: dict[str, tuple[str, ...]] = {
    "assert": (r"AssertionError", r"must be a multiple of pad_multiple",
               r"Assertion .* failed", r"\[EPCAP_ASSERT\]"),
    "badflag": (r"unrecognized arguments:", r"error: argument .*: invalid",
                r"error: the following arguments are required"),
    "does_not_fit": (r"CUDA out of memory", r"torch\.OutOfMemoryError",
                     r"OutOfMemoryError", r"NVSHMEM.*(?:alloc|allocation).*fail",
                     r"nvshmem.*out of memory"),
    "infra": (r"NCCL error", r"ncclSystemError", r"ncclInternalError",
              r"Connection reset by peer", r"RendezvousConnectionError",
              r"DistNetworkError", r"NODE_FAIL"),
}


@dataclass(frozen=True)
class LaunchSpec:
    """What a launcher runs for one cell.

    `ntasks` copies of `argv` are started: one per rank for the reference backend, one per
    node for torchrun-based cluster adapters. Each copy gets the launcher's rank variables
    (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT locally; SLURM_PROCID etc. plus
    MASTER_ADDR/MASTER_PORT under Slurm) on top of `env`.
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ntasks: int = 1
    nodes: int = 1
    gpus_per_node: int = 0
    cwd: str | None = None


@dataclass(frozen=True)
class RunRequest:
    """Everything a backend needs to build one cell's command."""

    cell: Cell
    model: ModelSpec
    shape: Shape
    backend: BackendConfig
    phase: PhaseConfig              # warmup/iters/trials for this purpose
    pad_multiple: int
    seed: int
    cell_dir: Path
    device_memory_bytes: int | None = None
    paths: dict[str, str] = field(default_factory=dict)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)   # nodes, gpus_per_node (cluster)

    @classmethod
    def for_cell(cls, runbook: Runbook, cell: Cell, cell_dir: Path) -> RunRequest:
        phase = runbook.timing if cell.purpose == "time" else runbook.measure
        return cls(cell=cell, model=runbook.model(cell.model), shape=runbook.shape,
                   backend=runbook.backend(cell.backend), phase=phase,
                   pad_multiple=runbook.capacity.pad_multiple, seed=runbook.seed,
                   cell_dir=cell_dir, device_memory_bytes=runbook.device_memory_bytes,
                   paths=dict(runbook.paths), slurm=runbook.slurm)


class Backend(ABC):
    """One dispatch library, real (cluster adapter) or emulated (reference)."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.name = config.name

    @abstractmethod
    def command(self, req: RunRequest) -> LaunchSpec:
        """The argv/env that runs this cell. Never a shell string."""

    def failure_patterns(self) -> dict[str, tuple[str, ...]]:
        """Regexes per taxonomy class; defaults plus the backend's own and runbook overrides."""
        pats = {k: tuple(v) for k, v in DEFAULT_FAILURE_PATTERNS.items()}
        for cls_name, extra in self.config.options.get("failure_patterns", {}).items():
            pats[cls_name] = pats.get(cls_name, ()) + tuple(extra)
        return pats

    def telemetry_tags(self) -> dict[str, str] | None:
        """Override of the SPEC section 1 tags for a native log format, else None."""
        return self.config.options.get("telemetry_tags")

    def parse_timing(self, lines: Iterable[str]) -> dict | None:
        """The first `[EPCAP_TIMING] {...}` object in the log lines, else None."""
        for line in lines:
            idx = line.find(TIMING_TAG)
            if idx >= 0:
                try:
                    return json.loads(line[idx + len(TIMING_TAG):].strip())
                except json.JSONDecodeError:
                    return None
        return None


def first_match(patterns: Iterable[str], line: str) -> bool:
    return any(re.search(p, line) for p in patterns)
