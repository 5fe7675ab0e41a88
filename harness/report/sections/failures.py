"""Section "Failures by class": attempt counts by status, failure classes first, with the
cells of each failure and the log line that classified it."""

from __future__ import annotations

from harness.report.inputs import ATTEMPTS, Context, md_table
from harness.vocab import FAILURE_CLASSES


def render(ctx: Context) -> list[str]:
    """Attempt counts by status, failure classes first, with the cells of each failure."""
    out = ["## Failures by class", ""]
    a = ctx.attempts
    if a is None:
        return out + [ctx.missing("failures", f"{ATTEMPTS} not found"), ""]
    by: dict[str, list[dict[str, str]]] = {}
    for r in a.rows:
        by.setdefault(r["status"], []).append(r)
    rows = []
    for status in list(FAILURE_CLASSES) + sorted(set(by) - set(FAILURE_CLASSES)):
        cells = by.get(status, [])
        shown = ", ".join(r["cell_dir"] for r in cells[:6]) + (" …" if len(cells) > 6 else "")
        kind = "failure" if status in FAILURE_CLASSES else "outcome"
        rows.append([status, kind, str(len(cells)), shown if status in FAILURE_CLASSES else ""])
    out += [md_table(["status", "kind", "attempts", "cells"], rows), ""]
    if a.has("failure_line"):
        lines = [[r["cell_dir"], r["status"], r["failure_line"]] for r in a.rows
                 if r["status"] in FAILURE_CLASSES and r["failure_line"]]
        if lines:
            out += [md_table(["cell", "status", "matching log line"], lines), ""]
    return out + [f"From the `status` column of {ATTEMPTS} ({len(a.rows)} attempts).", ""]
