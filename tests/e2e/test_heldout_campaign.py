"""Held-out validation end to end: validating on the measured routing cannot fail, held-out
validation can (tests/fixtures/runbooks/heldout.yaml; the fixture says why these seeds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.tables import read_rows

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "runbooks" / "heldout.yaml"
ZOO = ROOT / "runbooks" / "models.yaml"


def run_campaign(tmp_path: Path, extra: str = "") -> tuple[list[dict], dict]:
    """Run the fixture (plus extra runbook lines); its attempts rows and its selection row."""
    rb = tmp_path / "heldout.yaml"
    rb.write_text(FIXTURE.read_text().replace("../../../runbooks/models.yaml", str(ZOO))
                  .replace("{epcap: ../../..}", f"{{epcap: {ROOT}}}") + extra)
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(rb), "--results",
                          str(tmp_path / "res")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    camp = tmp_path / "res" / "heldout"
    (row,) = read_rows(camp / "capacity_selection.tsv")
    return read_rows(camp / "capacity_attempts.tsv"), row


def validate_rows(attempts: list[dict]) -> list[tuple[str, str, str]]:
    return [(r["capacity"], r["status"], r["peak_actual_valid_recv"]) for r in attempts
            if r["purpose"] == "validate"]


def recount(seed: int, iters: int) -> int:
    """The largest per-step demand of the fixture's routing, recounted from the routing."""
    from backends.reference.routing import demand_per_rank, route

    peak = 0
    for it in range(iters):
        for layer in range(2):
            ids = [route(seed, "QWEN2_57B", layer, it, rank, 256, 64, 8, 0.8,
                         popularity_seed=28).ids for rank in range(4)]
            peak = max(peak, int(demand_per_rank(ids, 64, 4).max()))
    return peak


@pytest.mark.slow
def test_held_out_validation_saturates_steps_up_and_covers_the_held_out_peak(tmp_path):
    attempts, row = run_campaign(tmp_path)
    measure = [r for r in attempts if r["purpose"] == "measure"]
    assert [r["peak_actual_valid_recv"] for r in measure] == ["2423"]
    # the rounded budget 2432 (1.1875) saturates on the held-out steps; one rung up holds
    assert validate_rows(attempts) == [("1.1875", "drops", "2432"), ("1.25", "ok", "2498")]
    assert row["validated"] == "true" and row["validate_attempts"] == "2"
    assert row["selected_capacity"] == "1.25" and row["selected_budget_tokens"] == "2560"
    assert row["held_out"] == "true" and row["validate_seed"] == "29"
    assert row["validate_steps"] == "3" and row["validate_peak"] == "2498"
    assert int(row["selected_budget_tokens"]) >= int(row["validate_peak"])
    assert float(row["headroom"]) == pytest.approx(2560 / 2498)
    assert float(row["drop_risk_95"]) == pytest.approx(1 - 0.05 ** (1 / 3))
    assert row["predicted_drop_risk"] == ""           # 6 steps: too few for a tail fit
    assert recount(29, 3) == 2498 and recount(28, 3) == 2423


@pytest.mark.slow
def test_validation_on_the_measured_routing_accepts_the_rounded_budget(tmp_path):
    """The check that could not fail: the same seed re-runs the measured steps."""
    attempts, row = run_campaign(tmp_path, "validate: {seed: 28}\n")
    assert validate_rows(attempts) == [("1.1875", "ok", "2423")]
    assert row["validated"] == "true" and row["selected_budget_tokens"] == "2432"
    assert row["held_out"] == "false" and row["drop_risk_95"] == ""
    assert row["validate_peak"] == row["peak_actual_valid_recv"] == "2423"
    # ... yet the held-out steps of the same model need more than the accepted 2432 slots
    assert recount(29, 3) > int(row["selected_budget_tokens"])


def test_tierb_dry_run_shows_the_validate_seed_and_iterations_of_every_validate_cell(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run",
                          str(ROOT / "runbooks" / "tierb-b200-gbs8.yaml"), "--dry-run",
                          "--no-test-only", "--results", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    blocks = out.stdout.split("\n\n")
    validate = [b for b in blocks if b.lstrip().startswith("[validate]")]
    assert len(validate) == 4 * 2                      # 4 models x (echo, ultraep)
    for block in validate:
        assert "routing: seed 1235 (held out: campaign seed 1234 + 1), 65 iterations" in block
    measure = [b for b in blocks if b.lstrip().startswith("[measure]")]
    assert measure and all("--seed 1234" in b for b in measure)
    assert [p.name for p in tmp_path.iterdir()] == ["tierb-b200-gbs8.dry-run"]
