"""The vocabulary lives in harness/vocab.py: no status, purpose, stage or launcher-state
string literal appears in harness/ or backends/ outside it, except the listed words that
mean something else there (a YAML or JSON key, a field name, the health probe's status)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from harness.vocab import LauncherState, Purpose, Stage, Status

ROOT = Path(__file__).resolve().parents[2]
WORDS = set(Status.values()) | set(Purpose.values()) | set(Stage.values()) | set(
    LauncherState.values())
# (file, word): why the literal is not the vocabulary word
ALLOWED = {
    ("harness/runbook/load.py", "measure"): "the runbook's `measure:` section and capacity key",
    ("harness/runbook/checks.py", "measure"): "the runbook's `capacity.measure` key",
    ("harness/runbook/load.py", "validate"): "the runbook's `validate:` section (seed, iters)",
    ("harness/runbook/load.py", "frontier"): "the runbook's `frontier:` section (rungs)",
    ("harness/campaign/ladder.py", "frontier"): "the runbook key a ladder step leaves out",
    ("harness/grid/selection.py", "lower_bound"): "the LogSummary field of that name",
    ("harness/telemetry/cli.py", "lower_bound"): "a key of `epcap parse --json`",
    ("harness/health.py", "ok"): "the health probe's own status (ok | unhealthy | no-gpu)",
    ("harness/results/retries.py", "infra"): "the RetryBudget field of that name",
    ("harness/results/retries.py", "unclassified"): "the RetryBudget field of that name",
    ("harness/runbook/load.py", "unclassified"): "the runbook's `limits.unclassified` key",
    ("harness/io/boundary/events.py", "ok"): "the `ok` field of an event record (a flag)",
    ("harness/io/boundary/tools.py", "timeout"): "why a tool's capture stopped (timeout | flood)",
    ("harness/results/layout.py", "report"): "the report's folder name, results/<c>/report",
    ("harness/publish/hub.py", "timeout"): "httpx's per-request `timeout` extension key",
    ("harness/audit/versions.py", "harness"): "the package folder harness/ of an epcap checkout",
    ("harness/launch/forkserver.py", "harness"): "the fork server protocol's exit-reply key",
    ("harness/launch/local.py", "harness"): "the ForkedProcess attribute of that name",
}


def literals() -> set[tuple[str, str]]:
    found = set()
    for path in list((ROOT / "harness").rglob("*.py")) + list((ROOT / "backends").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "harness/vocab.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value in WORDS and id(node) not in docstrings):
                found.add((rel, node.value))
    return found


def test_no_vocabulary_literal_outside_vocab():
    stray = literals() - set(ALLOWED)
    assert not stray, f"use harness.vocab for: {json.dumps(sorted(stray))}"
