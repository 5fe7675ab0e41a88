"""ECHO cluster adapter: Megatron-LM with the ECHO expert-parallel dispatcher."""

from __future__ import annotations

from backends.megatron import MegatronBackend, MegatronOptions
from harness.backend_api import BackendConfig


class EchoBackend(MegatronBackend):
    """ECHO via `--moe-flex-dispatcher-backend echo` (run-scripts fork; docs/cluster.md)."""

    library = "echo"
    patterns = {
        "assert": (r"echo_ep\S*:\d+.*[Aa]ssert", r"\[ECHO\].*assert(?:ion)? failed"),
        "does_not_fit": (r"\[ECHO\].*(?:failed to allocate|allocation failed)",),
    }


OPTIONS = MegatronOptions


def make_backend(config: BackendConfig) -> EchoBackend:
    """Entry point used by backends.load_backend."""
    return EchoBackend(config)
