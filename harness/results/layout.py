"""The names in a results directory (docs/spec.md: results layout): its files, and cells
(one run's identity, its directory name and the inverse parser).

The order of the runs is the stage table's (harness.pipeline.stages).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput
from harness.grid.capacity import capacity_tag
from harness.io.bounds import path_component_problem
from harness.vocab import Purpose

# the files of results/<campaign>/
ATTEMPTS_TSV = "capacity_attempts.tsv"
SELECTION_TSV = "capacity_selection.tsv"
TIMING_TSV = "timing.tsv"
COMPARISON_TSV = "comparison.tsv"
TIMING_LAUNCHES_TSV = "timing_launches.tsv"
TIMING_TRIALS_TSV = "timing_trials.tsv"
FRONTIER_TSV = "frontier.tsv"            # the capacity frontier (docs/frontier.md)
LADDER_TSV = "ladder.tsv"                # the imbalance ladder (docs/ladder.md)
CAMPAIGN_JSON = "campaign.json"      # the grid, shapes and backends of a campaign, as data
PROVENANCE_TXT = "provenance.txt"    # the campaign's, and each cell's
EVENTS_JSONL = "events.jsonl"
REPORT_DIR = "report"                   # `epcap report`'s default folder in a campaign
REPORT_FILE = "report.md"                # report.md in that folder
RUNBOOK_YAML = "runbook.yaml"        # the frozen copy of the runbook as run
STOPPED_TXT = "STOPPED.txt"          # why a campaign stopped (a bug-class failure)
CELL_JSON = "cell.json"              # in each cell directory
HARNESS_TXT = "harness.txt"          # in a cell the harness failed: what broke, its traceback

PURPOSES = Purpose.values()
# where a cluster measure cell's Megatron router trace goes (its --moe-routing-trace-path)
ROUTER_TRACE_DIR = "router_trace"
TAG = re.compile(r"cap(\d+)p(\d+)")
ATTEMPT = re.compile(r"a(\d+)")
MAX_TAG_DIGITS = 40                 # a capacity tag's or attempt's digits, checked before int()


@dataclass(frozen=True)
class Cell:
    """One run: (model, backend, purpose, capacity, attempt)."""

    campaign: str
    model: str
    backend: str
    purpose: str                    # canary | measure | validate | frontier | time
    capacity: str                   # decimal string, e.g. "2.00", "1.03125"
    attempt: int = 1

    def __post_init__(self) -> None:
        """Refuse a model or backend name that is not one path component (no `/`, `..`)."""
        for kind in ("model", "backend"):
            why = path_component_problem(getattr(self, kind), kind)
            if why is not None:
                raise BadInput(f"{kind} name {why}", field=kind)

    @property
    def name(self) -> str:
        """Directory name: <MODEL>__<backend>__<purpose>__cap<TAG>__a<N>."""
        return (f"{self.model}__{self.backend}__{self.purpose}__"
                f"{capacity_tag(self.capacity)}__a{self.attempt}")  # tag = cap2p00


def parse_cell_name(name: str, campaign: str = "") -> Cell | None:
    """The Cell a directory name stands for (the inverse of Cell.name), else None."""
    parts = name.split("__")
    if len(parts) != 5 or not all(parts[:3]):
        return None
    tag, attempt = TAG.fullmatch(parts[3]), ATTEMPT.fullmatch(parts[4])
    if tag is None or attempt is None:
        return None
    if len(tag[1]) + len(tag[2]) > MAX_TAG_DIGITS or len(attempt[1]) > MAX_TAG_DIGITS:
        return None                     # bounded before int(): no 5000-digit conversion
    try:
        cell = Cell(campaign, parts[0], parts[1], parts[2], f"{tag[1]}.{tag[2]}",
                    int(attempt[1]))
    except BadInput:
        return None
    return cell if cell.name == name else None          # only names Cell.name can write


def cell_dir(campaign_dir: str | Path, cell: Cell) -> Path:
    """results/<campaign>/cells/<cell.name>."""
    return Path(campaign_dir) / "cells" / cell.name


def canary_model(runbook) -> str:
    """The model a backend's canary runs: the one with the fewest MoE weights per rank."""
    def weight(m):
        return (m.moe_layers * m.experts * m.expert_ffn * m.hidden, m.name)
    return min(runbook.models, key=weight).name


@dataclass(frozen=True)
class PlannedCell:
    """A run the plan expects; `capacity` is None until earlier stages measured it."""

    model: str
    backend: str
    purpose: str
    capacity: str | None
    stage: str = ""
