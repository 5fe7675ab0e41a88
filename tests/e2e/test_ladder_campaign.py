"""The imbalance ladder end to end (docs/ladder.md): a one-model campaign of echo and ultraep
with the A/A control and `ladder: {routing_sigma: [0.1, 0.6]}`; ladder.tsv recomputed with
pandas from each step campaign's own evidence (the measure cells' dispatch rows,
capacity_attempts.tsv, timing_trials.tsv, comparison.tsv, capacity_selection.tsv), by code
independent of harness.campaign.ladder; every step campaign audits VALID."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
REDUCED = REPO / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
pytestmark = pytest.mark.slow
SIGMAS = (0.1, 0.6)
ROW = re.compile(r"\[MOE_DROP_DEBUG\]\[dispatch\].*")


def epcap(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def ladder_runbook_text() -> str:
    lines = [ln for ln in REDUCED.read_text().splitlines()
             if "DEEPSEEK_V2_LITE" not in ln and "name: moonep" not in ln]
    text = "\n".join(lines) + f"\nladder: {{routing_sigma: [{', '.join(map(str, SIGMAS))}]}}\n"
    text = text.replace("launches: 2}", "launches: 2, control: true}")
    text = text.replace("../../../runbooks/models.yaml", str(REPO / "runbooks" / "models.yaml"))
    return text.replace("{epcap: ../../..}", "{epcap: " + str(REPO) + "}")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("ladder")
    (base / "l.yaml").write_text(ladder_runbook_text())
    run = epcap("run", str(base / "l.yaml"), "--results", str(base / "results"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return base / "results"


def tsv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)


def raw_imbalance(step: Path) -> float:
    """max(pre_balance_recv) / expected_recv over the measure cells' dispatch rows."""
    pre, n = [], set()
    for log in step.glob("cells/*__measure__*/rank*.log"):
        for line in ROW.findall(log.read_text()):
            kv = dict(re.findall(r"(\w+)=(-?\d+)", line))
            if "pre_balance_recv" in kv:
                pre.append(int(kv["pre_balance_recv"]))
                n.add(int(kv["expected_recv"]))
    (uniform,) = n
    return max(pre) / uniform


def test_ladder_recomputed_with_pandas(results: Path):
    arms = ["echo", "ultraep", "echo~control"]
    assert check_ladder(results, "reduced", SIGMAS, arms) == len(SIGMAS) * len(arms)


def check_ladder(results: Path, campaign: str, sigmas: tuple[float, ...],
                 arms: list[str]) -> int:
    """ladder.tsv recomputed with pandas from each step campaign's cells and tables (one
    model per step: the raw imbalance is the step's); the number of rows checked. Also run by
    tests/benchmarks/bench_campaign_curves.py on runbooks/local-cpu-curves.yaml's ladder."""
    ladder = tsv(results / f"{campaign}-ladder" / "ladder.tsv")
    assert len(ladder) == len(sigmas) * len(arms)
    assert [float(s) for s in ladder["routing_sigma"].unique()] == list(sigmas)
    imbalance = []
    for step, sigma in enumerate(sigmas, start=1):
        rows = ladder[ladder.step == str(step)]
        root = results / rows["step_campaign"].iloc[0]
        assert root.name == f"{campaign}-sigma{str(sigma).replace('.', 'p')}"
        book = (root / "runbook.yaml").read_text()
        assert f"routing_sigma: {sigma}" in book and "seed: 1234" in book
        raw = raw_imbalance(root)
        assert np.allclose(rows["raw_imbalance"].astype(float), raw, rtol=1e-6)
        imbalance.append(raw)
        att, sel = tsv(root / "capacity_attempts.tsv"), tsv(root / "capacity_selection.tsv")
        trials, cmp = tsv(root / "timing_trials.tsv"), tsv(root / "comparison.tsv")
        assert sorted(rows["backend"]) == sorted(arms)
        for _, row in rows.iterrows():
            arm = row["backend"]
            clean = att[(att.backend == arm) & (att.purpose == "time") & (att.status == "ok")]
            assert float(row["required_capacity"]) == pytest.approx(
                clean["required_capacity"].astype(float).max(), abs=1e-6)
            ms = trials[(trials.backend == arm) & (trials.phase == "dispatch")]["ms"].astype(float)
            assert float(row["dispatch_ms_median"]) == pytest.approx(ms.median(), rel=1e-5)
            assert float(row["dispatch_ms_p10"]) == pytest.approx(ms.quantile(0.1), rel=1e-5)
            assert float(row["dispatch_ms_p90"]) == pytest.approx(ms.quantile(0.9), rel=1e-5)
            c = cmp[(cmp.backend == arm) & (cmp.phase == "dispatch")]
            if arm == "echo":                          # the baseline has no comparison row
                assert c.empty and row["verdict"] == ""
                continue
            for column in ("baseline", "verdict"):
                assert row[column] == c.iloc[0][column]
            for column in ("ratio_median", "ci_low", "ci_high"):
                assert row[column] == c.iloc[0][column] or float(row[column]) == \
                    pytest.approx(float(c.iloc[0][column]), rel=1e-6)
            s = sel[sel.backend == arm]
            if not s.empty:                            # a select backend: its selection row
                assert row["selected_capacity"] == s.iloc[0]["selected_capacity"]
                assert row["drop_risk_95"] == s.iloc[0]["drop_risk_95"]
                assert float(row["required_capacity"]) == pytest.approx(
                    float(s.iloc[0]["required_capacity"]), abs=1e-6)
    assert imbalance == sorted(imbalance) and imbalance[0] < imbalance[-1]
    assert (results / f"{campaign}-ladder" / "fig7_ladder.png").stat().st_size > 10_000
    return len(ladder)


def test_every_step_campaign_audits_valid(results: Path):
    for sigma in SIGMAS:
        out = epcap("audit", str(results / f"reduced-sigma{str(sigma).replace('.', 'p')}"))
        assert "VALID=1 INVALID=0 UNKNOWN=0" in out.stdout, out.stdout[-3000:]


def test_an_interrupted_ladder_resumes_without_losing_or_duplicating_a_row(tmp_path):
    """SIGINT in the second step (after its 5th run), then the same command again: the parent
    and the first step are done (nothing runs), the second step resumes on the parent's
    launcher, ladder.tsv has each (step, arm) row once, and every campaign audits VALID.
    Seen red: with the ladder taking a step's directory as done when it exists (no resume),
    step 2's rows were missing from ladder.tsv (3 rows, not 6)."""
    (tmp_path / "l.yaml").write_text(ladder_runbook_text())
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", str(tmp_path / "l.yaml"),
                             "--results", str(results)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events = results / "reduced-sigma0p6" / "events.jsonl"
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if events.is_file() and events.read_text().count('"cell_finish"') >= 5:
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.1)
    assert proc.wait(timeout=120) == 128 + signal.SIGINT
    assert not (results / "reduced-ladder" / "ladder.tsv").exists()
    again = epcap("run", str(tmp_path / "l.yaml"), "--results", str(results))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "reduced-sigma0p1 in" in again.stdout and "is done" in again.stdout
    assert "resuming campaign reduced-sigma0p6" in again.stdout
    ladder = tsv(results / "reduced-ladder" / "ladder.tsv")
    keys = list(zip(ladder["step"], ladder["backend"], strict=True))
    assert len(keys) == len(set(keys)) == len(SIGMAS) * 3
    for name in ("reduced", "reduced-sigma0p1", "reduced-sigma0p6"):
        out = epcap("audit", str(results / name))
        assert "VALID=1 INVALID=0 UNKNOWN=0" in out.stdout, out.stdout[-3000:]
