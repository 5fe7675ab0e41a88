"""The stage table: preflight, measure, select, validate, frontier, time, report (docs/spec.md: pipeline).

One table says, for every stage, which runs it makes (purpose), for which backends (all,
the select ones, the timed ones) and at which scope (once per campaign, per (model,
backend), per model). Everything that needs the stage order reads it: the dry-run plan and
progress (`plan_cells`), the ETA, `--stage`/`--until` (`stage_mode`) and the running
pipeline (`decisions.model_pipeline` walks `pipeline_groups`). Re-measures and validation
step-ups add runs at run time; no plan can know them. The time stage makes
`timing.launches` rounds per model, each launching every timed arm once in rotated order.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from harness.results.layout import PlannedCell, canary_model
from harness.runbook.model import BackendConfig, Runbook
from harness.timing import verdicts
from harness.vocab import STAGE_ORDER, Purpose, Stage, StageMode

# Which backends a stage runs for.
ALL, SELECT, TIMED = "every backend", "select backends", "timed backends"
# At which scope: once per campaign, per (model, backend) in backend order, once per model.
CAMPAIGN, PAIR, MODEL = "campaign", "pair", "model"


@dataclass(frozen=True)
class StageSpec:
    """One row of the stage table."""

    stage: Stage
    purpose: Purpose | None          # the runs it makes; None: it decides without running
    backends: str                    # ALL | SELECT | TIMED
    scope: str                       # CAMPAIGN | PAIR | MODEL


TABLE: tuple[StageSpec, ...] = (
    StageSpec(Stage.PREFLIGHT, Purpose.CANARY, ALL, CAMPAIGN),
    StageSpec(Stage.MEASURE, Purpose.MEASURE, SELECT, PAIR),
    StageSpec(Stage.SELECT, None, SELECT, PAIR),
    StageSpec(Stage.VALIDATE, Purpose.VALIDATE, SELECT, PAIR),
    StageSpec(Stage.FRONTIER, Purpose.FRONTIER, SELECT, PAIR),
    StageSpec(Stage.TIME, Purpose.TIME, TIMED, MODEL),
    StageSpec(Stage.REPORT, None, ALL, CAMPAIGN),
)
assert tuple(s.stage for s in TABLE) == STAGE_ORDER, "the table lists every stage in order"

STAGE_OF_PURPOSE: dict[str, Stage] = {s.purpose: s.stage for s in TABLE if s.purpose}
SPEC_OF: dict[str, StageSpec] = {s.stage: s for s in TABLE}


def backends_of(runbook: Runbook, spec: StageSpec) -> list[BackendConfig]:
    """The runbook backends a stage runs for, in runbook order."""
    if spec.backends == SELECT:
        return [b for b in runbook.backends if b.select]
    if spec.backends == TIMED:
        return [b for b in runbook.backends if b.time]
    return list(runbook.backends)


def timed_arms(runbook: Runbook) -> tuple[str | None, list[str]]:
    """(baseline, arms): the timed backends, plus `<baseline>~control` when timing.control."""
    timed = [b.name for b in runbook.backends if b.time]
    if not timed:
        return None, []
    return verdicts.arms(timed, runbook.baseline, runbook.timing.control)


def time_schedule(runbook: Runbook) -> list[tuple[int, str]]:
    """(round, arm) of every time run of one model, in launch order (rotated per round)."""
    _, arms = timed_arms(runbook)
    return verdicts.schedule(arms, runbook.timing.launches)


def pipeline_groups() -> list[tuple[str, tuple[StageSpec, ...]]]:
    """The per-model part of the table as consecutive (scope, stages) groups."""
    per_model = [s for s in TABLE if s.scope != CAMPAIGN]
    return [(scope, tuple(specs)) for scope, specs in groupby(per_model, key=lambda s: s.scope)]


def stage_mode(stage: str, stages: tuple[str, ...] = (), until: str | None = None) -> StageMode:
    """RUN, REPLAY (its results must come from earlier runs) or STOP for one invocation."""
    idx = STAGE_ORDER.index(stage)
    if until is not None and idx > STAGE_ORDER.index(until):
        return StageMode.STOP
    if not stages or stage in stages:
        return StageMode.RUN
    last = max(STAGE_ORDER.index(s) for s in stages)
    return StageMode.REPLAY if idx < last else StageMode.STOP


def initial_capacity(runbook: Runbook, spec: StageSpec) -> str | None:
    """The capacity a stage's first run uses when it is known before any run."""
    if spec.stage in (Stage.PREFLIGHT, Stage.MEASURE):
        return runbook.capacity.measure
    return None                      # validate/time: set by the selections


def runs_per_pair(runbook: Runbook, spec: StageSpec, backend: BackendConfig) -> int:
    """The fewest runs a pair stage makes for one backend: one, except the frontier's one
    launch per rung (2k + 1 for a timed backend under `frontier: {rungs: k}`, else none)."""
    if spec.stage == Stage.FRONTIER:
        return 2 * runbook.frontier_rungs + 1 if runbook.frontier_rungs and backend.time else 0
    return 1


def plan_cells(runbook: Runbook) -> list[PlannedCell]:
    """The minimum ordered plan: campaign-scope runs, then per model its pipeline's runs."""
    cells = []
    for spec in TABLE:
        if spec.scope == CAMPAIGN and spec.purpose is not None:
            model = canary_model(runbook)
            cells += [PlannedCell(model, b.name, spec.purpose, initial_capacity(runbook, spec),
                                      spec.stage)
                      for b in backends_of(runbook, spec)]
    for model in runbook.models:
        for scope, specs in pipeline_groups():
            if scope == PAIR:
                for b in backends_of(runbook, specs[0]):
                    cells += [PlannedCell(model.name, b.name, s.purpose,
                                          initial_capacity(runbook, s), s.stage)
                              for s in specs if s.purpose is not None
                              for _ in range(runs_per_pair(runbook, s, b))]
            else:
                for s in (s for s in specs if s.purpose is not None):
                    names = ([arm for _, arm in time_schedule(runbook)]
                             if s.stage == Stage.TIME else [b.name for b in backends_of(runbook, s)])
                    cells += [PlannedCell(model.name, name, s.purpose,
                                          initial_capacity(runbook, s), s.stage)
                              for name in names]
    return cells
