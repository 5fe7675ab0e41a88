"""The campaign report's forecast section, from measure cells' recorded routing."""

from __future__ import annotations

from pathlib import Path

from backends.reference.routing import route
from harness.loadmodel.trace_io import write_epcap
from harness.report.narrow import read_tables
from harness.report.sections.forecast import campaign_forecast
from harness.results.layout import ATTEMPTS_TSV
from harness.results.rows import ATTEMPT_COLUMNS
from harness.results.tables import write_table_atomic


def _cell(root: Path, name: str, seed: int = 1) -> Path:
    cell = root / "cells" / name
    cell.mkdir(parents=True)
    recs = [(it, 1, r, route(seed, "M", 1, it, r, 32, 16, 4, 1.5).ids.tolist(), None)
            for it in range(3) for r in range(4)]
    write_epcap(cell / "routing_trace.jsonl",
                {"experts": 16, "topk": 4, "tokens": 32, "ep": 4, "seq": 32, "micro_batch": 1,
                 "model": "M", "hidden": 64, "personality": "echo"}, recs)
    return cell


def test_section_forecasts_around_the_campaign_ep(tmp_path):
    _cell(tmp_path, "M__echo__measure__cap2p00__a1")
    _cell(tmp_path, "M__echo__measure__cap3p00__a2", seed=2)      # the later attempt wins
    _cell(tmp_path, "M__echo__validate__cap1p50__a3")              # not a measure cell
    write_table_atomic(tmp_path / ATTEMPTS_TSV, ATTEMPT_COLUMNS,
                       [{"cell_dir": "cells/M__echo__measure__cap3p00__a2",
                         "peak_actual_valid_recv": "171"}])
    lines = campaign_forecast(tmp_path, tmp_path / "report", pad_multiple=8)
    text = "\n".join(lines)
    rows = [r for _, rows in read_tables(text) for r in rows if r[0] == "M"]
    assert [r[2] for r in rows] == ["2", "4 (campaign)", "8", "16"]
    assert "measure__cap3p00__a2" in (tmp_path / "report" / "forecast.tsv").read_text()
    assert "cap2p00" not in (tmp_path / "report" / "forecast.tsv").read_text()
    assert rows[1][5] == "171" and rows[0][5] == "" and (tmp_path / "report" / "forecast.png").exists()
    assert "![forecast](forecast.png)" in text


def test_section_says_when_nothing_was_recorded(tmp_path):
    assert "Not available: no measure cell recorded its routing." in \
        campaign_forecast(tmp_path, tmp_path / "report")


def test_section_reads_a_cluster_cell_megatron_trace(tmp_path):
    import shutil

    from harness.loadmodel.trace_io import write_megatron

    runbooks = Path(__file__).parents[2] / "runbooks"
    shutil.copy(runbooks / "local-cpu.yaml", tmp_path / "runbook.yaml")
    shutil.copy(runbooks / "models.yaml", tmp_path / "models.yaml")
    trace_dir = tmp_path / "cells" / "QWEN3_30B__echo__measure__cap2p00__a1" / "router_trace"
    for r in range(4):
        write_megatron(trace_dir, r, [(it, 0, r, route(1, "Q", 0, it, r, 16, 128, 8, 1.0)
                                       .ids.tolist(), None) for it in range(2)])
    lines = campaign_forecast(tmp_path, tmp_path / "report")
    rows = [r for _, rows in read_tables("\n".join(lines)) for r in rows if r[0] == "QWEN3_30B"]
    assert [r[2] for r in rows] == ["2", "4 (campaign)", "8", "16"]
    assert rows[1][3] == str(16 * 8)                       # N = 16 tokens x top-8 at EP 4


def test_epcap_report_has_the_forecast_section(tmp_path):
    from harness.report import build_report

    _cell(tmp_path, "M__echo__measure__cap2p00__a1")
    write_table_atomic(tmp_path / ATTEMPTS_TSV, ATTEMPT_COLUMNS,
                       [{"campaign": "c", "model": "M", "backend": "echo", "purpose": "measure",
                         "cell_dir": "cells/M__echo__measure__cap2p00__a1"}])
    text = build_report(tmp_path).read_text()
    assert "## Forecast: other EP sizes from the recorded routing" in text
    assert (tmp_path / "report" / "forecast.tsv").exists()
