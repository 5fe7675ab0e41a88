"""The `reference` backend: a torch.distributed emulation of the EP libraries' contracts.

`make_backend(config)` returns the adapter that turns a RunRequest into the worker's argv
(`python -m backends.reference ...`, one process per rank); `OPTIONS` is its runbook options
dataclass. Kept import-light: torch loads only in the worker's rank processes.
"""

from __future__ import annotations

from harness.loadmodel.memory import estimate_memory_bytes

from .adapter import LIBRARIES, ReferenceBackend, ReferenceOptions

__all__ = ["OPTIONS", "estimate_memory_bytes", "make_backend"]

OPTIONS = ReferenceOptions
MODULES = tuple(sorted(LIBRARIES))      # the runbook's `module:` values (checked at load)


def make_backend(config) -> ReferenceBackend:
    """The reference Backend for a runbook backend entry (personality = config.module)."""
    return ReferenceBackend(config)
