"""The audit's one catalogue (harness/audit/catalogue.py, issue 40): every check is a row the
engine applies; no two rows share a code unless `MERGED` argues it; evidence two codes judge
is argued in `OVERLAPS`; docs/audit.md's rule table and catalogue and docs/spec.md's reason
codes are the catalogue's. No campaign is built: these read code and docs only."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

from harness.audit import catalogue, engine
from harness.audit.catalogue import CATALOGUE, FAMILIES, JUDGES, MERGED, OVERLAPS, PASSES
from harness.audit.model import Rule, Source, UploadRule
from harness.audit.vocab import CLOCK_IMPOSSIBLE, REASON_CODES
from harness.results.layout import ATTEMPTS_TSV

ROOT = Path(__file__).resolve().parents[2]
AUDIT_MD = ROOT / "docs" / "audit.md"
SPEC_MD = ROOT / "docs" / "spec.md"
RULES_DIR = ROOT / "harness" / "audit" / "rules"


def doc_code(row) -> str:
    return f"{row.code}:<id>" if isinstance(row, UploadRule) and row.per_fix else row.code


def codes() -> list[str]:
    """The catalogue's codes, each once, in report order (`predates-fix:<id>` as documented)."""
    return list(dict.fromkeys([*(doc_code(r) for r in CATALOGUE), *(c for c, _ in PASSES)]))


def section(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i:text.index(end, i)]


def test_the_engine_applies_the_catalogue_and_names_no_check():
    """One door: engine.audit_upload calls no check_* function; every check is a row."""
    assert engine.RULES is CATALOGUE
    tree = ast.parse((ROOT / "harness" / "audit" / "engine.py").read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "audit_upload")
    called = {n.func.id if isinstance(n.func, ast.Name) else n.func.attr
              for n in ast.walk(fn) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Name | ast.Attribute)}
    assert not {c for c in called if c.startswith("check_")}, called


def test_every_module_rule_is_in_the_catalogue():
    """A family module's RULES not joined into the catalogue would never run."""
    import importlib
    rows = set(map(id, CATALOGUE))
    for path in sorted(RULES_DIR.glob("*.py")):
        module = importlib.import_module(f"harness.audit.rules.{path.stem}")
        for row in getattr(module, "RULES", ()):
            assert id(row) in rows, (path.name, row.code)


def test_every_module_that_holds_rules_has_rows():
    """No family module holds `RULES = ()`: a helper module is named by what it holds."""
    for path in sorted(RULES_DIR.glob("*.py")):
        assert "RULES: tuple[Rule, ...] = ()" not in path.read_text(encoding="utf-8"), path.name


def test_codes_are_reason_codes_and_every_reason_code_has_a_row():
    assert set(codes()) == set(REASON_CODES)


def test_every_code_has_one_family():
    for row in CATALOGUE:
        homes = [f for f, cs in FAMILIES.items() if row.code in cs]
        assert len(homes) == 1, (row.code, homes)
    assert {c for cs in FAMILIES.values() for c in cs} == \
        {r.code for r in CATALOGUE} | {c for c, _ in PASSES}


def test_no_two_rows_share_a_code_unless_merged():
    assert catalogue.duplicated() == []
    assert all(sum(r.code == code for r in CATALOGUE) > 1 for code in MERGED), "stale MERGED"


def test_a_duplicated_code_is_flagged():
    """The recipe's slip: a second row of `clock-impossible` (seen passing unnoticed)."""
    clocks = next(r for r in CATALOGUE if r.code == CLOCK_IMPOSSIBLE)
    again = replace(clocks, summary="an attempt finished before it started")
    assert catalogue.duplicated((*CATALOGUE, again)) == [CLOCK_IMPOSSIBLE]


def test_no_unargued_overlap():
    assert catalogue.unargued() == []


def test_every_argued_overlap_is_still_one():
    """An OVERLAPS entry no two codes judge any more is stale."""
    shared = catalogue.judged_by()
    for key, (allowed, why) in OVERLAPS.items():
        assert key in shared and shared[key] <= allowed and why, key


def test_a_new_rule_on_judged_evidence_is_flagged():
    """A rule under a new code that judges what clock-impossible judges fails until argued."""
    check = next(r for r in CATALOGUE if r.code == CLOCK_IMPOSSIBLE).check
    new = Rule("clock-reversed", "an attempt finished before it started",
               (Source(ATTEMPTS_TSV, ("started_utc", "finished_utc")),), False, check)
    got = catalogue.unargued((*CATALOGUE, new))
    assert got == [f"{ATTEMPTS_TSV}: finished_utc: clock-impossible, clock-reversed",
                   f"{ATTEMPTS_TSV}: started_utc: clock-impossible, clock-reversed"]


def test_judges_names_catalogue_codes():
    assert set(JUDGES) <= {r.code for r in CATALOGUE}


def test_audit_md_carries_the_catalogue_as_generated():
    assert catalogue.markdown() in AUDIT_MD.read_text(encoding="utf-8")


def test_audit_md_rule_table_is_the_catalogue_in_order():
    """docs/audit.md's one line per reason code: every code of the catalogue once, in the
    catalogue's order, and none other."""
    table = section(AUDIT_MD.read_text(encoding="utf-8"), "One line per reason code",
                    "Each rule is data")
    assert re.findall(r"^\| `([^`]+)` \|", table, re.M) == codes()


def test_spec_md_lists_every_reason_code():
    """docs/spec.md#audit-rules names every code of the catalogue and no other."""
    text = section(SPEC_MD.read_text(encoding="utf-8"), "## Audit rules", "## Command line")
    documented = set(re.findall(r"`([a-z]+(?:-[a-z]+)+(?::<id>)?)`", text))
    assert documented == set(codes())


def test_rules_readme_lists_every_module():
    """rules/README.md's family table names each module of rules/ (apply.py aside), and no
    module that is not there."""
    text = (RULES_DIR / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([a-z_]+\.py)` \|", text, re.M))
    assert listed == {p.name for p in RULES_DIR.glob("*.py")} - {"__init__.py", "apply.py"}
