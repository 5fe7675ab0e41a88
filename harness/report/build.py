"""Build a report: load the Context, write demand.tsv and the figures, render every section
of SECTIONS in order into report.md."""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable
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
    NEED_FRONTIER,
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
    frontier,
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
from harness.results.layout import (
    EVENTS_JSONL,
    FRONTIER_TSV,
    PROVENANCE_TXT,
    REPORT_DIR,
    REPORT_FILE,
)

# The sections of report.md, in order; each is a module with render(ctx) -> lines.
# `unavailable` lists what the others could not build, so it stays last.
SECTIONS = (header, answers, summary, overview, selection, balance, risk, frontier, demand, forecast,
            timing, dnf, failures, audit, provenance, campaign, unavailable)


# Sections rendered in a forked child each while the parent draws the figures and the other
# sections: CPU-bound, they read only the results directory (the audit re-derives every
# cell; the forecast replays every measure cell's routing trace and writes forecast.tsv/png,
# the risk section draws fig5_steps_*.png, both through the report folder's descriptor). On
# two cores this takes their seconds off the report's wall time. Those in DRAWS are forked
# once matplotlib is imported here, so the parent and they import it once, not each.
BESIDE = (audit, forecast, risk)
DRAWS = (forecast, risk)


class Beside:
    """One section rendered in a forked child; `lines()` gives what `render(ctx)` would have
    given in this process (its lines, and the parts and figures it recorded, appended to ctx
    in section order). Where fork is missing or the child fails, it renders here."""

    def __init__(self, ctx: Context, render: Callable[[Context], list[str]]) -> None:
        self.ctx, self.render = ctx, render
        self.pid, self.fd = None, None
        if not hasattr(os, "fork"):
            return
        n_missing, n_figures = len(ctx.unavailable), len(ctx.figures)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:                                   # the child: render, send, leave
            code = 1
            try:
                os.close(read_fd)
                payload = pickle.dumps((render(ctx), ctx.unavailable[n_missing:],
                                        ctx.figures[n_figures:]))
                with os.fdopen(write_fd, "wb") as out:
                    out.write(payload)
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid, self.fd = pid, read_fd

    def lines(self) -> list[str]:
        """The section's lines: the child's answer, or rendered here if it gave none."""
        if self.pid is None:
            return self.render(self.ctx)
        with os.fdopen(self.fd, "rb") as src:
            data = src.read()
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.waitstatus_to_exitcode(status) != 0 or not data:
            return self.render(self.ctx)
        lines, missing, figures = pickle.loads(data)   # noqa: S301 - our own child's bytes
        self.ctx.unavailable.extend(missing)
        self.ctx.figures.extend(figures)
        return lines

    def cancel(self) -> None:
        """Stop and reap a child whose answer is no longer wanted (the parent failed)."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        self.pid = None


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
                   float(max_cv) if isinstance(max_cv, (int, float)) else None,
                   frontier=read_tsv(results_dir / FRONTIER_TSV, NEED_FRONTIER))


def render_report(results_dir: Path | str, out: Path | str | None = None) -> Context:
    """Build everything into `out` (default RESULTS_DIR/report); return the context (its
    out folder, the figures drawn, the parts unavailable)."""
    results_dir = Path(results_dir)
    out = Path(out) if out is not None else results_dir / REPORT_DIR
    ctx = load_context(results_dir, out)
    # the folder is opened once (no link followed at `out`); every file goes through its fd
    with OutDir.open(out, "--out") as ctx.dest:
        beside = {section: Beside(ctx, section.render) for section in BESIDE
                  if section not in DRAWS}
        import harness.figures  # noqa: F401 - lazy (slow import): before the drawing children
        beside.update({section: Beside(ctx, section.render) for section in DRAWS})
        try:
            build_outputs(ctx)
            body: list[str] = []
            for section in SECTIONS:
                body += beside[section].lines() if section in beside else section.render(ctx)
        finally:
            for child in beside.values():
                child.cancel()
        # one redaction pass (harness.io.redact): a failure line or path may carry a token;
        # then every line fitted to REPORT_WIDTH (tables split, prose wrapped: narrow.py)
        # every line through the one renderer (harness.io.boundary.text.shown): a TSV cell's
        # escape sequence or carriage return is written escaped, never acted on by a viewer
        lines = narrow_lines([shown(line) for line in
                              redact_text("\n".join(body).rstrip()).split("\n")])
        write_text_atomic(ctx.dest / REPORT_FILE, "\n".join(lines) + "\n")
    return ctx


def build_report(results_dir: Path | str, out: Path | str | None = None) -> Path:
    """Write report.md, figures and demand.tsv for a campaign; return the report.md path."""
    return render_report(results_dir, out).out / REPORT_FILE
