"""MoonEP cluster adapter: Megatron-LM with the MoonEP expert-parallel dispatcher."""

from __future__ import annotations

from backends.megatron import MegatronBackend, MegatronOptions
from harness.backend_api import BackendConfig


class MoonEPBackend(MegatronBackend):
    """MoonEP via `--moe-flex-dispatcher-backend moonep` (run-scripts fork; docs/cluster.md)."""

    library = "moonep"
    patterns = {
        "assert": (r"moon_ep\S*:\d+.*[Aa]ssert", r"\[MoonEP\].*assert(?:ion)? failed"),
        "does_not_fit": (r"\[MoonEP\].*(?:failed to allocate|allocation failed)",),
    }


OPTIONS = MegatronOptions


def make_backend(config: BackendConfig) -> MoonEPBackend:
    """Entry point used by backends.load_backend."""
    return MoonEPBackend(config)
