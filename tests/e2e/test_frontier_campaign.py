"""The capacity frontier end to end (docs/frontier.md): a one-model, two-backend campaign with
`frontier: {rungs: 2}`; frontier.tsv recomputed with pandas from the cells' own evidence
(their [EPCAP_TIMING] lines, the validate runs' recorded step peaks, capacity_attempts.tsv)
by code independent of the frontier step; the campaign audits VALID and an edited
frontier.tsv does not."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta

REPO = Path(__file__).resolve().parents[2]
REDUCED = REPO / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
pytestmark = pytest.mark.slow
RUNGS = 2


def epcap(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def frontier_runbook_text() -> str:
    """The reduced fixture cut to one model and its two select backends, one timing launch,
    plus the frontier."""
    lines = [ln for ln in REDUCED.read_text().splitlines()
             if "DEEPSEEK_V2_LITE" not in ln and "name: moonep" not in ln]
    text = "\n".join(lines) + f"\nfrontier: {{rungs: {RUNGS}}}\n"
    text = text.replace("launches: 2}", "launches: 1}")
    text = text.replace("../../../runbooks/models.yaml", str(REPO / "runbooks" / "models.yaml"))
    return text.replace("{epcap: ../../..}", "{epcap: " + str(REPO) + "}")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("frontier")
    (base / "f.yaml").write_text(frontier_runbook_text())
    run = epcap("run", str(base / "f.yaml"), "--results", str(base / "results"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (root,) = [p.parent for p in (base / "results").rglob("frontier.tsv")]
    return root


def tsv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)


def timing_line(cell: Path) -> dict:
    """The cell's [EPCAP_TIMING] object, read from its logs with a regex."""
    for log in sorted(cell.glob("*.log")):
        for match in re.finditer(r"\[EPCAP_TIMING\] (\{.*\})", log.read_text()):
            return json.loads(match.group(1))
    raise AssertionError(f"no timing line in {cell}")


def finished(root: Path) -> pd.DataFrame:
    events = [json.loads(ln) for ln in (root / "events.jsonl").read_text().splitlines()]
    return pd.DataFrame([e for e in events if e["ev"] == "cell_finish"])


def test_frontier_recomputed_with_pandas(campaign: Path):
    front = tsv(campaign / "frontier.tsv")
    assert len(front) == 2 * (2 * RUNGS + 1)
    assert check_frontier(campaign, RUNGS) == len(front)
    for _, rows in front.groupby(["model", "backend"], sort=False):
        assert rows.iloc[0]["status"] == "drops"      # two rungs below the peak clip


def check_frontier(campaign: Path, rungs: int) -> int:
    """frontier.tsv recomputed with pandas from the campaign's cells, events and tables (each
    pair's `rungs` rungs each side, 128 slots apart); the number of rows checked. Also run by
    tests/benchmarks/bench_campaign_curves.py on runbooks/local-cpu-curves.yaml's campaign."""
    front, sel = tsv(campaign / "frontier.tsv"), tsv(campaign / "capacity_selection.tsv")
    att = tsv(campaign / "capacity_attempts.tsv")
    fin = finished(campaign)
    labels = [f"{i:+d}" if i else "0" for i in range(-rungs, rungs + 1)]
    checked = 0
    for (model, backend), rows in front.groupby(["model", "backend"], sort=False):
        s = sel[(sel.model == model) & (sel.backend == backend)].iloc[0]
        n = int(s["uniform_tokens"])
        cap = rows["capacity"].astype(float)
        budgets = (cap * n).astype(int)
        # the rungs: consecutive budgets one pad multiple (128) apart, rung 0 the selection
        assert list(rows["rung"]) == labels, (model, backend, list(rows["rung"]))
        assert list(np.diff(budgets)) == [128] * (2 * rungs)
        assert list(budgets) == [int(x) for x in rows["budget_tokens"]]
        zero = rows[rows.rung == "0"].iloc[0]
        assert zero["capacity"] == s["selected_capacity"] and zero["selected"] == "true"
        assert list(rows["selected"]) == ["true" if r == "0" else "false" for r in rows.rung]
        peak = int(s["peak_actual_valid_recv"])
        assert np.allclose(rows["over_provision"].astype(float), budgets / peak, rtol=1e-6)
        # each rung's launch: a frontier attempt at that capacity; its figures from its logs
        mine = att[(att.model == model) & (att.backend == backend) & (att.purpose == "frontier")]
        assert list(mine["capacity"]) == list(rows["capacity"])
        for (_, row), (_, a) in zip(rows.iterrows(), mine.iterrows(), strict=True):
            assert row["status"] == a["status"] and row["cell_dir"] == a["cell_dir"]
            t = timing_line(campaign / a["cell_dir"])
            for phase in ("dispatch", "combine"):
                medians = [tr[f"{phase}_ms_median"] for tr in t["per_trial"]]
                want = [np.median(medians), np.quantile(medians, 0.1), np.quantile(medians, 0.9)]
                got = [float(row[f"{phase}_ms_{q}"]) for q in ("median", "p10", "p90")]
                assert np.allclose(got, want, rtol=1e-5), (row["cell_dir"], phase, got, want)
            assert int(row["peak_mem_bytes"]) == t["peak_mem_bytes"]
            assert int(row["trials"]) == len(t["per_trial"])
            # dropped slots: the run's own summary; drops only where the launch says so
            ev = fin[fin.cell == Path(a["cell_dir"]).name].iloc[-1]
            assert int(row["dropped_slots"]) == ev["summary"]["dropped_slots"]
            assert (int(row["dropped_slots"]) > 0) == (row["status"] == "drops")
        # held-out drop risk: the last validate run's recorded step peaks
        val = fin[(fin.model == model) & (fin.backend == backend) & (fin.purpose == "validate")]
        peaks = np.array(val.iloc[-1]["steps"]["peaks"])
        steps = len(peaks)
        for _, row in rows.iterrows():
            j = int((peaks > int(row["budget_tokens"])).sum())
            bound = 1 - 0.05 ** (1 / steps) if j == 0 else (
                1.0 if j == steps else beta.ppf(0.95, j + 1, steps - j))
            assert int(row["heldout_dropped_steps"]) == j and int(row["heldout_steps"]) == steps
            assert float(row["drop_risk_95"]) == pytest.approx(bound, rel=1e-5)
        # monotone in capacity, and rung 0's figures are capacity_selection.tsv's
        for column in ("drop_risk_95", "predicted_drop_risk", "predicted_drop_risk_hi"):
            values = [float(v) for v in rows[column] if v]
            assert values == sorted(values, reverse=True), (column, values)
            assert zero[column] == s[column], column
        checked += len(rows)
    return checked


def test_the_campaign_audits_valid_and_an_edited_frontier_does_not(campaign: Path, tmp_path):
    ok = epcap("audit", str(campaign))
    assert "VALID=1 INVALID=0 UNKNOWN=0" in ok.stdout, ok.stdout[-3000:]
    lie = tmp_path / "lie"
    shutil.copytree(campaign, lie)
    front = tsv(lie / "frontier.tsv")
    front.loc[front.rung == "-1", "drop_risk_95"] = "0.01"   # a rung made to look safe
    front.to_csv(lie / "frontier.tsv", sep="\t", index=False)
    bad = epcap("audit", str(lie))
    assert "INVALID=1" in bad.stdout and "frontier.tsv" in bad.stdout, bad.stdout[-3000:]


def test_the_report_draws_the_frontier(campaign: Path):
    text = (campaign / "report" / "report.md").read_text()
    assert "## Capacity frontier" in text
    assert (campaign / "report" / "fig6_frontier_QWEN3_30B.png").stat().st_size > 10_000


def test_a_frontier_run_the_pipeline_never_asks_for_is_named(campaign: Path, tmp_path):
    """A frontier cell beyond the rungs (a copy of the last one as a further attempt) is a
    run no replayed request answers: the audit names it under timing-not-rederived."""
    extra = tmp_path / "extra"
    shutil.copytree(campaign, extra)
    last = sorted((extra / "cells").glob("QWEN3_30B__echo__frontier__*"))[-1]
    shutil.copytree(last, last.with_name(re.sub(r"__a\d+$", "__a9", last.name)))
    bad = epcap("audit", str(extra))
    assert "a frontier run the pipeline never asks for" in bad.stdout, bad.stdout[-3000:]


def test_resume_with_fewer_then_more_rungs_keeps_the_table_and_the_audit_consistent(
        campaign: Path, tmp_path):
    """`frontier.rungs` lowered on resume (2 -> 1): no run, the outer rungs' cells are taken
    out (a cells_invalidated event naming exactly them), frontier.tsv holds rungs -1..+1 and
    the audit says VALID; raised again (1 -> 2): only the two outer rungs of each pair run
    (as new attempts, replayed by capacity, not position) and the audit says VALID.
    Seen red: before the fix the lowered resume of the done campaign said "done; nothing to
    run" and kept frontier.tsv's rungs -2..+2; without the invalidation no cells_invalidated
    event was written (gone == []); with the audit's positional replay the raised resume
    audited INVALID (contradicted: the first rung cell left ran at rung -1 where the
    pipeline asks rung -2; a frontier stop was not counted before, and hid the time step)."""
    results = tmp_path / "results"
    shutil.copytree(campaign.parent, results)
    root = results / campaign.name
    book = tmp_path / "f.yaml"
    first = tsv(campaign / "frontier.tsv")
    outer_caps = set(first[first.rung.isin(["-2", "+2"])].capacity)
    assert len(outer_caps) >= 2
    for rungs, expected in ((1, ["-1", "0", "+1"]), (RUNGS, ["-2", "-1", "0", "+1", "+2"])):
        before = len(finished(root))
        book.write_text(frontier_runbook_text().replace(f"rungs: {RUNGS}", f"rungs: {rungs}"))
        run = epcap("run", str(book), "--results", str(results))
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        front = tsv(root / "frontier.tsv")
        for _, rows in front.groupby("backend"):
            assert list(rows["rung"]) == expected
        events = [json.loads(ln) for ln in (root / "events.jsonl").read_text().splitlines()]
        gone = [c for e in events if e["ev"] == "cells_invalidated" for c in e["cells"]]
        done = finished(root)
        outer = set(done[(done.purpose == "frontier") & done.capacity.isin(outer_caps)].cell)
        if rungs == 1:
            assert len(finished(root)) == before and sorted(gone) == sorted(outer)
            assert len(gone) == 4
        else:
            assert len(finished(root)) == before + 4       # the four outer rungs, again
        audit = epcap("audit", str(root))
        assert "VALID=1 INVALID=0 UNKNOWN=0" in audit.stdout, audit.stdout[-3000:]
