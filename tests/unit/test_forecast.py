"""`epcap forecast`: the core against brute-force counts, its rules, outputs and refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.errors import BadInput
from harness.forecast.cli import cli_forecast, forecast_rows, placement_file
from harness.forecast.core import (
    COLUMNS,
    Forecaster,
    Setting,
    distinct_per_rank,
    neighbour_eps,
    routing_from_calls,
    share_bounds,
)
from harness.grid.risk import drop_risk_upper
from harness.loadmodel import planners

FIXTURE = Path(__file__).parents[1] / "fixtures" / "traces" / "megatron_ep2"
E, K, T = 16, 4, 96


def _calls(seed: int = 0, steps: int = 3, layers: int = 2) -> list:
    rng = np.random.default_rng(seed)
    pop = rng.lognormal(0, 1.2, E)
    pop /= pop.sum()
    return [(s, np.stack([rng.choice(E, K, replace=False, p=pop) for _ in range(T)]))
            for s in range(steps) for _ in range(layers)]


def brute_peak(calls, ep: int, home, per_rank: int | None = None, tokens_unit=False) -> int:
    """Plain-Python count: dispatches of ep x per_rank tokens, slots (or distinct tokens) per
    home rank, max over everything."""
    peak = 0
    for _, ids in calls:
        size = len(ids) if per_rank is None else ep * per_rank
        for lo in range(0, len(ids), size):
            load = [0] * ep
            for row in ids[lo:lo + size].tolist():
                ranks = [int(home[e]) for e in row]
                for r in (set(ranks) if tokens_unit else ranks):
                    load[r] += 1
            peak = max(peak, max(load))
    return peak


@pytest.mark.parametrize("ep", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("placement", ["contiguous", "round-robin"])
@pytest.mark.parametrize("unit", ["slots", "tokens"])
def test_raw_peak_equals_a_brute_force_count(ep, placement, unit):
    calls = _calls()
    planner = planners.load_planner("raw")
    home = np.asarray(planner.home_ranks(E, ep, placement))
    row = Forecaster(routing_from_calls("t", E, K, calls)).row(
        Setting(ep, None, placement, "raw", unit), home, planner)
    assert row["peak_demand"] == brute_peak(calls, ep, home, tokens_unit=unit == "tokens")
    assert row["uniform_tokens"] == math.ceil(T / ep) * K and row["steps"] == 3


@pytest.mark.parametrize("ep,mb,seq", [(2, 1, 16), (4, 2, 6), (8, 1, 5)])
def test_micro_batches_cut_the_step_into_dispatches(ep, mb, seq):
    calls = _calls(1)
    planner = planners.load_planner("raw")
    home = np.asarray(planner.home_ranks(E, ep, "contiguous"))
    row = Forecaster(routing_from_calls("t", E, K, calls, seq=seq)).row(
        Setting(ep, mb, "contiguous", "raw"), home, planner)
    assert row["peak_demand"] == brute_peak(calls, ep, home, per_rank=mb * seq)
    assert row["uniform_tokens"] == mb * seq * K and row["micro_batch"] == mb


def test_moonep_balances_every_rank_to_the_share():
    calls = _calls(2)
    planner = planners.load_planner("moonep")
    for ep in (2, 4, 8):
        home = np.asarray(planner.home_ranks(E, ep, "contiguous"))
        row = Forecaster(routing_from_calls("t", E, K, calls)).row(
            Setting(ep, personality="moonep"), home, planner)
        assert row["peak_demand"] == T * K // ep == row["uniform_tokens"]
        assert row["required_capacity"] == 1.0


def test_selection_rounds_the_peak_onto_the_grid_and_bounds_the_drop_risk():
    calls = _calls(3)
    planner = planners.load_planner("raw")
    home = np.asarray(planner.home_ranks(E, 4, "contiguous"))
    row = Forecaster(routing_from_calls("t", E, K, calls)).row(Setting(4), home, planner,
                                                               pad_multiple=8)
    peak, n = row["peak_demand"], row["uniform_tokens"]
    assert row["required_capacity"] == peak / n
    assert row["selected_budget_tokens"] == -(-peak // 8) * 8
    assert row["over_provision"] == row["selected_budget_tokens"] / peak
    assert row["drop_risk_95"] == pytest.approx(1 - 0.05 ** (1 / 3))


def test_share_and_risk_rules():
    assert share_bounds(10, 4).tolist() == [0, 3, 6, 8, 10]      # first 10 % 4 shares +1
    assert drop_risk_upper(0, 65) == pytest.approx(0.0450, abs=1e-4)    # the forecast's bound
    assert drop_risk_upper(1, 10) == pytest.approx(0.3942, abs=1e-4)   # Clopper-Pearson
    assert drop_risk_upper(10, 10) == 1.0
    assert distinct_per_rank(np.array([[0, 0, 1], [1, 1, 1]]), 3).tolist() == [1, 2, 0]
    assert neighbour_eps(8, 64) == [4, 8, 16, 32] and neighbour_eps(8, 48) == [4, 8, 16]
    assert neighbour_eps(3, 6) == [3, 6]


def test_megatron_fixture_is_forecast(tmp_path, capsys):
    assert cli_forecast((str(FIXTURE),), experts=8, ep="2,4", out=str(tmp_path),
                        as_json=True, personality="raw,moonep") == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["forecasts"]
    assert [list(r) for r in rows] == [list(COLUMNS)] * 4
    raw = {r["ep"]: r for r in rows if r["personality"] == "raw"}
    assert raw[2]["peak_demand"] == 15 and raw[4]["peak_demand"] == 10   # as replayed (e2e)
    assert raw[2]["steps"] == 2 and isinstance(raw[2]["selected_capacity"], float)
    tsv = (tmp_path / "forecast.tsv").read_text().splitlines()
    assert tsv[0].split("\t") == list(COLUMNS) and len(tsv) == 5
    assert (tmp_path / "forecast.png").stat().st_size > 0


def test_zoo_model_gives_experts_and_buffer_bytes():
    rows = forecast_rows((str(FIXTURE),), experts=8, ep="2")
    assert rows[0]["buffer_bytes_per_rank"] is None
    with pytest.raises(BadInput, match="QWEN3_30B has 128 experts, not 8"):
        forecast_rows((str(FIXTURE),), model="QWEN3_30B", experts=8)


def _bad_rank0(tmp_path: Path, lines: list[str]) -> Path:
    tmp_path.mkdir()
    (tmp_path / "router_trace_rank0.jsonl").write_text("".join(x + "\n" for x in lines))
    return tmp_path


def test_refusals_name_file_line_and_field(tmp_path):
    rank0 = (FIXTURE / "router_trace_rank0.jsonl").read_text().splitlines()
    with pytest.raises(BadInput, match=r"rank0.jsonl:1: experts: 8 experts do not divide over"):
        forecast_rows((str(FIXTURE),), experts=8, ep="3")
    with pytest.raises(BadInput, match=r"rank0.jsonl:1: experts: the trace does not say"):
        forecast_rows((str(FIXTURE),))
    bad = _bad_rank0(tmp_path / "a", rank0[:1] + [rank0[1].replace("[4, 5]", "[4, 5.0]")])
    with pytest.raises(BadInput, match=r"rank0.jsonl:2: top_indices: row 0 col 1: 5.0 is not"):
        forecast_rows((str(bad),), experts=8)
    short = rank0[3].replace('"num_tokens": 4', '"num_tokens": 3').replace(", [2, 6]]", "]")
    bad = _bad_rank0(tmp_path / "b", rank0[:3] + [short, rank0[4].replace(
        '"num_tokens": 4', '"num_tokens": 3').replace(", [6, 0]]", "]"), rank0[5].replace(
        '"num_tokens": 4', '"num_tokens": 3').replace(", [7, 6]]", "]")])
    with pytest.raises(BadInput, match=r"rank0.jsonl:4: num_tokens: step 2 holds 3 tokens"):
        forecast_rows((str(bad),), experts=8)
    with pytest.raises(BadInput, match="--micro-batch: a micro-batch needs the sequence"):
        forecast_rows((str(FIXTURE),), experts=8, micro_batch="1")
    with pytest.raises(BadInput, match="--grid: expected exact or decimals-D"):
        forecast_rows((str(FIXTURE),), experts=8, grid="decimal:2")
    with pytest.raises(BadInput, match="--personality: unknown personality 'deepep'"):
        forecast_rows((str(FIXTURE),), experts=8, personality="deepep")


def test_placement_file(tmp_path):
    f = tmp_path / "place.txt"
    f.write_text("# EP: home rank of experts 0..7\n2: 1 1 1 1 0 0 0 0\n")
    assert placement_file(str(f), 8)[2].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    flipped = forecast_rows((str(FIXTURE),), experts=8, ep="2", placement=str(f))[0]
    plain = forecast_rows((str(FIXTURE),), experts=8, ep="2")[0]
    assert flipped["peak_demand"] == plain["peak_demand"]      # same two halves, swapped
    f.write_text("2: 1 1 1 1 1 0 0 0\n")
    with pytest.raises(BadInput, match=r"place.txt:1: placement: every rank 0..1 must host 4"):
        placement_file(str(f), 8)
    f.write_text("\n2: 1 1 x\n")
    with pytest.raises(BadInput, match=r"place.txt:2: placement: expected `EP: rank"):
        placement_file(str(f), 8)
    f.write_text("2: 1 1 1 1 0 0 0 0\n")
    with pytest.raises(BadInput, match=r"place.txt: placement: no placement for EP 4"):
        forecast_rows((str(FIXTURE),), experts=8, ep="4", placement=str(f))


def test_command_line_json_and_exit_2_with_the_line(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    runner = CliRunner()
    ok = runner.invoke(main, ["forecast", str(FIXTURE), "--experts", "8", "--ep", "2,4",
                              "--json"])
    assert ok.exit_code == 0 and len(json.loads(ok.output)["forecasts"]) == 2
    rank0 = (FIXTURE / "router_trace_rank0.jsonl").read_text().splitlines()
    bad = _bad_rank0(tmp_path / "bad", rank0[:2] + [rank0[2].replace("[2, 3]", "[2, true]")])
    res = runner.invoke(main, ["forecast", str(bad), "--experts", "8"])
    assert res.exit_code == 2
    assert f"{bad}/router_trace_rank0.jsonl:3: top_indices: row 1 col 1: true is a boolean" \
        in res.output
