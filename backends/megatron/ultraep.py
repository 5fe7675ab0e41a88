"""UltraEP cluster adapter: Megatron-LM with UltraEP on HybridEP; fp32 router is mandatory.

The tree the cluster runs is UltraEP's fork, Dots-Infra/Megatron-LM-UltraEP, which its README
says is based on NVIDIA/Megatron-LM `dev` e93814b4 and adds two flags (`--moe-enable-ultraep`,
`--moe-num-redundant-experts-per-rank R`; R defaults to 2 as in Dots-Infra/UltraEP
examples/README.md). The fork's source is not readable here, so the argument data is dev at
e93814b4 plus those two flags (backends/megatron/args/data/overlay-ultraep.json).

The command: `--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep
--moe-enable-ultraep --moe-num-redundant-experts-per-rank R`. The per-rank budget flag
`--moe-expert-rank-capacity-factor` and the `--use-transformer-engine-op-fuser` it needs with
hybridep exist on `main` (d98e8a64, transformer_config.py:1868-1881) but not at e93814b4, so
they are dropped by default; `options.main_flags: true` keeps them for a runbook whose
`options.megatron` names a tree that defines them (main + the fork's flags). The op fuser also
needs a newer Transformer Engine than the fork pins (`epcap doctor` on the cluster).

UltraEP asserts that router probabilities are fp32 (`ultra_ep.cpp:909`) and that every
receive budget is a multiple of the pad multiple; both are bug signatures (class `assert`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.megatron.args import MegatronSource, flag_values
from backends.megatron.base import MegatronBackend, MegatronOptions
from harness.api.backend import BackendConfig, LaunchSpec, OptionError, RunRequest
from harness.errors import BadInput
from harness.vocab import Status

REQUIRED_ROUTER_DTYPE = "fp32"
ULTRAEP_SOURCE = MegatronSource("NVIDIA/Megatron-LM", "e93814b4c6965c3f8639abdf690416c08937f370",
                                "refs/heads/dev", overlays=("ultraep",))
# What --moe-expert-rank-capacity-factor needs (transformer_config.py:1868-1881 at d98e8a64).
CAPACITY_BACKENDS = ("hybridep", "ncclep")
HYBRIDEP_CAPACITY_NEEDS = ("--use-transformer-engine-op-fuser", "--moe-use-grouped-tensor")


@dataclass(frozen=True)
class UltraEPOptions(MegatronOptions):
    """UltraEP's runbook options: redundant experts per rank, and what enables the rank
    capacity with hybridep (the TE op fuser or the grouped tensor)."""

    redundant_experts_per_rank: int = 2
    capacity_enabler: str = HYBRIDEP_CAPACITY_NEEDS[0]
    main_flags: bool = False        # keep the main-only rank-capacity flags (module docstring)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.redundant_experts_per_rank <= 0:
            raise OptionError("redundant_experts_per_rank",
                              f"must be > 0, got {self.redundant_experts_per_rank}")
        if self.capacity_enabler not in HYBRIDEP_CAPACITY_NEEDS:
            raise OptionError("capacity_enabler", f"must be one of {HYBRIDEP_CAPACITY_NEEDS}")


OPTIONS = UltraEPOptions


class UltraEPBackend(MegatronBackend):
    """UltraEP via `--moe-enable-ultraep` on flex/hybridep (see the module docstring)."""

    library = "ultraep"
    options_type = UltraEPOptions
    default_source = ULTRAEP_SOURCE
    patterns = {
        Status.ASSERT: (r"num_permuted_tokens \(\d+\) must be a multiple of pad_multiple",
                   r"ultra_ep\.cpp:909", r"ultra_ep\.cpp:\d+.*[Aa]ssert"),
        Status.DOES_NOT_FIT: (r"(?:nvshmem|NVSHMEM).*(?:malloc|alloc\w*).*(?:fail|FAIL)",
                         r"\[UltraEP\].*(?:failed to allocate|allocation failed)"),
    }

    def library_args(self, req: RunRequest, values: dict[str, str]) -> list[str]:
        """HybridEP + UltraEP and its redundant experts; with options.main_flags also the
        rank capacity and what it needs (options.capacity_enabler: op fuser or grouped tensor).
        Without them the budget reaches the run scripts' hook through the env only."""
        redundant, enabler = self.options.redundant_experts_per_rank, self.options.capacity_enabler
        args = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                "--moe-enable-ultraep", "--moe-num-redundant-experts-per-rank", str(redundant)]
        if self.options.main_flags:
            args += ["--moe-expert-rank-capacity-factor", values["capacity"], enabler]
        return args

    def rules(self, args: list[str]) -> list[str]:
        """The rank capacity's conditions at the pinned commit (see CAPACITY_BACKENDS)."""
        if not flag_values(args, "--moe-expert-rank-capacity-factor"):
            return []
        where = f"megatron/core/transformer/transformer_config.py ({self.source.label})"
        backend = (flag_values(args, "--moe-flex-dispatcher-backend") or ["deepep"])[-1]
        if backend not in CAPACITY_BACKENDS:
            return [f"--moe-expert-rank-capacity-factor needs --moe-flex-dispatcher-backend "
                    f"hybridep or ncclep, got {backend} ({where})"]
        if backend == "hybridep" and not any(f in args for f in HYBRIDEP_CAPACITY_NEEDS):
            return [f"--moe-expert-rank-capacity-factor with hybridep needs "
                    f"{' or '.join(HYBRIDEP_CAPACITY_NEEDS)} ({where})"]
        return []

    def check(self, req: RunRequest) -> None:
        """Refuse a non-fp32 router: UltraEP would die at ultra_ep.cpp:909."""
        if req.model.router_dtype != REQUIRED_ROUTER_DTYPE:
            raise BadInput(f"UltraEP needs router_dtype fp32; model {req.model.name} has "
                           f"{req.model.router_dtype!r}",
                           field=f"models.{req.model.name}.router_dtype")

    def command(self, req: RunRequest) -> LaunchSpec:
        """The Megatron launch, checked to set `--moe-router-dtype` and only to fp32."""
        spec = super().command(req)
        dtypes = flag_values(spec.argv, "--moe-router-dtype")
        if not dtypes or any(d != REQUIRED_ROUTER_DTYPE for d in dtypes):
            raise BadInput(f"UltraEP command must set --moe-router-dtype fp32 (got {dtypes}); "
                           "check the runbook flags", field=f"backends.{self.name}.flags")
        return spec


def make_backend(config: BackendConfig) -> UltraEPBackend:
    """Entry point used by backends.load_backend."""
    return UltraEPBackend(config)
