"""The report opens with a narrow summary (the summary table right after the header), every
line of it at most 100 characters, and embeds the audit verdict with the hash of the TSVs it
judged, which changes with any byte of them."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.report.build import render_report
from harness.report.narrow import REPORT_WIDTH
from harness.report.sections.audit import JUDGED, judged_digest

from .conftest import run_cli


@pytest.mark.slow
def test_summary_first_narrow_and_audit_hash(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run_cli("run", tiny, "--results", results, timeout_s=120).code == 0
    root = results / "tiny"
    text = (render_report(root).out / "report.md").read_text()
    sections = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert sections[0] == "## Summary", sections[:3]
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "| QWEN3_30B" in summary
    assert max(map(len, summary.splitlines())) <= 100
    # the whole report, not only its summary, reads in `less` (failed before narrow.py)
    assert max(map(len, text.splitlines())) <= REPORT_WIDTH, max(text.splitlines(), key=len)
    assert f"Judged: {judged_digest(root)}" in text


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(JUDGED), at=st.floats(0, 1), byte=st.integers(0, 255))
def test_judged_digest_changes_with_any_byte(tmp_path_factory, name, at, byte):
    root = tmp_path_factory.mktemp("j")
    for n in JUDGED:
        (root / n).write_bytes(f"campaign\tmodel\n{n}\tM\n".encode())
    before = judged_digest(root)
    data = bytearray((root / name).read_bytes())
    i = min(int(at * len(data)), len(data) - 1)
    if data[i] == byte:
        byte = (byte + 1) % 256
    data[i] = byte
    (root / name).write_bytes(bytes(data))
    assert judged_digest(root) != before
    (root / name).unlink()
    assert judged_digest(root) not in (before,)
    shutil.rmtree(root)
