"""`epcap report`: a campaign's results as report.md, PNG figures and a tidy demand.tsv.

Reads only the results directory (docs/spec.md: results layout): the three TSVs, provenance.txt, the cells'
rank logs (through harness.telemetry.summary), the campaign statistics (harness.results.events) and the audit
verdict (harness.audit). Numbers from the TSVs are printed as the TSV strings, unchanged;
derived numbers (percentages) are labelled as such with their precision. A part whose input is
missing becomes a "not available: <why>" line, never a crash or an invented value.

Rooms: inputs.py (TSVs, recorded grid and baseline, the Context, Markdown helpers),
demand.py (demand.tsv and figures 1 to 4), sections/ (one module per section of report.md,
each `render(ctx) -> lines`), build.py (SECTIONS, their order, and the loop that writes
report.md; `build_report`, which `epcap run` calls), cli.py (`epcap report`). How to add a
section: README.md.
"""

from __future__ import annotations

from harness.report.build import build_report

__all__ = ["build_report"]
