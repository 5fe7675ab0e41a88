"""MoonEP cluster adapter: Megatron-LM with the MoonEP balanced token dispatcher.

Pinned source: NVIDIA/Megatron-LM pull request 6274 (head a8785b1e), which adds MoonEP as a
dispatcher type: `--moe-token-dispatcher-type moonep` (TransformerConfig Literal in
megatron/core/transformer/transformer_config.py). MoonEP makes every rank receive exactly
S x K tokens, so it takes no capacity flag; its _validate_moonep rejects token dropping
(moe_expert_capacity_factor), the TE op fuser, and needs grouped GEMM and bf16; and
megatron/training/arguments.py:1081-1090 (validate_args) raises `ValueError: MoonEP requires
--accumulate-allreduce-grads-in-fp32 ...` without FP32 gradient accumulation (the commit's
megatron/core/transformer/moe/README.md lists the flag). MoonEP raises its flag errors as
ValueError (transformer_config.py _validate_moonep, arguments.py, moonep_dispatcher.py) and
as TypeError (moonep_manager.py:352, the same fp32-gradient rule found at runtime): both are
`badflag`.
"""

from __future__ import annotations

from backends.megatron.args import MegatronSource, flag_values
from backends.megatron.base import MegatronBackend, MegatronOptions
from harness.api.backend import BackendConfig, RunRequest
from harness.vocab import Status

MOONEP_SOURCE = MegatronSource("NVIDIA/Megatron-LM", "a8785b1e956e651796c8fcb36fdfbbdc7debe1f5",
                               "refs/pull/6274/head")


# What MoonEP's validate_args needs (megatron/training/arguments.py:1081-1090 at a8785b1e).
FP32_GRADS_FLAG = "--accumulate-allreduce-grads-in-fp32"
# MoonEP's own configuration errors, as ValueError or TypeError (see the module docstring).
MOONEP_FLAG_ERROR = (r"(?:ValueError|TypeError): MoonEP (?:requires|supports|does not|"
                     r"currently|integration|MoE layers require)")


class MoonEPBackend(MegatronBackend):
    """MoonEP via `--moe-token-dispatcher-type moonep` (Megatron-LM PR 6274)."""

    library = "moonep"
    default_source = MOONEP_SOURCE
    patterns = {
        Status.ASSERT: (r"moon_ep\S*:\d+.*[Aa]ssert", r"\[MoonEP\].*assert(?:ion)? failed"),
        Status.BADFLAG: (MOONEP_FLAG_ERROR,),
        Status.DOES_NOT_FIT: (r"\[MoonEP\].*(?:failed to allocate|allocation failed)",),
    }

    def library_args(self, req: RunRequest, values: dict[str, str]) -> list[str]:
        """The MoonEP dispatcher and the FP32 gradient accumulation its validate_args
        requires; the budget reaches the telemetry hook through the env."""
        return ["--moe-token-dispatcher-type", "moonep", FP32_GRADS_FLAG]

    def rules(self, args: list[str]) -> list[str]:
        """_validate_moonep (transformer_config.py at a8785b1e): no op fuser, no dropping;
        validate_args (arguments.py:1087): FP32 gradient accumulation."""
        out = []
        if "moonep" in flag_values(args, "--moe-token-dispatcher-type"):
            if FP32_GRADS_FLAG not in args:
                out.append(f"MoonEP requires {FP32_GRADS_FLAG} (validate_args, "
                           f"megatron/training/arguments.py:1087, {self.source.label})")
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
