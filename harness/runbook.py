"""Runbook: load and validate a YAML campaign; errors carry file:line:field.

The dataclasses below are the validated form every other room reads. Loading and
validation (`load_runbook`) live here too; see docs/runbook.md for the YAML schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


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
    flags: tuple[str, ...] = ()     # extra per-model launch flags (cluster adapters)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers


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
    kind: str                       # reference | cluster
    module: str                     # reference: personality; cluster: adapter module in backends/
    select: bool = True             # measured/validated; its selection feeds the timing capacity
    time: bool = True               # timed at the common capacity
    flags: tuple[str, ...] = ()     # extra launch flags
    options: dict = field(default_factory=dict)   # backend-specific settings (paths, patterns)


@dataclass(frozen=True)
class CapacityConfig:
    measure: str = "2.00"           # measurement capacity (decimal string)
    pad_multiple: int = 128
    decimals: int | None = None     # None = exact grid; D = legacy D-decimals grid
    max_remeasure: int = 2          # re-measures at a larger capacity after a lower bound
    max_validate_steps: int = 4     # step-ups of one rung (budget + P) after drops


@dataclass(frozen=True)
class PhaseConfig:
    warmup: int
    iters: int
    trials: int = 1


@dataclass(frozen=True)
class Limits:
    run_timeout_s: float = 600.0    # no progress within this -> timeout
    infra_retries: int = 2


@dataclass(frozen=True)
class SlurmConfig:
    partition: str | None = None
    account: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    time_limit: str = "00:30:00"
    mem_per_task: str | None = None
    extra_sbatch: tuple[str, ...] = ()


@dataclass(frozen=True)
class Runbook:
    path: Path                      # the file it was loaded from
    campaign: str
    models: tuple[ModelSpec, ...]
    shape: Shape
    backends: tuple[BackendConfig, ...]
    capacity: CapacityConfig
    measure: PhaseConfig            # iterations of measure/validate runs
    timing: PhaseConfig             # iterations and trials of time runs
    limits: Limits
    launcher: str = "local"         # local | slurm
    device_memory_bytes: int | None = None   # memory model budget (reference); None = unlimited
    seed: int = 1234
    repositories: dict[str, Path] = field(default_factory=dict)   # name -> local clone
    paths: dict[str, str] = field(default_factory=dict)           # cluster paths (megatron, data)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    gpu_hours_per_cell: float | None = None

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def backend(self, name: str) -> BackendConfig:
        return next(b for b in self.backends if b.name == name)
