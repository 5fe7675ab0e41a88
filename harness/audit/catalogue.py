"""The audit's one catalogue: every rule the audit applies, in report order, as rows (the
MLPerf checkers' way). `engine.audit_upload` applies every row, merges the checks of one
code, and folds the verdict; no check is called by name anywhere else.

A row is a `Rule` (one table's columns: `Source(table, columns)`) or an `UploadRule` (the
whole upload: the files it reads, `Source(file, keys)`, with the audit context: the errata
registry and the --git-repo clones); a `per_fix` row expands into one row per errata fix at
audit time (rules.apply.expand). Each code has a family: what it checks.

docs/audit.md's rule catalogue is `markdown()` (generated, as the evidence map is), and its
rule table and docs/spec.md#audit-rules's reason codes are tested against `CATALOGUE`
(tests/unit/test_audit_catalogue.py), as are the codes two rows share (`MERGED`) and the
columns two rows both judge (`OVERLAPS`).
"""

from __future__ import annotations

from harness.audit import versions
from harness.audit.model import AuditContext, Check, Rule, Source, Upload, UploadRule
from harness.audit.rules import (
    basic,
    cells,
    clocks,
    conservation,
    hardware,
    history,
    launch,
    legacy,
    links,
    pipeline,
    present,
    provenance,
    rederive,
    routing,
    selection,
    signature,
    timing_objects,
)
from harness.audit.vocab import (
    ABOVE_LINK_LIMIT,
    BELOW_PEAK,
    CELL_IDENTITY,
    CLOCK_IMPOSSIBLE,
    COMMIT_IMPOSSIBLE,
    CONSERVATION,
    EARLIER_NOT_REDERIVED,
    FABRICATED,
    HARDWARE_MISMATCH,
    HELD_OUT_NOT_REDERIVED,
    HISTORY_REWRITTEN,
    INCOMPLETE,
    INCONSISTENT,
    LAUNCH_NOT_RUNBOOK,
    LFS_POINTER,
    MISSING_CELL,
    MISSING_LOGS,
    MISSING_PROVENANCE,
    MIXED_TIMING,
    NATURAL,
    NO_MEASURE_VALIDATE,
    NOT_REDERIVED,
    NOTHING_TO_JUDGE,
    OTHER_VERSION,
    PREDATES,
    PROVENANCE_INCOMPLETE,
    ROUTING_NOT_FROM_SEED,
    RUNBOOK_ALTERED,
    SELECTION_NOT_REDERIVED,
    STATEMENT_UNVERIFIED,
    TIMING_CELL,
    TIMING_IMPLAUSIBLE,
    TIMING_INCOMPLETE,
    TIMING_NOT_MAX,
    TIMING_NOT_REDERIVED,
    UNEXECUTABLE,
    UNVALIDATED,
    VALIDATED_SATURATED,
    VERSION_MISMATCH,
)
from harness.results.layout import ATTEMPTS_TSV, PROVENANCE_TXT, SELECTION_TSV

Row = Rule | UploadRule


def nothing_to_judge(upload: Upload, ctx: AuditContext) -> Check:
    """`nothing-to-judge` (rules.selection.check_nothing_to_judge): the fold makes the upload
    UNKNOWN whatever the other rows say when this one is."""
    return selection.check_nothing_to_judge(upload)


NOTHING = UploadRule(NOTHING_TO_JUDGE, "(UNKNOWN whatever else is found) no attempt rows "
                     "(canary aside) and no selection rows, or only measure attempts and no "
                     "selection", (Source(ATTEMPTS_TSV, ("purpose",)), Source(SELECTION_TSV, ())),
                     nothing_to_judge, "an empty or preflight-only campaign uploaded")

def version_mismatch(upload: Upload, ctx: AuditContext) -> Check:
    """`version-mismatch` (versions.check_version_mismatch)."""
    return versions.check_version_mismatch(upload, ctx.clones)


def one_version(upload: Upload, ctx: AuditContext) -> Check:
    """One analysis version per harness.commit (versions.check_one_version)."""
    return versions.check_one_version(upload)


VERSION_ROWS: tuple[UploadRule, ...] = (
    UploadRule(PROVENANCE_INCOMPLETE, "one harness.commit recorded with two analysis_version "
               "values (or with and without one)",
               (Source(PROVENANCE_TXT, ("harness.commit", "analysis_version")),), one_version,
               "an upload re-stamped with another analysis version"),
    UploadRule(VERSION_MISMATCH, "(with --git-repo epcap=PATH) a table, column, provenance "
               "key or log tag of the upload the recorded commit's own code never names",
               (Source(PROVENANCE_TXT, ("harness.commit",)), Source("<evidence files>", ())),
               version_mismatch, "an upload re-stamped with a real earlier commit"),
)

# The order is the report's: the verdict's codes and rules_ran list in this order.
CATALOGUE: tuple[Row, ...] = (
    NOTHING, *basic.RULES, *cells.RULES, *selection.RULES, *rederive.RULES, *pipeline.RULES,
    *legacy.RULES, *conservation.RULES, *clocks.RULES, *timing_objects.RULES, *links.RULES,
    *launch.RULES, *hardware.RULES, *routing.RULES, *provenance.RULES, *VERSION_ROWS,
    *present.RULES, *signature.RULES, *history.RULES)

# Codes decided by a pass over the rows' checks rather than by a row: the version pass
# (versions.judge_versions, after every row) re-judges the `version_bound` rows of an upload
# made by another analysis version by that version's own audit, and says so in
# `other-version`. (code, summary), in report order after the rows.
PASSES: tuple[tuple[str, str], ...] = (
    (OTHER_VERSION, "(UNKNOWN, never INVALID) made by another analysis version and the "
                    "version-bound rows cannot be judged by its own code (no --git-repo "
                    "epcap=PATH, or the clone lacks the commit)"),
)

# What each code checks: its family (the generated docs/audit.md catalogue shows it per row).
FAMILIES: dict[str, tuple[str, ...]] = {
    "verdict": (NOTHING_TO_JUDGE,),
    "selection": (NATURAL, NO_MEASURE_VALIDATE, FABRICATED, VALIDATED_SATURATED, BELOW_PEAK,
                  TIMING_NOT_MAX, UNVALIDATED, MIXED_TIMING),
    "grid": (UNEXECUTABLE,),
    "identity": (MISSING_CELL, CELL_IDENTITY, TIMING_CELL),
    "rederivation": (INCONSISTENT, NOT_REDERIVED, INCOMPLETE, EARLIER_NOT_REDERIVED),
    "pipeline replay": (SELECTION_NOT_REDERIVED, HELD_OUT_NOT_REDERIVED, TIMING_INCOMPLETE,
                        TIMING_NOT_REDERIVED),
    "conservation": (CONSERVATION,),
    "clocks": (CLOCK_IMPOSSIBLE,),
    "timing objects": (TIMING_IMPLAUSIBLE,),
    "links": (ABOVE_LINK_LIMIT,),
    "launch": (LAUNCH_NOT_RUNBOOK,),
    "hardware": (HARDWARE_MISMATCH,),
    "routing": (ROUTING_NOT_FROM_SEED,),
    "provenance": (MISSING_PROVENANCE, RUNBOOK_ALTERED, PROVENANCE_INCOMPLETE, PREDATES,
                   COMMIT_IMPOSSIBLE),
    "missing evidence": (LFS_POINTER, MISSING_LOGS),
    "versions": (VERSION_MISMATCH, OTHER_VERSION),
    "signature": (STATEMENT_UNVERIFIED,),
    "history": (HISTORY_REWRITTEN,),
}

# Codes decided by more than one row, merged into one check (engine.merge_codes: fail, else
# unknown, else pass), each with why two rows and not one. Any other shared code is a
# duplicate rule (tests/unit/test_audit_catalogue.py fails on it).
MERGED: dict[str, str] = {
    MISSING_CELL: "the tables' cell_dir (a table rule) and events.jsonl's finished cells (a "
                  "rule over the upload's events) are two evidences of one lie: a cell that "
                  "ran and is not in the upload",
    PROVENANCE_INCOMPLETE: "provenance.txt's required keys (with the runbook's repositories) "
                           "and the form of its repo.<name> lines (every covering file): one "
                           "claim, that provenance says what the harness writes; and one "
                           "analysis_version per harness.commit (a commit has one)",
}

# Columns rows are matched by (which row, which cell, which pair), not judged: two rules
# reading them do not judge the same thing.
KEYS = frozenset({"model", "backend", "purpose", "attempt", "cell_dir", "campaign"})

# What a row judges beyond its sources' columns: a row that reads the cells, logs or files
# (its `Source` names a table with no columns, so that an older upload without the column is
# not made UNKNOWN) states here the evidence it judges, (table or file, column or key).
TIMING_OBJECT = "[EPCAP_TIMING]"
RANK_LOGS = "rank*.log"
JUDGES: dict[str, tuple[tuple[str, str], ...]] = {
    CONSERVATION: tuple((RANK_LOGS, c) for c in ("actual_valid_recv", "expected_recv",
                                                 "budget")),
    CLOCK_IMPOSSIBLE: (("capacity_attempts.tsv", "started_utc"),
                       ("capacity_attempts.tsv", "finished_utc"),
                       ("capacity_attempts.tsv", "wall_s"), ("cell.json", "launcher.wall_s"),
                       ("events.jsonl", "t"), ("events.jsonl", "mono")),
    TIMING_IMPLAUSIBLE: tuple((TIMING_OBJECT, c) for c in (
        "dispatch_ms_median", "dispatch_ms_p10", "dispatch_ms_p90", "combine_ms_median",
        "combine_ms_p10", "combine_ms_p90", "step_cv", "noise_floor_pct", "algbw_gbps",
        "peak_mem_bytes", "trials", "per_trial")),
    ABOVE_LINK_LIMIT: ((TIMING_OBJECT, "dispatch_bytes_per_rank"), (TIMING_OBJECT, "device_name"),
                       (TIMING_OBJECT, "combine_bytes_per_rank"),
                       (TIMING_OBJECT, "dispatch_ms_median"), (TIMING_OBJECT, "combine_ms_median"),
                       ("timing.tsv", "link_gbps"), ("timing.tsv", "dispatch_gbps"),
                       ("timing.tsv", "combine_gbps"), ("provenance.txt", "gpu.model")),
    LAUNCH_NOT_RUNBOOK: (("cell.json", "argv"), (TIMING_OBJECT, "modelled_peak_mem_bytes")),
    HARDWARE_MISMATCH: (("[EPCAP_RANK]", "host"), ("[EPCAP_RANK]", "device"),
                        ("[EPCAP_RANK]", "world"), ("provenance.txt", "hostnames"),
                        ("provenance.txt", "gpu.model"),
                        ("provenance.txt", "gpu.count"), ("cell.json", "ntasks"),
                        ("cell.json", "nodes"), (TIMING_OBJECT, "ranks"),
                        (TIMING_OBJECT, "device_name")),
    ROUTING_NOT_FROM_SEED: tuple((RANK_LOGS, c) for c in (
        "actual_valid_recv", "pre_balance_recv", "redundant_experts")),
}

# Evidence more than one code judges, argued once per (table, column): the codes allowed to
# share it, and why they judge different things of it. A code outside the listed ones that
# judges the column fails tests/unit/test_audit_catalogue.py until it is argued here (or it
# is a duplicate rule, and goes).
OVERLAPS: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    ("capacity_attempts.tsv", "required_capacity"): (
        frozenset({FABRICATED, INCONSISTENT}),
        "fabricated: every ECHO requirement exactly 1.0 (assumed, not measured); "
        "inconsistent: one requirement against its own peak / N"),
    ("capacity_selection.tsv", "required_capacity"): (
        frozenset({FABRICATED, INCONSISTENT}),
        "as in capacity_attempts.tsv: a pattern over models against one row's arithmetic"),
    ("capacity_attempts.tsv", "capacity"): (
        frozenset({UNEXECUTABLE, MIXED_TIMING, INCONSISTENT, CELL_IDENTITY}),
        "executable for its N (grid); one timing capacity per model (time rows); the "
        "cell's cell.json/telemetry (numbers); the cell's name and argv (which cell)"),
    ("timing.tsv", "timing_capacity"): (
        frozenset({MIXED_TIMING, TIMING_CELL, EARLIER_NOT_REDERIVED}),
        "one per model across backends; the row's time cell ran at it; in the earlier "
        "layout, a time attempt ran at it"),
    ("capacity_selection.tsv", "selected_capacity"): (
        frozenset({INCONSISTENT, VALIDATED_SATURATED, TIMING_NOT_MAX, UNVALIDATED,
                   SELECTION_NOT_REDERIVED}),
        "its budget is int(capacity x N); its validate attempt did not drop; the timing "
        "capacity is the max of them; a validate attempt ran at it; the replayed pipeline "
        "selects it (the first four are the earlier layout's, n/a where the replay decides)"),
    ("capacity_selection.tsv", "peak_actual_valid_recv"): (
        frozenset({INCONSISTENT, BELOW_PEAK}),
        "a measure attempt's peak (provenance of the number) against the budget above it"),
    ("capacity_selection.tsv", "selected_budget_tokens"): (
        frozenset({INCONSISTENT, BELOW_PEAK, EARLIER_NOT_REDERIVED}),
        "int(capacity x N); at or above the peak; in the earlier layout over_provision = "
        "budget / peak"),
    ("capacity_attempts.tsv", "status"): (
        frozenset({NOT_REDERIVED, INCOMPLETE, EARLIER_NOT_REDERIVED, MISSING_LOGS}),
        "judge_run's status (with the runbook, and the earlier layout's own); whether a "
        "run counted as data has its whole grid; a status only a log gives, with no log "
        "(UNKNOWN, never INVALID)"),
    ("provenance.txt", "harness.commit"): (
        frozenset({PROVENANCE_INCOMPLETE, VERSION_MISMATCH}),
        "one analysis_version per commit (no clone needed); the commit's own code names "
        "every word of the evidence (with the clone)"),
    ("provenance.txt", "repo.<name>"): (
        frozenset({PROVENANCE_INCOMPLETE, PREDATES, COMMIT_IMPOSSIBLE}),
        "the line's form; the commit contains each errata fix; the commit could have been "
        "checked out by the run"),
    (TIMING_OBJECT, "dispatch_ms_median"): (
        frozenset({TIMING_IMPLAUSIBLE, ABOVE_LINK_LIMIT}),
        "within its quantiles and trials; bytes / median under the GPU's link limit"),
    (TIMING_OBJECT, "combine_ms_median"): (
        frozenset({TIMING_IMPLAUSIBLE, ABOVE_LINK_LIMIT}),
        "within its quantiles and trials; bytes / median under the GPU's link limit"),
    ("provenance.txt", "gpu.model"): (
        frozenset({HARDWARE_MISMATCH, ABOVE_LINK_LIMIT}),
        "the GPU the ranks state is the one provenance names; the named GPU's link limit "
        "(when the time object names none)"),
    (TIMING_OBJECT, "device_name"): (
        frozenset({HARDWARE_MISMATCH, ABOVE_LINK_LIMIT}),
        "the device the ranks state; the device whose link limit bounds the rate"),
    (RANK_LOGS, "actual_valid_recv"): (
        frozenset({CONSERVATION, ROUTING_NOT_FROM_SEED}),
        "the sum over ranks against the slots sent (a law); each count against the routing "
        "its seed regenerates"),
}


def family_of(code: str) -> str:
    """The family of a code (a `predates-fix:<id>` is `predates-fix`'s)."""
    base = PREDATES if code.startswith(PREDATES + ":") else code
    return next((f for f, codes in FAMILIES.items() if base in codes), "")


def evidence_of(row: Row) -> set[tuple[str, str]]:
    """The (table or file, column or key) pairs a row judges: its sources' columns but the
    KEYS, and what JUDGES states for its code."""
    named = {(s.table, c) for s in row.sources for c in s.columns if c not in KEYS}
    return named | set(JUDGES.get(row.code, ()))


def judged_by(rows: tuple[Row, ...] = CATALOGUE) -> dict[tuple[str, str], set[str]]:
    """Each (table, column) judged by more than one code, with the codes (a code decided by
    two rows, `MERGED`, is one rule here)."""
    codes: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        for pair in evidence_of(row):
            codes.setdefault(pair, set()).add(row.code)
    return {pair: found for pair, found in codes.items() if len(found) > 1}


def unargued(rows: tuple[Row, ...] = CATALOGUE) -> list[str]:
    """Evidence judged by codes OVERLAPS does not argue for it: each as `table: column:
    codes`."""
    return [f"{table}: {column}: {', '.join(sorted(found))}"
            for (table, column), found in sorted(judged_by(rows).items())
            if not found <= OVERLAPS.get((table, column), (frozenset(), ""))[0]]


def duplicated(rows: tuple[Row, ...] = CATALOGUE) -> list[str]:
    """Codes more than one row decides that MERGED does not argue."""
    seen: dict[str, int] = {}
    for row in rows:
        seen[row.code] = seen.get(row.code, 0) + 1
    return sorted(code for code, n in seen.items() if n > 1 and code not in MERGED)


def sources_text(row: Row) -> str:
    """A row's sources for the docs: `table: col, col` per source, `; `-joined."""
    return "; ".join(f"{s.table}" + (f": {', '.join(s.columns)}" if s.columns else "")
                     for s in row.sources)


def markdown() -> str:
    """docs/audit.md's rule catalogue: one line per row, in report order."""
    lines = ["| code | family | what it judges | reads |", "| --- | --- | --- | --- |"]
    for row in CATALOGUE:
        code = f"{row.code}:<id>" if isinstance(row, UploadRule) and row.per_fix else row.code
        kind = "" if isinstance(row, Rule) else " (upload)"
        lines.append(f"| `{code}` | {family_of(row.code)}{kind} | {row.summary} | "
                     f"{sources_text(row)} |")
    for code, summary in PASSES:
        lines.append(f"| `{code}` | {family_of(code)} (pass) | {summary} | the rows' checks |")
    return "\n".join(lines) + "\n"

