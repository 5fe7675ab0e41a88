"""The `reference` backend: a torch.distributed emulation of the EP libraries' contracts.

`make_backend(config)` returns the adapter that turns a RunRequest into the worker's argv
(`python -m backends.reference ...`, one process per rank). Kept import-light: the adapter
and torch load only when used, so the worker starts fast.
"""

from __future__ import annotations

from .memory import estimate_memory_bytes

__all__ = ["estimate_memory_bytes", "make_backend"]


def make_backend(config):
    """The reference Backend for a runbook backend entry (personality = config.module)."""
    from .adapter import ReferenceBackend

    return ReferenceBackend(config)
