"""UltraEP cluster adapter: Megatron-LM with the UltraEP dispatcher; fp32 router is mandatory.

UltraEP asserts that router probabilities are fp32 (`ultra_ep.cpp:909`) and that every
receive budget is a multiple of the pad multiple; both are bug signatures (class `assert`).
"""

from __future__ import annotations

from backends.megatron import MegatronBackend, MegatronOptions
from harness.backend_api import BackendConfig, LaunchSpec, RunRequest
from harness.errors import BadInput

REQUIRED_ROUTER_DTYPE = "fp32"


class UltraEPBackend(MegatronBackend):
    """UltraEP via `--moe-flex-dispatcher-backend ultraep` (run-scripts fork; docs/cluster.md)."""

    library = "ultraep"
    patterns = {
        "assert": (r"num_permuted_tokens \(\d+\) must be a multiple of pad_multiple",
                   r"ultra_ep\.cpp:909", r"ultra_ep\.cpp:\d+.*[Aa]ssert"),
        "does_not_fit": (r"(?:nvshmem|NVSHMEM).*(?:malloc|alloc\w*).*(?:fail|FAIL)",
                         r"\[UltraEP\].*(?:failed to allocate|allocation failed)"),
    }

    def check(self, req: RunRequest) -> None:
        """Refuse a non-fp32 router: UltraEP would die at ultra_ep.cpp:909."""
        if req.model.router_dtype != REQUIRED_ROUTER_DTYPE:
            raise BadInput(f"UltraEP needs router_dtype fp32; model {req.model.name} has "
                           f"{req.model.router_dtype!r}",
                           field=f"models.{req.model.name}.router_dtype")

    def command(self, req: RunRequest) -> LaunchSpec:
        """The Megatron launch, checked to set `--moe-router-dtype` and only to fp32."""
        spec = super().command(req)
        dtypes = router_dtypes(spec.argv)
        if not dtypes or any(d != REQUIRED_ROUTER_DTYPE for d in dtypes):
            raise BadInput(f"UltraEP command must set --moe-router-dtype fp32 (got {dtypes}); "
                           "check the runbook flags", field=f"backends.{self.name}.flags")
        return spec


def router_dtypes(argv: list[str]) -> list[str]:
    """Every value given to --moe-router-dtype in an argv (both `--x v` and `--x=v`)."""
    out = []
    for i, arg in enumerate(argv):
        if arg == "--moe-router-dtype":
            out.append(argv[i + 1] if i + 1 < len(argv) else "")
        elif arg.startswith("--moe-router-dtype="):
            out.append(arg.split("=", 1)[1])
    return out


OPTIONS = MegatronOptions


def make_backend(config: BackendConfig) -> UltraEPBackend:
    """Entry point used by backends.load_backend."""
    return UltraEPBackend(config)
