"""The analysis version: one constant, its changelog, and every provenance.txt records it."""

from __future__ import annotations

import re
from pathlib import Path

from harness.pipeline.version import ANALYSIS_VERSION, PROVENANCE_KEY
from harness.results.provenance import capture_provenance

CHANGELOG = Path(__file__).resolve().parents[2] / "docs" / "analysis-versions.md"


def test_constant_is_the_newest_changelog_entry():
    entries = [int(n) for n in re.findall(r"^## (\d+)\s*$", CHANGELOG.read_text(), re.M)]
    assert entries, "docs/analysis-versions.md has no `## N` entry"
    assert entries == sorted(entries, reverse=True), "newest entry first"
    assert entries[0] == ANALYSIS_VERSION


def test_capture_records_it_beside_harness_commit():
    fields = capture_provenance(["epcap", "run"], {}, analysis_version=ANALYSIS_VERSION)
    keys = list(fields)
    assert fields[PROVENANCE_KEY] == str(ANALYSIS_VERSION)
    assert keys.index(PROVENANCE_KEY) == keys.index("harness.dirty") + 1
    assert PROVENANCE_KEY not in capture_provenance(["x"], {})     # only where it is given
