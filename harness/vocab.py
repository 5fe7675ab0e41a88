"""The project's vocabulary: statuses, failure classes, purposes, stages, launcher states and
event names as string enums, plus how many iterations a run of each purpose makes.

Every member *is* its string (`Status.OK == "ok"`, `json.dumps(Status.OK) == '"ok"'`,
`f"{Status.OK}" == "ok"`), so TSVs, events.jsonl and JSON documents stay byte-identical
to plain strings. The words themselves are the contracts of docs/spec.md.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

# P of docs/spec.md: budgets are padded to a multiple of it unless the runbook says otherwise
# (capacity.pad_multiple); also the value for results that do not record theirs.
DEFAULT_PAD_MULTIPLE = 128


class StrEnum(str, Enum):
    """A str-valued enum whose str() and format() are the value (enum.StrEnum is 3.11+)."""

    __str__ = str.__str__
    __format__ = str.__format__

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The member strings in declaration order (for CLI choices and argparse)."""
        return tuple(m.value for m in cls)


class Status(StrEnum):
    """The status of one run (capacity_attempts.tsv `status`, docs/spec.md: pipeline)."""

    OK = "ok"
    DROPS = "drops"
    LOWER_BOUND = "lower_bound"
    DOES_NOT_FIT = "does_not_fit"
    ASSERT = "assert"
    BADFLAG = "badflag"
    CRASH = "crash"
    TIMEOUT = "timeout"
    INFRA = "infra"
    UNCLASSIFIED = "unclassified"
    CANCELLED = "cancelled"      # a user's or an admin's scancel: stopped as asked, not retried
    HARNESS = "harness"          # the harness failed (its launcher, fork server, driver), not the run


# The failure taxonomy: a run that ended in one of these produced no measurement.
FAILURE_CLASSES: tuple[Status, ...] = (Status.DOES_NOT_FIT, Status.ASSERT, Status.BADFLAG,
                                       Status.CRASH, Status.TIMEOUT, Status.INFRA,
                                       Status.UNCLASSIFIED, Status.CANCELLED, Status.HARNESS)
# Bug classes stop the campaign (exit 3).
BUG_CLASSES: tuple[Status, ...] = (Status.ASSERT, Status.BADFLAG)
# Classes a backend's failure pattern may name, in the order they are checked: bug classes
# first, so an assertion that mentions memory is still an assertion.
PATTERN_CLASSES: tuple[Status, ...] = (Status.ASSERT, Status.BADFLAG, Status.DOES_NOT_FIT,
                                       Status.INFRA)
# Outcomes of a canary that let the campaign go on.
CANARY_OK: tuple[Status, ...] = (Status.OK, Status.DROPS, Status.LOWER_BOUND,
                                 Status.DOES_NOT_FIT)
# Statuses whose run produced telemetry that may be timed.
TIMED_OK: tuple[Status, ...] = (Status.OK, Status.DROPS)


class Verdict(StrEnum):
    """A timing comparison's verdict (comparison.tsv `verdict`, docs/timing-verdicts.md)."""

    FASTER = "faster"
    SLOWER = "slower"
    INDISTINGUISHABLE = "indistinguishable"
    TOO_NOISY = "too_noisy"
    # an arm or its baseline dropped slots (timing status drops): the two did not do the same
    # work, so no speed verdict is given (docs/timing-verdicts.md#equal-work)
    UNEQUAL_WORK = "unequal_work"


# The A/A control arm of a timing baseline is named `<baseline>~control`.
CONTROL_SUFFIX = "~control"


class Purpose(StrEnum):
    """Why a cell runs (capacity_attempts.tsv `purpose`, the cell name's third part)."""

    CANARY = "canary"
    MEASURE = "measure"
    VALIDATE = "validate"
    TIME = "time"
    FRONTIER = "frontier"           # timed runs at the rungs around a selection


class Stage(StrEnum):
    """The stages of the pipeline, in order (`epcap run --stage/--until`)."""

    PREFLIGHT = "preflight"
    MEASURE = "measure"
    SELECT = "select"
    VALIDATE = "validate"
    FRONTIER = "frontier"
    TIME = "time"
    REPORT = "report"


STAGE_ORDER: tuple[Stage, ...] = tuple(Stage)


class LauncherState(StrEnum):
    """How a launcher saw a job end (JobResult.state; `epcap classify --state`)."""

    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OOM = "oom"
    NODE_FAIL = "node_fail"
    CANCELLED = "cancelled"


class Event(StrEnum):
    """Event names of events.jsonl (the `ev` key)."""

    CAMPAIGN_START = "campaign_start"
    RUN_START = "run_start"
    HEALTH = "health"
    CELL_SUBMIT = "cell_submit"
    CELL_START = "cell_start"
    CELL_FINISH = "cell_finish"
    CELL_ABANDONED = "cell_abandoned"
    CELL_QUEUED = "cell_queued"
    CHECKPOINT = "checkpoint"
    STAGE_DONE = "stage_done"
    CAMPAIGN_DONE = "campaign_done"
    CAMPAIGN_STOPPED = "campaign_stopped"
    REPORT = "report"
    CELLS_INVALIDATED = "cells_invalidated"
    RUNBOOK_REVISED = "runbook_revised"


class StageMode(StrEnum):
    """What a stage does in one invocation: run, replay earlier results, or stop before it."""

    RUN = "run"
    REPLAY = "replay"
    STOP = "stop"


class Impl(StrEnum):
    """`backend_impl`: the emulation or a real library on a cluster."""

    REFERENCE = "reference"
    CLUSTER = "cluster"
    MEGATRON_CORE = "megatron-core"     # megatron-core's own router and dispatcher


# Purposes whose durations the ETA pools: measure and validate runs make the same iterations.
DURATION_CLASS: dict[str, str] = {Purpose.CANARY: "canary", Purpose.MEASURE: "select",
                                  Purpose.VALIDATE: "select", Purpose.TIME: "time",
                                  Purpose.FRONTIER: "time"}


# Purposes whose runs are timed with the runbook's `timing` phase: the time stage's launches
# and the capacity frontier's one launch per rung (docs/frontier.md).
TIMED_PURPOSES: frozenset[str] = frozenset({Purpose.TIME, Purpose.FRONTIER})


def run_phase(runbook: Any, purpose: str) -> Any:
    """The phase config (warmup, iters, trials) a run of `purpose` uses.

    canary: one iteration, no warmup, one trial; time: the runbook's `timing`; measure: the
    runbook's `measure`; validate: its warmup, then `validate.iters` held-out iterations. The
    one place this is decided (docs/spec.md: pipeline).
    """
    if purpose == Purpose.CANARY:
        return dataclasses.replace(runbook.measure, warmup=0, iters=1, trials=1)
    if purpose in TIMED_PURPOSES:
        return runbook.timing
    if purpose == Purpose.VALIDATE:
        return dataclasses.replace(runbook.measure, iters=runbook.validate.iters)
    return runbook.measure


def run_seed(runbook: Any, purpose: str) -> int:
    """The routing seed of a run: `validate.seed` (held-out routing) for validate runs, the
    campaign seed for every other purpose (docs/drop-risk.md)."""
    return runbook.validate.seed if purpose == Purpose.VALIDATE else runbook.seed


def run_timed(purpose: str) -> bool:
    """Whether a run of `purpose` takes timing trials (time and frontier runs; docs/spec.md:
    telemetry)."""
    return purpose in TIMED_PURPOSES


def run_records_routing(purpose: str) -> bool:
    """Whether the campaign wants a run's routing recorded: measure runs, whose routing the
    report's forecast section replays (docs/forecast.md)."""
    return purpose == Purpose.MEASURE


def phase_iterations(phase: Any, timed: bool) -> int:
    """Iterations one run of `phase` (warmup, iters, trials) makes: warmup + iters, times
    trials when timed. A backend's worker calls this with the flags it was given."""
    return phase.warmup + phase.iters * (max(1, phase.trials) if timed else 1)


def run_iterations(phase: Any, purpose: str) -> int:
    """Iterations one run of `purpose` makes (phase_iterations of its timing decision)."""
    return phase_iterations(phase, run_timed(purpose))
