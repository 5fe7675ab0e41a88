"""Section "Overview": every (model, backend) pair with its selection, timing status and fit."""

from __future__ import annotations

from harness.report.inputs import Context, md_table


def render(ctx: Context) -> list[str]:
    """Every (model, backend) pair with its selection, timing status and fit."""
    sel = {(r["model"], r["backend"]): r for r in ctx.selection.rows} if ctx.selection else {}
    tim = {(r["model"], r["backend"]): r for r in ctx.timing.rows} if ctx.timing else {}
    rows = []
    for pair in ctx.pairs:
        s, t = sel.get(pair, {}), tim.get(pair, {})
        rows.append([pair[0], pair[1], s.get("selected_capacity", ""),
                     t.get("timing_capacity", s.get("timing_capacity", "")),
                     t.get("status", "no timing row"),
                     "DOES NOT FIT" if pair in ctx.dnf else ""])
    out = ["## Overview", ""]
    if not rows:
        return out + [ctx.missing("overview", "no rows in any TSV"), ""]
    out += [md_table(["model", "backend", "selected", "timed at", "timing status", "fit"],
                     rows), "",
            "Empty cell = not applicable (e.g. a backend that is timed but not selected).", ""]
    return out
