"""MoonEP cluster adapter: Megatron-LM with the MoonEP balanced token dispatcher.

Pinned source: NVIDIA/Megatron-LM pull request 6274 (head a8785b1e), which adds MoonEP as a
dispatcher type: `--moe-token-dispatcher-type moonep` (TransformerConfig Literal in
megatron/core/transformer/transformer_config.py). MoonEP makes every rank receive exactly
S x K tokens, so it takes no capacity flag; its _validate_moonep rejects token dropping
(moe_expert_capacity_factor), the TE op fuser, and needs grouped GEMM and bf16.
"""

from __future__ import annotations

from backends.megatron.args import MegatronSource, flag_values
from backends.megatron.base import MegatronBackend, MegatronOptions
from harness.api.backend import BackendConfig, RunRequest
from harness.vocab import Status

MOONEP_SOURCE = MegatronSource("NVIDIA/Megatron-LM", "a8785b1e956e651796c8fcb36fdfbbdc7debe1f5",
                               "refs/pull/6274/head")


class MoonEPBackend(MegatronBackend):
    """MoonEP via `--moe-token-dispatcher-type moonep` (Megatron-LM PR 6274)."""

    library = "moonep"
    default_source = MOONEP_SOURCE
    patterns = {
        Status.ASSERT: (r"moon_ep\S*:\d+.*[Aa]ssert", r"\[MoonEP\].*assert(?:ion)? failed"),
        Status.BADFLAG: (r"ValueError: MoonEP (?:requires|supports|does not)",),
        Status.DOES_NOT_FIT: (r"\[MoonEP\].*(?:failed to allocate|allocation failed)",),
    }

    def library_args(self, req: RunRequest, values: dict[str, str]) -> list[str]:
        """The MoonEP dispatcher; the budget reaches the telemetry hook through the env."""
        return ["--moe-token-dispatcher-type", "moonep"]

    def rules(self, args: list[str]) -> list[str]:
        """_validate_moonep (transformer_config.py at a8785b1e): no op fuser, no dropping."""
        out = []
        if "moonep" in flag_values(args, "--moe-token-dispatcher-type"):
            for bad in ("--use-transformer-engine-op-fuser", "--moe-expert-capacity-factor"):
                if bad in args or any(a.startswith(bad + "=") for a in args):
                    out.append(f"{bad} is rejected by MoonEP (_validate_moonep, "
                               f"megatron/core/transformer/transformer_config.py, "
                               f"{self.source.label})")
        return out


OPTIONS = MegatronOptions


def make_backend(config: BackendConfig) -> MoonEPBackend:
    """Entry point used by backends.load_backend."""
    return MoonEPBackend(config)
