"""The audit's words: reason codes (docs/spec.md#audit-rules), the table names it reads, and the
purposes and statuses it compares (normalised with harness.audit.model.norm)."""

from __future__ import annotations

import re

from harness.audit.model import Row, cell_name
from harness.results.layout import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    FRONTIER_TSV,
    SELECTION_TSV,
    TIMING_LAUNCHES_TSV,
    TIMING_TRIALS_TSV,
    TIMING_TSV,
)
from harness.vocab import Purpose, Status

NATURAL = "natural-selection"
NO_MEASURE_VALIDATE = "no-measure-validate"
FABRICATED = "fabricated-requirement"
UNEXECUTABLE = "unexecutable-capacity"
MIXED_TIMING = "mixed-timing-capacity"
VALIDATED_SATURATED = "validated-but-saturated"
INCONSISTENT = "inconsistent-requirement"
BELOW_PEAK = "selection-below-peak"
TIMING_NOT_MAX = "timing-not-max"
UNVALIDATED = "unvalidated-selection"
MISSING_CELL = "missing-cell"
MISSING_PROVENANCE = "missing-provenance"
NOTHING_TO_JUDGE = "nothing-to-judge"
RUNBOOK_ALTERED = "runbook-altered"
CELL_IDENTITY = "cell-identity"
TIMING_CELL = "timing-cell"
PROVENANCE_INCOMPLETE = "provenance-incomplete"
NOT_REDERIVED = "not-rederived"
INCOMPLETE = "incomplete-telemetry"
SELECTION_NOT_REDERIVED = "selection-not-rederived"
EARLIER_NOT_REDERIVED = "earlier-not-rederived"
TIMING_NOT_REDERIVED = "timing-not-rederived"
TIMING_INCOMPLETE = "timing-incomplete"
HELD_OUT_NOT_REDERIVED = "held-out-not-rederived"
LFS_POINTER = "lfs-pointer"          # UNKNOWN: evidence files are Git LFS pointers
MISSING_LOGS = "missing-logs"        # UNKNOWN: cells that ran hold no log
CONSERVATION = "conservation-broken"
CLOCK_IMPOSSIBLE = "clock-impossible"
TIMING_IMPLAUSIBLE = "timing-implausible"
ABOVE_LINK_LIMIT = "above-link-limit"
PREDATES = "predates-fix"            # emitted as predates-fix:<id>
COMMIT_IMPOSSIBLE = "commit-impossible"
LAUNCH_NOT_RUNBOOK = "launch-not-runbook"
HARDWARE_MISMATCH = "hardware-mismatch"
ROUTING_NOT_FROM_SEED = "routing-not-from-seed"
OTHER_VERSION = "other-version"      # UNKNOWN: made by another epcap version (names both)
VERSION_MISMATCH = "version-mismatch"  # evidence the recorded commit's code never writes
STATEMENT_UNVERIFIED = "statement-unverified"  # the signed statement fails its trusted key
HISTORY_REWRITTEN = "history-rewritten"  # a published cell, launch or row later replaced
REASON_CODES = (NATURAL, NO_MEASURE_VALIDATE, FABRICATED, UNEXECUTABLE, MIXED_TIMING,
                VALIDATED_SATURATED, INCONSISTENT, BELOW_PEAK, TIMING_NOT_MAX, UNVALIDATED,
                MISSING_CELL, PREDATES + ":<id>", MISSING_PROVENANCE, NOTHING_TO_JUDGE,
                RUNBOOK_ALTERED, CELL_IDENTITY, NOT_REDERIVED, INCOMPLETE,
                SELECTION_NOT_REDERIVED, PROVENANCE_INCOMPLETE, TIMING_CELL,
                TIMING_INCOMPLETE, TIMING_NOT_REDERIVED, HELD_OUT_NOT_REDERIVED,
                EARLIER_NOT_REDERIVED, LFS_POINTER, MISSING_LOGS, CONSERVATION,
                CLOCK_IMPOSSIBLE, TIMING_IMPLAUSIBLE, COMMIT_IMPOSSIBLE, ABOVE_LINK_LIMIT,
                LAUNCH_NOT_RUNBOOK, HARDWARE_MISMATCH, ROUTING_NOT_FROM_SEED, OTHER_VERSION,
                VERSION_MISMATCH, STATEMENT_UNVERIFIED,
                HISTORY_REWRITTEN)

TABLES = (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, COMPARISON_TSV, TIMING_LAUNCHES_TSV,
          TIMING_TRIALS_TSV, FRONTIER_TSV)
UPLOAD_MARKERS = (ATTEMPTS_TSV, SELECTION_TSV)
VERDICTS = ("VALID", "INVALID", "UNKNOWN")

ECHO = "echo"                        # the reference selection backend the first rules name
P_MEASURE, P_VALIDATE, P_TIME, P_CANARY = (Purpose.MEASURE, Purpose.VALIDATE, Purpose.TIME,
                                           Purpose.CANARY)
P_NATURAL = "natural"                # the old selection's purpose: only uploads carry it
S_OK, S_DROPS, S_LOWER_BOUND, S_DOES_NOT_FIT = (Status.OK, Status.DROPS, Status.LOWER_BOUND,
                                                Status.DOES_NOT_FIT)
TRUE, FALSE = "true", "false"        # TSV booleans (docs/spec.md: results layout)

IGNORED_TAG = re.compile(r"__cap1p75(?:__|$)")   # abandoned descent capacity (docs/spec.md#audit-rules)
IGNORED_CAPACITY_TAG = "cap1p75"
CELL_TAG = re.compile(r"__cap(\d+)p(\d+)(?:__|$)")


def is_ignored_row(row: Row) -> bool:
    """Rows of cells tagged with the abandoned descent capacity (__cap1p75) are not counted."""
    return (bool(IGNORED_TAG.search(cell_name(row)))
            or row.name("capacity_tag") == IGNORED_CAPACITY_TAG)


def ignored_name(row: Row) -> str:
    """A name for an ignored row: its cell directory, else built from its columns."""
    name = cell_name(row)
    if name:
        return name
    parts = [row.get(c) for c in ("model", "backend", "purpose") if row.get(c)]
    return "__".join([*parts, IGNORED_CAPACITY_TAG, f"a{row.get('attempt') or '?'}"])
