"""The backend contract: what a backend module imports from the harness, and nothing else.

A backend is one module (or package) in `backends/` that exposes
`make_backend(config: BackendConfig) -> Backend` and `OPTIONS`, the dataclass of its runbook
`options:` (validated at runbook load, errors naming file:line: field). The harness reaches
backends only through harness.api.registry; backends import this module and the pure helpers
(errors, capacity, telemetry, vocab), never the campaign or the launchers (import-linter
contracts in pyproject.toml).

Timing contract (docs/spec.md: telemetry) -- what a timed run's log must contain, on any
rank's log, once:

    [EPCAP_TIMING] {"trials": 3, "iters": 10, "dispatch_ms_median": ..., "dispatch_ms_p10": ...,
                    "dispatch_ms_p90": ..., "combine_ms_median": ..., "combine_ms_p10": ...,
                    "combine_ms_p90": ..., "step_cv": ..., "noise_floor_pct": ...,
                    "algbw_gbps": ..., "algbw_formula": "...", "peak_mem_bytes": ...,
                    "timer": "cuda-events|perf_counter", "backend_impl": "reference|<lib>",
                    "per_trial": [{"dispatch_ms_median": ..., "combine_ms_median": ...}, ...]}

A JSON object on one line after the tag. Keys may be added; none renamed.

Rank contract: each rank prints once, when it has its device, on its own log
`[EPCAP_RANK] {"rank": R, "world": W, "local_rank": L, "host": "...", "device": "cuda:0|cpu",
"device_name": "NVIDIA H100 80GB HBM3|cpu"}` (`rank_line`; the audit's `hardware-mismatch`).
"""

from __future__ import annotations

import dataclasses
import json
import socket
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.io.boundary.logs import lines_from, text_lines
from harness.results.layout import Cell
from harness.runbook.model import BackendConfig, ModelSpec, PhaseConfig, Runbook, Shape, SlurmConfig
from harness.vocab import (
    Impl,
    Status,
    phase_iterations,
    run_phase,
    run_records_routing,
    run_seed,
    run_timed,
)

__all__ = ["DEFAULT_FAILURE_PATTERNS", "RANK_TAG", "TIMING_TAG", "Backend",
           "BackendConfig", "Cell", "ExpectedDispatch", "LaunchSpec", "ModelSpec", "NoOptions", "PhaseConfig",
           "OptionError", "RunRequest", "Shape", "SlurmConfig", "free_port", "make_options"]

TIMING_TAG = "[EPCAP_TIMING]"
RANK_TAG = "[EPCAP_RANK]"


def rank_line(*, rank: int, world: int, local_rank: int, device: str, device_name: str) -> str:
    """The `[EPCAP_RANK]` line a rank prints once (module docstring); host = this host's name
    as provenance.txt records it (socket.gethostname)."""
    fields = {"rank": rank, "world": world, "local_rank": local_rank,
              "host": socket.gethostname(), "device": device, "device_name": device_name}
    return f"{RANK_TAG} " + json.dumps(fields, separators=(",", ":"))

DEFAULT_FAILURE_PATTERNS: dict[str, tuple[str, ...]] = {
    Status.ASSERT: (r"AssertionError", r"must be a multiple of pad_multiple",
                    r"Assertion .* failed", r"\[EPCAP_ASSERT\]"),
    Status.BADFLAG: (r"unrecognized arguments:", r"error: argument .*: invalid",
                     r"error: the following arguments are required"),
    Status.DOES_NOT_FIT: (r"CUDA out of memory", r"torch\.OutOfMemoryError",
                          r"OutOfMemoryError", r"NVSHMEM.*(?:alloc|allocation).*fail",
                          r"nvshmem.*out of memory"),
    Status.INFRA: (r"NCCL error", r"ncclSystemError", r"ncclInternalError",
                   r"Connection reset by peer", r"RendezvousConnectionError",
                   r"DistNetworkError", r"NODE_FAIL"),
}


class OptionError(ValueError):
    """A backend option's value is wrong; `field` names it under `options.`."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class NoOptions:
    """Options every backend accepts (its own OPTIONS dataclass adds more)."""

    # option fields that hold local paths: a relative one resolves against the runbook's
    # folder at load (harness/io/boundary/paths.py), not the checkout the backend runs in
    PATH_FIELDS: ClassVar[tuple[str, ...]] = ()

    failure_patterns: dict = field(default_factory=dict)   # class -> extra regexes
    telemetry_tags: dict | None = None                      # override the telemetry tags


def make_options(cls: type, value: Any) -> Any:
    """`value` as an instance of the options dataclass `cls` (a dict is checked by name).

    The runbook loader validates with file:line; this is for configs built in code.
    """
    if isinstance(value, cls):
        return value
    value = dict(value or {})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - names)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; allowed: {sorted(names)}")
    return cls(**value)


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
    # ranks one task starts itself (a worker given --ranks): the local launcher then gives
    # each its own log (a FIFO per rank named in RANK_FIFOS_ENV; the task's own lines go to
    # node<T>.log), so rank<R>.log holds rank R's lines only
    ranks_per_task: int = 1


# Where a task that starts its own ranks finds one FIFO per rank (`<dir>/rank<R>.fifo`, R the
# global rank): each rank writes its stdout and stderr there (backends/ranks.py).
RANK_FIFOS_ENV = "EPCAP_RANK_FIFOS"


@dataclass(frozen=True)
class RunRequest:
    """Everything a backend needs to build one cell's command.

    A backend acts on the decisions carried here (`timed`, `record_routing`, `seed`,
    `phase`), never on the purpose of the run: `for_cell` derives them from the cell's
    purpose once (harness.vocab run_phase, run_seed, run_timed, run_records_routing), so a
    new stage with its own runs needs no backend edit. `cell` names the run (its directory,
    labels such as the cell name); no backend branches on `cell.purpose`.
    """

    cell: Cell
    model: ModelSpec
    shape: Shape
    backend: BackendConfig
    phase: PhaseConfig              # warmup/iters/trials of this run (vocab.run_phase)
    pad_multiple: int
    seed: int                       # the routing seed: a held-out seed on held-out runs
    cell_dir: Path
    device_memory_bytes: int | None = None
    paths: dict[str, str] = field(default_factory=dict)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)   # nodes, gpus_per_node (cluster)
    model_seed: int | None = None   # the campaign seed: the emulated model's router (reference)
    timed: bool = False             # take timing trials: warmup + iters x trials, timing line
    record_routing: bool = False    # the campaign wants this run's routing recorded

    @property
    def iterations(self) -> int:
        """Iterations this run makes: warmup + iters, times trials when timed."""
        return phase_iterations(self.phase, self.timed)

    @classmethod
    def for_cell(cls, runbook: Runbook, cell: Cell, cell_dir: Path) -> RunRequest:
        """The request of one planned cell: the purpose's decisions, taken here."""
        purpose = cell.purpose
        return cls(cell=cell, model=runbook.model(cell.model), shape=runbook.shape,
                   backend=runbook.backend(cell.backend), phase=run_phase(runbook, purpose),
                   pad_multiple=runbook.capacity.pad_multiple,
                   seed=run_seed(runbook, purpose), cell_dir=cell_dir,
                   device_memory_bytes=runbook.device_memory_bytes,
                   paths=dict(runbook.paths), slurm=runbook.slurm, model_seed=runbook.seed,
                   timed=run_timed(purpose), record_routing=run_records_routing(purpose))


class Backend(ABC):
    """One dispatch library, real (cluster adapter) or emulated (reference)."""

    options_type: type = NoOptions

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.name = config.name
        self.options = make_options(self.options_type, config.options)

    @abstractmethod
    def command(self, req: RunRequest) -> LaunchSpec:
        """The argv/env that runs this cell. Never a shell string."""

    def implementation(self, timing: dict | None = None) -> str:
        """The `backend_impl` label of this backend's rows: a real library on a cluster."""
        return Impl.CLUSTER

    def expected_log_shape(self, req: RunRequest) -> dict[str, int]:
        """Ranks x layers x iterations a complete log holds, when the backend knows them
        (keys of telemetry.summarize: expected_ranks, expected_layers, expected_iters)."""
        return {}

    def preflight(self, argv: list[str]) -> list[str]:
        """Problems of a launch argv found statically (unknown flags or choices of the code the
        backend runs), each naming what is wrong; empty when none. The campaign refuses to
        start while any planned cell has one (harness/campaign/preflight.py)."""
        return []

    def validate_commands(self, commands: list[tuple[str, LaunchSpec]]) -> tuple[str, list[str]]:
        """(how the launches were checked, problems) by the code the backend itself runs,
        for (label, launch) pairs; ("", []) when the backend has no such check."""
        return "", []

    def flag_origins(self, model: ModelSpec) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(where they come from, flags) of the flags this backend adds to `model`'s commands
        beside the model's own architecture flags; () when it builds no model command."""
        return ()

    def failure_patterns(self) -> dict[str, tuple[str, ...]]:
        """Regexes per taxonomy class; defaults plus the backend's own and runbook overrides."""
        pats = {k: tuple(v) for k, v in DEFAULT_FAILURE_PATTERNS.items()}
        for cls_name, extra in (self.options.failure_patterns or {}).items():
            pats[cls_name] = pats.get(cls_name, ()) + tuple(extra)
        return pats

    def telemetry_tags(self) -> dict[str, str] | None:
        """Override of the telemetry tags (docs/spec.md: telemetry) for a native log format."""
        return self.options.telemetry_tags

    def parse_timing(self, lines: Iterable[str]) -> dict | None:
        """The first `[EPCAP_TIMING] {...}` object in the log lines, else None (a backend with
        a native timing format overrides this)."""
        return first_timing_object(lines)

    def timing_of(self, logs: Sequence[Path]) -> dict | None:
        """`parse_timing` over the logs' lines in file order. The default reader looks for the
        SPEC's tag first, so it is given the lines from the first that holds the tag (none
        before can matter, and a few hundred MB of dispatch rows are not decoded); a backend
        that overrides parse_timing (a native format) is given every line."""
        if type(self).parse_timing is Backend.parse_timing:
            return first_timing_object(lines_from(list(logs), TIMING_TAG.encode()))
        return self.parse_timing(t for path in logs for _, t in text_lines(path))

    def modelled_peak_memory(self, req: RunRequest) -> int | None:
        """The peak memory (bytes per rank) this backend reports for the request when it has
        no device to measure (`peak_mem_source: modelled`), so the audit can hold a stated
        figure to it; None when the backend models none."""
        return None

    def expected_dispatch(self, argv: Sequence[str] | None) -> ExpectedDispatch | None:
        """What the routing of the run `argv` launched (a cell.json's recorded argv; None when
        it recorded none) implies for its dispatch rows, from the backend's own routing code,
        so the audit can hold the stated counts to it (`routing-not-from-seed`). None when
        this backend's routing cannot be regenerated; ValueError naming why when this argv's
        cannot (none recorded, flags it does not know)."""
        return None


class ExpectedDispatch(ABC):
    """A run's routing as its backend regenerates it, and the dispatch-row fields counts imply.

    `counts(iteration, layer)` is the (ranks, experts) slot counts each source rank routes;
    `rows(counts)` the routing-determined fields of each rank's `[MOE_DROP_DEBUG][dispatch]`
    row (e.g. actual_valid_recv, pre_balance_recv) under those counts, which also reads a
    recorded trace's counts.
    """

    ranks: int
    experts: int
    iterations: tuple[int, ...]        # the iterations the run logs
    layers: tuple[int, ...]            # the layers it dispatches
    seeded: bool                       # regenerable from its seed (not a replayed trace)
    seed_text: str                     # the seeds as messages name them
    trace: str | None                  # the epcap routing trace it recorded, as argv names it
    trace_header: dict                 # what that trace's header must state

    @abstractmethod
    def counts(self, iteration: int, layer: int) -> Any:
        """(ranks, experts) int64 slot counts of every source rank at (iteration, layer)."""

    @abstractmethod
    def rows(self, counts: Any) -> dict[int, dict[str, int]]:
        """rank -> {field: value} of the dispatch rows the (ranks, experts) counts imply."""


# srun's I/O forwarding carries at most 1024 bytes per message, so `srun --label` splits a
# longer line into labelled pieces (SchedMD/slurm src/common/io_hdr.h SLURM_IO_MAX_MSG_LEN;
# seen here: a 1,100-byte [EPCAP_TIMING] line arrived as a 1,024-byte line and its tail).
MAX_TIMING_PIECES = 64


def first_timing_object(lines: Iterable[str]) -> dict | None:
    """The first `[EPCAP_TIMING] {...}` object in the log lines (docs/spec.md#telemetry),
    else None: the default timing reader, also the audit's for uploads with no runbook. An
    object split over consecutive lines (srun's 1024-byte pieces) is joined back, at most
    MAX_TIMING_PIECES lines."""
    it = iter(lines)
    for line in it:
        idx = line.find(TIMING_TAG)
        if idx < 0:
            continue
        text = line[idx + len(TIMING_TAG):].strip()
        for _ in range(MAX_TIMING_PIECES):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                piece = next(it, None)
                if piece is None:
                    return None
                text += piece.rstrip("\r\n")
        return None
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (rendezvous of locally started ranks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
