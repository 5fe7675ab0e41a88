"""The report opens with a narrow summary (the summary table right after the header), every
line of it at most 100 characters, and embeds the audit verdict with the hash of the evidence
files it judged, which changes with any byte of them, beside the shell command that
recomputes it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.audit.evidence import digest_command, evidence_digest
from harness.report.build import render_report
from harness.report.narrow import REPORT_WIDTH
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON, SELECTION_TSV, TIMING_TSV

from .conftest import run_cli


@pytest.mark.slow
def test_summary_first_narrow_and_audit_hash(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run_cli("run", tiny, "--results", results, timeout_s=120).code == 0
    root = results / "tiny"
    text = (render_report(root).out / "report.md").read_text()
    sections = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert sections[:2] == ["## Answers", "## Summary"], sections[:3]   # the answers open it
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "| QWEN3_30B" in summary
    assert max(map(len, summary.splitlines())) <= 100
    # the whole report, not only its summary, reads in `less` (failed before narrow.py)
    assert max(map(len, text.splitlines())) <= REPORT_WIDTH, max(text.splitlines(), key=len)
    digest = evidence_digest(root)
    assert f"Judged: {digest}" in text
    command = text.split(f"Judged: {digest}", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert run_printed(command, root) == digest


def run_printed(command: str, root: Path) -> str:
    """The hash the report's printed command prints, run by bash in the results directory."""
    done = subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, text=True,
                          check=True, env={**os.environ, "LC_ALL": "C"})
    return done.stdout.split()[0]


def test_printed_command_recomputes_the_digest(tmp_path):
    """digest_command (coreutils only) prints evidence_digest on a results directory holding
    nested cells, names with a space and a backslash, a hidden folder, a link and files that
    are no evidence (both left out by each); a changed, added or removed evidence file
    changes both (seen failing with the earlier digest, which no shell command gave)."""
    root = tmp_path / "r"
    for rel in (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, "cells/a b/" + CELL_JSON,
                "cells/a b/rank0.log", "cells/c\\d/rank1.log", "step/cells/x/node0.out",
                "models.yaml", ".hidden/rank0.log", "cells/a b/.rank9.log", "notes.txt",
                "cells/a b/routing_trace.jsonl"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(f"{rel}\n".encode())
    (root / "cells/link.log").symlink_to(root / ATTEMPTS_TSV)
    command = "\n".join(digest_command())
    first = evidence_digest(root)
    assert run_printed(command, root) == first
    (root / "notes.txt").write_text("changed, no evidence\n")
    (root / ".hidden/rank0.log").write_text("changed, hidden\n")
    assert evidence_digest(root) == first
    for change in (lambda: (root / "cells/a b/rank0.log").write_text("x\n"),
                   lambda: (root / "cells/new.err").write_text("y\n"),
                   lambda: (root / "models.yaml").unlink()):
        change()
        now = evidence_digest(root)
        assert now != first and run_printed(command, root) == now
        first = now


JUDGED = (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, "cells/c/" + CELL_JSON, "cells/c/rank0.log")


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(JUDGED), at=st.floats(0, 1), byte=st.integers(0, 255))
def test_judged_digest_changes_with_any_byte(tmp_path_factory, name, at, byte):
    root = tmp_path_factory.mktemp("j")
    for n in JUDGED:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_bytes(f"campaign\tmodel\n{n}\tM\n".encode())
    before = evidence_digest(root)
    data = bytearray((root / name).read_bytes())
    i = min(int(at * len(data)), len(data) - 1)
    if data[i] == byte:
        byte = (byte + 1) % 256
    data[i] = byte
    (root / name).write_bytes(bytes(data))
    assert evidence_digest(root) != before
    (root / name).unlink()
    assert evidence_digest(root) not in (before,)
    shutil.rmtree(root)
