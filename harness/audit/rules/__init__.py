"""The audit rules, as data (the MLPerf way), one module per family; each module holds its
checks and its `RULES` rows side by side. The order here is the order of the report."""

from harness.audit.rules import (
    basic,
    cells,
    hardware,
    heldout,
    invariants,
    launch,
    legacy,
    physics,
    pipeline,
    rederive,
    routing,
    selection,
    timing,
)
from harness.audit.rules.apply import apply_rule, check_missing_provenance, fold

RULES = (*basic.RULES, *cells.RULES, *selection.RULES, *rederive.RULES, *pipeline.RULES,
         *timing.RULES, *heldout.RULES, *legacy.RULES, *invariants.RULES,
         *physics.RULES, *launch.RULES, *hardware.RULES, *routing.RULES)

__all__ = ["RULES", "apply_rule", "check_missing_provenance", "fold"]
