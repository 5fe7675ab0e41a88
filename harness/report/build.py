"""Entry points: load the Context, render report.md into the output folder,
`epcap report`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.redact import redact_text
from harness.report.balance import balance_lines
from harness.report.demand import (
    build_demand,
    draw_figures,
)
from harness.report.forecast import report_section
from harness.report.inputs import (
    ATTEMPTS,
    COMPARISON,
    NEED_ATTEMPTS,
    NEED_COMPARISON,
    NEED_SELECTION,
    NEED_TIMING,
    SELECTION,
    TIMING,
    Context,
    not_fitting,
    pair_order,
    read_baseline,
    read_pad_multiple,
    read_tsv,
)
from harness.report.sections import (
    _impl_note,
    section_audit,
    section_campaign,
    section_demand,
    section_dnf,
    section_failures,
    section_overview,
    section_provenance,
    section_selection,
    section_timing,
)
from harness.results.facts import read_facts


def load_context(results_dir: Path, out: Path) -> Context:
    """Read the TSVs; refuse a directory that holds no campaign results at all."""
    if not results_dir.is_dir():
        raise BadInput("not a directory", path=str(results_dir))
    known = [ATTEMPTS, SELECTION, TIMING, "events.jsonl", "provenance.txt"]
    if not any((results_dir / k).exists() for k in known):
        raise BadInput(f"not a campaign results directory: none of {', '.join(known)}",
                       path=str(results_dir))
    attempts = read_tsv(results_dir / ATTEMPTS, NEED_ATTEMPTS)
    selection = read_tsv(results_dir / SELECTION, NEED_SELECTION)
    timing = read_tsv(results_dir / TIMING, NEED_TIMING)
    pairs = pair_order([selection, timing, attempts])
    comparison = read_tsv(results_dir / COMPARISON, NEED_COMPARISON)
    max_cv = read_facts(results_dir).max_cv
    return Context(results_dir, out, attempts, selection, timing, pairs,
                   not_fitting(attempts, timing), read_pad_multiple(results_dir),
                   read_baseline(results_dir, timing), comparison,
                   float(max_cv) if isinstance(max_cv, (int, float)) else None)


def _campaign_name(ctx: Context) -> str:
    """The campaign column of the first TSV row, else the directory name."""
    for t in (ctx.attempts, ctx.selection, ctx.timing):
        if t and t.rows and t.rows[0].get("campaign"):
            return t.rows[0]["campaign"]
    return ctx.results_dir.name


def _render(results_dir: Path, out: Path) -> Context:
    """Build everything into `out`; return the context (figures drawn, parts unavailable)."""
    ctx = load_context(results_dir, out)
    out.mkdir(parents=True, exist_ok=True)
    demand_note, measured = build_demand(ctx)
    demand_figs = draw_figures(ctx, measured)
    if not measured and not any(u.startswith("demand") for u in ctx.unavailable):
        demand_note += "\n\n" + ctx.missing("demand heatmaps", "no measure cell has telemetry rows")
    body = [f"# epcap report: {_campaign_name(ctx)}", "",
            f"Results: `{results_dir.name}/` · generated "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} · numbers in tables are "
            "the TSV strings unchanged unless a column says derived.", ""]
    body += _impl_note(ctx) + [""]
    body += section_overview(ctx) + section_selection(ctx) + balance_lines(results_dir)
    from harness.report.risk import section_risk  # lazy: scipy only when a report is built

    body += section_risk(results_dir, out, ctx.selection, ctx.attempts, ctx.figures,
                         ctx.missing)
    body += section_demand(ctx, demand_note, demand_figs)
    body += report_section(ctx)
    body += section_timing(ctx) + section_dnf(ctx) + section_failures(ctx)
    body += section_audit(ctx) + section_provenance(ctx) + section_campaign(ctx)
    if ctx.unavailable:
        body += ["## Parts not available", ""] + [f"- {u}" for u in ctx.unavailable] + [""]
    # one redaction pass (harness.io.redact): a failure line or path may carry a token
    write_text_atomic(out / "report.md", redact_text("\n".join(body).rstrip() + "\n"))
    return ctx


def build_report(results_dir: Path, out: Path | None = None) -> Path:
    """Write report.md, figures and demand.tsv for a campaign; return the report.md path."""
    results_dir = Path(results_dir)
    out = Path(out) if out is not None else results_dir / "report"
    _render(results_dir, out)
    return out / "report.md"


def cli_report(results_dir: str, out: str | None = None) -> int:
    """`epcap report RESULTS_DIR [--out DIR]`: build the report; say where, and what is missing."""
    results = Path(results_dir)
    target = Path(out) if out else results / "report"
    ctx = _render(results, target)
    print(f"report: {target / 'report.md'} ({len(ctx.figures)} figures)")
    for part in ctx.unavailable:
        print(f"  not available: {part}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_report(sys.argv[1]))
