"""The runbook's typed model: frozen dataclasses every other room reads (docs/runbook.md).

Built only by harness/runbook/load.py, which validates a YAML runbook into these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.grid.capacity import Grid
from harness.grid.heldout import TARGET_PEAK, ValidateConfig, resolve_validate
from harness.vocab import CONTROL_SUFFIX, DEFAULT_PAD_MULTIPLE

# The architecture a model states (zoo `arch:`, docs/runbook.md#architecture), one group of
# Megatron-LM flags per aspect, each required and each written out ([] = Megatron's default,
# stated): a new architecture cannot inherit another model's by omission.
ARCH_FIELDS = ("activation", "normalization", "position_embedding", "attention", "bias",
               "embeddings", "ffn", "router")


@dataclass(frozen=True)
class ModelSpec:
    """One model of the zoo (runbooks/models.yaml), after runbook overrides."""

    name: str                       # zoo key, e.g. QWEN3_30B
    hf_name: str                    # e.g. Qwen/Qwen3-30B-A3B
    layers: int                     # transformer layers
    hidden: int                     # hidden size
    experts: int                    # routed experts
    topk: int                       # router top-k (K)
    expert_ffn: int                 # routed expert FFN size
    shared_experts: int = 0
    shared_ffn: int = 0             # total shared-expert FFN size
    first_dense_layers: int = 0     # leading dense (non-MoE) layers
    dense_ffn: int = 0              # FFN size of those dense layers
    heads: int = 0
    kv_heads: int = 0
    vocab: int = 0
    router_dtype: str = "fp32"      # fp32 is explicit for every model
    routing_sigma: float = 1.0      # lognormal sigma of expert popularity (reference routing)
    routing: dict | None = None     # named routing workload of the reference emulation
    flags: tuple[str, ...] = ()     # extra per-model launch flags (cluster adapters)
    # (aspect, its Megatron-LM flags) in ARCH_FIELDS order; () = the model states none
    arch: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers

    @property
    def arch_flags(self) -> tuple[str, ...]:
        """Every architecture flag the model states, aspect by aspect (ARCH_FIELDS order)."""
        return tuple(f for _, flags in self.arch for f in flags)


@dataclass(frozen=True)
class Shape:
    seq: int                        # sequence length
    micro_batch: int
    global_batch: int
    ep: int                         # expert-parallel size = ranks per cell

    def uniform_tokens(self, topk: int) -> int:
        """N = S x K with S = seq x micro_batch."""
        return self.seq * self.micro_batch * topk


@dataclass(frozen=True)
class BackendConfig:
    name: str                       # as written in TSVs, e.g. echo, ultraep, moonep
    kind: str                       # reference | cluster | megatron-core
    module: str                     # reference: personality; cluster: adapter module in backends/
    select: bool = True             # measured/validated; its selection feeds the timing capacity
    time: bool = True               # timed at the common capacity
    flags: tuple[str, ...] = ()     # extra launch flags
    # backend-specific settings: the backend's OPTIONS dataclass (validated at load); a plain
    # dict is accepted from code and checked when the backend is built
    options: Any = field(default_factory=dict)


@dataclass(frozen=True)
class CapacityConfig:
    measure: str = "2.00"           # measurement capacity (decimal string)
    pad_multiple: int = DEFAULT_PAD_MULTIPLE
    decimals: int | None = None     # None = exact grid; D = legacy D-decimals grid
    max_remeasure: int = 2          # re-measures at a larger capacity after a lower bound
    max_validate_steps: int = 4     # step-ups of one rung (budget + P) after drops
    target: str | float = TARGET_PEAK   # "peak" or a per-step drop-risk target (a float)

    @property
    def grid(self) -> Grid:
        """The grid capacities round onto; str() is its runbook spelling (exact | decimals-D)."""
        return Grid(self.decimals)


@dataclass(frozen=True)
class PhaseConfig:
    warmup: int
    iters: int
    trials: int = 1


DEFAULT_MAX_LAUNCHES = 10          # timing.max_launches when a resolution is asked without one
MAX_LAUNCHES_LIMIT = 64            # the largest timing.max_launches (or launches) accepted


@dataclass(frozen=True)
class TimingConfig(PhaseConfig):
    """`timing:`: the time runs' iterations plus the launches and the verdict settings
    (docs/timing-verdicts.md)."""

    launches: int = 3               # independent process starts per (model, backend)
    baseline: str | None = None     # compared against; default: the first timed backend
    max_cv: float = 0.05            # a CV over this makes a verdict too_noisy
    control: bool = False           # time the baseline twice: the `<baseline>~control` arm
    resolution: float | None = None  # go on launching until every CI half-width <= this
    max_launches: int | None = None  # the cap on rounds with a resolution (default below)

    @property
    def launch_cap(self) -> int:
        """The most rounds the time step runs: max_launches, else max(launches,
        DEFAULT_MAX_LAUNCHES) with a resolution, else launches."""
        if self.resolution is None:
            return self.launches
        if self.max_launches is not None:
            return self.max_launches
        return max(self.launches, DEFAULT_MAX_LAUNCHES)


UNCLASSIFIED_ACTIONS = ("stop", "continue")


@dataclass(frozen=True)
class UnclassifiedPolicy:
    """`limits.unclassified`: retry an unclassified run `retries` times as a new attempt
    (like infra), then `stop` the campaign for a person (exit 3) or `continue`."""

    retries: int = 1
    then: str = "stop"              # one of UNCLASSIFIED_ACTIONS


@dataclass(frozen=True)
class Limits:
    run_timeout_s: float = 600.0    # no progress within this -> timeout
    infra_retries: int = 2
    unclassified: UnclassifiedPolicy = UnclassifiedPolicy()
    max_pending_s: float = 0.0      # a job queued longer stops the campaign; 0: wait forever


@dataclass(frozen=True)
class PublishConfig:
    """`publish:`: live publishing (harness/publish/live.py): with `live: true` each finished
    stage is committed to the dataset repository `repo` (ORG/NAME) as the campaign goes."""
    live: bool = False
    repo: str | None = None


@dataclass(frozen=True)
class SlurmConfig:
    partition: str | None = None
    account: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    time_limit: str = "00:30:00"
    mem_per_task: str | None = None     # x tasks per node -> --mem (memory per node)
    mem_per_gpu: str | None = None      # --mem-per-gpu (not with mem_per_task)
    cpus_per_task: int | None = None    # --cpus-per-task; None: one per rank the task hosts
    cpus_per_rank: int | None = None    # cores of each rank's own: --cpus-per-task = this x
                                        # ranks per task, srun --cpu-bind=cores
    requeue: bool = False               # --requeue; else --no-requeue (a cell runs once)
    signal_grace_s: int | None = None   # --signal=B:USR1@N before the limit; 0 none; None:
                                        # 120 s, at most half of time_limit
    extra_sbatch: tuple[str, ...] = ()
    allocation: str = "per-cell"        # per-cell: one job per cell; per-stage: one job per
                                        # stage of a model, its cells as steps (docs/slurm.md)
    allocation_idle_s: int = 300        # per-stage: a step runner with no step this long ends
    allocation_time_limit: str | None = None   # per-stage: at most this --time (the
                                        # partition's MaxTime); None: time_limit x cells


ALLOCATIONS = ("per-cell", "per-stage")
CONTAINER_ENGINES = ("none", "pyxis", "apptainer")


@dataclass(frozen=True)
class ContainerConfig:
    """`container:`: where a Slurm cell's ranks run (docs/slurm.md#containers). pyxis: srun's
    --container-image/--container-mounts/--container-workdir; apptainer: `apptainer exec`."""

    engine: str = "none"            # none | pyxis | apptainer
    image: str | None = None        # pyxis: squashfs path or enroot URI; apptainer: SIF path/URI
    mounts: tuple[str, ...] = ()    # SRC:DST[:FLAGS] each (pyxis --container-mounts, apptainer --bind)
    workdir: str | None = None      # pyxis --container-workdir; apptainer --pwd
    executable: str = "apptainer"   # apptainer or singularity (apptainer engine only)

    @property
    def enabled(self) -> bool:
        return self.engine != "none"


@dataclass(frozen=True)
class Runbook:
    path: Path                      # the file it was loaded from
    campaign: str
    models: tuple[ModelSpec, ...]
    shape: Shape
    backends: tuple[BackendConfig, ...]
    capacity: CapacityConfig
    measure: PhaseConfig            # iterations of measure/validate runs
    timing: TimingConfig            # iterations, trials, launches and verdict settings
    limits: Limits
    launcher: str = "local"         # local | slurm
    device_memory_bytes: int | None = None   # memory model budget (reference); None = unlimited
    seed: int = 1234
    repositories: dict[str, Path] = field(default_factory=dict)   # name -> local clone
    paths: dict[str, str] = field(default_factory=dict)           # cluster paths (megatron, data)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    container: ContainerConfig = field(default_factory=ContainerConfig)
    cell_wall_hours: float | None = None    # wall hours one cell holds (uncalibrated kinds)
    max_parallel_cells: int = 1     # cells in flight at once (independent models)
    publish: PublishConfig = field(default_factory=PublishConfig)   # live publishing; no result
    models_path: Path | None = None  # the model zoo file it read (frozen next to the results)
    validate_config: ValidateConfig | None = None   # `validate:`; None = the defaults
    # `frontier: {rungs: k}`: time each selected pair at its validated rung and k executable
    # rungs below and above it (docs/frontier.md); 0 (no `frontier:`) = no frontier runs
    frontier_rungs: int = 0
    # `ladder: {routing_sigma: [s, ...]}`: the same campaign again at each routing_sigma (every
    # model's), one campaign per step, gathered into ladder.tsv (docs/ladder.md); () = none
    ladder_sigmas: tuple[float, ...] = ()
    ladder_models: tuple[str, ...] = ()      # `ladder.models`: the steps' models (() = all)
    # `ladder.backends`: the steps' backends (() = all); every select backend must be among
    # them (a step's timing capacity is its own selection's)
    ladder_backends: tuple[str, ...] = ()
    # model name -> ((what, where it was written), ...): each of its flag groups (`arch.<aspect>`,
    # `flags`) with the file:line it came from, and `arch_source` (the public config the zoo
    # copied it from); printed by the dry run, changes no result
    model_origins: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    @property
    def validate(self) -> ValidateConfig:
        """Routing seed and iterations of validate runs (default: seed + 1, measure iters)."""
        return self.validate_config or resolve_validate(None, self.seed, self.measure.iters)

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def backend(self, name: str) -> BackendConfig:
        """The backend called `name`; the A/A control arm `<baseline>~control` is its baseline."""
        base = name[:-len(CONTROL_SUFFIX)] if name.endswith(CONTROL_SUFFIX) else name
        return next(b for b in self.backends if b.name == base)

    def held_out_routing(self, backend: str) -> bool:
        """Whether `backend`'s validate runs see routing its measure run did not: another seed
        (validate.held_out), and no recorded routing trace replayed (a trace ignores seeds).
        The validate step's fact, and the audit's."""
        opts = self.backend(backend).options
        trace = opts.get("trace") if isinstance(opts, dict) else getattr(opts, "trace", None)
        return self.validate.held_out and trace is None

    @property
    def baseline(self) -> str | None:
        """The backend timing comparisons are made against: `timing.baseline`, else the first
        timed backend."""
        if self.timing.baseline is not None:
            return self.timing.baseline
        return next((b.name for b in self.backends if b.time), None)
