"""The registry: the one table from a runbook backend entry to the module that implements it.

A runbook backend entry names its `kind` (and, for `cluster`, its `module:`). This table is
the only place a backend's module name appears in the harness; everything else reaches a
backend through the `Backend` contract (harness/api/backend.py). Each backend module exposes
`make_backend(config) -> Backend` and `OPTIONS`, the dataclass of its runbook `options:`
(and optionally `MODULES`, the names `module:` may take). Enforced by the import-linter
contracts in pyproject.toml (tests/unit/test_layering.py) and, backend by backend, by
tests/unit/test_backend_contract.py. How to add a backend: backends/README.md.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from harness.errors import BadInput

REFERENCE_KIND = "reference"
CLUSTER_KIND = "cluster"
MEGATRON_CORE_KIND = "megatron-core"

# kind -> the module that implements it; "{module}" is the runbook entry's `module:`.
BACKEND_MODULES: dict[str, str] = {
    REFERENCE_KIND: "backends.reference",
    CLUSTER_KIND: "backends.megatron.{module}",
    MEGATRON_CORE_KIND: "backends.megatron_core.adapter",
}
BACKEND_KINDS = tuple(BACKEND_MODULES)

# launcher name -> "module:Class" (harness/api/launcher.py is the contract).
LAUNCHERS: dict[str, str] = {
    "local": "harness.launch.local:LocalLauncher",
    "slurm": "harness.launch.slurm:SlurmLauncher",
}
LAUNCHER_NAMES = tuple(LAUNCHERS)


def module_name(kind: str, module: str) -> str:
    """The Python module of a runbook backend entry."""
    return BACKEND_MODULES[kind].format(module=module)


def backend_module(kind: str, module: str, name: str = "") -> ModuleType:
    """Import a backend's module; BadInput naming the backend when there is none."""
    target = module_name(kind, module)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is None or not target.startswith(exc.name):
            raise                                      # the module exists; a dependency is missing
        raise BadInput(f"no backend module {target!r} for backend {name or module!r}",
                       field="backends") from exc


def module_problem(kind: str, module: str, name: str = "") -> str | None:
    """Why `module:` names nothing this backend module runs (a module's MODULES list), or
    None: checked at load so a bad entry fails with file:line before anything is written."""
    known = getattr(backend_module(kind, module, name), "MODULES", None)
    if known is not None and module not in known:
        return f"{module!r} is not one of {list(known)}"
    return None


def options_type(kind: str, module: str, name: str = "") -> type:
    """The options dataclass a backend declares (module attribute OPTIONS)."""
    mod = backend_module(kind, module, name)
    opts = getattr(mod, "OPTIONS", None)
    if opts is None:
        raise BadInput(f"backend module {mod.__name__!r} declares no OPTIONS dataclass",
                       field="backends")
    return opts


def load_backend(config: Any) -> Any:
    """Build the Backend of a runbook entry (harness.runbook.model.BackendConfig)."""
    return backend_module(config.kind, config.module, config.name).make_backend(config)


def load_launcher_class(name: str) -> type:
    """The Launcher class registered under `name` (local | slurm)."""
    if name not in LAUNCHERS:
        raise BadInput(f"unknown launcher {name!r}; expected one of {', '.join(LAUNCHERS)}",
                       field="launcher")
    module, cls = LAUNCHERS[name].split(":")
    return getattr(importlib.import_module(module), cls)
