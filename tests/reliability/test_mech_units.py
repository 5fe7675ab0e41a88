"""Units: the report's forecast table states drop risk in percent, like the sentences above
it ("below 34.8% at 95%"), and names the unit in its header; forecast.tsv keeps the fraction
its column list (docs/spec.md) defines."""

from __future__ import annotations

import csv
from pathlib import Path

from backends.reference.routing import route
from harness.loadmodel.trace_io import write_epcap
from harness.report.narrow import read_tables
from harness.report.sections.forecast import campaign_forecast
from harness.results.layout import ATTEMPTS_TSV
from harness.results.rows import ATTEMPT_COLUMNS
from harness.results.tables import write_table_atomic


def _cell(root: Path, name: str, seed: int = 1) -> Path:
    """A measure cell with a recorded routing trace (as tests/unit/test_report_forecast.py)."""
    cell = root / "cells" / name
    cell.mkdir(parents=True)
    recs = [(it, 1, r, route(seed, "M", 1, it, r, 32, 16, 4, 1.5).ids.tolist(), None)
            for it in range(3) for r in range(4)]
    write_epcap(cell / "routing_trace.jsonl",
                {"experts": 16, "topk": 4, "tokens": 32, "ep": 4, "seq": 32, "micro_batch": 1,
                 "model": "M", "hidden": 64, "personality": "echo"}, recs)
    return cell


def test_forecast_table_risk_in_percent_named_in_its_header(tmp_path):
    _cell(tmp_path, "M__echo__measure__cap2p00__a1")
    write_table_atomic(tmp_path / ATTEMPTS_TSV, ATTEMPT_COLUMNS,
                       [{"cell_dir": "cells/M__echo__measure__cap2p00__a1"}])
    text = "\n".join(campaign_forecast(tmp_path, tmp_path / "report", pad_multiple=8))
    # the table's parts (split to fit 100 characters) joined again
    names, rows = next((h, r) for h, r in read_tables(text) if h[0] == "model")
    risk = next(i for i, n in enumerate(names) if "drop risk" in n)
    assert "%" in names[risk].replace("95%", ""), names[risk]     # the unit, not the level
    rows = [r for r in rows if r[0] == "M"]
    with open(tmp_path / "report" / "forecast.tsv", encoding="utf-8") as fh:
        tsv = list(csv.DictReader(fh, delimiter="\t"))
    assert len(rows) == len(tsv) > 0
    for row, rec in zip(rows, tsv, strict=True):
        fraction = float(rec["drop_risk_95"])
        assert 0 <= fraction <= 1
        assert abs(float(row[risk]) - 100 * fraction) <= 0.05 + 1e-9, (row[risk], fraction)
