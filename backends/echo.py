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

from backends.base import RunRequest
from backends.megatron import MegatronBackend
from backends.megatron_args import MegatronSource
from harness.errors import BadInput
from harness.runbook import BackendConfig

ECHO_SOURCE = MegatronSource("NVIDIA/Megatron-LM", "a2b16b8733bb4ced46880d6adee6f19124732991",
                             "refs/pull/2368/head")


class EchoBackend(MegatronBackend):
    """ECHO via `--moe-enable-echo` on the flex/hybridep dispatcher (Megatron-LM PR 2368)."""

    library = "echo"
    default_source = ECHO_SOURCE
    patterns = {
        "assert": (r"echo_ep\S*:\d+.*[Aa]ssert", r"\[ECHO\].*assert(?:ion)? failed",
                   r"moe_num_echo_experts must be"),
        "does_not_fit": (r"\[ECHO\].*(?:failed to allocate|allocation failed)",),
    }

    def library_args(self, req: RunRequest, values: dict[str, str]) -> list[str]:
        """ECHO on, its echo-expert pool (options.echo_experts, default the model's expert
        count) and the per-rank received-token capacity."""
        echo = int(self.config.options.get("echo_experts", req.model.experts))
        if echo <= 0 or echo % req.shape.ep:
            raise BadInput(f"ECHO needs echo_experts divisible by ep {req.shape.ep} "
                           f"(got {echo})", field=f"backends.{self.name}.options.echo_experts")
        return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                "--moe-enable-echo", "--moe-num-echo-experts", str(echo),
                "--moe-received-token-capacity", values["capacity"]]


def make_backend(config: BackendConfig) -> EchoBackend:
    """Entry point used by backends.load_backend."""
    return EchoBackend(config)
