"""Plan: runbook -> ordered cells; cell names and directories (SPEC section 4)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.capacity import capacity_tag

PURPOSES = ("canary", "measure", "validate", "time")


@dataclass(frozen=True)
class Cell:
    """One run: (model, backend, purpose, capacity, attempt)."""

    campaign: str
    model: str
    backend: str
    purpose: str                    # canary | measure | validate | time
    capacity: str                   # decimal string, e.g. "2.00", "1.03125"
    attempt: int = 1

    @property
    def name(self) -> str:
        """Directory name: <MODEL>__<backend>__<purpose>__cap<TAG>__a<N>."""
        return (f"{self.model}__{self.backend}__{self.purpose}__"
                f"{capacity_tag(self.capacity)}__a{self.attempt}")  # tag = cap2p00


STAGES = ("preflight", "measure", "select", "validate", "time", "report")
STAGE_OF_PURPOSE = {"canary": "preflight", "measure": "measure", "validate": "validate",
                    "time": "time"}


@dataclass(frozen=True)
class PlannedCell:
    """A run the plan expects; `capacity` is None until earlier stages measured it."""

    model: str
    backend: str
    purpose: str
    capacity: str | None

    @property
    def stage(self) -> str:
        return STAGE_OF_PURPOSE[self.purpose]


def cell_dir(campaign_dir, cell: Cell):
    """results/<campaign>/cells/<cell.name>."""
    from pathlib import Path
    return Path(campaign_dir) / "cells" / cell.name


def canary_model(runbook) -> str:
    """The model a backend's canary runs: the one with the fewest MoE weights per rank."""
    def weight(m):
        return (m.moe_layers * m.experts * m.expert_ffn * m.hidden, m.name)
    return min(runbook.models, key=weight).name


def plan_cells(runbook) -> list[PlannedCell]:
    """The minimum ordered plan: canaries, then per model measure/validate, then time.

    Re-measures and validation step-ups add runs at run time; they are not known here.
    """
    cells = [PlannedCell(canary_model(runbook), b.name, "canary", runbook.capacity.measure)
             for b in runbook.backends]
    for model in runbook.models:
        for b in runbook.backends:
            if b.select:
                cells.append(PlannedCell(model.name, b.name, "measure",
                                         runbook.capacity.measure))
                cells.append(PlannedCell(model.name, b.name, "validate", None))
        for b in runbook.backends:
            if b.time:
                cells.append(PlannedCell(model.name, b.name, "time", None))
    return cells
