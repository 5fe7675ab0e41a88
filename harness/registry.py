"""The registry: the only harness module that reaches `backends`, by name (importlib).

A runbook backend entry names its module: kind `reference` -> the package
`backends.reference` (the personality picks echo/ultraep/moonep behaviour); kind `cluster`
-> `backends.<module>`; kind `megatron-core` -> `backends.megatron_core`. Each backend module
exposes `make_backend(config) -> Backend` and `OPTIONS`, the dataclass of its runbook
`options:`. Nothing else in harness/ names a backend
(docs/architecture.md; enforced by the import-linter contracts in pyproject.toml).

`epcap forecast` also comes here for the reference backend's load planners and its trace
reader, so a forecast and a replay run the same code (load_planner, read_trace).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.errors import BadInput

BACKENDS_PACKAGE = "backends"
REFERENCE_KIND = "reference"
CLUSTER_KIND = "cluster"
MEGATRON_CORE_KIND = "megatron-core"
BACKEND_KINDS = (REFERENCE_KIND, CLUSTER_KIND, MEGATRON_CORE_KIND)
PLANNERS = "backends.reference.planners"
TRACES = "backends.reference.traces"
TRACE_IO = "backends.reference.trace_io"


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


@dataclass(frozen=True)
class Planner:
    """One personality's balancing planner (interface of backends/reference/planners.py)."""

    personality: str
    module: ModuleType

    def home_ranks(self, experts: int, ep: int, placement: str):
        return self.module.home_ranks(experts, ep, placement)

    def plan(self, counts, home, ep: int, options: dict | None = None):
        return self.module.plan(self.personality, counts, home, ep, options)

    def demand(self, quotas):
        return self.module.demand(quotas)

    def slot_destinations(self, expert_of_slot, quotas):
        return self.module.slot_destinations(expert_of_slot, quotas)


def load_planner(personality: str) -> Planner:
    """The planner of raw | echo | ultraep | moonep (BadInput for any other name)."""
    module = importlib.import_module(PLANNERS)
    names = module.PERSONALITIES
    if personality not in names:
        raise BadInput(f"unknown personality {personality!r}; expected one of "
                       f"{', '.join(names)}", field="--personality")
    return Planner(personality, module)


def read_trace(paths: Sequence[str | Path], experts: int | None = None):
    """A checked routing trace (epcap or Megatron-LM router trace); BadInput names file:line."""
    traces = importlib.import_module(TRACES)
    try:
        return traces.read_trace(paths, experts)
    except traces.TraceError as exc:
        raise BadInput(exc.message, path=exc.path, line=exc.line or None,
                       field=exc.field) from None


def routing_trace_file() -> str:
    """The file name a reference measure cell records its routing to."""
    return importlib.import_module(TRACE_IO).ROUTING_TRACE


def cluster_trace_dir() -> str:
    """The directory a cluster measure cell's Megatron router trace goes to (its
    --moe-routing-trace-path, below the cell)."""
    return importlib.import_module(f"{BACKENDS_PACKAGE}.megatron").TRACE_DIR
