"""`epcap report`: a campaign's results as report.md, PNG figures and a tidy demand.tsv.

Reads only the results directory (docs/spec.md: results layout): the three TSVs, provenance.txt, the cells'
rank logs (through harness.telemetry.summary), the campaign statistics (harness.results.events) and the audit
verdict (harness.audit). Numbers from the TSVs are printed as the TSV strings, unchanged;
derived numbers (percentages) are labelled as such with their precision. A part whose input or
input is missing becomes a "not available: <why>" line, never a crash or an invented value.

Rooms: inputs.py (TSVs, recorded grid and baseline, Markdown helpers), sections.py (the
sections of report.md), demand.py (demand.tsv and the figures), build.py (entry points).
"""

from __future__ import annotations

from harness.report.build import build_report, cli_report, load_context
from harness.report.demand import build_demand, demand_maps

__all__ = ["build_demand", "build_report", "cli_report", "demand_maps",
           "load_context"]
