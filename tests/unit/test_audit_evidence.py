"""The evidence map (harness/audit/evidence.py, issue 23): every column of every TSV the
harness writes has an entry, every entry names a known kind and a documented reason code, and
docs/audit.md carries the map as generated."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.audit import evidence
from harness.audit.vocab import REASON_CODES
from harness.results.layout import ATTEMPTS_TSV, COMPARISON_TSV, SELECTION_TSV, TIMING_TSV
from harness.results.rows import (
    ATTEMPT_COLUMNS,
    COMPARISON_COLUMNS,
    SELECTION_COLUMNS,
    TIMING_COLUMNS,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit.md"
TABLES = {ATTEMPTS_TSV: ATTEMPT_COLUMNS, SELECTION_TSV: SELECTION_COLUMNS,
          TIMING_TSV: TIMING_COLUMNS, COMPARISON_TSV: COMPARISON_COLUMNS}


def missing_entries(emap: dict) -> list[str]:
    """Columns of harness/results/rows.py with no entry in a map."""
    return [f"{t}:{c}" for t, cols in TABLES.items() for c in cols if c not in emap.get(t, {})]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_column_has_an_entry(table):
    assert missing_entries(evidence.EVIDENCE) == []
    assert set(evidence.EVIDENCE[table]) >= set(TABLES[table])


def test_a_column_without_an_entry_fails():
    """The check above catches a map that lost a column (seen failing)."""
    emap = {t: dict(e) for t, e in evidence.EVIDENCE.items()}
    del emap[SELECTION_TSV]["over_provision"]
    assert missing_entries(emap) == [f"{SELECTION_TSV}:over_provision"]


def test_entries_name_known_kinds_and_codes():
    codes = set(REASON_CODES)
    for table, entries in evidence.EVIDENCE.items():
        for column, e in entries.items():
            assert e.kind in evidence.KINDS, (table, column)
            if e.kind in evidence.EVIDENCE_KINDS:
                assert e.code in codes, (table, column, e.code)
            else:
                assert e.code == "", (table, column)


def test_rederived_attempt_columns_are_the_rules_columns():
    cols = evidence.rederived_columns(ATTEMPTS_TSV)
    assert {"status", "rows", "saturated_rows", "peak_actual_valid_recv",
            "required_capacity", "budget_tokens", "uniform_tokens"} <= set(cols)


def test_docs_carry_the_map_as_generated():
    assert evidence.markdown() in DOC.read_text(encoding="utf-8")


def test_docs_carry_the_evidence_files_as_generated():
    assert evidence.files_markdown() in DOC.read_text(encoding="utf-8")


def test_the_evidence_files_cover_what_the_readers_open():
    """Every name the loaders and rules open is matched by the list (the fetch list)."""
    from harness.results.layout import (
        CAMPAIGN_JSON,
        CELL_JSON,
        EVENTS_JSONL,
        PROVENANCE_TXT,
        RUNBOOK_YAML,
        TIMING_LAUNCHES_TSV,
    )
    names = [*TABLES, TIMING_LAUNCHES_TSV, CAMPAIGN_JSON, EVENTS_JSONL, PROVENANCE_TXT,
             RUNBOOK_YAML, "models.yaml"]
    cells = [CELL_JSON, PROVENANCE_TXT, "rank0.log", "rank10.log", "node1.log",
             "slurm-123.out", "slurm-123.err", "health0.log"]
    paths = [f"c/{n}" for n in names] + [f"c/cells/M__b__measure__cap2p00__a1/{n}"
                                         for n in cells]
    assert [p for p in paths if not evidence.is_evidence(p)] == []
