"""The one harness module that reaches `backends`, by name: planners and routing traces.

`epcap forecast` applies the same load planners the reference backend runs and reads traces
with the reference backend's own reader, so the forecast and a replay cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import ModuleType

from harness.errors import BadInput

PLANNERS = "backends.reference.planners"
INTERIM_PLANNERS = "backends.reference.planners_interim"
TRACES = "backends.reference.traces"
TRACE_IO = "backends.reference.trace_io"


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


def _planner_module() -> ModuleType:
    try:
        return import_module(PLANNERS)
    except ModuleNotFoundError as exc:
        if exc.name != PLANNERS:
            raise
        return import_module(INTERIM_PLANNERS)


def load_planner(personality: str) -> Planner:
    """The planner of raw | echo | ultraep | moonep (BadInput for any other name)."""
    module = _planner_module()
    names = getattr(module, "PERSONALITIES", ("raw", "echo", "ultraep", "moonep"))
    if personality not in names:
        raise BadInput(f"unknown personality {personality!r}; expected one of "
                       f"{', '.join(names)}", field="--personality")
    return Planner(personality, module)


def read_trace(paths: Sequence[str | Path], experts: int | None = None):
    """A checked routing trace (epcap or Megatron-LM router trace); BadInput names file:line."""
    traces = import_module(TRACES)
    try:
        return traces.read_trace(paths, experts)
    except traces.TraceError as exc:
        raise BadInput(exc.message, path=exc.path, line=exc.line,
                       field=exc.field) from None


def routing_trace_file() -> str:
    """The file name a reference measure cell records its routing to."""
    return import_module(TRACE_IO).ROUTING_TRACE
