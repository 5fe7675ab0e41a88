"""Build a report: load the Context, write demand.tsv and the figures, render every section
of SECTIONS in order into report.md."""

from __future__ import annotations

from pathlib import Path

from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.boundary.text import shown
from harness.io.outdir import OutDir
from harness.io.redact import redact_text
from harness.report.demand import build_outputs
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
from harness.report.narrow import narrow_lines
from harness.report.sections import (
    answers,
    audit,
    balance,
    campaign,
    demand,
    dnf,
    failures,
    forecast,
    header,
    overview,
    provenance,
    risk,
    selection,
    summary,
    timing,
    unavailable,
)
from harness.results.facts import read_facts
from harness.results.layout import EVENTS_JSONL, PROVENANCE_TXT

# The sections of report.md, in order; each is a module with render(ctx) -> lines.
# `unavailable` lists what the others could not build, so it stays last.
SECTIONS = (header, answers, summary, overview, selection, balance, risk, demand, forecast, timing, dnf,
            failures, audit, provenance, campaign, unavailable)


def load_context(results_dir: Path, out: Path) -> Context:
    """Read the TSVs; refuse a directory that holds no campaign results at all."""
    if not results_dir.is_dir():
        raise BadInput("not a directory", path=str(results_dir))
    known = [ATTEMPTS, SELECTION, TIMING, EVENTS_JSONL, PROVENANCE_TXT]
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


def render_report(results_dir: Path | str, out: Path | str | None = None) -> Context:
    """Build everything into `out` (default RESULTS_DIR/report); return the context (its
    out folder, the figures drawn, the parts unavailable)."""
    results_dir = Path(results_dir)
    out = Path(out) if out is not None else results_dir / "report"
    ctx = load_context(results_dir, out)
    # the folder is opened once (no link followed at `out`); every file goes through its fd
    with OutDir.open(out, "--out") as ctx.dest:
        build_outputs(ctx)
        body: list[str] = []
        for section in SECTIONS:
            body += section.render(ctx)
        # one redaction pass (harness.io.redact): a failure line or path may carry a token;
        # then every line fitted to REPORT_WIDTH (tables split, prose wrapped: narrow.py)
        # every line through the one renderer (harness.io.boundary.text.shown): a TSV cell's
        # escape sequence or carriage return is written escaped, never acted on by a viewer
        lines = narrow_lines([shown(line) for line in
                              redact_text("\n".join(body).rstrip()).split("\n")])
        write_text_atomic(ctx.dest / "report.md", "\n".join(lines) + "\n")
    return ctx


def build_report(results_dir: Path | str, out: Path | str | None = None) -> Path:
    """Write report.md, figures and demand.tsv for a campaign; return the report.md path."""
    return render_report(results_dir, out).out / "report.md"
