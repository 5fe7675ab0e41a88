"""ECHO cluster adapter: Megatron-LM with ECHO (Elastic Cloning for Hot Experts).

Pinned source: NVIDIA/Megatron-LM pull request 2368 (head a2b16b87), whose
megatron/training/arguments.py defines `--moe-enable-echo`, `--moe-num-echo-experts` and
`--moe-received-token-capacity` (the per-rank receive budget as a multiple of S x K:
token_dispatcher.py sets num_permuted_tokens = int(capacity * num_tokens * topk), the SPEC's
budget). ECHO rides the flex dispatcher with the hybridep backend (echo experts' own
dispatcher defaults to hybridep there). transformer_config.py asserts that
moe_num_echo_experts is set and divisible by the EP size.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.megatron.args import MegatronSource
from backends.megatron.base import MegatronBackend, MegatronOptions
from harness.api.backend import BackendConfig, OptionError, RunRequest
from harness.errors import BadInput
from harness.vocab import Status

ECHO_SOURCE = MegatronSource("NVIDIA/Megatron-LM", "a2b16b8733bb4ced46880d6adee6f19124732991",
                             "refs/pull/2368/head")


@dataclass(frozen=True)
class EchoOptions(MegatronOptions):
    """ECHO's runbook options: the echo-expert pool (default: the model's expert count)."""

    echo_experts: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.echo_experts is not None and self.echo_experts <= 0:
            raise OptionError("echo_experts", f"must be positive, got {self.echo_experts}")


OPTIONS = EchoOptions


class EchoBackend(MegatronBackend):
    """ECHO via `--moe-enable-echo` on the flex/hybridep dispatcher (Megatron-LM PR 2368)."""

    library = "echo"
    options_type = EchoOptions
    default_source = ECHO_SOURCE
    patterns = {
        Status.ASSERT: (r"echo_ep\S*:\d+.*[Aa]ssert", r"\[ECHO\].*assert(?:ion)? failed",
                   r"moe_num_echo_experts must be"),
        Status.DOES_NOT_FIT: (r"\[ECHO\].*(?:failed to allocate|allocation failed)",),
    }

    def library_args(self, req: RunRequest, values: dict[str, str]) -> list[str]:
        """ECHO on, its echo-expert pool (options.echo_experts, default the model's expert
        count) and the per-rank received-token capacity."""
        echo = self.options.echo_experts or req.model.experts
        if echo % req.shape.ep:
            raise BadInput(f"ECHO needs echo_experts divisible by ep {req.shape.ep} "
                           f"(got {echo})", field=f"backends.{self.name}.options.echo_experts")
        return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                "--moe-enable-echo", "--moe-num-echo-experts", str(echo),
                "--moe-received-token-capacity", values["capacity"]]



def make_backend(config: BackendConfig) -> EchoBackend:
    """Entry point used by backends.load_backend."""
    return EchoBackend(config)
