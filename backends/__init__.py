"""Backends: one module per dispatch library plus the torch.distributed `reference` emulation.

`load_backend` maps a runbook entry to its module: kind `reference` -> backends.reference
(the personality picks echo/ultraep/moonep behaviour); kind `cluster` -> backends.<module>;
kind `megatron-core` -> backends.megatron_core.
"""

from __future__ import annotations

import importlib

from harness.errors import BadInput
from harness.runbook import BackendConfig


def load_backend(config: BackendConfig):
    """Import the backend module named by the runbook and build its Backend."""
    module = {"reference": "backends.reference", "megatron-core": "backends.megatron_core"}.get(
        config.kind, f"backends.{config.module}")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise BadInput(f"no backend module {module!r} for backend {config.name!r}",
                       field="backends") from exc
    return mod.make_backend(config)
