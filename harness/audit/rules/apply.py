"""Running a row of the catalogue over an upload: `apply_row` runs either kind of row;
`apply_rule` reads a table rule's sources and folds their checks (INVALID beats UNKNOWN beats
VALID); an `UploadRule` is called with the upload and the audit context."""

from __future__ import annotations

from dataclasses import fields, replace
from functools import partial

from harness.audit.model import (
    FAIL,
    NOT_APPLICABLE,
    PASS,
    UNKNOWN,
    AuditContext,
    Check,
    Row,
    Rule,
    Table,
    Upload,
    UploadRule,
    first,
    norm,
    readable,
    unreadable,
)
from harness.results.layout import ATTEMPTS_TSV
from harness.results.rows import ROW_TYPES
from harness.vocab import Status

# the words a column holds (harness.vocab): another word is none epcap writes, so no rule
# may judge the row as if it were one it knows (a status wrapped in terminal escapes, a
# later version's new class): it is unreadable, the rules reading it UNKNOWN. `purpose` has
# none: the earlier campaign's `natural` rows are what natural-selection must still read
VOCABULARY: dict[tuple[str, str], tuple[str, ...]] = {
    (ATTEMPTS_TSV, "status"): tuple(Status),
}


def blank_unreadable(upload: Upload) -> None:
    """One treatment of unreadable evidence, for every rule: an evidence cell whose value is
    not of its row field's type (harness/results/rows.py), or not a word of its column's
    VOCABULARY, is taken out (read as not stated) and recorded with file, line and field; a
    rule reading that table is then UNKNOWN unless other evidence fails it. Done once per
    table."""
    from harness.audit.evidence import evidence_columns
    for table in upload.tables.values():
        if table.blanked is not None:
            continue
        table.blanked = {}
        row_type = ROW_TYPES.get(table.name)
        if row_type is None:
            continue
        kinds = {f.name: str(f.type).replace(" | None", "") for f in fields(row_type)}
        columns = [c for c in evidence_columns(table.name) if c in table.columns]
        for row in table.rows:
            for column in columns:
                words = VOCABULARY.get((table.name, column))
                value = row.get(column)
                if not readable(value, kinds.get(column, "")):
                    table.blanked[(row.line, column)] = unreadable(table, row, column,
                                                                   kinds[column])
                    row.values[column] = ""
                elif words is not None and value and norm(value) not in words:
                    table.blanked[(row.line, column)] = unreadable(
                        table, row, column, f"a {column} epcap writes: {', '.join(words)}")
                    row.values[column] = ""


def blanked(table: Table, row: Row, column: str) -> bool:
    """Was this cell taken out as unreadable (blank_unreadable)?"""
    return bool(table.blanked) and (row.line, column) in table.blanked


def apply_rule(rule: Rule, upload: Upload) -> Check:
    """Run a rule over every usable source.

    A present table that cannot be read, has malformed rows or unreadable evidence values
    leaves the rule UNKNOWN (file, line, field) unless some source fails it; a source
    lacking a column is skipped when another decides (every source must be read for an
    `all_sources` rule).
    """
    blank_unreadable(upload)
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
        if table.blanked and check.state in (PASS, NOT_APPLICABLE):
            check = Check(rule.code, UNKNOWN, [first(list(table.blanked.values()))])
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


def combine(code: str, checks: list[Check]) -> Check:
    """Several checks of one code as one: fail, else unknown, else pass, else n/a."""
    for state in (FAIL, UNKNOWN, PASS, NOT_APPLICABLE):
        same = [w for c in checks if c.state == state for w in c.why]
        if any(c.state == state for c in checks):
            return Check(code, state, same)
    return Check(code, NOT_APPLICABLE, ["nothing to check"])


def expand(rows: tuple[Rule | UploadRule, ...], errata) -> tuple[Rule | UploadRule, ...]:
    """The rows as run against one errata registry: a `per_fix` row becomes one row per fix
    (its code the fix's `predates-fix:<id>`, its check given the fix), in registry order."""
    out: list[Rule | UploadRule] = []
    for row in rows:
        if isinstance(row, UploadRule) and row.per_fix:
            out += [replace(row, code=fix.code, per_fix=False, check=partial(row.check, fix=fix))
                    for fix in (errata.fixes if errata is not None else ())]
        else:
            out.append(row)
    return tuple(out)


def apply_row(row: Rule | UploadRule, upload: Upload, ctx: AuditContext) -> Check:
    """One row of the catalogue over an upload: a table rule through `apply_rule`, a rule over
    the whole upload called with the context (after the one treatment of unreadable values,
    which every table rule shares)."""
    if isinstance(row, Rule):
        return apply_rule(row, upload)
    blank_unreadable(upload)
    return row.check(upload, ctx)
