"""The `unclassified` policy end to end with the reference backend (docs/campaign.md#failure-taxonomy-harnesstaxonomyjudgepy):
a measure cell whose ranks print their first iteration's rows and exit 1 saying nothing is
`unclassified`; once, it is retried and the campaign completes, and the audit's replay of
the upload (the driver's own retry rule) judges it VALID; twice, the campaign stops for a
person (exit 3, naming `epcap classify --explain <cell dir>`), and `--retry unclassified`
reruns it to a VALID upload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.events import read_events

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "reliability" / "fixtures"
EPCAP = [sys.executable, "-m", "harness.cli"]
MEASURE = "QWEN3_30B__echo__measure__cap2p00__a{}"

# Imported by every Python process the cells start (PYTHONPATH): in a cell named in the
# `silent` file, the ranks exit 1 saying nothing when they reach their second iteration's
# first row (after the first iteration's rows): failed after rows, no signature.
SITECUSTOMIZE = """
import os, sys
_cell = os.path.basename(os.environ.get("EPCAP_CELL_DIR", ""))
_names = os.path.join(os.path.dirname(__file__), "silent")
if _cell and os.path.exists(_names) and _cell in open(_names).read().split():
    class _Silent:
        def __init__(self, stream):
            self._stream = stream
        def write(self, text):
            if "[MOE_DROP_DEBUG][dispatch] iter=1 " in text:
                self._stream.flush()
                os._exit(1)
            return self._stream.write(text)
        def __getattr__(self, name):
            return getattr(self._stream, name)
    sys.stdout = _Silent(sys.stdout)
"""


def epcap(env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*EPCAP, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=env)


def setup(tmp_path: Path, silent: list[str]) -> tuple[dict, Path, Path]:
    """(env with the plant, the runbook (one timing launch), the results root)."""
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (plant / "silent").write_text("\n".join(silent) + "\n")
    book = tmp_path / "book"
    book.mkdir()
    (book / "models.yaml").write_text((TINY / "models.yaml").read_text())
    text = (TINY / "tiny.yaml").read_text().replace("trials: 2}", "trials: 2, launches: 1}")
    assert "launches: 1" in text
    (book / "tiny.yaml").write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plant), str(ROOT)])}
    return env, book / "tiny.yaml", tmp_path / "res"


def finished(camp: Path) -> dict[str, str]:
    return {e["cell"]: e["status"] for e in read_events(camp / "events.jsonl")
            if e["ev"] == "cell_finish"}


def audit_verdicts(env: dict, camp: Path) -> list[str]:
    res = epcap(env, "audit", camp, "--json")
    return [u["verdict"] for u in json.loads(res.stdout)["uploads"]], res.stdout


@pytest.mark.slow
def test_unclassified_once_is_retried_and_the_audit_replays_it(tmp_path):
    env, book, results = setup(tmp_path, [MEASURE.format(1)])
    run = epcap(env, "run", book, "--results", results)
    camp = results / "tiny"
    assert run.returncode == 0, run.stdout + run.stderr
    done = finished(camp)
    assert done[MEASURE.format(1)] == "unclassified", done
    assert done[MEASURE.format(2)] == "ok", done
    verdicts, text = audit_verdicts(env, camp)
    assert verdicts == ["VALID"], text


@pytest.mark.slow
def test_unclassified_twice_stops_then_retry_reruns_it(tmp_path):
    env, book, results = setup(tmp_path, [MEASURE.format(1), MEASURE.format(2)])
    run = ("run", book, "--results", results)
    camp = results / "tiny"
    stop = epcap(env, *run)
    cell = camp / "cells" / MEASURE.format(2)
    assert stop.returncode == 3, stop.stdout + stop.stderr
    assert f"`epcap classify --explain {cell}`" in stop.stderr, stop.stderr
    explain = epcap(env, "classify", "--explain", cell)
    assert explain.returncode == 0 and "unclassified" in explain.stdout, explain.stdout
    (tmp_path / "plant" / "silent").write_text("")
    retry = epcap(env, *run, "--retry", "unclassified")
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert finished(camp)[MEASURE.format(3)] == "ok"
    verdicts, text = audit_verdicts(env, camp)
    assert verdicts == ["VALID"], text
