"""The registry: the only harness module that reaches `backends`, by name (importlib).

A runbook backend entry names its module: kind `reference` -> the package
`backends.reference` (the personality picks echo/ultraep/moonep behaviour); kind `cluster`
-> `backends.<module>`; kind `megatron-core` -> `backends.megatron_core`. Each backend module
exposes `make_backend(config) -> Backend` and `OPTIONS`, the dataclass of its runbook
`options:`. Nothing else in harness/ names a backend
(docs/architecture.md; enforced by the import-linter contracts in pyproject.toml).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from harness.errors import BadInput

BACKENDS_PACKAGE = "backends"
REFERENCE_KIND = "reference"
CLUSTER_KIND = "cluster"
MEGATRON_CORE_KIND = "megatron-core"
BACKEND_KINDS = (REFERENCE_KIND, CLUSTER_KIND, MEGATRON_CORE_KIND)


def module_name(kind: str, module: str) -> str:
    """The Python module of a runbook backend entry."""
    if kind == REFERENCE_KIND:
        return f"{BACKENDS_PACKAGE}.{REFERENCE_KIND}"
    if kind == MEGATRON_CORE_KIND:
        return f"{BACKENDS_PACKAGE}.megatron_core"
    return f"{BACKENDS_PACKAGE}.{module}"


def backend_module(kind: str, module: str, name: str = "") -> ModuleType:
    """Import a backend's module; BadInput naming the backend when there is none."""
    target = module_name(kind, module)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name not in (target, BACKENDS_PACKAGE):
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
    """Build the Backend of a runbook entry (harness.runbook.BackendConfig)."""
    return backend_module(config.kind, config.module, config.name).make_backend(config)
