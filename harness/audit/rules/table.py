"""The audit's rules as data (the MLPerf way): each `Rule` names the tables and columns it
reads, what it catches and the earlier failure it stands for; `apply_rule` runs it over an
upload. INVALID beats UNKNOWN beats VALID (harness.audit.engine folds the checks)."""

from __future__ import annotations

from harness.audit.model import (
    FAIL,
    NOT_APPLICABLE,
    PASS,
    UNKNOWN,
    Check,
    Rule,
    Source,
    Upload,
    first,
    verdict_of,
)
from harness.audit.rules.basic import (
    check_fabricated,
    check_measure_validate,
    check_mixed_timing,
    check_natural,
    check_unexecutable,
)
from harness.audit.rules.cells import check_inconsistent, check_missing_cell
from harness.audit.rules.selection import (
    check_below_peak,
    check_timing_not_max,
    check_unvalidated,
    check_validated_saturated,
)
from harness.audit.vocab import (
    BELOW_PEAK,
    FABRICATED,
    INCONSISTENT,
    MISSING_CELL,
    MISSING_PROVENANCE,
    MIXED_TIMING,
    NATURAL,
    NO_MEASURE_VALIDATE,
    TIMING_NOT_MAX,
    UNEXECUTABLE,
    UNVALIDATED,
    VALIDATED_SATURATED,
)
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV

ATTEMPT_FACTS = ("model", "backend", "capacity", "uniform_tokens", "budget_tokens",
                 "peak_actual_valid_recv", "required_capacity", "cell_dir")
SELECTION_FACTS = ("model", "backend", "required_capacity", "peak_actual_valid_recv",
                   "uniform_tokens", "selected_capacity", "selected_budget_tokens")

RULES: tuple[Rule, ...] = (
    Rule(NATURAL, "ECHO attempts with purpose=natural (old selection)",
         (Source(ATTEMPTS_TSV, ("backend", "purpose")),), True, check_natural,
         "the first campaign picked the lowest capacity with no observed loss"),
    Rule(NO_MEASURE_VALIDATE, "ECHO attempts lack purpose=measure or purpose=validate rows",
         (Source(ATTEMPTS_TSV, ("model", "backend", "purpose")),), True, check_measure_validate,
         "selections that were never measured or never validated"),
    Rule(FABRICATED, "ECHO required_capacity exactly 1.0 for every model",
         (Source(SELECTION_TSV, ("backend", "required_capacity")),
          Source(ATTEMPTS_TSV, ("backend", "required_capacity"))), True, check_fabricated,
         "ECHO's requirement assumed 1.0 (setup_metadata), not measured"),
    Rule(UNEXECUTABLE, "a cell whose capacity is not executable for its shape",
         (Source(ATTEMPTS_TSV, ("capacity",)),), True, check_unexecutable,
         "1.02 at N = 65536: UltraEP died before iteration 0 (pad multiple 128)"),
    Rule(MIXED_TIMING, "one model's timing rows use different capacities across backends",
         (Source(TIMING_TSV, ("model", "timing_capacity")),
          Source(ATTEMPTS_TSV, ("model", "purpose", "capacity"))), False, check_mixed_timing,
         "backends timed at their own capacities, so the comparison was not like for like"),
    Rule(MISSING_CELL, "a row names a cell directory that is not in the upload",
         (Source(ATTEMPTS_TSV, ("cell_dir",)), Source(TIMING_TSV, ("cell_dir",))), True,
         check_missing_cell,
         "summaries uploaded without the runs they summarise (cells/ deleted)"),
    Rule(INCONSISTENT, "required_capacity != peak / N, or a row disagrees with its cell",
         (Source(ATTEMPTS_TSV, ATTEMPT_FACTS), Source(SELECTION_TSV, SELECTION_FACTS)), True,
         check_inconsistent,
         "a requirement or budget written by hand (1.05 where the peak says 1.205), or a "
         "false N that makes 1.02 look executable", all_sources=True),
    Rule(VALIDATED_SATURATED, "validated=true, yet the accepted validate attempt dropped",
         (Source(SELECTION_TSV, ("model", "backend", "selected_capacity", "validated")),),
         True, check_validated_saturated,
         "max(0, observed_loss) read zero drops from a clipping buffer"),
    Rule(BELOW_PEAK, "a selected budget below the measured peak it was selected for",
         (Source(SELECTION_TSV, ("peak_actual_valid_recv", "selected_budget_tokens")),),
         True, check_below_peak,
         "capacities rounded down, or chosen from setup_metadata's uniform N"),
    Rule(TIMING_NOT_MAX, "timing capacity is not max(selected capacity of the select backends)",
         (Source(SELECTION_TSV, ("model", "selected_capacity")),), True, check_timing_not_max,
         "timing at ECHO's capacity where UltraEP needed more (or at the lowest rung)"),
    Rule(UNVALIDATED, "a select backend without a validate attempt at its selected capacity",
         (Source(SELECTION_TSV, ("model", "backend", "selected_capacity")),), True,
         check_unvalidated,
         "only ECHO was validated; UltraEP's selection was taken on trust"),
)


def apply_rule(rule: Rule, upload: Upload) -> Check:
    """Run a rule over every usable source.

    A present table that cannot be read, or has malformed rows, leaves the rule UNKNOWN
    unless some source fails it; a source lacking a column is skipped when another decides
    (every source must be read for an `all_sources` rule).
    """
    checks, missing, broken = [], [], []
    for source in rule.sources:
        table = upload.tables.get(source.table)
        if table is None:
            continue
        if table.unreadable:
            broken.append(f"{table.name}: {table.unreadable}")
            continue
        absent = [c for c in source.columns if c not in table.columns]
        if absent:
            missing.append(f"{table.name} lacks column {', '.join(absent)}")
            continue
        check = rule.check(table, upload)
        if table.malformed and check.state in (PASS, NOT_APPLICABLE):
            check = Check(rule.code, UNKNOWN, [f"malformed rows not read: "
                                               f"{first(table.malformed)}"])
        checks.append(check)
    return fold(rule, checks, missing, broken)


def fold(rule: Rule, checks: list[Check], missing: list[str], broken: list[str]) -> Check:
    """Combine one rule's checks over its sources: fail, else unreadable, else pass."""
    failed = [w for c in checks if c.state == FAIL for w in c.why]
    if failed:
        return Check(rule.code, FAIL, failed)
    unknown = [w for c in checks if c.state == UNKNOWN for w in c.why]
    if broken or unknown or (missing and rule.all_sources):
        return Check(rule.code, UNKNOWN, [first(broken + unknown + missing)])
    passed = [w for c in checks if c.state == PASS for w in c.why]
    if passed:
        return Check(rule.code, PASS, passed)
    if missing:
        return Check(rule.code, UNKNOWN, [first(missing)])
    if checks:
        return checks[0]
    if rule.required:
        needed = " or ".join(s.table for s in rule.sources)
        return Check(rule.code, UNKNOWN, [f"no {needed} in the upload"])
    return Check(rule.code, NOT_APPLICABLE, ["no table to check"])


def check_missing_provenance(upload: Upload) -> Check:
    """The tables' provenance.txt, and one covering every (not ignored) cell directory: its
    own, or the nearest at or above it inside the upload (the earlier campaign wrote one per
    step, not one per cell)."""
    bad, unknown = [], []
    if upload.provenance is None:
        bad.append(upload.provenance_problem or "no provenance.txt")
    for key, cell in sorted(upload.cells.items()):
        if cell.problem:
            unknown.append(f"{key}: {cell.problem}")
        elif cell.provenance is None:
            bad.append(f"{key}: no provenance.txt in it or above it")
    return verdict_of(bad, [], MISSING_PROVENANCE, unknown)
